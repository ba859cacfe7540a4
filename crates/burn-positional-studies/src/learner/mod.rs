//! Training a [`TokenTagger`] on the copy-back task with burn-train: `SupervisedTraining`,
//! its metrics, checkpointer and execution strategies (one device, several workers with
//! `ExecutionStrategy::MultiDevice`, or DDP on CUDA devices).
//!
//! An epoch is `valid_every` optimizer steps over a fixed training set (burn-train's data
//! loader repeats one dataset every epoch), followed by a validation pass and a checkpoint
//! (model, optimizer, scheduler) in `<dir>/checkpoint`. A run whose directory holds checkpoints
//! resumes after the last complete one, if `<dir>/run.json` says they were made with the same
//! settings (see [`crate::checkpoint`]). The loaders do not shuffle, so a resumed run sees the
//! batches an uninterrupted one would.

use std::path::Path;
use std::sync::Arc;

use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::optim::AdamConfig;
use burn::optim::lr_scheduler::constant::ConstantLr;
use burn::prelude::*;
use burn::tensor::distributed::{DistributedConfig, ReduceOperation};
use burn::train::checkpoint::KeepLastNCheckpoints;
use burn::train::metric::{AccuracyMetric, LossMetric};
use burn::train::{
    ExecutionStrategy, InferenceStep, Learner, LearnerModel, MultiDeviceOptim, SupervisedTraining,
    TrainStep,
};

use crate::checkpoint::{
    PARTS, PartCheckpointer, ResumePoint, RunLock, RunRecord, discard_after, last_complete_epoch,
    resume_point,
};
use crate::copy_back::{CopyBackBatch, CopyBackBatcher, CopyBackDataset};
use crate::tagger::TokenTagger;
use crate::training::{Metrics, TrainingConfig, TrainingError};

mod recorder;
pub(crate) use recorder::Recorder;

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

/// The validation set ([`TrainingConfig::valid_dataset`] at the task's length), one batch.
pub fn valid_loader(config: &TrainingConfig) -> Arc<dyn DataLoader<CopyBackBatch>> {
    DataLoaderBuilder::new(CopyBackBatcher { k: config.task.k })
        .batch_size(config.valid_size)
        .build(config.valid_dataset(config.task.seq))
}

/// The last epoch with a complete checkpoint (model, optimizer and scheduler, each on disk and
/// decoding) in `<dir>/checkpoint`, as burn-train names them (see [`crate::checkpoint`]).
pub fn last_checkpoint(dir: &Path) -> Option<usize> {
    last_complete_epoch(&dir.join("checkpoint"))
}

/// Creates `<dir>/checkpoint` and removes the leftovers of writes a crash interrupted (scratch
/// files never renamed into place, never read: the parts' in `<dir>/checkpoint`, `run.json`'s
/// in `<dir>`); returns the folder. Only for the folder's one run: [`fit`] holds its lock.
///
/// # Errors
///
/// [`TrainingError::Io`] when the folder cannot be created.
pub fn prepare_checkpoint_dir(dir: &Path) -> Result<std::path::PathBuf, TrainingError> {
    let checkpoint_dir = dir.join("checkpoint");
    std::fs::create_dir_all(&checkpoint_dir).map_err(|error| TrainingError::Io {
        path: checkpoint_dir.clone(),
        error: error.to_string(),
    })?;
    remove_scratch(&checkpoint_dir, "");
    remove_scratch(dir, "run.json.");
    Ok(checkpoint_dir)
}

/// Removes the files of `dir` named `<prefix>...tmp`.
fn remove_scratch(dir: &Path, prefix: &str) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(prefix) && name.ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// How `fit` spreads the training over devices: burn-train's execution strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// One device (`ExecutionStrategy::SingleDevice`).
    Single,
    /// `workers` threads on copies of the device, each on its own batches, their gradients
    /// summed on the first (`ExecutionStrategy::MultiDevice` with `OptimMainDevice`). On flex,
    /// which has one device id, the workers share it, as in burn's own data-split test.
    MultiDevice {
        /// Worker threads (at least 1).
        workers: usize,
    },
    /// Distributed data parallel on CUDA devices `0..devices`: one worker per GPU, gradients
    /// averaged by an all-reduce (NCCL) after every backward
    /// (`ExecutionStrategy::ddp` with `ReduceOperation::Mean`). burn 0.22.1 implements the
    /// all-reduce for CUDA only; `fit` refuses any other device with the reason.
    Ddp {
        /// GPUs (at least 1).
        devices: usize,
    },
}

