//! `learner::fit`: the copy-back tagger trained by burn-train's `SupervisedTraining` learns, a
//! run resumed from a checkpoint ends where an uninterrupted one does (also from the epoch
//! before when the newest does not load), two workers train, a folder takes one run at a time,
//! and a resume in another dtype is refused.
//!
//! Over 600 lines on purpose: one test binary per subject keeps CI's link count down, and
//! every test here drives the same entry point (`fit`) through the same helpers.

use burn::prelude::*;
use burn::tensor::FloatDType;
use burn_positional::AbsolutePosition;
use burn_positional_examples::device::{DeviceChoice, open};
use burn_positional_studies::checkpoint::{LOCK_FILE, resume_point};
use burn_positional_studies::copy_back::CopyBackBatch;
use burn_positional_studies::learner::{Event, Listener, Strategy, fit, fit_from, last_checkpoint};
use burn_positional_studies::tagger::TokenTagger;
use burn_positional_studies::training::{TrainingConfig, TrainingError, evaluate};

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

/// Training events heard by a listener: the numbers of the steps, in order.
fn step_listener() -> (Listener, std::sync::Arc<std::sync::Mutex<Vec<usize>>>) {
    let steps = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = steps.clone();
    let listener = Listener::Events(Box::new(move |event: &Event| {
        if let Event::Step { step, .. } = event {
            sink.lock().unwrap().push(*step);
        }
    }));
    (listener, steps)
}

/// Ways a part can exist and not load: a part cut in half (a disk or a copy that stopped), a
/// part of zero bytes (a full disk), a model record of another shape (another run's file).
fn truncate_optim(checkpoint: &std::path::Path, _: &TrainingConfig, _: &Device) {
    let path = checkpoint.join("optim-2.bpk");
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
}

fn empty_scheduler(checkpoint: &std::path::Path, _: &TrainingConfig, _: &Device) {
    std::fs::write(checkpoint.join("scheduler-2.bpk"), b"").unwrap();
}

fn model_of_another_shape(checkpoint: &std::path::Path, config: &TrainingConfig, device: &Device) {
    let mut other = config.model.clone();
    other.encoder = other.encoder.clone().with_d_model(8);
    let path = checkpoint.join("model-2.bpk");
    std::fs::remove_file(&path).unwrap();
    other.init(device).save_file(&path).unwrap();
}

/// A newest epoch with a part that exists and does not load (truncated, empty, another shape):
/// the resume passes it over, names the part, resumes after the epoch before (its first step
/// is step 3), finishes, and ends where an uninterrupted run does.
/// `tolerance`: how far the resumed run may end from the uninterrupted one.
fn a_part_that_does_not_load_falls_back(device: &Device, tolerance: f32) {
    type Corrupt = fn(&std::path::Path, &TrainingConfig, &Device);
    let cases: [(&str, Corrupt); 3] = [
        ("optim-2.bpk", truncate_optim),
        ("scheduler-2.bpk", empty_scheduler),
        ("model-2.bpk", model_of_another_shape),
    ];
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_config().with_steps(6).with_valid_every(2);
    let start = config.init_model(&device.clone().autodiff());
    let fit_start = |config: &TrainingConfig, dir: &std::path::Path, listener| {
        fit_from(
            config,
            start.clone(),
            device,
            Strategy::Single,
            dir,
            listener,
        )
        .unwrap()
    };
    let straight = fit_start(&config, &dir.path().join("straight"), Listener::silent());
    for (part, corrupt) in cases {
        let run = dir.path().join(part);
        fit_start(&config.clone().with_steps(4), &run, Listener::silent());
        let checkpoint = run.join("checkpoint");
        corrupt(&checkpoint, &config, device);
        let point = resume_point(&checkpoint, |record| {
            start
                .clone()
                .try_load_record(record)
                .map(drop)
                .map_err(|e| e.to_string())
        });
        assert_eq!(point.epoch, Some(1), "{part}: {point:?}");
        assert!(
            point.passed_over.len() == 1 && point.passed_over[0].contains(part),
            "{part}: {point:?}"
        );
        let (listener, steps) = step_listener();
        let resumed = fit_start(&config, &run, listener);
        assert_eq!(*steps.lock().unwrap(), [3, 4, 5, 6], "{part}");
        assert_eq!(last_checkpoint(&run), Some(3), "{part}");
        let difference = max_abs_diff(&table(&resumed), &table(&straight));
        // On wgpu, sums without a fixed order (atomics in the attention's backward) make two
        // runs of the same steps differ in the last bits, and Adam turns that into whole steps
        // where a gradient is about zero: its update `m / (sqrt(v) + eps)` is about `lr` in the
        // direction of the noise's sign. Over the 4 resumed steps at lr 1e-2 an element can so
        // drift by up to 4e-2 (seen: 2.2e-4 once in three full runs, and 2.1e-2 once in seven,
        // at 1e-3 then). The tolerance on wgpu is that bound; the CPU backends (1e-5) sum in a
        // fixed order and check the resume exactly.
        assert!(
            difference < tolerance,
            "{part}: the resumed run differs by {difference} (tolerance {tolerance})"
        );
    }
}

