//! A run's folder: the lock that keeps it to one run ([`RunLock`]) and the record of the
//! settings its checkpoints were made with ([`RunRecord`]).

use std::io::Write as _;
use std::path::Path;

use burn::tensor::FloatDType;

use super::{LOCK_FILE, write_atomic};
use crate::training::{TrainingConfig, TrainingError};

/// `File::try_lock`, retried for up to [`LOCK_GRACE`]: a child process started by any thread of
/// the holder inherits, between fork and exec, a reference to the lock, so a lock released just
/// now may still read as held for a moment. A real run holds its folder for far longer.
fn try_lock_with_grace(file: &std::fs::File) -> Result<(), std::fs::TryLockError> {
    let start = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < LOCK_GRACE => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// How long [`RunLock::acquire`] waits for a lock that reads as held before refusing.
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// A run's hold on its folder, for as long as the value lives: an OS advisory lock
/// (`File::try_lock`: `flock` on Unix) on `<dir>/run.lock`, which holds the holder's pid. The
/// system releases the lock when the process ends, however it ends, so a killed run leaves no
/// lock behind: the file stays, unlocked, and the next run takes it over.
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
}

impl RunLock {
    /// Takes the lock on `dir` (created if need be), or says who holds it.
    ///
    /// # Errors
    ///
    /// [`TrainingError::InUse`] with the holder's pid when another run holds the folder
    /// (another process, or another `fit` in this one); [`TrainingError::Io`] when the lock
    /// file cannot be created, or the file system cannot lock it.
    pub fn acquire(dir: &Path) -> Result<Self, TrainingError> {
        let path = dir.join(LOCK_FILE);
        let io = |error: std::io::Error| TrainingError::Io {
            path: path.clone(),
            error: error.to_string(),
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match try_lock_with_grace(&file) {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let pid = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|text| text.trim().parse().ok());
                return Err(TrainingError::InUse {
                    dir: dir.to_path_buf(),
                    pid,
                });
            }
            Err(std::fs::TryLockError::Error(error)) => return Err(io(error)),
        }
        file.set_len(0)
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(io)?;
        Ok(Self { _file: file })
    }
}

/// What a run's checkpoints were made with (`run.json` beside them): the training config, the
/// number of workers (which sets the training set) and the device's float dtype.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunRecord {
    /// The run's config.
    pub config: TrainingConfig,
    /// Batches per optimizer step.
    pub workers: usize,
    /// The float dtype of the device the run trains on (`Device::configure`): its checkpoints
    /// hold tensors of that dtype.
    pub dtype: FloatDType,
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
        differ(
            "dtype",
            format!("{:?}", self.dtype),
            format!("{:?}", saved.dtype),
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
