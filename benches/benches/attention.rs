//! Throughput of the `SelfAttention` block beside burn's own attention, in one run per device
//! and shape `[batch, seq, d_model, n_heads]`:
//!
//! - `ours_none`, `ours_rope`, `ours_alibi`, `ours_t5`: the block's `forward` (burn's fused
//!   `attention`, score biases built on the device and cached);
//! - `ours_rope_gqa`, `ours_rope_window`: the RoPE block with 2 key/value heads for its 8
//!   query heads, and with transformers' `sliding_window = 256` (both through `attend`);
//! - `burn_mha`: burn's `MultiHeadAttention` alone (no norms, no feed-forward);
//! - `burn_layer`: burn's pre-norm `TransformerEncoder` with one layer (norms, multi-head
//!   attention, feed-forward: the same work as our block);
//! - `old_alibi`, `old_t5` (seq 2048 only): the block as it was before device biases, the bias
//!   built on the host and uploaded in every call, the scores spelled out (`forward_weights`);
//! - `weights_none`, `weights_alibi`, `weights_t5` (seq 2048 only): the scores spelled out
//!   (`forward_weights`), with today's cached device bias, which separates the two changes.
//!
//! `forward_backward` runs the same on the autodiff device (the sum of the output, backward).
//! Every timed closure ends with `device.sync()`. Throughput is tokens (`batch * seq`).
//!
//! ```text
//! cargo bench -p burn-positional-benches --bench attention                  # flex and wgpu
//! BENCH_DEVICES=flex cargo bench -p burn-positional-benches --bench attention
//! ```

use burn::nn::attention::{MhaInput, MultiHeadAttentionConfig};
use burn::nn::transformer::{TransformerEncoderConfig, TransformerEncoderInput};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::module::embedding;
use burn_positional::score_bias::{alibi_slopes, t5_bucket};
use burn_positional::{AttentionInput, SelfAttention, SelfAttentionConfig, T5Bias};
use burn_positional_benches::bench_devices;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::time::Duration;

/// `[batch, seq, d_model, n_heads]`.
const SHAPES: [[usize; 4]; 2] = [[8, 512, 512, 8], [1, 2048, 512, 8]];

/// The ALiBi bias as the block built it before: distances on the host, uploaded per call.
fn old_alibi_bias(n_heads: usize, seq: usize, device: &Device) -> Tensor<4> {
    let distance: Vec<f32> = (0..seq)
        .flat_map(|i| (0..seq).map(move |j| (i as i64 - j as i64).abs() as f32))
        .collect();
    let distance = Tensor::<2>::from_data(TensorData::new(distance, [seq, seq]), device);
    let slopes: Vec<f32> = alibi_slopes(n_heads)
        .into_iter()
        .map(|m| m as f32)
        .collect();
    let slopes = Tensor::<1>::from_data(TensorData::new(slopes, [n_heads]), device);
    distance
        .unsqueeze::<4>()
        .mul(slopes.reshape([1, n_heads, 1, 1]))
        .neg()
}

/// The T5 bias as the block built it before: buckets on the host, uploaded, gathered, permuted.
fn old_t5_bias(t5: &T5Bias, seq: usize, device: &Device) -> Tensor<4> {
    let [num_buckets, n_heads] = t5.table.shape().dims();
    let ids: Vec<i64> = (0..seq)
        .flat_map(|i| (0..seq).map(move |j| j as i64 - i as i64))
        .map(|rel| t5_bucket(rel, true, num_buckets, t5.max_distance) as i64)
        .collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, seq * seq]), device);
    embedding(t5.table.val(), ids)
        .reshape([seq, seq, n_heads])
        .permute([2, 0, 1])
        .unsqueeze::<4>()
}

struct Blocks {
    none: SelfAttention,
    rope: SelfAttention,
    alibi: SelfAttention,
    t5: SelfAttention,
    /// RoPE with 2 key/value heads for the 8 query heads.
    gqa: SelfAttention,
    /// RoPE with transformers' `sliding_window = 256`.
    window: SelfAttention,
}

