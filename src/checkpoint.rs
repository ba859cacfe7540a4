//! Checkpoints that a crash cannot leave half-written, and a run record that a resume must
//! agree with.
//!
//! burn-train's checkpointer writes `model-N.bpk`, `optim-N.bpk` and `scheduler-N.bpk` one
//! after the other; burn-pack writes each to a scratch file and renames it into place, so a
//! part is whole or absent, but a crash between parts leaves epoch `N` with its model and
//! without its optimizer. [`last_complete_epoch`] resumes only from an epoch whose three parts
//! all exist (burn-train keeps the one before until the next is saved), and [`RunRecord`]
//! (`run.json`, written by [`write_atomic`]: a flushed temporary file renamed into place)
//! holds the settings the checkpoints were made with, so a resume with other settings is
//! refused instead of silently mixing two runs.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use burn::train::checkpoint::{Checkpoint, Checkpointer, CheckpointerError, FileCheckpointer};

use crate::training::{TrainingConfig, TrainingError};

/// The fault-injection knob of [`write_atomic`] (milliseconds).
const DELAY_VAR: &str = "BURN_POSITIONAL_CHECKPOINT_DELAY_MS";

/// The parts burn-train saves every epoch, by file-name prefix.
pub const PARTS: [&str; 3] = ["model", "optim", "scheduler"];

/// Writes `bytes` to `path` so that `path` holds either its old content or all of `bytes`:
/// a sibling `.tmp` file, flushed to disk, renamed over `path`, then the directory flushed.
///
/// Fault injection for crash tests: with `BURN_POSITIONAL_CHECKPOINT_DELAY_MS` set, it pauses
/// that long halfway through the write and again before the rename, so a test that kills the
/// process lands inside writes often.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = tmp_path(path);
    {
        let mut file = std::fs::File::create(&tmp)?;
        let (first, rest) = bytes.split_at(bytes.len() / 2);
        file.write_all(first)?;
        pause();
        file.write_all(rest)?;
        file.sync_all()?;
    }
    pause();
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        // Makes the rename itself durable; some file systems refuse to open a directory.
        if let Ok(dir) = std::fs::File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}

/// The fault-injection pause: `BURN_POSITIONAL_CHECKPOINT_DELAY_MS` milliseconds, or none.
fn pause() {
    if let Some(ms) = std::env::var(DELAY_VAR)
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// burn-train's `FileCheckpointer` for one part (`model`, `optim` or `scheduler`) in `dir`.
/// burn-pack 0.22.1 writes every part to a scratch sibling and renames it into place, so a
/// part is whole or absent; what a crash can leave is an epoch with some parts and not others,
/// which [`last_complete_epoch`] passes over.
///
/// A restore reads the whole file into memory. burn-train's own restore keeps the tensor data
/// file-backed and reads it lazily, on first use: once the run deletes that epoch (keep-last-N
/// rotation, or a finished cell's checkpoint folder removed), a tensor the training never
/// rewrote (a constant table, an optimizer moment) fails to read with "No such file or
/// directory" long after the restore, in whatever later work uses it.
///
/// Fault injection for crash tests: with `BURN_POSITIONAL_CHECKPOINT_DELAY_MS` set, part `i`
/// of [`PARTS`] waits `i` times that long before it is saved, so the parts of one epoch land
/// on disk one after the other and a kill often falls between them.
pub struct PartCheckpointer {
    inner: FileCheckpointer,
    dir: PathBuf,
    name: String,
    stagger: u32,
}

impl PartCheckpointer {
    /// The checkpointer of part `name` in `dir`.
    pub fn new(dir: &Path, name: &str) -> Self {
        Self {
            inner: FileCheckpointer::new(dir, name),
            dir: dir.to_path_buf(),
            name: name.to_string(),
            stagger: PARTS.iter().position(|part| *part == name).unwrap_or(0) as u32,
        }
    }

    /// The file of `epoch`, named as burn-train's `FileCheckpointer` names it.
    fn path(&self, epoch: usize) -> PathBuf {
        self.dir.join(format!("{}-{epoch}.bpk", self.name))
    }
}

impl<R: Checkpoint> Checkpointer<R> for PartCheckpointer {
    fn save(&self, epoch: usize, record: R) -> Result<(), CheckpointerError> {
        for _ in 0..self.stagger {
            pause();
        }
        self.inner.save(epoch, record)
    }

    fn delete(&self, epoch: usize) -> Result<(), CheckpointerError> {
        Checkpointer::<R>::delete(&self.inner, epoch)
    }

    fn restore(&self, epoch: usize) -> Result<R, CheckpointerError> {
        let bytes = std::fs::read(self.path(epoch)).map_err(CheckpointerError::IOError)?;
        R::checkpoint_from_bytes(burn::tensor::Bytes::from_bytes_vec(bytes))
            .map_err(CheckpointerError::Record)
    }
}

/// The last epoch in `checkpoint_dir` whose three parts ([`PARTS`]) all exist. Each part is
/// renamed into place whole, so such an epoch is complete; an epoch with a part missing (a
/// crash between parts) is passed over for the one before.
pub fn last_complete_epoch(checkpoint_dir: &Path) -> Option<usize> {
    let entries = std::fs::read_dir(checkpoint_dir).ok()?;
    entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let epoch: usize = name
                .strip_prefix("model-")?
                .strip_suffix(".bpk")?
                .parse()
                .ok()?;
            PARTS
                .iter()
                .all(|part| checkpoint_dir.join(format!("{part}-{epoch}.bpk")).is_file())
                .then_some(epoch)
        })
        .max()
}

