//! Checkpoints that a crash cannot leave half-written, a run record that a resume must agree
//! with, and a lock that keeps a folder to one run.
//!
//! burn-train's checkpointer writes `model-N.bpk`, `optim-N.bpk` and `scheduler-N.bpk` on three
//! threads, in any order; burn-pack writes each to a scratch file and renames it into place, so
//! a part is whole or absent, but a crash between parts leaves epoch `N` with some parts and
//! without the others. [`last_complete_epoch`] resumes only from an epoch whose three parts all
//! exist and decode (burn-train keeps the one before until the next is saved), [`resume_point`]
//! also checks the model part against the model and says which epochs it passed over, and
//! [`RunRecord`] (`run.json`, written by [`write_atomic`]: a flushed temporary file renamed
//! into place) holds the settings the checkpoints were made with, so a resume with other
//! settings is refused instead of silently mixing two runs. [`RunLock`] holds the folder for
//! the run's lifetime: a second run on it is refused, naming the first.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use burn::optim::OptimizerRecord;
use burn::optim::lr_scheduler::LrSchedulerRecord;
use burn::store::ModuleRecord;
use burn::train::checkpoint::{Checkpoint, Checkpointer, CheckpointerError, FileCheckpointer};

mod run;
pub use run::{RunLock, RunRecord};

/// The fault-injection knob of [`write_atomic`] (milliseconds).
const DELAY_VAR: &str = "BURN_POSITIONAL_CHECKPOINT_DELAY_MS";

/// The fault-injection knob of [`PartCheckpointer`]: the order the parts are saved in, as
/// comma-separated part names (`scheduler,model,optim`).
const ORDER_VAR: &str = "BURN_POSITIONAL_CHECKPOINT_ORDER";

/// The file in a run's folder that [`RunLock`] locks; it holds the holder's pid.
pub const LOCK_FILE: &str = "run.lock";

/// The parts burn-train saves every epoch, by file-name prefix.
pub const PARTS: [&str; 3] = ["model", "optim", "scheduler"];

/// Writes `bytes` to `path` so that `path` holds either its old content or all of `bytes`:
/// a sibling `<name>.<pid>.tmp` file, flushed to disk, renamed over `path`, then the directory
/// flushed. The scratch name is the process's own, so two processes never share one.
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

/// `<name>.<pid>.tmp` beside `path`.
fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", std::process::id()));
    path.with_file_name(name)
}

/// The order the parts are saved in under fault injection: `BURN_POSITIONAL_CHECKPOINT_ORDER`
/// when it names each of [`PARTS`] once, [`PARTS`]'s own otherwise.
fn save_order() -> Vec<String> {
    let named: Vec<String> = std::env::var(ORDER_VAR)
        .unwrap_or_default()
        .split(',')
        .map(|part| part.trim().to_string())
        .collect();
    let valid =
        named.len() == PARTS.len() && PARTS.iter().all(|part| named.contains(&part.to_string()));
    if valid {
        named
    } else {
        PARTS.iter().map(|part| part.to_string()).collect()
    }
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
/// Fault injection for crash tests: with `BURN_POSITIONAL_CHECKPOINT_DELAY_MS` set, the `i`-th
/// part saved waits `i` times that long before it is saved, so the parts of one epoch land on
/// disk one after the other and a kill often falls between them. The order is [`PARTS`]'s, or
/// the one `BURN_POSITIONAL_CHECKPOINT_ORDER` names (`optim,scheduler,model`): burn-train saves
/// the three on threads of their own, so production has every order.
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
            stagger: save_order()
                .iter()
                .position(|part| part == name)
                .unwrap_or(0) as u32,
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

/// The epochs in `checkpoint_dir` whose three parts ([`PARTS`]) all exist, newest first.
fn epochs_with_every_part(checkpoint_dir: &Path) -> Vec<usize> {
    let Ok(entries) = std::fs::read_dir(checkpoint_dir) else {
        return Vec::new();
    };
    let mut epochs: Vec<usize> = entries
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
        .collect();
    epochs.sort_unstable_by(|a, b| b.cmp(a));
    epochs
}

/// Why part `part` of `epoch` cannot be restored, or `None`: it is read and decoded as the
/// resume will (a truncated or empty file fails here), and a model part is also handed to
/// `fits`, which loads it into the model (a record of another shape fails there). A panic
/// while decoding counts as a fault, not as the run's end.
fn part_fault(
    checkpoint_dir: &Path,
    part: &str,
    epoch: usize,
    fits: &dyn Fn(ModuleRecord) -> Result<(), String>,
) -> Option<String> {
    let checkpointer = PartCheckpointer::new(checkpoint_dir, part);
    let restore = || -> Result<(), String> {
        let text = |error: CheckpointerError| error.to_string();
        match part {
            "model" => {
                fits(Checkpointer::<ModuleRecord>::restore(&checkpointer, epoch).map_err(text)?)
            }
            "optim" => Checkpointer::<OptimizerRecord>::restore(&checkpointer, epoch)
                .map(drop)
                .map_err(text),
            _ => Checkpointer::<LrSchedulerRecord>::restore(&checkpointer, epoch)
                .map(drop)
                .map_err(text),
        }
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(restore))
        .unwrap_or_else(|_| Err("decoding it panicked".into()));
    outcome.err().map(|error| {
        format!(
            "{} does not load ({})",
            checkpointer.path(epoch).display(),
            shorten(&error, 300)
        )
    })
}

/// `text` cut to its first `max` characters (a shape mismatch names every tensor).
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_string(),
    }
}

