//! What a study is and what it yields: [`StudyConfig`], [`Variant`], [`Measurement`],
//! [`CellResult`], [`Summary`], [`StudyResults`], [`Progress`].

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::{LanguageModelConfig, Task, VOCAB};
use crate::encoder::EncoderConfig;
use crate::schemes::Scheme;
use crate::training::TrainingError;
use crate::{AbsolutePositionConfig, RopeScaling};

/// The schemes of the study: none (NoPE), sinusoidal, learned, T5, RoPE, ALiBi.
pub const SCHEMES: [Scheme; 6] = [
    Scheme::None,
    Scheme::Sinusoidal,
    Scheme::Learned,
    Scheme::T5,
    Scheme::Rope,
    Scheme::Alibi,
];

/// Configuration of the study: the grid and the model and training of each cell.
#[derive(Config, Debug, PartialEq)]
pub struct StudyConfig {
    /// Training length `L`: training examples have `1..=L` digits per number.
    #[config(default = 8)]
    pub train_len: usize,
    /// Tasks, by name (copy, reverse, sort, addition).
    #[config(
        default = "vec![\"copy\".into(), \"reverse\".into(), \"sort\".into(), \"addition\".into()]"
    )]
    pub tasks: Vec<String>,
    /// Schemes, by name (none, sinusoidal, learned, t5, rope, alibi).
    #[config(
        default = "vec![\"none\".into(), \"sinusoidal\".into(), \"learned\".into(), \"t5\".into(), \"rope\".into(), \"alibi\".into()]"
    )]
    pub schemes: Vec<String>,
    /// Seeds per cell: `0..seeds`.
    #[config(default = 3)]
    pub seeds: u64,
    /// Width of the model.
    #[config(default = 64)]
    pub d_model: usize,
    /// Heads per block.
    #[config(default = 4)]
    pub n_heads: usize,
    /// Causal blocks.
    #[config(default = 2)]
    pub n_blocks: usize,
    /// Optimizer steps per cell (rounded up to whole epochs).
    #[config(default = 1500)]
    pub steps: usize,
    /// Steps per epoch: a checkpoint and a validation after each.
    #[config(default = 500)]
    pub steps_per_epoch: usize,
    /// Examples per step.
    #[config(default = 32)]
    pub batch_size: usize,
    /// Adam's learning rate.
    #[config(default = 1e-3)]
    pub learning_rate: f64,
    /// Test examples per length.
    #[config(default = 100)]
    pub test_examples: usize,
    /// Test lengths as multiples of `L` (rounded up).
    #[config(default = "vec![1.0, 1.5, 2.0, 3.0]")]
    pub test_multiples: Vec<f64>,
}

/// How a model was evaluated: as trained, or with RoPE's context extension by the test
/// length's ratio to `L`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// As trained.
    AsTrained,
    /// RoPE with position interpolation by `n / L`.
    RopeInterpolation,
    /// RoPE with NTK-aware base scaling by `n / L`.
    RopeNtk,
}

impl Variant {
    /// The row's name for `scheme`.
    pub fn label(self, scheme: &str) -> String {
        match self {
            Self::AsTrained => scheme.to_string(),
            Self::RopeInterpolation => format!("{scheme} + PI (s = n/L)"),
            Self::RopeNtk => format!("{scheme} + NTK (s = n/L)"),
        }
    }

    /// The scaling for a test of `n` digits after training on `train_len`.
    pub fn scaling(self, n: usize, train_len: usize) -> RopeScaling {
        let s = (n as f64 / train_len as f64).max(1.0);
        match self {
            Self::AsTrained => RopeScaling::None,
            Self::RopeInterpolation => RopeScaling::Interpolation(s),
            Self::RopeNtk => RopeScaling::NtkAware(s),
        }
    }
}

/// One measurement: a task, scheme, variant, seed and test length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Task name.
    pub task: String,
    /// Scheme name.
    pub scheme: String,
    /// How it was evaluated.
    pub variant: Variant,
    /// RoPE's scaling, as applied (`None` when there is none).
    pub scaling: String,
    /// The seed of the model (its draw and its training set).
    pub seed: u64,
    /// Digits per number.
    pub n: usize,
    /// Exact match in `[0, 1]`, or `None` when the model refused the length.
    pub exact_match: Option<f64>,
    /// The model's error when it refused the length.
    pub refused: Option<String>,
}

/// The result of one trained model (cell): its measurements and what training cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    /// Task name.
    pub task: String,
    /// Scheme name.
    pub scheme: String,
    /// Seed.
    pub seed: u64,
    /// Optimizer steps trained.
    pub steps: usize,
    /// Teacher-forced token accuracy on the validation set (lengths up to `L`) at the end.
    pub valid_accuracy: f64,
    /// Wall-clock seconds of training and evaluation (this process's share, after a resume).
    pub seconds: f64,
    /// Every test length and variant.
    pub measurements: Vec<Measurement>,
}

/// Mean and spread of one row entry over seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Task name.
    pub task: String,
    /// The row's name (scheme and variant).
    pub row: String,
    /// Digits per number.
    pub n: usize,
    /// Mean exact match over the seeds that answered.
    pub mean: Option<f64>,
    /// Sample standard deviation over those seeds (0 for one seed).
    pub std: Option<f64>,
    /// Seeds that answered.
    pub seeds: usize,
    /// The refusal, when every seed refused.
    pub refused: Option<String>,
}

