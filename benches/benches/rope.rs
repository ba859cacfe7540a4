//! Rotary position embedding of queries and keys, in one run per device and shape:
//!
//! - `fused`: this crate's `Rope::apply` on q and on k, one fused pass each (the default);
//! - `op_by_op`: the same rotation with the same tables as plain tensor ops (the kernels'
//!   `reference_rope`: two slices, four products, a difference, a sum and a concatenation),
//!   which is what `Rope::apply` ran before the fused op;
//! - `burn`: burn's own `RotaryEncoding::apply` on q and on k (interleaved, op by op);
//! - `copy_floor`: one read and one write of q and of k (`neg`), the floor for any op that
//!   reads both and writes both;
//! - `candle` (flex's group, CPU): candle-nn's `rope` (half-split, its CPU kernel) on q and k
//!   held as candle tensors, with the same angles;
//! - `copy_into_mapped` (CPU devices): a host `copy_from_slice` of q's and k's bytes into a
//!   buffer already mapped (no page faults), on one thread: the floor a fresh CPU output is
//!   measured against.
//!
//! Shapes: q and k of `[batch 8, heads 32, seq 2048, d_head 128]` at offset 0 (prefill), and
//! a decoding step `[8, 32, 1, 128]` at position 4000. Half-split layout (Hugging Face's), f32.
//! On wgpu the batch is halved until four times q fits the adapter's largest buffer (1 on
//! lavapipe, whose limit is 128 MiB). The device is synced inside the timed region
//! (`iter_synced`: after every call, or every `BENCH_LAUNCHES_PER_SYNC` calls). Throughput: the bytes of q and k.
//!
//! ```text
//! BENCH_DEVICES=flex cargo bench -p burn-positional-benches --bench rope
//! ```
//!
//! PyTorch eager on the same shapes and cores: `python3 tools/rope_speed.py`.

use std::time::Duration;

use burn::nn::RotaryEncodingConfig;
use burn::prelude::*;
use burn::tensor::Distribution;
use burn_positional::{RopeConfig, RopeLayout};
use burn_positional_benches::{bench_devices, iter_synced};
use burn_positional_examples::device::DeviceChoice;
use burn_positional_kernels::{RotaryLayout, reference_rope};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};

const HEADS: usize = 32;
const D_HEAD: usize = 128;
/// `(batch, seq, offset)`.
const SHAPES: [(usize, usize, usize); 2] = [(8, 2048, 0), (8, 1, 4000)];

fn rope(c: &mut Criterion) {
    for (choice, device) in bench_devices("flex") {
        let ours = RopeConfig::new(D_HEAD)
            .with_layout(RopeLayout::HalfSplit)
            .init(&device);
        let burn_rope = RotaryEncodingConfig::new(4096 + 1, D_HEAD).init(&device);
        for (batch, seq, offset) in SHAPES {
            // wgpu binds at most `max_buffer_bytes` per tensor (128 MiB on lavapipe), and burn's
            // `RotaryEncoding` makes intermediates several times q's size: the batch is halved
            // until four times q fits, and the label says so.
            let limit = burn_positional_kernels::max_buffer_bytes(&device).unwrap_or(u64::MAX);
            let mut batch = batch;
            while batch > 1 && (4 * batch * HEADS * seq * D_HEAD * 4) as u64 > limit {
                batch /= 2;
            }
            let mut group = c.benchmark_group(format!("rope/{choice}"));
            group
                .throughput(Throughput::Bytes(
                    (2 * batch * HEADS * seq * D_HEAD * 4) as u64,
                ))
                .sample_size(10)
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_secs(3));
            device.seed(1);
            let shape = [batch, HEADS, seq, D_HEAD];
            let q = Tensor::<4>::random(shape, Distribution::Default, &device);
            let k = Tensor::<4>::random(shape, Distribution::Default, &device);
            let id = |f: &str| BenchmarkId::new(f, format!("b{batch}_h{HEADS}_s{seq}_at{offset}"));
            device.sync().unwrap();

            group.bench_function(id("fused"), |b| {
                iter_synced(b, &device, || {
                    (ours.apply(q.clone(), offset), ours.apply(k.clone(), offset))
                })
            });
            // The angles of the fused entry's tables (same formula, f64), built once outside
            // the timing: this entry times the rotation alone, as the fused one does.
            let (cos, sin) = angles(&ours, offset, seq, &device);
            group.bench_function(id("op_by_op"), |b| {
                let rotate = |x: &Tensor<4>| {
                    reference_rope(x.clone(), cos.clone(), sin.clone(), RotaryLayout::HalfSplit)
                };
                iter_synced(b, &device, || (rotate(&q), rotate(&k)))
            });
            group.bench_function(id("burn"), |b| {
                iter_synced(b, &device, || {
                    (
                        burn_rope.apply(q.clone(), offset),
                        burn_rope.apply(k.clone(), offset),
                    )
                })
            });
            group.bench_function(id("copy_floor"), |b| {
                iter_synced(b, &device, || (q.clone().neg(), k.clone().neg()))
            });
            if choice == DeviceChoice::Flex {
                let cpu = candle_core::Device::Cpu;
                let to_candle = |t: Tensor<4>| {
                    let values: Vec<f32> = t.into_data().try_to_vec::<f32>().unwrap();
                    candle_core::Tensor::from_vec(
                        values,
                        (shape[0], shape[1], shape[2], shape[3]),
                        &cpu,
                    )
                    .unwrap()
                };
                let (cq, ck) = (to_candle(q.clone()), to_candle(k.clone()));
                let table = |t: &Tensor<3>| {
                    let values: Vec<f32> = t.clone().into_data().try_to_vec::<f32>().unwrap();
                    candle_core::Tensor::from_vec(values, (seq, D_HEAD / 2), &cpu).unwrap()
                };
                let (ccos, csin) = (table(&cos), table(&sin));
                group.bench_function(id("candle"), |b| {
                    b.iter(|| {
                        let rotate = |x: &candle_core::Tensor| {
                            candle_nn::rotary_emb::rope(x, &ccos, &csin).unwrap()
                        };
                        (rotate(&cq), rotate(&ck))
                    })
                });
            }
            if choice != DeviceChoice::Wgpu {
                let src = vec![1.0f32; 2 * batch * HEADS * seq * D_HEAD];
                let mut dst = vec![0.0f32; src.len()];
                group.bench_function(id("copy_into_mapped"), |b| {
                    b.iter(|| {
                        dst.copy_from_slice(std::hint::black_box(&src));
                        std::hint::black_box(&mut dst);
                    })
                });
            }
            group.finish();
        }
    }
}

/// `cos` and `sin` `[1, seq, pairs]` of positions `offset..offset + seq` for `rope`'s trained
/// frequencies, computed in f64 from its `inv_freq` (the numbers its tables hold).
fn angles(
    rope: &burn_positional::Rope,
    offset: usize,
    seq: usize,
    device: &Device,
) -> (Tensor<3>, Tensor<3>) {
    let inv_freq = rope.inv_freq();
    let pairs = inv_freq.len();
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for p in offset..offset + seq {
        for w in &inv_freq {
            let (s, c) = (p as f64 * w).sin_cos();
            cos.push(c as f32);
            sin.push(s as f32);
        }
    }
    (
        Tensor::from_data(TensorData::new(cos, [1, seq, pairs]), device),
        Tensor::from_data(TensorData::new(sin, [1, seq, pairs]), device),
    )
}

criterion_group!(benches, rope);
// `criterion_main!` spelled out, public: the GPU kit's multi-call binary calls it.
pub fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