/// What a run's checkpoints were made with (`run.json` beside them): the training config and
/// the number of workers (which sets the training set).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunRecord {
    /// The run's config.
    pub config: TrainingConfig,
    /// Batches per optimizer step.
    pub workers: usize,
}

impl RunRecord {
    /// Reads `path`, or says what is wrong with it.
    pub fn load(path: &Path) -> Result<Self, TrainingError> {
        let text = std::fs::read_to_string(path).map_err(|error| TrainingError::Io {
            path: path.to_path_buf(),
            error: error.to_string(),
        })?;
        serde_json::from_str(&text).map_err(|error| TrainingError::Io {
            path: path.to_path_buf(),
            error: format!(
                "not a run record ({error}). Fix: delete the run's folder or pass --fresh to \
                 start over"
            ),
        })
    }

    /// Writes `path` with [`write_atomic`].
    pub fn save(&self, path: &Path) -> Result<(), TrainingError> {
        let text = serde_json::to_string_pretty(self).expect("serializable");
        write_atomic(path, text.as_bytes()).map_err(|error| TrainingError::Io {
            path: path.to_path_buf(),
            error: error.to_string(),
        })
    }

    /// Whether a run with `self`'s settings may resume from checkpoints made with `saved`'s,
    /// `done` steps in: everything equal but the step budget, which may grow (not fall below
    /// `done`). Otherwise names every difference and how to start over.
    pub fn check_resume(
        &self,
        saved: &RunRecord,
        done: usize,
        dir: &Path,
    ) -> Result<(), TrainingError> {
        let mut differences = Vec::new();
        let (now, then) = (&self.config, &saved.config);
        let mut differ = |what: &str, now: String, then: String| {
            if now != then {
                differences.push(format!("{what}: {then} in the checkpoint, {now} now"));
            }
        };
        differ(
            "task",
            format!("{:?}", now.task),
            format!("{:?}", then.task),
        );
        differ(
            "model",
            format!("{:?}", now.model),
            format!("{:?}", then.model),
        );
        differ(
            "batch_size",
            now.batch_size.to_string(),
            then.batch_size.to_string(),
        );
        differ(
            "learning_rate",
            now.learning_rate.to_string(),
            then.learning_rate.to_string(),
        );
        differ(
            "freeze_tokens",
            now.freeze_tokens.to_string(),
            then.freeze_tokens.to_string(),
        );
        differ(
            "valid_every",
            now.valid_every.to_string(),
            then.valid_every.to_string(),
        );
        differ(
            "valid_size",
            now.valid_size.to_string(),
            then.valid_size.to_string(),
        );
        differ("seed", now.seed.to_string(), then.seed.to_string());
        differ(
            "workers",
            self.workers.to_string(),
            saved.workers.to_string(),
        );
        if now.steps < done {
            differences.push(format!(
                "steps: the checkpoint is already at step {done}, past this run's {}",
                now.steps
            ));
        }
        if differences.is_empty() {
            return Ok(());
        }
        Err(TrainingError::Unsupported {
            what: format!(
                "cannot resume the run in {} with other settings ({})",
                dir.display(),
                differences.join("; ")
            ),
            fix: "run with the checkpoint's settings (the step budget may grow), or start \
                  fresh (--fresh, or delete the folder)"
                .into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use burn::nn::LinearConfig;
    use burn::prelude::*;
    use burn::store::ModuleRecord;

    use super::*;

    /// A restored part owns its data: deleting its file (as keep-last-N rotation and a finished
    /// study cell do) leaves the restored tensors readable.
    #[test]
    fn a_restored_part_outlives_its_file() {
        let device = Device::flex();
        let dir = tempfile::tempdir().unwrap();
        let linear = LinearConfig::new(3, 2).init(&device);
        let weights = linear.weight.val().into_data();
        let checkpointer = PartCheckpointer::new(dir.path(), PARTS[0]);
        Checkpointer::<ModuleRecord>::save(&checkpointer, 1, linear.clone().into_record()).unwrap();
        let record: ModuleRecord = checkpointer.restore(1).unwrap();
        Checkpointer::<ModuleRecord>::delete(&checkpointer, 1).unwrap();
        assert!(!dir.path().join("model-1.bpk").exists());
        let restored = LinearConfig::new(3, 2)
            .init(&device)
            .try_load_record(record)
            .unwrap();
        assert_eq!(restored.weight.val().into_data(), weights);
    }

    #[test]
    fn a_missing_part_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let checkpointer = PartCheckpointer::new(dir.path(), PARTS[1]);
        let err = Checkpointer::<ModuleRecord>::restore(&checkpointer, 7)
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(err, CheckpointerError::IOError(_)), "{err}");
    }
}