/// Everything the study measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudyResults {
    /// The grid and the models.
    pub config: StudyConfig,
    /// The device it ran on.
    pub device: String,
    /// One per trained model.
    pub cells: Vec<CellResult>,
    /// Mean and spread per task, row and length.
    pub summary: Vec<Summary>,
}

/// What [`run_study`](super::run_study) reports as it goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// A cell starts training (`resumed_at` is the step of the checkpoint it resumes from).
    Started {
        /// `task/scheme/seed`.
        cell: String,
        /// Step resumed from, if any.
        resumed_at: Option<usize>,
    },
    /// A cell took an optimizer step.
    Step {
        /// `task/scheme/seed`.
        cell: String,
        /// 1-based step.
        step: usize,
        /// Training loss of the step.
        loss: f32,
    },
    /// A cell is done (trained and evaluated now, or found done on disk).
    Done {
        /// `task/scheme/seed`.
        cell: String,
        /// Its optimizer steps.
        steps: usize,
        /// Found on disk, not run now.
        from_disk: bool,
        /// Teacher-forced token accuracy on the validation set at the end of training.
        valid_accuracy: f64,
    },
}

impl StudyConfig {
    /// The test lengths: `ceil(m * L)` for each multiple `m`.
    pub fn test_lengths(&self) -> Vec<usize> {
        self.test_multiples
            .iter()
            .map(|m| (m * self.train_len as f64).ceil() as usize)
            .collect()
    }

    /// The tasks, parsed.
    pub fn task_list(&self) -> Result<Vec<Task>, TrainingError> {
        self.tasks
            .iter()
            .map(|t| {
                t.parse().map_err(|why: String| TrainingError::Unsupported {
                    what: why,
                    fix: "pass tasks among copy, reverse, sort, addition".into(),
                })
            })
            .collect()
    }

    /// The schemes, parsed.
    pub fn scheme_list(&self) -> Result<Vec<Scheme>, TrainingError> {
        self.schemes
            .iter()
            .map(|s| {
                s.parse().map_err(|why: String| TrainingError::Unsupported {
                    what: why,
                    fix: "pass schemes among none, sinusoidal, learned, t5, rope, alibi".into(),
                })
            })
            .collect()
    }

    /// Optimizer steps each cell trains: `steps` rounded up to whole epochs.
    pub fn trained_steps(&self) -> usize {
        self.steps.div_ceil(self.steps_per_epoch.max(1)) * self.steps_per_epoch
    }

    /// Checks the grid and the model, naming the field, the value and the fix.
    pub fn validate(&self) -> Result<(), TrainingError> {
        let positive = [
            ("train_len", self.train_len),
            ("seeds", self.seeds as usize),
            ("steps", self.steps),
            ("steps_per_epoch", self.steps_per_epoch),
            ("batch_size", self.batch_size),
            ("test_examples", self.test_examples),
            ("n_blocks", self.n_blocks),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(TrainingError::Unsupported {
                    what: format!("StudyConfig::{field} is 0"),
                    fix: format!("give {field} a positive value"),
                });
            }
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return Err(TrainingError::Unsupported {
                what: format!("StudyConfig::learning_rate is {}", self.learning_rate),
                fix: "use a positive finite learning rate such as 1e-3".into(),
            });
        }
        if let Some(m) = self
            .test_multiples
            .iter()
            .find(|m| !(m.is_finite() && **m >= 1.0))
        {
            return Err(TrainingError::Unsupported {
                what: format!("test multiple {m} (tests are at lengths m * L)"),
                fix: "use multiples of at least 1, such as 1, 1.5, 2, 3".into(),
            });
        }
        if self.steps_per_epoch.checked_mul(self.batch_size).is_none() {
            return Err(TrainingError::Unsupported {
                what: "steps_per_epoch * batch_size overflows a usize".into(),
                fix: "use the defaults (500 steps of 32)".into(),
            });
        }
        self.task_list()?;
        for scheme in self.scheme_list()? {
            self.model_config(Task::Copy, scheme).encoder.validate()?;
        }
        Ok(())
    }

    /// The model of a cell: learned tables as long as the longest training sequence of the
    /// task, so every test past `L` is past the table.
    pub fn model_config(&self, task: Task, scheme: Scheme) -> LanguageModelConfig {
        let encoder = EncoderConfig::new(VOCAB, AbsolutePositionConfig::None)
            .with_d_model(self.d_model)
            .with_n_heads(self.n_heads)
            .with_n_blocks(self.n_blocks)
            .with_causal(true)
            .with_position(scheme, task.model_len(self.train_len));
        LanguageModelConfig::new(encoder)
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_checked_by_name() {
        let err = StudyConfig::new()
            .with_tasks(vec!["multiply".into()])
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("multiply"), "{err}");
        let err = StudyConfig::new().with_seeds(0).validate().unwrap_err();
        assert!(err.to_string().contains("seeds"), "{err}");
        let err = StudyConfig::new()
            .with_test_multiples(vec![0.5])
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("0.5"), "{err}");
        StudyConfig::new().validate().unwrap();
        assert_eq!(StudyConfig::new().test_lengths(), vec![8, 12, 16, 24]);
    }
}
