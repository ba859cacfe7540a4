//! One decoding step of RoPE far past the trained context, in one run per device and position:
//!
//! - `dynamic_query`: the query of one new token at position `p` rotated by a `dynamic` rope
//!   (`max_position_embeddings` 4096, transformers' arithmetic, as `from_hf_config` builds it):
//!   the frequencies of the length `p + 1`, which changes at every step;
//! - `dynamic_step`: that query and the keys at `0..=p` rotated again with the same
//!   frequencies, which is what a `SelfAttention` block with a length-dependent rope does at
//!   every cached step;
//! - `default_query`, `default_step`: the same with the trained frequencies (`rope_type:
//!   "default"`), the baseline whose angles are precomputed or grown once.
//!
//! Each iteration decodes the next position (`p`, `p + 1`, ... cycling over 1024 of them), so
//! no iteration reuses the previous one's frequencies. Every timed closure ends with
//! `device.sync()`. Shape: one sequence, 8 heads of width 128.
//!
//! ```text
//! BENCH_DEVICES=flex cargo bench -p burn-positional-benches --bench rope_decode -- \
//!     --warm-up-time 1 --measurement-time 3
//! ```

use std::cell::Cell;
use std::time::Duration;

use burn::prelude::*;
use burn::tensor::Distribution;
use burn_positional::{DynamicScaling, RopeArithmetic, RopeConfig, RopeLayout, RopeScaling};
use burn_positional_benches::bench_devices;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

const POSITIONS: [usize; 2] = [8192, 32768];
const CYCLE: usize = 1024;
const N_HEADS: usize = 8;
const D_HEAD: usize = 128;

fn decode(c: &mut Criterion) {
    for (choice, device) in bench_devices("flex") {
        let config = RopeConfig::new(D_HEAD)
            .with_layout(RopeLayout::HalfSplit)
            .with_arithmetic(RopeArithmetic::Transformers);
        let default = config.clone().init(&device);
        let dynamic = config
            .with_scaling(RopeScaling::Dynamic(DynamicScaling::new(2.0, 4096)))
            .init(&device);
        for p in POSITIONS {
            let mut group = c.benchmark_group(format!("rope_decode/{choice}"));
            group.sample_size(10).warm_up_time(Duration::from_secs(1));
            device.seed(1);
            let q = Tensor::<4>::random([1, N_HEADS, 1, D_HEAD], Distribution::Default, &device);
            let keys = Tensor::<4>::random(
                [1, N_HEADS, p + CYCLE, D_HEAD],
                Distribution::Default,
                &device,
            );
            for (name, rope) in [("default", &default), ("dynamic", &dynamic)] {
                let step = Cell::new(0);
                let next = || {
                    step.set(step.get() + 1);
                    p + step.get() % CYCLE
                };
                group.bench_function(BenchmarkId::new(format!("{name}_query"), p), |b| {
                    b.iter(|| {
                        let out = rope.apply(q.clone(), next());
                        drop(out);
                        device.sync().unwrap();
                    })
                });
                group.bench_function(BenchmarkId::new(format!("{name}_step"), p), |b| {
                    b.iter(|| {
                        let at = next();
                        let out = rope.apply(q.clone(), at);
                        let k = keys.clone().slice([0..1, 0..N_HEADS, 0..at + 1, 0..D_HEAD]);
                        let k = rope.apply(k, 0);
                        drop((out, k));
                        device.sync().unwrap();
                    })
                });
            }
            group.finish();
        }
    }
}

criterion_group!(benches, decode);
criterion_main!(benches);