/// Where a run resumes, from [`resume_point`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResumePoint {
    /// The newest epoch whose three parts exist and load; `None`: start from the beginning.
    pub epoch: Option<usize>,
    /// The newer epochs with every part on disk that were passed over, one line each: the part
    /// that does not load and why.
    pub passed_over: Vec<String>,
}

/// The newest epoch in `checkpoint_dir` whose three parts ([`PARTS`]) all exist and load, and
/// the newer ones passed over. Each part is renamed into place whole, so a crash leaves an
/// epoch with a part missing, passed over without a word; a part that exists but does not
/// load (truncated, emptied, another run's: a disk or a person did it) is passed over with its
/// reason, for the epoch before (burn-train keeps it until the next is saved). `fits` loads a
/// model record into the run's model, or says why it cannot.
pub fn resume_point(
    checkpoint_dir: &Path,
    fits: impl Fn(ModuleRecord) -> Result<(), String>,
) -> ResumePoint {
    let mut passed_over = Vec::new();
    for epoch in epochs_with_every_part(checkpoint_dir) {
        match PARTS
            .iter()
            .find_map(|part| part_fault(checkpoint_dir, part, epoch, &fits))
        {
            None => {
                return ResumePoint {
                    epoch: Some(epoch),
                    passed_over,
                };
            }
            Some(fault) => passed_over.push(format!("epoch {epoch}: {fault}")),
        }
    }
    ResumePoint {
        epoch: None,
        passed_over,
    }
}

/// The last epoch in `checkpoint_dir` whose three parts ([`PARTS`]) all exist and decode
/// ([`resume_point`] without a model to check the model part's shapes against).
pub fn last_complete_epoch(checkpoint_dir: &Path) -> Option<usize> {
    resume_point(checkpoint_dir, |_| Ok(())).epoch
}

