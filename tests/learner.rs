//! `learner::fit`: the copy-back tagger trained by burn-train's `SupervisedTraining` learns, a
//! run resumed from a checkpoint ends where an uninterrupted one does, and two workers train.

use burn::prelude::*;
use burn_positional::{AbsolutePosition, LearnedConfig};
use burn_positional_examples::copy_back::CopyBackConfig;
use burn_positional_examples::encoder::EncoderConfig;
use burn_positional_examples::learner::{LineRenderer, fit, last_checkpoint};
use burn_positional_examples::tagger::{TokenTagger, TokenTaggerConfig};
use burn_positional_examples::training::{TrainingConfig, evaluate};

/// Building a model seeds flex's one random generator and draws lazily: tests that build
/// models at the same time would draw from each other's stream. One at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn tiny_config() -> TrainingConfig {
    let task = CopyBackConfig::new()
        .with_vocab_size(8)
        .with_seq(8)
        .with_k(2);
    let encoder = EncoderConfig::new(8, LearnedConfig::new(8).into())
        .with_d_model(16)
        .with_n_heads(2)
        .with_n_blocks(1);
    TrainingConfig::new(TokenTaggerConfig::new(encoder), task)
        .with_batch_size(8)
        .with_valid_size(16)
        .with_learning_rate(1e-2)
}

fn table(model: &TokenTagger) -> Vec<f32> {
    let AbsolutePosition::Learned(table) = &model.encoder.embed.position else {
        unreachable!()
    };
    table.table.val().into_data().iter::<f32>().collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn resumed_run_ends_where_an_uninterrupted_one_does() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_config().with_steps(6).with_valid_every(3);
    let straight = fit(
        &config,
        &device,
        1,
        &dir.path().join("straight"),
        Some(Box::new(LineRenderer::new("straight"))),
    );
    // Stopped after the first epoch, then resumed with the full budget.
    let resumed_dir = dir.path().join("resumed");
    fit(
        &config.clone().with_steps(3),
        &device,
        1,
        &resumed_dir,
        Some(Box::new(LineRenderer::new("first half"))),
    );
    assert_eq!(last_checkpoint(&resumed_dir), Some(1));
    let resumed = fit(
        &config,
        &device,
        1,
        &resumed_dir,
        Some(Box::new(LineRenderer::new("resumed"))),
    );
    assert_eq!(last_checkpoint(&resumed_dir), Some(2));
    let difference = max_abs_diff(&table(&resumed), &table(&straight));
    assert!(difference < 1e-5, "the resumed run differs by {difference}");
}

#[test]
fn two_workers_learn_the_task() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_config().with_steps(120).with_valid_every(40);
    let model = fit(
        &config,
        &device,
        2,
        dir.path(),
        Some(Box::new(LineRenderer::new("two workers"))),
    );
    let valid = evaluate(
        &model,
        &config.valid_batch(config.task.seq, &device),
        config.task.k,
    )
    .unwrap();
    // Chance is 1/8 = 12.5 %.
    assert!(
        valid.accuracy > 0.5,
        "valid accuracy {} after 120 steps on two workers",
        valid.accuracy
    );
}
