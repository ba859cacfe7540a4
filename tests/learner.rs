//! `learner::fit`: the copy-back tagger trained by burn-train's `SupervisedTraining` learns, a
//! run resumed from a checkpoint ends where an uninterrupted one does, and two workers train.

use burn::prelude::*;
use burn_positional::AbsolutePosition;
use burn_positional_examples::copy_back::CopyBackBatch;
use burn_positional_examples::learner::{Event, Listener, Strategy, fit, last_checkpoint};
use burn_positional_examples::tagger::TokenTagger;
use burn_positional_examples::training::{TrainingConfig, evaluate};

/// Building a model seeds flex's one random generator, shared by every thread: tests that build
/// models at the same time would draw from each other's stream. Every test here that builds a
/// model takes this lock (the others fail before building one).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[path = "support/tiny.rs"]
mod tiny;
use tiny::tiny_config;

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
    let run = |config: &TrainingConfig, strategy, name: &str| {
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = events.clone();
        let listener = Listener::Events(Box::new(move |event: &Event| {
            sink.lock().unwrap().push(*event);
        }));
        let model = fit(config, &device, strategy, &dir.path().join(name), listener).unwrap();
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
    let (model, first) = run(&config.clone().with_steps(3), Strategy::Single, "one");
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
    // Resumed after epoch 1: numbered on from the checkpoint.
    let (_, resumed) = run(&config, Strategy::Single, "one");
    assert_eq!(
        summary(&resumed),
        ["step 4", "step 5", "step 6", "valid 2 at 6"]
    );
    // On two workers: one event per step, not per worker.
    let (_, two) = run(&config, Strategy::MultiDevice { workers: 2 }, "two");
    assert_eq!(
        summary(&two),
        [
            "step 1",
            "step 2",
            "step 3",
            "valid 1 at 3",
            "step 4",
            "step 5",
            "step 6",
            "valid 2 at 6"
        ]
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

/// A task drawing ids the model has no row for is refused before training, by name.
#[test]
fn a_task_wider_than_the_model_is_refused_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = tiny_config();
    config.task = config.task.clone().with_vocab_size(12);
    let err = fit(
        &config,
        &Device::flex(),
        Strategy::Single,
        dir.path(),
        Listener::silent(),
    )
    .err()
    .expect("ids up to 11 with a vocabulary of 8");
    let message = err.to_string();
    assert!(
        message.contains("CopyBackConfig::vocab_size") && message.contains("vocab_size = 8"),
        "{message}"
    );
}

/// burn-train's validation step runs the embedding's deferred check: a bad id in a training
/// step (a NaN row there, no read) stops training at the next validation with its message.
#[test]
fn the_validation_step_names_a_bad_id_of_a_training_step() {
    use burn::train::{InferenceStep, TrainStep};
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let device = Device::flex().autodiff();
    let config = tiny_config();
    let model = config.model.init(&device);
    // Id 11 at the last position, which is no answer (answers are the ids at 0..seq - k).
    let ids = Tensor::<2, Int>::from_data([[1, 2, 3, 4, 5, 6, 7, 11]], &device);
    let bad = CopyBackBatch {
        answers: ids.clone().slice([0..1, 0..6]),
        ids,
    };
    // The training step neither reads nor fails.
    let _ = TrainStep::step(&model, bad);
    let valid = config.valid_batch(config.task.seq, &device.clone().without_autodiff());
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = InferenceStep::step(&model.valid(), valid);
    }))
    .expect_err("the batch had ids past the vocabulary");
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(
        message.contains("token id") && message.contains("ids must be in 0..8"),
        "{message}"
    );
}

/// Zeros, overflowing sizes and a non-finite rate: each named before anything is built.
#[test]
fn bad_training_configs_are_refused_by_name() {
    let cases: [(&str, TrainingConfig); 8] = [
        ("TrainingConfig::steps", tiny_config().with_steps(0)),
        (
            "TrainingConfig::batch_size",
            tiny_config().with_batch_size(0),
        ),
        (
            "TrainingConfig::valid_every",
            tiny_config().with_valid_every(0),
        ),
        (
            "TrainingConfig::valid_size",
            tiny_config().with_valid_size(0),
        ),
        (
            "TrainingConfig::learning_rate",
            tiny_config().with_learning_rate(f64::NAN),
        ),
        ("CopyBackConfig::k", {
            let mut c = tiny_config();
            c.task = c.task.clone().with_k(8);
            c
        }),
        (
            "TrainingConfig::valid_every",
            tiny_config().with_valid_every(usize::MAX / 2),
        ),
        ("n_heads", {
            let mut c = tiny_config();
            c.model.encoder = c.model.encoder.clone().with_n_heads(0);
            c
        }),
    ];
    for (field, config) in cases {
        let message = config.validate().expect_err(field).to_string();
        assert!(
            message.contains(field) && message.contains("Fix:"),
            "{field}: {message}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let err = fit(
        &tiny_config(),
        &Device::flex(),
        Strategy::MultiDevice {
            workers: usize::MAX,
        },
        dir.path(),
        Listener::silent(),
    )
    .err()
    .expect("overflowing workers");
    assert!(err.to_string().contains("overflow"), "{err}");
}

/// A resume with other settings is refused with the differences named; a larger step budget
/// resumes, a smaller one than the checkpoint's is refused.
#[test]
fn a_resume_with_other_settings_is_refused_by_name() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_config().with_steps(4).with_valid_every(2);
    fit(
        &config,
        &device,
        Strategy::Single,
        dir.path(),
        Listener::silent(),
    )
    .unwrap();
    assert_eq!(last_checkpoint(dir.path()), Some(2));
    let refuse = |config: &TrainingConfig, strategy, expected: &[&str]| {
        let message = fit(config, &device, strategy, dir.path(), Listener::silent())
            .err()
            .expect("other settings")
            .to_string();
        for part in expected {
            assert!(message.contains(part), "{part:?} not in: {message}");
        }
        assert!(message.contains("--fresh"), "{message}");
    };
    refuse(
        &config.clone().with_learning_rate(5e-3).with_seed(7),
        Strategy::Single,
        &[
            "learning_rate: 0.01 in the checkpoint, 0.005 now",
            "seed: 42 in the checkpoint, 7 now",
        ],
    );
    refuse(
        &config,
        Strategy::MultiDevice { workers: 2 },
        &["workers: 1 in the checkpoint, 2 now"],
    );
    refuse(
        &config.clone().with_steps(2),
        Strategy::Single,
        &["already at step 4, past this run's 2"],
    );
    // A larger budget resumes.
    fit(
        &config.clone().with_steps(6),
        &device,
        Strategy::Single,
        dir.path(),
        Listener::silent(),
    )
    .unwrap();
    assert_eq!(last_checkpoint(dir.path()), Some(3));
}
