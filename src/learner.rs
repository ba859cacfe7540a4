//! Training a [`TokenTagger`] on the copy-back task with burn-train: `SupervisedTraining`,
//! its metrics, checkpointer and execution strategies (one device, or several workers with
//! `ExecutionStrategy::MultiDevice`).
//!
//! An epoch is `valid_every` optimizer steps over a fixed training set (burn-train's data
//! loader repeats one dataset every epoch), followed by a validation pass and a checkpoint
//! (model, optimizer, scheduler) in `<dir>/checkpoint`. A run whose directory holds checkpoints
//! resumes after the last one. The loaders do not shuffle, so a resumed run sees the batches an
//! uninterrupted one would.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::optim::AdamConfig;
use burn::optim::lr_scheduler::constant::ConstantLr;
use burn::prelude::*;
use burn::train::checkpoint::KeepLastNCheckpoints;
use burn::train::logger::{EvaluationProgressLogger, TrainingProgressLogger};
use burn::train::metric::{AccuracyMetric, LossMetric, MetricDefinition};
use burn::train::renderer::{
    EvaluationName, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining,
};
use burn::train::{ExecutionStrategy, Learner, MultiDeviceOptim, SupervisedTraining};

use crate::copy_back::{CopyBackBatch, CopyBackBatcher, CopyBackDataset};
use crate::tagger::TokenTagger;
use crate::training::TrainingConfig;

/// Seed of the validation set, apart from the training set's.
const VALID_SEED: u64 = 0x05EE_D0F7_A11D;

/// The training set: `valid_every * batch_size * workers` sequences, so an epoch is
/// `valid_every` optimizer steps whatever the number of workers (each takes `batch_size`).
pub fn train_loader(config: &TrainingConfig, workers: usize) -> Arc<dyn DataLoader<CopyBackBatch>> {
    let dataset = CopyBackDataset {
        task: config.task.clone(),
        len: config.valid_every * config.batch_size * workers,
        seed: config.seed,
    };
    DataLoaderBuilder::new(CopyBackBatcher { k: config.task.k })
        .batch_size(config.batch_size)
        .build(dataset)
}

/// The validation set, one batch.
pub fn valid_loader(config: &TrainingConfig) -> Arc<dyn DataLoader<CopyBackBatch>> {
    let dataset = CopyBackDataset {
        task: config.task.clone(),
        len: config.valid_size,
        seed: config.seed ^ VALID_SEED,
    };
    DataLoaderBuilder::new(CopyBackBatcher { k: config.task.k })
        .batch_size(config.valid_size)
        .build(dataset)
}

/// The last epoch with a complete checkpoint (model, optimizer and scheduler) in
/// `<dir>/checkpoint`, as burn-train's file checkpointer names them.
pub fn last_checkpoint(dir: &Path) -> Option<usize> {
    let entries = std::fs::read_dir(dir.join("checkpoint")).ok()?;
    entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let epoch: usize = name
                .strip_prefix("model-")?
                .strip_suffix(".bpk")?
                .parse()
                .ok()?;
            ["optim", "scheduler"]
                .iter()
                .all(|part| {
                    dir.join("checkpoint")
                        .join(format!("{part}-{epoch}.bpk"))
                        .exists()
                })
                .then_some(epoch)
        })
        .max()
}

/// Trains with burn-train on `workers` copies of `device` (made an autodiff device here): one
/// worker is `ExecutionStrategy::SingleDevice`, more are `MultiDevice` with the optimizer on
/// the first (flex has one device id, so its workers share it, as in burn's own data-split
/// test). Adam at the config's learning rate; the workers' gradients are summed, which Adam's
/// update does not feel. Checkpoints every epoch in `<dir>/checkpoint` and resumes from the
/// last complete one. `renderer`: burn-train's default when `None` (its terminal dashboard
/// when stdout is a terminal, plain lines otherwise). Returns the trained model, without
/// autodiff.
///
/// # Panics
///
/// If `workers` is 0.
pub fn fit(
    config: &TrainingConfig,
    device: &Device,
    workers: usize,
    dir: &Path,
    renderer: Option<Box<dyn MetricsRenderer>>,
) -> TokenTagger {
    assert!(workers > 0, "workers must be at least 1");
    let device = device.clone().autodiff();
    let model = config.init_model(&device);
    let epochs = config.steps.div_ceil(config.valid_every);
    let strategy = if workers == 1 {
        ExecutionStrategy::single(device)
    } else {
        ExecutionStrategy::multi(vec![device; workers], MultiDeviceOptim::OptimMainDevice)
    };
    let learner = Learner::new(
        model,
        AdamConfig::new().init(),
        ConstantLr::new(config.learning_rate),
    );
    let mut training =
        SupervisedTraining::new(dir, train_loader(config, workers), valid_loader(config))
            .with_training_strategy(strategy.into())
            .num_epochs(epochs)
            .metric_train_numeric(LossMetric::new())
            .metric_valid_numeric(LossMetric::new())
            .metric_train_numeric(AccuracyMetric::new())
            .metric_valid_numeric(AccuracyMetric::new())
            .with_default_checkpointers()
            .with_checkpointing_strategy(KeepLastNCheckpoints::new(2))
            .with_application_logger(None);
    if let Some(renderer) = renderer {
        training = training.renderer(renderer);
    }
    if let Some(epoch) = last_checkpoint(dir) {
        training = training.checkpoint(epoch);
    }
    training.launch(learner).model
}