impl Strategy {
    /// The strategy for `devices` devices: one is `Single`, more are `MultiDevice` workers or,
    /// with `ddp`, `Ddp`.
    pub fn new(devices: usize, ddp: bool) -> Self {
        match (devices, ddp) {
            (_, true) => Self::Ddp { devices },
            (1, false) => Self::Single,
            (workers, false) => Self::MultiDevice { workers },
        }
    }

    /// Batches taken per optimizer step: one per worker or device.
    pub fn workers(&self) -> usize {
        match *self {
            Self::Single => 1,
            Self::MultiDevice { workers } => workers,
            Self::Ddp { devices } => devices,
        }
    }

    /// burn-train's strategy on `device` (an autodiff device), or why it cannot run there.
    fn execution(&self, device: Device) -> Result<ExecutionStrategy, TrainingError> {
        if self.workers() == 0 {
            return Err(TrainingError::Unsupported {
                what: format!("{self:?} has no worker"),
                fix: "pass --devices 1 or more".into(),
            });
        }
        match *self {
            Self::Single => Ok(ExecutionStrategy::single(device)),
            Self::MultiDevice { workers } => Ok(ExecutionStrategy::multi(
                vec![device; workers],
                MultiDeviceOptim::OptimMainDevice,
            )),
            Self::Ddp { devices } => ddp_devices(&device, devices).map(|devices| {
                let config = DistributedConfig {
                    all_reduce_op: ReduceOperation::Mean,
                };
                ExecutionStrategy::ddp(devices, config)
            }),
        }
    }
}

/// CUDA devices `0..n` (with autodiff) when `device` is CUDA device 0.
#[cfg(feature = "cuda")]
fn ddp_devices(device: &Device, n: usize) -> Result<Vec<Device>, TrainingError> {
    if device.clone().without_autodiff() != Device::cuda(0) {
        return Err(TrainingError::Unsupported {
            what: format!(
                "distributed data parallel needs CUDA devices (burn 0.22.1 implements its \
                 all-reduce with NCCL on CUDA only), not {device:?}"
            ),
            fix: "pass --device cuda, or train on several workers without --ddp".into(),
        });
    }
    Ok((0..n).map(|i| Device::cuda(i).autodiff()).collect())
}

/// Without the `cuda` feature there is no device DDP runs on.
#[cfg(not(feature = "cuda"))]
fn ddp_devices(device: &Device, _n: usize) -> Result<Vec<Device>, TrainingError> {
    Err(TrainingError::Unsupported {
        what: format!(
            "distributed data parallel needs CUDA devices (burn 0.22.1 implements its \
             all-reduce with NCCL on CUDA only); this build has no CUDA backend and the device \
             is {device:?}"
        ),
        fix: "build with --features cuda and pass --device cuda, or train on several workers \
              without --ddp"
            .into(),
    })
}

/// Where training reports to.
pub enum Listener {
    /// burn-train's default renderer: its terminal dashboard when stdout is a terminal, a line
    /// per batch otherwise.
    Dashboard,
    /// A function called after every optimizer step and every validation.
    Events(Box<dyn FnMut(&Event) + Send + Sync>),
}

impl Listener {
    /// A line per epoch (`label epoch e/E, step s: train loss .., accuracy .. | valid loss ..,
    /// accuracy .. | seconds since the start`), for logs and CI where burn-train's dashboard is
    /// not wanted.
    pub fn lines(label: impl Into<String>) -> Self {
        let label = label.into();
        let start = std::time::Instant::now();
        Self::Events(Box::new(move |event| {
            if let Event::Validated {
                epoch,
                epochs,
                step,
                train,
                valid,
            } = event
            {
                println!(
                    "{label} epoch {epoch}/{epochs}, step {step}: train loss {:.4}, accuracy \
                     {:.1} % | valid loss {:.4}, accuracy {:.1} % | {:.1} s",
                    train.loss,
                    100.0 * train.accuracy,
                    valid.loss,
                    100.0 * valid.accuracy,
                    start.elapsed().as_secs_f64()
                );
            }
        }))
    }

    /// Nothing: for tests.
    pub fn silent() -> Self {
        Self::Events(Box::new(|_| {}))
    }
}

