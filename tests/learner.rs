//! `learner::fit`: the copy-back tagger trained by burn-train's `SupervisedTraining` learns, a
//! run resumed from a checkpoint ends where an uninterrupted one does, and two workers train.

use burn::prelude::*;
use burn_positional::{AbsolutePosition, LearnedConfig};
use burn_positional_examples::copy_back::CopyBackConfig;
use burn_positional_examples::encoder::EncoderConfig;
use burn_positional_examples::learner::{Event, Listener, Strategy, fit, last_checkpoint};
use burn_positional_examples::tagger::{TokenTagger, TokenTaggerConfig};
use burn_positional_examples::training::{TrainingConfig, evaluate};

/// Building a model seeds flex's one random generator, shared by every thread: tests that build
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
        Strategy::Single,
        &dir.path().join("straight"),
        Listener::lines("straight"),
    )
    .unwrap();
    // Stopped after the first epoch, then resumed with the full budget.
    let resumed_dir = dir.path().join("resumed");
    fit(
        &config.clone().with_steps(3),
        &device,
        Strategy::Single,
        &resumed_dir,
        Listener::lines("first half"),
    )
    .unwrap();
    assert_eq!(last_checkpoint(&resumed_dir), Some(1));
    let resumed = fit(
        &config,
        &device,
        Strategy::Single,
        &resumed_dir,
        Listener::lines("resumed"),
    )
    .unwrap();
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
        Strategy::MultiDevice { workers: 2 },
        dir.path(),
        Listener::lines("two workers"),
    )
    .unwrap();
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

/// The events a listener hears: every step once, numbered from 1 (from the checkpoint's step
/// after a resume), and a validation at the end of every epoch, after its last step.
#[test]
fn listener_hears_every_step_and_every_validation() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_config().with_steps(6).with_valid_every(3);
    let run = |config: &TrainingConfig, strategy| {
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = events.clone();
        let listener = Listener::Events(Box::new(move |event: &Event| {
            sink.lock().unwrap().push(*event);
        }));
        let model = fit(config, &device, strategy, dir.path(), listener).unwrap();
        let events = events.lock().unwrap().clone();
        (model, events)
    };
    let summary = |events: &[Event]| -> Vec<String> {
        events
            .iter()
            .map(|event| match event {
                Event::Step { step, train } => {
                    assert!(train.loss.is_finite() && (0.0..=1.0).contains(&train.accuracy));
                    format!("step {step}")
                }
                Event::Validated {
                    epoch, step, valid, ..
                } => {
                    assert!(valid.loss.is_finite() && (0.0..=1.0).contains(&valid.accuracy));
                    format!("valid {epoch} at {step}")
                }
            })
            .collect()
    };
    let (model, first) = run(&config.clone().with_steps(3), Strategy::Single);
    assert_eq!(
        summary(&first),
        ["step 1", "step 2", "step 3", "valid 1 at 3"]
    );
    // The validation the listener heard is the model's on the validation set.
    let Some(Event::Validated { valid, .. }) = first.last() else {
        unreachable!()
    };
    let direct = evaluate(
        &model,
        &config.valid_batch(config.task.seq, &device),
        config.task.k,
    )
    .unwrap();
    assert!(
        (valid.loss - direct.loss).abs() < 1e-4 && (valid.accuracy - direct.accuracy).abs() < 1e-4,
        "heard {valid:?}, measured {direct:?}"
    );
    // Resumed after epoch 1, on two workers: one event per step, not per worker.
    let (_, resumed) = run(&config, Strategy::MultiDevice { workers: 2 });
    assert_eq!(
        summary(&resumed),
        ["step 4", "step 5", "step 6", "valid 2 at 6"]
    );
}

/// DDP is refused with the reason where burn has no all-reduce (everywhere but CUDA).
#[test]
fn ddp_off_cuda_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let err = fit(
        &tiny_config(),
        &Device::flex(),
        Strategy::Ddp { devices: 2 },
        dir.path(),
        Listener::silent(),
    )
    .err()
    .expect("flex has no all-reduce");
    let message = err.to_string();
    assert!(
        message.contains("CUDA") && message.contains("Fix:"),
        "{message}"
    );
    let err = fit(
        &tiny_config(),
        &Device::flex(),
        Strategy::MultiDevice { workers: 0 },
        dir.path(),
        Listener::silent(),
    )
    .err()
    .expect("no worker");
    assert!(err.to_string().contains("--devices 1"), "{err}");
}
