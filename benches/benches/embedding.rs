//! Throughput of `EmbeddingWithPosition` beside its baselines, in one run per device and shape:
//!
//! - `fused_sinusoidal`, `fused_learned`: this crate's default forward, one fused pass (token
//!   lookup, scale, position, id check) with no read-back (the status stays on the device);
//! - `reference_learned`: the same module's reference forward made of burn tensor ops
//!   (`try_forward_reference`: id check by min/max read-back, gather, add);
//! - `burn`: burn's own `Embedding` followed by `PositionalEncoding`;
//! - `two_op`: the PyTorch-style composition, `embedding(table, ids) + pe[..seq]` with a
//!   precomputed position table (one gather, one broadcast add, no checks);
//! - `copy_floor`: one read and one write of a tensor of the output's size (`neg`), the
//!   floor for any memory-bound op that produces that output;
//! - `copy_into_mapped` (CPU devices): a host `copy_from_slice` of the output's size into a
//!   buffer that is already mapped (no page faults), on one thread: the floor the CPU
//!   implementation's fresh output is measured against at large shapes.
//!
//! `queued_forward` times what a GPU user's step sees: 100 forwards queued, then one sync, for
//! `forward` (no read) against `try_forward` (one read of the status per call, which is what
//! `forward` did before it became asynchronous).
//!
//! Forward plus backward (autodiff device, learned table) runs the same entries (no
//! sinusoidal) with a copy floor that copies the output's size forward and back.
//! The device is synced inside the timed region (`iter_synced`: after every call, or every
//! `BENCH_LAUNCHES_PER_SYNC` calls, which the GPU kit sets to 20), so queued GPU work is inside
//! the timing.
//! Throughput is the output's size in bytes.
//!
//! ```text
//! cargo bench -p burn-positional-benches --bench embedding                     # every device
//! BENCH_DEVICES=flex,ndarray cargo bench -p burn-positional-benches --bench embedding
//! ```

use burn::nn::{EmbeddingConfig, PositionalEncodingConfig};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn_positional::{EmbeddingWithPositionConfig, LearnedConfig, Positions};
use burn_positional_benches::{bench_devices, iter_synced};
use burn_positional_examples::device::DeviceChoice;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use std::time::Duration;

/// `[batch, seq, d_model, vocab]`.
const SHAPES: [[usize; 4]; 3] = [
    [1, 128, 256, 1000],
    [8, 512, 512, 32000],
    [32, 1024, 768, 32000],
];

fn token_ids(batch: usize, seq: usize, vocab: usize, device: &Device) -> Tensor<2, Int> {
    // A fixed pseudo-random sequence (64-bit LCG), the same on every device.
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let ids: Vec<i64> = (0..batch * seq)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % vocab as u64) as i64
        })
        .collect();
    Tensor::from_data(TensorData::new(ids, [batch, seq]), device)
}

/// The first `seq` rows of a learned table, `[1, seq, d_model]`, detached.
fn learned_rows(embed: &burn_positional::EmbeddingWithPosition, seq: usize) -> Tensor<3> {
    embed
        .position
        .vectors(0..seq)
        .unwrap()
        .expect("a learned table")
        .detach()
        .unsqueeze::<3>()
}

fn label([batch, seq, d_model, vocab]: [usize; 4]) -> String {
    format!("b{batch}_s{seq}_d{d_model}_v{vocab}")
}