/// What a [`Listener::Events`] function hears.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    /// An optimizer step: its number (from 1, counting the steps of a resumed run's
    /// checkpoints) and the loss and accuracy on its batches (the workers' mean).
    Step {
        /// 1-based.
        step: usize,
        /// On this step's batches, before the update.
        train: Metrics,
    },
    /// The end of an epoch: the epoch's mean training metrics and the validation set's.
    Validated {
        /// 1-based.
        epoch: usize,
        /// Of the whole run.
        epochs: usize,
        /// The last step of the epoch.
        step: usize,
        /// Mean over the epoch's steps.
        train: Metrics,
        /// On the validation set, after the epoch.
        valid: Metrics,
    },
}

/// Trains with burn-train on `device` (made an autodiff device here) under `strategy`: Adam at
/// the config's learning rate (gradients summed over `MultiDevice` workers, which Adam's
/// update does not feel; averaged under `Ddp`), loss and accuracy metrics, a checkpoint
/// (model, optimizer, scheduler) every epoch in `<dir>/checkpoint`, resumed from the last
/// complete one. Returns the trained model, without autodiff.
///
/// Crash-safe: every checkpoint part is written whole or not at all (burn-pack's scratch file
/// and rename; [`PartCheckpointer`]), an epoch is resumed only when all its parts exist and
/// load (one that does not is passed over for the epoch before, with a notice on stderr; the
/// epochs after the one resumed are removed, so no epoch mixes two attempts' parts), and
/// `<dir>/run.json` records the settings the checkpoints were made with, the device's float
/// dtype included: a resume with other settings (other than a larger step budget) is refused
/// with the differences named. The run holds `<dir>` ([`RunLock`]) until it returns: a second
/// run on the folder is refused, naming the first's pid.
///
/// Every parameter is drawn in `init` from the config's seed (see
/// [`burn_positional::training::materialize`]), and the loaders do not shuffle, so a run is reproducible
/// from its config as long as nothing else seeds or draws from the same device meanwhile.
///
/// # Errors
///
/// [`TrainingError::Position`] for an invalid config ([`TrainingConfig::validate`]),
/// [`TrainingError::Unsupported`] for a strategy that cannot run on `device` or a resume with
/// other settings, [`TrainingError::InUse`] when another run holds the folder,
/// [`TrainingError::Io`] when the folder cannot be written.
pub fn fit(
    config: &TrainingConfig,
    device: &Device,
    strategy: Strategy,
    dir: &Path,
    listener: Listener,
) -> Result<TokenTagger, TrainingError> {
    launch(
        config,
        |device| config.init_model(device),
        device,
        strategy,
        dir,
        listener,
    )
}

/// [`fit`] from a given starting model (built on `device.clone().autodiff()` from
/// `config.model`, with the token table frozen if the config says so) instead of one drawn
/// from the config's seed: to continue from a trained model, or to start two runs from one
/// draw whatever else draws from the device's random generator (flex has one generator for
/// every thread of the process). A run resumed from a checkpoint replaces the model with the
/// checkpoint's.
///
/// # Errors
///
/// As [`fit`].
pub fn fit_from(
    config: &TrainingConfig,
    model: TokenTagger,
    device: &Device,
    strategy: Strategy,
    dir: &Path,
    listener: Listener,
) -> Result<TokenTagger, TrainingError> {
    launch(config, |_| model, device, strategy, dir, listener)
}

/// What [`fit`] and [`fit_from`] share: every check (config, strategy, the folder's lock,
/// resume settings) before the model is built by `model` on the autodiff device, then the
/// epoch to resume (its model part must load into that model), then burn-train.
fn launch(
    config: &TrainingConfig,
    model: impl FnOnce(&Device) -> TokenTagger,
    device: &Device,
    strategy: Strategy,
    dir: &Path,
    listener: Listener,
) -> Result<TokenTagger, TrainingError> {
    config.validate()?;
    let workers = strategy.workers();
    if config
        .valid_every
        .checked_mul(config.batch_size)
        .and_then(|n| n.checked_mul(workers))
        .is_none()
    {
        return Err(TrainingError::Unsupported {
            what: format!(
                "{workers} workers of {} steps of {} sequences per epoch overflow a usize",
                config.valid_every, config.batch_size
            ),
            fix: "use fewer workers, or the default valid_every and batch_size".into(),
        });
    }
    let dtype = device.settings().float_dtype;
    let device = device.clone().autodiff();
    let execution = strategy.execution(device.clone())?;
    let _lock = RunLock::acquire(dir)?;
    let checkpoint_dir = dir.join("checkpoint");
    let run = RunRecord {
        config: config.clone(),
        workers,
        dtype,
    };
    check_settings(&run, dir)?;
    let model = model(&device);
    let resume = choose_resume(&checkpoint_dir, &model);
    prepare_checkpoint_dir(dir)?;
    discard_after(&checkpoint_dir, resume).map_err(|error| TrainingError::Io {
        path: checkpoint_dir.clone(),
        error: error.to_string(),
    })?;
    run.save(&dir.join("run.json"))?;
    let epochs = config.steps.div_ceil(config.valid_every);
    let learner = adam_learner(model, config.learning_rate);
    let mut training = checkpointed_training(
        dir,
        &checkpoint_dir,
        train_loader(config, workers),
        valid_loader(config),
        epochs,
        resume,
    )
    .with_training_strategy(execution.into())
    .metric_train_numeric(LossMetric::new())
    .metric_valid_numeric(LossMetric::new())
    .metric_train_numeric(AccuracyMetric::new())
    .metric_valid_numeric(AccuracyMetric::new());
    if let Listener::Events(on_event) = listener {
        training = training.renderer(Box::new(Recorder::new(
            config.valid_every,
            workers,
            on_event,
        )));
    }
    Ok(training.launch(learner).model)
}