#[test]
fn a_part_that_does_not_load_falls_back_flex() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    a_part_that_does_not_load_falls_back(&Device::flex(), 1e-5);
}

#[test]
#[allow(deprecated)]
fn a_part_that_does_not_load_falls_back_ndarray() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    a_part_that_does_not_load_falls_back(&Device::ndarray(), 1e-5);
}

#[test]
fn a_part_that_does_not_load_falls_back_wgpu() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let opened = open(DeviceChoice::Wgpu).unwrap_or_else(|reason| {
        panic!("{reason}. These tests never skip a backend: install a Vulkan driver (lavapipe)")
    });
    // 4 resumed steps of Adam at most `lr` each (see the comment at the check).
    a_part_that_does_not_load_falls_back(&opened.device, 4.0 * 1e-2);
}

const CHILD_DIR: &str = "BURN_POSITIONAL_LEARNER_CHILD_DIR";

/// The test binary run again as a child process, on one test, with `dir` in its environment.
fn child(test: &str, dir: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir);
    command
}

/// The child of `a_second_run_on_a_held_folder_is_refused`: a run far too long to end before
/// it is killed.
#[test]
#[ignore = "the child process of a_second_run_on_a_held_folder_is_refused"]
fn long_run_child() {
    let dir = std::env::var(CHILD_DIR).expect("run by its parent test, which names the folder");
    let config = tiny_config().with_steps(1_000_000).with_valid_every(2);
    fit(
        &config,
        &Device::flex(),
        Strategy::Single,
        std::path::Path::new(&dir),
        Listener::silent(),
    )
    .unwrap();
}

/// A second run on a folder a running one holds is refused with a typed error naming the
/// holder's pid and the fix; once the holder is killed (SIGKILL, its lock file left behind),
/// the next run takes the folder over and resumes.
#[test]
fn a_second_run_on_a_held_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut holder = child("long_run_child", dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lock = dir.path().join(LOCK_FILE);
    let pid = holder.id();
    let began = std::time::Instant::now();
    while std::fs::read_to_string(&lock).unwrap_or_default().trim() != pid.to_string() {
        assert!(
            began.elapsed() < std::time::Duration::from_secs(120),
            "the child never wrote its pid to {}",
            lock.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let config = tiny_config().with_steps(1_000_000).with_valid_every(2);
    let err = fit(
        &config,
        &Device::flex(),
        Strategy::Single,
        dir.path(),
        Listener::silent(),
    )
    .err()
    .expect("the folder is held");
    let message = err.to_string();
    assert!(
        matches!(err, TrainingError::InUse { pid: Some(p), .. } if p == pid),
        "{message}"
    );
    assert!(
        message.contains(&format!("pid {pid}")) && message.contains("Fix:"),
        "{message}"
    );
    holder.kill().unwrap(); // SIGKILL: the lock file stays, naming a dead process.
    holder.wait().unwrap();
    assert!(lock.exists());
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let done = last_checkpoint(dir.path()).unwrap_or(0);
    let config = config.with_steps((done + 1) * 2);
    fit(
        &config,
        &Device::flex(),
        Strategy::Single,
        dir.path(),
        Listener::silent(),
    )
    .unwrap_or_else(|err| panic!("a dead holder's lock blocked the run: {err}"));
    assert_eq!(last_checkpoint(dir.path()), Some(done + 1));
}

/// The child of `a_resume_in_another_dtype_is_refused`: flex set to bf16, then a resume of the
/// f32 run in the folder, which must be refused naming both dtypes.
#[test]
#[ignore = "the child process of a_resume_in_another_dtype_is_refused"]
fn bf16_resume_child() {
    let dir = std::env::var(CHILD_DIR).expect("run by its parent test, which names the folder");
    let mut device = Device::flex();
    device.configure(FloatDType::BF16).unwrap();
    let config = tiny_config().with_steps(4).with_valid_every(2);
    let err = fit(
        &config,
        &device,
        Strategy::Single,
        std::path::Path::new(&dir),
        Listener::silent(),
    )
    .err()
    .expect("the checkpoints are f32, the device bf16");
    println!("refused: {err}");
}

/// A resume on a device configured to another float dtype (`--dtype bf16` after an f32 run) is
/// refused, the two dtypes named, as for the other settings. Device settings are set once per
/// process, so the bf16 resume runs in a child process.
#[test]
fn a_resume_in_another_dtype_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let config = tiny_config().with_steps(2).with_valid_every(2);
        fit(
            &config,
            &Device::flex(),
            Strategy::Single,
            dir.path(),
            Listener::silent(),
        )
        .unwrap();
    }
    let output = child("bf16_resume_child", dir.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("dtype: F32 in the checkpoint, BF16 now") && stdout.contains("--fresh"),
        "{stdout}"
    );
}