fn forward(c: &mut Criterion) {
    for (name, device) in bench_devices("flex,ndarray,wgpu") {
        for shape in SHAPES {
            let [batch, seq, d_model, vocab] = shape;
            let mut group = c.benchmark_group(format!("forward/{name}"));
            group.throughput(Throughput::Bytes((batch * seq * d_model * 4) as u64));
            group
                .sample_size(10)
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_secs(3));
            let ids = token_ids(batch, seq, vocab, &device);
            let id = |f: &str| BenchmarkId::new(f, label(shape));

            let sinusoidal = EmbeddingWithPositionConfig::new(vocab, d_model).init(&device);
            group.bench_function(id("fused_sinusoidal"), |b| {
                iter_synced(b, &device, || sinusoidal.forward(ids.clone()))
            });
            let learned = EmbeddingWithPositionConfig::new(vocab, d_model)
                .with_scheme(LearnedConfig::new(seq).into())
                .init(&device);
            group.bench_function(id("fused_learned"), |b| {
                iter_synced(b, &device, || learned.forward(ids.clone()))
            });
            group.bench_function(id("reference_learned"), |b| {
                iter_synced(b, &device, || {
                    learned
                        .try_forward_reference(ids.clone(), Positions::default())
                        .unwrap()
                })
            });
            let embedding = EmbeddingConfig::new(vocab, d_model).init(&device);
            let positional = PositionalEncodingConfig::new(d_model).init(&device);
            group.bench_function(id("burn"), |b| {
                iter_synced(b, &device, || {
                    positional.forward(embedding.forward(ids.clone()))
                })
            });
            let table = Tensor::<2>::random([vocab, d_model], Distribution::Default, &device);
            let pe: Tensor<3> = learned_rows(&learned, seq);
            group.bench_function(id("two_op"), |b| {
                iter_synced(b, &device, || {
                    burn::tensor::module::embedding(table.clone(), ids.clone()) + pe.clone()
                })
            });
            let output_sized = Tensor::<3>::ones([batch, seq, d_model], &device);
            group.bench_function(id("copy_floor"), |b| {
                iter_synced(b, &device, || output_sized.clone().neg())
            });
            if name != DeviceChoice::Wgpu {
                let src = vec![1.0f32; batch * seq * d_model];
                let mut dst = vec![0.0f32; batch * seq * d_model];
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

/// 100 forwards queued, one sync at the end: the read-free `forward` against `try_forward`,
/// which reads the status back on every call (as `forward` did before).
fn queued_forward(c: &mut Criterion) {
    const QUEUE: usize = 100;
    for (name, device) in bench_devices("flex,ndarray,wgpu") {
        let [batch, seq, d_model, vocab] = SHAPES[0];
        let mut group = c.benchmark_group(format!("queued_forward/{name}"));
        group.throughput(Throughput::Bytes(
            (QUEUE * batch * seq * d_model * 4) as u64,
        ));
        group
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(5));
        let ids = token_ids(batch, seq, vocab, &device);
        let id = |f: &str| BenchmarkId::new(f, label(SHAPES[0]));
        for (scheme, config) in [
            (
                "sinusoidal",
                EmbeddingWithPositionConfig::new(vocab, d_model),
            ),
            (
                "learned",
                EmbeddingWithPositionConfig::new(vocab, d_model)
                    .with_scheme(LearnedConfig::new(seq).into()),
            ),
        ] {
            let embed = config.init(&device);
            group.bench_function(id(&format!("forward_{scheme}")), |b| {
                iter_synced(b, &device, || {
                    let outs: Vec<Tensor<3>> =
                        (0..QUEUE).map(|_| embed.forward(ids.clone())).collect();
                    outs
                })
            });
            group.bench_function(id(&format!("try_forward_{scheme}")), |b| {
                iter_synced(b, &device, || {
                    let outs: Vec<Tensor<3>> = (0..QUEUE)
                        .map(|_| embed.try_forward(ids.clone()).unwrap())
                        .collect();
                    outs
                })
            });
        }
        group.finish();
    }
}

fn forward_backward(c: &mut Criterion) {
    for (name, device) in bench_devices("flex,ndarray,wgpu") {
        let device = device.autodiff();
        for shape in SHAPES {
            let [batch, seq, d_model, vocab] = shape;
            let mut group = c.benchmark_group(format!("forward_backward/{name}"));
            group.throughput(Throughput::Bytes((batch * seq * d_model * 4) as u64));
            group
                .sample_size(10)
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_secs(3));
            let ids = token_ids(batch, seq, vocab, &device);
            let id = |f: &str| BenchmarkId::new(f, label(shape));

            let learned = EmbeddingWithPositionConfig::new(vocab, d_model)
                .with_scheme(LearnedConfig::new(seq).into())
                .init(&device);
            group.bench_function(id("fused_learned"), |b| {
                iter_synced(b, &device, || learned.forward(ids.clone()).sum().backward())
            });
            group.bench_function(id("reference_learned"), |b| {
                iter_synced(b, &device, || {
                    learned
                        .try_forward_reference(ids.clone(), Positions::default())
                        .unwrap()
                        .sum()
                        .backward()
                })
            });
            let embedding = EmbeddingConfig::new(vocab, d_model).init(&device);
            let positional = PositionalEncodingConfig::new(d_model).init(&device);
            group.bench_function(id("burn"), |b| {
                iter_synced(b, &device, || {
                    positional
                        .forward(embedding.forward(ids.clone()))
                        .sum()
                        .backward()
                })
            });
            let table = Tensor::<2>::random([vocab, d_model], Distribution::Default, &device)
                .require_grad();
            let pe = learned_rows(&learned, seq).require_grad();
            group.bench_function(id("two_op"), |b| {
                iter_synced(b, &device, || {
                    (burn::tensor::module::embedding(table.clone(), ids.clone()) + pe.clone())
                        .sum()
                        .backward()
                })
            });
            // The floor: one output-sized copy forward and one back (`neg` of a tracked tensor).
            let output_sized = Tensor::<3>::ones([batch, seq, d_model], &device).require_grad();
            group.bench_function(id("copy_floor"), |b| {
                iter_synced(b, &device, || output_sized.clone().neg().sum().backward())
            });
            group.finish();
        }
    }
}

criterion_group!(benches, forward, forward_backward, queued_forward);
// `criterion_main!` spelled out, public: the GPU kit's multi-call binary calls it.
pub fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