/// Removes every part of every epoch after `epoch` (all of them for `None`) from
/// `checkpoint_dir`: a resume from `epoch` saves those epochs again, and a crash amid that
/// save must not leave an epoch made of this attempt's parts and an earlier one's.
pub fn discard_after(checkpoint_dir: &Path, epoch: Option<usize>) -> std::io::Result<()> {
    let Ok(entries) = std::fs::read_dir(checkpoint_dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let later = PARTS.iter().any(|part| {
            name.strip_prefix(&format!("{part}-"))
                .and_then(|rest| rest.strip_suffix(".bpk")?.parse::<usize>().ok())
                .is_some_and(|n| epoch.is_none_or(|epoch| n > epoch))
        });
        if later {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use burn::nn::LinearConfig;
    use burn::prelude::*;
    use burn::store::ModuleRecord;

    use super::*;
    use crate::training::TrainingError;

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
    /// Saves every part of `epoch` in `dir`: a small linear model, an empty optimizer state and
    /// an empty scheduler state, each through [`PartCheckpointer`].
    fn save_epoch(dir: &Path, epoch: usize) {
        let linear = LinearConfig::new(3, 2).init(&Device::flex());
        let part = |name| PartCheckpointer::new(dir, name);
        Checkpointer::<ModuleRecord>::save(&part(PARTS[0]), epoch, linear.into_record()).unwrap();
        Checkpointer::save(&part(PARTS[1]), epoch, OptimizerRecord::default()).unwrap();
        Checkpointer::save(&part(PARTS[2]), epoch, LrSchedulerRecord::new()).unwrap();
    }

    /// A newest epoch whose three parts exist but one does not decode (cut in half, or empty)
    /// is passed over for the epoch before, the part named; an epoch with a part missing is
    /// passed over without a word.
    #[test]
    fn an_epoch_with_a_part_that_does_not_load_is_passed_over() {
        for (part, keep) in [("model", 0.5), ("optim", 0.0), ("scheduler", 0.0)] {
            let dir = tempfile::tempdir().unwrap();
            save_epoch(dir.path(), 1);
            save_epoch(dir.path(), 2);
            save_epoch(dir.path(), 3);
            std::fs::remove_file(dir.path().join("optim-3.bpk")).unwrap();
            let path = dir.path().join(format!("{part}-2.bpk"));
            let len = std::fs::metadata(&path).unwrap().len();
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.set_len((len as f64 * keep) as u64).unwrap();
            let point = resume_point(dir.path(), |_| Ok(()));
            assert_eq!(point.epoch, Some(1), "{part}: {point:?}");
            assert_eq!(point.passed_over.len(), 1, "{part}: {point:?}");
            assert!(
                point.passed_over[0].starts_with("epoch 2: ")
                    && point.passed_over[0].contains(&format!("{part}-2.bpk does not load")),
                "{part}: {point:?}"
            );
            assert_eq!(last_complete_epoch(dir.path()), Some(1));
        }
    }

    /// The parts of every epoch after the one resumed go; the rest stay.
    #[test]
    fn discard_after_removes_the_later_epochs_only() {
        let dir = tempfile::tempdir().unwrap();
        for epoch in 1..=3 {
            save_epoch(dir.path(), epoch);
        }
        discard_after(dir.path(), Some(1)).unwrap();
        assert_eq!(epochs_with_every_part(dir.path()), [1]);
        assert!(!dir.path().join("scheduler-2.bpk").exists());
        discard_after(dir.path(), None).unwrap();
        assert_eq!(epochs_with_every_part(dir.path()), Vec::<usize>::new());
    }

    /// A folder takes one lock at a time, also within one process: the second is refused with
    /// the holder's pid; once the first is dropped, the lock is free again.
    #[test]
    fn a_held_folder_is_refused_naming_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        let first = RunLock::acquire(dir.path()).unwrap();
        let err = RunLock::acquire(dir.path()).unwrap_err();
        let pid = std::process::id();
        assert!(
            matches!(err, TrainingError::InUse { pid: Some(p), .. } if p == pid),
            "{err}"
        );
        assert!(err.to_string().contains(&format!("pid {pid}")), "{err}");
        drop(first);
        RunLock::acquire(dir.path()).unwrap();
    }

    /// A lock file left by a process that is gone (its pid written, no lock held) does not
    /// block the next run, which writes its own pid.
    #[test]
    fn a_lock_file_of_a_dead_process_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        // A pid past Linux's largest (2^22): no process has it. (Spawning a child to get a dead
        // pid would let the child inherit, between fork and exec, a lock another test holds.)
        let gone = 1u32 << 23;
        std::fs::write(dir.path().join(LOCK_FILE), format!("{gone}\n")).unwrap();
        let _lock = RunLock::acquire(dir.path()).unwrap();
        let written = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(written.trim(), std::process::id().to_string());
    }

    /// The scratch file of a write is named after the process, so two never share one.
    #[test]
    fn scratch_files_are_named_after_the_process() {
        let scratch = tmp_path(Path::new("/x/run.json"));
        assert_eq!(
            scratch,
            Path::new(&format!("/x/run.json.{}.tmp", std::process::id()))
        );
    }
}