fn blocks(d_model: usize, n_heads: usize, device: &Device) -> Blocks {
    let config = SelfAttentionConfig::new(d_model, n_heads);
    Blocks {
        none: config.init(device),
        rope: config.clone().with_rotary().init(device),
        alibi: config.clone().with_alibi().init(device),
        t5: config.clone().with_t5().init(device),
        gqa: config
            .clone()
            .with_rotary()
            .with_n_kv_heads(Some(2))
            .init(device),
        window: config
            .with_rotary()
            .with_sliding_window(Some(256))
            .init(device),
    }
}

/// Runs every entry for one device and shape; `step` turns an output into the timed work
/// (nothing, or a backward).
fn entries(c: &mut Criterion, group_name: &str, device: &Device, backward: bool) {
    for [batch, seq, d_model, n_heads] in SHAPES {
        let mut group =
            c.benchmark_group(format!("{group_name}/{batch}x{seq}x{d_model}x{n_heads}"));
        group
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(4))
            .throughput(Throughput::Elements((batch * seq) as u64));
        device.seed(1);
        let x = Tensor::<3>::random([batch, seq, d_model], Distribution::Default, device);
        let ours = blocks(d_model, n_heads, device);
        let mha = MultiHeadAttentionConfig::new(d_model, n_heads).init(device);
        let layer = TransformerEncoderConfig::new(d_model, 4 * d_model, n_heads, 1)
            .with_norm_first(true)
            .with_dropout(0.0)
            .init(device);
        let finish = |out: Tensor<3>| {
            if backward {
                let _ = out.sum().backward();
            } else {
                drop(out);
            }
            device.sync().unwrap();
        };
        let mut run = |name: &str, f: &dyn Fn() -> Tensor<3>| {
            group.bench_function(BenchmarkId::new(name, seq), |b| b.iter(|| finish(f())));
        };
        run("ours_none", &|| ours.none.forward(x.clone()));
        run("ours_rope", &|| ours.rope.forward(x.clone()));
        run("ours_alibi", &|| ours.alibi.forward(x.clone()));
        run("ours_t5", &|| ours.t5.forward(x.clone()));
        run("ours_rope_gqa", &|| ours.gqa.forward(x.clone()));
        run("ours_rope_window", &|| ours.window.forward(x.clone()));
        run("burn_mha", &|| {
            mha.forward(MhaInput::self_attn(x.clone())).context
        });
        run("burn_layer", &|| {
            layer.forward(TransformerEncoderInput::new(x.clone()))
        });
        if seq == 2048 {
            let t5 = match &ours.t5.score_bias {
                Some(burn_positional::ScoreBias::T5(t5)) => t5.clone(),
                _ => unreachable!("built with T5"),
            };
            run("old_alibi", &|| {
                ours.none
                    .forward_weights(
                        AttentionInput::new(x.clone())
                            .score_bias(old_alibi_bias(n_heads, seq, device)),
                    )
                    .output
            });
            run("old_t5", &|| {
                ours.none
                    .forward_weights(
                        AttentionInput::new(x.clone()).score_bias(old_t5_bias(&t5, seq, device)),
                    )
                    .output
            });
            run("weights_none", &|| {
                ours.none
                    .forward_weights(AttentionInput::new(x.clone()))
                    .output
            });
            run("weights_alibi", &|| {
                ours.alibi
                    .forward_weights(AttentionInput::new(x.clone()))
                    .output
            });
            run("weights_t5", &|| {
                ours.t5
                    .forward_weights(AttentionInput::new(x.clone()))
                    .output
            });
        }
        group.finish();
    }
}

fn forward(c: &mut Criterion) {
    for (choice, device) in bench_devices("flex,wgpu") {
        entries(c, &format!("attention_forward/{choice}"), &device, false);
    }
}

fn forward_backward(c: &mut Criterion) {
    for (choice, device) in bench_devices("flex,wgpu") {
        entries(
            c,
            &format!("attention_forward_backward/{choice}"),
            &device.autodiff(),
            true,
        );
    }
}

criterion_group!(benches, forward, forward_backward);
criterion_main!(benches);
