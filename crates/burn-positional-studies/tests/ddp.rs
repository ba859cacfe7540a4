//! burn-train's distributed data parallel strategy (one worker per GPU, gradients averaged by an
//! NCCL all-reduce) training the copy-back tagger on CUDA, against one device.
//!
//! Built only with the `cuda` feature, on a machine with a CUDA driver and NCCL:
//!
//! ```text
//! DDP_DEVICES=2 cargo test --release --features cuda --test ddp -- --nocapture
//! ```
//!
//! `DDP_DEVICES` (default 1) is the number of GPUs. The test fails loudly where CUDA device 0
//! cannot be opened: a DDP test that skips is no test. CI machines have no GPU, so CI does not
//! build this file (see `crates/burn-positional-studies/tests/learner.rs` for the refusal off CUDA, which CI does run).
#![cfg(feature = "cuda")]

use std::time::Instant;

use burn::prelude::*;
use burn_positional_examples::encoder::EncoderConfig;
use burn_positional_examples::schemes::Scheme;
use burn_positional_studies::copy_back::CopyBackConfig;
use burn_positional_studies::learner::{Listener, Strategy, fit};
use burn_positional_studies::tagger::TokenTaggerConfig;
use burn_positional_studies::training::{TrainingConfig, evaluate};

#[test]
fn ddp_on_cuda_trains_like_one_device() {
    let devices: usize = std::env::var("DDP_DEVICES")
        .ok()
        .map(|n| n.parse().expect("DDP_DEVICES is a number"))
        .unwrap_or(1);
    let device = Device::cuda(0);
    let task = CopyBackConfig::new();
    let encoder = EncoderConfig::new(
        task.vocab_size,
        burn_positional::AbsolutePositionConfig::None,
    )
    .with_position(Scheme::Learned, task.seq);
    let config = TrainingConfig::new(TokenTaggerConfig::new(encoder), task).with_steps(600);
    let dir = tempfile::tempdir().unwrap();
    let mut rates = Vec::new();
    for (name, strategy) in [
        ("one device", Strategy::Single),
        ("ddp", Strategy::Ddp { devices }),
    ] {
        let start = Instant::now();
        let model = fit(
            &config,
            &device,
            strategy,
            &dir.path().join(name),
            Listener::lines(name),
        )
        .unwrap_or_else(|err| panic!("{name}: {err}"));
        let seconds = start.elapsed().as_secs_f64();
        let valid = evaluate(
            &model,
            &config.valid_batch(config.task.seq, &device),
            config.task.k,
        )
        .unwrap();
        let rate = config.steps as f64 / seconds;
        println!(
            "{name} ({} GPU(s)): {rate:.1} steps/s, {:.0} sequences/s, valid accuracy {:.1} %",
            strategy.workers(),
            rate * (config.batch_size * strategy.workers()) as f64,
            100.0 * valid.accuracy
        );
        // Chance is 1/16; the one-device run reaches 100 % on flex.
        assert!(
            valid.accuracy > 0.9,
            "{name}: valid accuracy {} after {} steps",
            valid.accuracy,
            config.steps
        );
        rates.push(rate);
    }
    println!(
        "ddp / one device, steps per second: {:.2}",
        rates[1] / rates[0]
    );
}
