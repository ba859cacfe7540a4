//! What a training run of a [`TokenTagger`] on [`CopyBackConfig`] is made of: its config
//! (saved as `config.json` beside the model), its metrics, saving and loading a trained model.
//! The training itself runs on burn-train: [`crate::learner::fit`].

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::prelude::*;
use burn::store::RecordError;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset;

use crate::PositionError;
use crate::copy_back::{CopyBackBatch, CopyBackBatcher, CopyBackConfig, CopyBackDataset};
use crate::tagger::{TokenTagger, TokenTaggerConfig};
use burn_positional::training::read_record;

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
    /// The run's settings cannot run where it was asked to.
    #[error("{what}. Fix: {fix}")]
    Unsupported {
        /// What cannot run, and why.
        what: String,
        /// How to run it.
        fix: String,
    },
    /// Another run holds the run's folder ([`crate::checkpoint::RunLock`]).
    #[error(
        "{} is in use by another run ({}): two runs on one folder overwrite each other's \
         checkpoints. Fix: wait for that run to end or stop it, or give this run another folder",
        .dir.display(),
        .pid.map_or("its pid unknown".to_string(), |pid| format!("pid {pid}"))
    )]
    InUse {
        /// The run's folder.
        dir: PathBuf,
        /// The holder's process id, as its lock file names it.
        pid: Option<u32>,
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

/// Seed of the validation set, apart from the training set's.
const VALID_SEED: u64 = 0x05EE_D0F7_A11D;

/// Loss and accuracy on one set.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Metrics {
    /// Mean cross-entropy.
    pub loss: f32,
    /// Fraction of positions predicted right.
    pub accuracy: f32,
}

impl TrainingConfig {
    /// Checks every size and rate of the run, the task and the model, before anything is built
    /// or divided: a zero, a non-finite rate or a task the model cannot take gets an error that
    /// names the field, the value, the rule and the fix.
    pub fn validate(&self) -> Result<(), TrainingError> {
        let invalid = |field, value: String, rule, fix: &str| {
            Err(TrainingError::Position(PositionError::InvalidConfig {
                field,
                value,
                rule,
                fix: fix.into(),
            }))
        };
        let positive = [
            (
                "TrainingConfig::steps",
                self.steps,
                "training needs a step",
                "pass --steps 1 or more",
            ),
            (
                "TrainingConfig::batch_size",
                self.batch_size,
                "a step needs a sequence",
                "set it to 1 or more (32 by default)",
            ),
            (
                "TrainingConfig::valid_every",
                self.valid_every,
                "an epoch is valid_every steps",
                "set it to 1 or more (50 by default)",
            ),
            (
                "TrainingConfig::valid_size",
                self.valid_size,
                "validation needs a sequence",
                "set it to 1 or more (256 by default)",
            ),
            (
                "CopyBackConfig::vocab_size",
                self.task.vocab_size,
                "tokens are drawn from 0..vocab_size",
                "set it to 2 or more (16 by default)",
            ),
        ];
        for (field, value, rule, fix) in positive {
            if value == 0 {
                return invalid(field, "0".into(), rule, fix);
            }
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return invalid(
                "TrainingConfig::learning_rate",
                self.learning_rate.to_string(),
                "Adam needs a positive, finite step size",
                "use a value such as 3e-3",
            );
        }
        if self.task.k >= self.task.seq {
            return invalid(
                "CopyBackConfig::k",
                self.task.k.to_string(),
                "answers sit at positions k..seq, so k must be below seq",
                &format!("choose k below seq = {}", self.task.seq),
            );
        }
        if self.task.vocab_size > self.model.encoder.vocab_size {
            return invalid(
                "CopyBackConfig::vocab_size",
                self.task.vocab_size.to_string(),
                "the task must not draw ids the model has no row for",
                &format!(
                    "draw from at most the model's vocab_size = {}, or widen the model",
                    self.model.encoder.vocab_size
                ),
            );
        }
        let sequences = self.valid_every.checked_mul(self.batch_size);
        if sequences.is_none() {
            return invalid(
                "TrainingConfig::valid_every",
                self.valid_every.to_string(),
                "valid_every * batch_size sequences must fit in memory, let alone a usize",
                "use the defaults (50 and 32)",
            );
        }
        self.model.encoder.validate()?;
        Ok(())
    }

    /// The validation set at length `seq`: `valid_size` sequences fixed by the seed, never
    /// trained on. At the task's length it is the set burn-train validates on
    /// ([`crate::learner::valid_loader`]).
    pub fn valid_dataset(&self, seq: usize) -> CopyBackDataset {
        CopyBackDataset {
            task: CopyBackConfig {
                seq,
                ..self.task.clone()
            },
            len: self.valid_size,
            seed: self.seed ^ VALID_SEED,
        }
    }

    /// [`valid_dataset`](Self::valid_dataset) as one batch on `device`.
    pub fn valid_batch(&self, seq: usize, device: &Device) -> CopyBackBatch {
        let dataset = self.valid_dataset(seq);
        let items = (0..dataset.len())
            .map(|i| dataset.get(i).expect("in range"))
            .collect();
        CopyBackBatcher { k: self.task.k }.batch(items, device)
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
