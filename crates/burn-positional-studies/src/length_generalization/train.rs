//! One cell's training and evaluation: [`train_cell`] (burn-train, checkpoints, resume) and
//! [`run_cell`].

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use burn::data::dataloader::DataLoaderBuilder;
use burn::prelude::*;
use burn::train::metric::{AccuracyMetric, LossMetric};

use super::{
    CellResult, LanguageModel, LmBatcher, Measurement, PAD, StudyConfig, Task, TaskDataset,
    Variant, score,
};
use crate::checkpoint::last_complete_epoch;
use crate::learner::{
    Event, Recorder, adam_learner, checkpointed_training, prepare_checkpoint_dir,
};
use crate::schemes::Scheme;
use crate::training::TrainingError;

/// Serializes model draws: flex has one random generator for the process, so seeding and
/// drawing must not interleave with another cell's.
static INIT: Mutex<()> = Mutex::new(());

/// Trains one cell (or resumes it from its last complete checkpoint in `<dir>/checkpoint`)
/// with burn-train, and returns the trained model (without autodiff) and its validation
/// token accuracy. `on_step` hears each optimizer step.
///
/// # Errors
///
/// [`TrainingError::Io`] when `dir` cannot be written.
pub fn train_cell(
    config: &StudyConfig,
    task: Task,
    scheme: Scheme,
    seed: u64,
    device: &Device,
    dir: &Path,
    on_step: impl Fn(usize, f32) + Send + Sync + 'static,
) -> Result<(LanguageModel, f64), TrainingError> {
    let checkpoint_dir = prepare_checkpoint_dir(dir)?;
    let device = device.clone().autodiff();
    let model = {
        let _draw = INIT.lock().unwrap_or_else(|e| e.into_inner());
        device.seed(seed);
        config.model_config(task, scheme).init(&device)
    };
    let train = TaskDataset {
        task,
        max_n: config.train_len,
        len: config.steps_per_epoch * config.batch_size,
        seed,
    };
    let valid = TaskDataset {
        task,
        max_n: config.train_len,
        len: 4 * config.batch_size,
        seed: seed ^ 0x5EED_0F_7A11D,
    };
    let valid_accuracy = Arc::new(Mutex::new(f64::NAN));
    let heard = valid_accuracy.clone();
    let recorder = Recorder::new(
        config.steps_per_epoch,
        1,
        Box::new(move |event: &Event| match event {
            Event::Step { step, train } => on_step(*step, train.loss),
            Event::Validated { valid, .. } => {
                *heard.lock().unwrap_or_else(|e| e.into_inner()) = valid.accuracy as f64;
            }
        }),
    );
    let learner = adam_learner(model, config.learning_rate);
    let training = checkpointed_training(
        dir,
        &checkpoint_dir,
        DataLoaderBuilder::new(LmBatcher)
            .batch_size(config.batch_size)
            .build(train),
        DataLoaderBuilder::new(LmBatcher)
            .batch_size(config.batch_size)
            .build(valid),
        config.trained_steps() / config.steps_per_epoch,
        last_complete_epoch(&checkpoint_dir),
    )
    .metric_train_numeric(LossMetric::new())
    .metric_valid_numeric(LossMetric::new())
    .metric_train_numeric(AccuracyMetric::new().with_pad_token(PAD as usize))
    .metric_valid_numeric(AccuracyMetric::new().with_pad_token(PAD as usize))
    .renderer(Box::new(recorder));
    let model = training.launch(learner).model;
    let accuracy = *valid_accuracy.lock().unwrap_or_else(|e| e.into_inner());
    Ok((model, accuracy))
}

/// Trains and evaluates one cell: every test length, and for RoPE the context extensions.
pub fn run_cell(
    config: &StudyConfig,
    task: Task,
    scheme: Scheme,
    seed: u64,
    device: &Device,
    dir: &Path,
    on_step: impl Fn(usize, f32) + Send + Sync + 'static,
) -> Result<CellResult, TrainingError> {
    let start = Instant::now();
    let (model, valid_accuracy) = train_cell(config, task, scheme, seed, device, dir, on_step)?;
    let variants: &[Variant] = if scheme == Scheme::Rope {
        &[
            Variant::AsTrained,
            Variant::RopeInterpolation,
            Variant::RopeNtk,
        ]
    } else {
        &[Variant::AsTrained]
    };
    let mut measurements = Vec::new();
    for n in config.test_lengths() {
        // Test sets differ from the training set's seed and from each other.
        let examples = task.examples(n, config.test_examples, 0x7E57 ^ (seed << 32) ^ n as u64);
        for &variant in variants {
            let scaling = variant.scaling(n, config.train_len);
            let scaled;
            let model = if variant == Variant::AsTrained {
                &model
            } else {
                scaled = model
                    .with_rope_scaling(scaling.clone())
                    .expect("a RoPE model");
                &scaled
            };
            let result = score(model, &examples, device);
            measurements.push(Measurement {
                task: task.name().into(),
                scheme: scheme.to_string(),
                variant,
                scaling: format!("{scaling:?}"),
                seed,
                n,
                exact_match: result.as_ref().ok().copied(),
                refused: result.err().map(|err| err.to_string()),
            });
        }
    }
    Ok(CellResult {
        task: task.name().into(),
        scheme: scheme.to_string(),
        seed,
        steps: config.trained_steps(),
        valid_accuracy,
        seconds: start.elapsed().as_secs_f64(),
        measurements,
    })
}