/// The learner every run of this crate trains with: `model`, Adam with burn's defaults, a
/// constant learning rate.
pub(crate) fn adam_learner<M: LearnerModel>(model: M, learning_rate: f64) -> Learner<M> {
    Learner::new(
        model,
        AdamConfig::new().init(),
        ConstantLr::new(learning_rate),
    )
}

/// The burn-train run every trainer of this crate launches ([`fit`] and the length-generalization
/// study's `train_cell`): `epochs` epochs over the two loaders, a checkpoint (model, optimizer,
/// scheduler, each part written whole by a [`PartCheckpointer`]) every epoch in
/// `checkpoint_dir`, the last two kept, no log file, and resumed after epoch `resume` when
/// given. Callers add their metrics, execution strategy and renderer.
pub(crate) fn checkpointed_training<M: LearnerModel>(
    dir: &Path,
    checkpoint_dir: &Path,
    train: Arc<dyn DataLoader<<M as TrainStep>::Input>>,
    valid: Arc<dyn DataLoader<<M as InferenceStep>::Input>>,
    epochs: usize,
    resume: Option<usize>,
) -> SupervisedTraining<M> {
    let training = SupervisedTraining::new(dir, train, valid)
        .num_epochs(epochs)
        .with_custom_checkpointers(
            PartCheckpointer::new(checkpoint_dir, PARTS[0]),
            PartCheckpointer::new(checkpoint_dir, PARTS[1]),
            PartCheckpointer::new(checkpoint_dir, PARTS[2]),
        )
        .with_checkpointing_strategy(KeepLastNCheckpoints::new(2))
        .with_application_logger(None);
    match resume {
        Some(epoch) => training.checkpoint(epoch),
        None => training,
    }
}

/// Whether `run` may resume the checkpoints in `<dir>/checkpoint`, if any: `<dir>/run.json`
/// must exist and agree ([`RunRecord::check_resume`]).
fn check_settings(run: &RunRecord, dir: &Path) -> Result<(), TrainingError> {
    let checkpoint_dir = dir.join("checkpoint");
    let run_path = dir.join("run.json");
    match (last_complete_epoch(&checkpoint_dir), run_path.exists()) {
        (Some(epoch), true) => run.check_resume(
            &RunRecord::load(&run_path)?,
            epoch * run.config.valid_every,
            dir,
        ),
        (Some(_), false) => Err(TrainingError::Unsupported {
            what: format!(
                "{} holds checkpoints but no run.json saying what they were made with",
                checkpoint_dir.display()
            ),
            fix: "start fresh (--fresh, or delete the folder)".into(),
        }),
        (None, _) => Ok(()),
    }
}

/// The epoch to resume after ([`resume_point`], the model part loaded into a copy of `model`),
/// with a notice on stderr for every newer epoch passed over because a part does not load.
fn choose_resume(checkpoint_dir: &Path, model: &TokenTagger) -> Option<usize> {
    let ResumePoint { epoch, passed_over } = resume_point(checkpoint_dir, |record| {
        model
            .clone()
            .try_load_record(record)
            .map(drop)
            .map_err(|error| error.to_string())
    });
    for fault in &passed_over {
        let instead = epoch.map_or("starting from the beginning".to_string(), |epoch| {
            format!("resuming after epoch {epoch}")
        });
        eprintln!("notice: passed over checkpoint {fault}; {instead}");
    }
    epoch
}
