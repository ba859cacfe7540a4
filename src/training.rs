//! Training a [`TokenTagger`] on [`CopyBackConfig`]: the loop behind `examples/train_positions.rs`
//! and the training tests.
//!
//! A plain loop: every step that matters for positional tables (freezing the token table,
//! starting a learned table from the sinusoidal one, the checkpoint and resume) is a line here
//! a reader can see and change. The same models also run under burn-train: [`TokenTagger`] and
//! [`SequenceClassifier`](crate::classifier::SequenceClassifier) implement its `TrainStep` and
//! `InferenceStep`, [`CopyBackDataset`](crate::copy_back::CopyBackDataset) and
//! [`CopyBackBatcher`](crate::copy_back::CopyBackBatcher) feed its data loaders, and
//! `tests/multi_device.rs` trains them with `SupervisedTraining` on one device and on two
//! workers (`ExecutionStrategy::MultiDevice`).
//!
//! Checkpoints are burn's own records: `model.bpk` (the model), `optimizer.bpk` (Adam's
//! moments), `state.json` (the step) and `config.json` (this config). Batches are drawn from
//! `seed` and the step number, so a resumed run sees the batches an uninterrupted one would.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams};
use burn::prelude::*;
use burn::store::RecordError;

use crate::copy_back::{CopyBackBatch, CopyBackConfig};
use crate::tagger::{TokenTagger, TokenTaggerConfig};
use crate::{PositionError, read_record};

/// Everything a training run depends on; saved as `config.json` beside the model.
#[derive(Config, Debug, PartialEq)]
pub struct TrainingConfig {
    /// The model.
    pub model: TokenTaggerConfig,
    /// The task.
    pub task: CopyBackConfig,
    /// Optimizer steps.
    #[config(default = 600)]
    pub steps: usize,
    /// Sequences per step.
    #[config(default = 32)]
    pub batch_size: usize,
    /// Adam's learning rate.
    #[config(default = 3e-3)]
    pub learning_rate: f64,
    /// Keep the token table fixed, so only positions (and the rest of the model) train.
    #[config(default = false)]
    pub freeze_tokens: bool,
    /// Steps between validations.
    #[config(default = 50)]
    pub valid_every: usize,
    /// Sequences in the validation set.
    #[config(default = 256)]
    pub valid_size: usize,
    /// Seed of initialization and data.
    #[config(default = 42)]
    pub seed: u64,
}

/// Why training, saving or loading failed.
#[derive(Debug, thiserror::Error)]
pub enum TrainingError {
    /// The model refused its input.
    #[error(transparent)]
    Position(#[from] PositionError),
    /// A record could not be written or read.
    #[error("{path}: {error}")]
    Record {
        /// The file.
        path: PathBuf,
        /// What burn reported.
        error: RecordError,
    },
    /// A file could not be written or read.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system reported.
        error: String,
    },
}

/// Where a checkpoint stands (`state.json`).
#[derive(Config, Debug)]
pub struct CheckpointState {
    /// The last step whose update the checkpoint holds.
    pub step: usize,
}

/// Loss and accuracy on one set.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Metrics {
    /// Mean cross-entropy.
    pub loss: f32,
    /// Fraction of positions predicted right.
    pub accuracy: f32,
}

/// What one step reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepReport {
    /// 1-based step number.
    pub step: usize,
    /// On this step's batch, before the update.
    pub train: Metrics,
    /// On the validation set, every `valid_every` steps and at the last step.
    pub valid: Option<Metrics>,
}

impl TrainingConfig {
    /// The validation set: fixed by the seed, never trained on.
    pub fn valid_batch(&self, seq: usize, device: &Device) -> CopyBackBatch {
        self.task
            .batch(self.valid_size, seq, self.seed ^ 0x05EE_D0F7_A11D, device)
    }

    /// The batch of `step`.
    fn train_batch(&self, step: usize, device: &Device) -> CopyBackBatch {
        let seed = self.seed.wrapping_mul(1_000_003).wrapping_add(step as u64);
        self.task
            .batch(self.batch_size, self.task.seq, seed, device)
    }

    /// A fresh model for this config, token table frozen if asked.
    pub fn init_model(&self, device: &Device) -> TokenTagger {
        device.seed(self.seed);
        let mut model = self.model.init(device);
        if self.freeze_tokens {
            model.encoder.embed.tokens = model.encoder.embed.tokens.set_require_grad(false);
        }
        model
    }
}