/// A renderer of one line per epoch (`label epoch e/E: train loss .. accuracy .. | valid loss
/// .. accuracy ..`), for logs and terminals where burn-train's dashboard is not wanted.
pub struct LineRenderer {
    label: String,
    names: HashMap<String, String>,
    train: Vec<(String, String)>,
    valid: Vec<(String, String)>,
    split: String,
    epoch: usize,
    epochs: usize,
}

impl LineRenderer {
    /// A renderer whose lines start with `label`. Epochs count from burn-train's starting
    /// epoch (1, or the one after a resumed checkpoint).
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            names: HashMap::new(),
            train: Vec::new(),
            valid: Vec::new(),
            split: String::new(),
            epoch: 0,
            epochs: 0,
        }
    }

    fn record(&mut self, valid: bool, state: MetricState) {
        let MetricState::Numeric(entry, _) = state else {
            return;
        };
        let id = format!("{:?}", entry.metric_id);
        let name = self.names.get(&id).cloned().unwrap_or(id);
        let values = if valid {
            &mut self.valid
        } else {
            &mut self.train
        };
        match values.iter_mut().find(|(n, _)| *n == name) {
            Some((_, value)) => *value = entry.serialized_entry.formatted,
            None => values.push((name, entry.serialized_entry.formatted)),
        }
    }

    fn line(values: &[(String, String)]) -> String {
        values
            .iter()
            .map(|(name, value)| format!("{name} {value}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl MetricsRendererTraining for LineRenderer {
    fn update_train(&mut self, state: MetricState) {
        self.record(false, state);
    }

    fn update_valid(&mut self, state: MetricState) {
        self.record(true, state);
    }
}

impl MetricsRendererEvaluation for LineRenderer {
    fn update_test(&mut self, _name: EvaluationName, _state: MetricState) {}
}

impl TrainingProgressLogger for LineRenderer {
    fn start(
        &mut self,
        epochs: usize,
        starting_epoch: usize,
        _items: Option<usize>,
        _label: Option<&str>,
    ) {
        self.epochs = epochs;
        self.epoch = starting_epoch;
    }

    fn update_epoch(&mut self, _epoch: usize) {}

    fn start_split(&mut self, split: &str, _total_items: usize) {
        self.split = split.to_string();
    }

    fn update_split(&mut self, _items_processed: usize) {}

    fn end_split(&mut self) {
        if self.split.to_ascii_lowercase().contains("valid") {
            println!(
                "{} epoch {}/{}: train {} | valid {}",
                self.label,
                self.epoch,
                self.epochs,
                Self::line(&self.train),
                Self::line(&self.valid)
            );
            self.epoch += 1;
        }
    }

    fn end(&mut self) {}

    fn log_event_training(&mut self, _event: String) {}
}

impl EvaluationProgressLogger for LineRenderer {
    fn start_global_progress(&mut self, _total_tests: usize) {}
    fn start_test(&mut self, _name: &str, _total_items: usize) {}
    fn update_test_progress(&mut self, _items_processed: usize) {}
    fn end_test(&mut self) {}
    fn end_global_progress(&mut self) {}
    fn log_event_evaluation(&mut self, _event: String) {}
}

impl MetricsRenderer for LineRenderer {
    fn manual_close(&mut self) {}

    fn register_metric(&mut self, definition: MetricDefinition) {
        self.names.insert(
            format!("{:?}", definition.metric_id),
            definition.name.to_string(),
        );
    }
}