/// Loss and accuracy of `model` on `batch`.
pub fn evaluate(
    model: &TokenTagger,
    batch: &CopyBackBatch,
    k: usize,
) -> Result<Metrics, PositionError> {
    let (loss, accuracy) =
        model.try_loss_and_accuracy(batch.ids.clone(), batch.answers.clone(), k)?;
    Ok(Metrics {
        loss: loss.into_scalar::<f32>(),
        accuracy,
    })
}

fn record_err(path: &Path) -> impl FnOnce(RecordError) -> TrainingError + '_ {
    move |error| TrainingError::Record {
        path: path.to_path_buf(),
        error,
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TrainingError + '_ {
    move |error| TrainingError::Io {
        path: path.to_path_buf(),
        error: error.to_string(),
    }
}

/// Writes `model.bpk` and `config.json` into `dir`.
pub fn save_model(
    model: &TokenTagger,
    config: &TrainingConfig,
    dir: &Path,
) -> Result<(), TrainingError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let path = dir.join("model.bpk");
    model.clone().save_file(&path).map_err(record_err(&path))?;
    let path = dir.join("config.json");
    config.save(&path).map_err(io_err(&path))
}

/// Reads what [`save_model`] wrote: the config, and the model built from it with its record.
pub fn load_model(
    dir: &Path,
    device: &Device,
) -> Result<(TrainingConfig, TokenTagger), TrainingError> {
    let path = dir.join("config.json");
    let config = TrainingConfig::load(&path).map_err(|e| TrainingError::Io {
        path: path.clone(),
        error: e.to_string(),
    })?;
    let path = dir.join("model.bpk");
    let model = read_record(&path)
        .and_then(|record| config.model.init(device).try_load_record(record))
        .map_err(record_err(&path))?;
    Ok((config, model))
}

/// Trains from scratch, or from the checkpoint in `checkpoint` when it holds one, for the
/// config's number of steps, writing a checkpoint there every `valid_every` steps. Calls
/// `on_step` after every step. Returns the trained model (without autodiff).
///
/// `device` should be an autodiff device.
pub fn train(
    config: &TrainingConfig,
    device: &Device,
    checkpoint: Option<&Path>,
    mut on_step: impl FnMut(&StepReport),
) -> Result<TokenTagger, TrainingError> {
    let mut model = config.init_model(device);
    let mut optim = AdamConfig::new().init();
    let mut first_step = 1;
    if let Some(dir) = checkpoint.filter(|dir| dir.join("state.json").exists()) {
        // Read into memory: this checkpoint's files are overwritten as training goes on.
        let path = dir.join("model.bpk");
        model = read_record(&path)
            .and_then(|record| model.try_load_record(record))
            .map_err(record_err(&path))?;
        let path = dir.join("optimizer.bpk");
        let bytes = std::fs::read(&path).map_err(io_err(&path))?;
        optim = optim
            .from_bytes(burn::tensor::Bytes::from_bytes_vec(bytes))
            .map_err(record_err(&path))?;
        let path = dir.join("state.json");
        let state = CheckpointState::load(&path).map_err(|e| TrainingError::Io {
            path: path.clone(),
            error: e.to_string(),
        })?;
        first_step = state.step + 1;
    }
    let valid = config.valid_batch(config.task.seq, device);
    for step in first_step..=config.steps {
        let batch = config.train_batch(step, device);
        // No read in the embedding: bad ids would be NaN, named by the check below.
        let (loss, accuracy) = model.loss_and_accuracy(batch.ids, batch.answers, config.task.k);
        let train = Metrics {
            loss: loss.clone().into_scalar::<f32>(),
            accuracy,
        };
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(config.learning_rate, model, grads);
        let report_valid = step % config.valid_every == 0 || step == config.steps;
        if report_valid {
            model.encoder.embed.check_inputs()?;
        }
        let valid = if report_valid {
            Some(evaluate(&model.valid(), &valid, config.task.k)?)
        } else {
            None
        };
        if let (Some(dir), true) = (checkpoint, report_valid) {
            save_model(&model, config, dir)?;
            let path = dir.join("optimizer.bpk");
            optim.save(&path).map_err(record_err(&path))?;
            let path = dir.join("state.json");
            CheckpointState::new(step)
                .save(&path)
                .map_err(io_err(&path))?;
        }
        on_step(&StepReport { step, train, valid });
    }
    Ok(model.valid())
}
