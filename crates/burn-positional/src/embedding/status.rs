//! The statuses of forwards not yet checked: how [`EmbeddingWithPosition::forward`] stays free
//! of device-to-host reads without ever being silent about bad input.
//!
//! [`EmbeddingWithPosition::forward`]: crate::EmbeddingWithPosition::forward

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::ThreadId;

use burn::tensor::{DType, Device, Int, Tensor};
use burn_positional_kernels::InputStatus;

use crate::PositionError;
use crate::cache::Slots;

/// Statuses kept with full detail (enough to name the bad id); older ones are folded into a
/// count on the device.
pub const KEPT_STATUSES: usize = 64;

/// Orders statuses across threads, so that a check reports the oldest bad input first.
static NEXT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Alive while this thread runs: a log whose thread has ended is anyone's to check.
    static ALIVE: Arc<()> = Arc::new(());
}

/// The pending statuses of one embedding, shared by its clones (a training step maps the model
/// into a new value, and the statuses of the step before must survive that), kept apart per
/// thread: a check covers the forwards of the thread that runs it, and those of threads that
/// have ended (burn-train's workers), never another live thread's.
///
/// Stored in a [`Slots`] keyed by thread with no limit on threads: evicting a thread's log
/// would lose a report. What bounds the log is [`KEPT_STATUSES`] per thread (older statuses are
/// folded into counts), and a check takes out the logs it covers.
#[derive(Clone)]
pub(crate) struct StatusLog(Slots<ThreadId, ThreadLog>);

impl Default for StatusLog {
    fn default() -> Self {
        Self(Slots::new(usize::MAX))
    }
}

/// The statuses one thread pushed.
struct ThreadLog {
    /// Dead once the thread has ended.
    alive: Weak<()>,
    pending: Pending,
}

impl ThreadLog {
    /// Whether a check on thread `me` covers this log, pushed by `thread`.
    fn covered(&self, thread: ThreadId, me: ThreadId) -> bool {
        thread == me || self.alive.upgrade().is_none()
    }
}

#[derive(Default)]
struct Pending {
    /// The last forwards, oldest first, at most `2 * KEPT_STATUSES`, each with its rank.
    kept: Vec<(u64, InputStatus)>,
    /// Per device: the number of bad tokens in folded (older) forwards, a `[1]` int tensor.
    folded: Vec<(Device, Tensor<1, Int>)>,
    /// How many forwards were folded.
    folded_forwards: usize,
}

impl core::fmt::Debug for StatusLog {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (threads, kept, folded) = self.0.read(|logs| {
            logs.fold((0, 0, 0), |(threads, kept, folded), (_, log)| {
                (
                    threads + 1,
                    kept + log.pending.kept.len(),
                    folded + log.pending.folded_forwards,
                )
            })
        });
        write!(
            f,
            "StatusLog {{ threads: {threads}, kept: {kept}, folded: {folded} }}"
        )
    }
}

impl Pending {
    /// Records one status; folds the oldest `KEPT_STATUSES` when `2 * KEPT_STATUSES` are kept.
    fn push(&mut self, status: InputStatus) {
        self.kept
            .push((NEXT.fetch_add(1, Ordering::Relaxed), status));
        if self.kept.len() < 2 * KEPT_STATUSES {
            return;
        }
        let old: Vec<InputStatus> = self
            .kept
            .drain(..KEPT_STATUSES)
            .map(|(_, status)| status)
            .collect();
        self.folded_forwards += old.len();
        // One concatenation per device and ids' dtype (i32 and i64 ids may alternate).
        let mut groups: Vec<(Device, DType)> = Vec::new();
        for status in &old {
            let group = (status.codes().device(), status.codes().dtype());
            if !groups.contains(&group) {
                groups.push(group);
            }
        }
        for (device, dtype) in groups {
            let codes: Vec<Tensor<1, Int>> = old
                .iter()
                .filter(|s| s.codes().device() == device && s.codes().dtype() == dtype)
                .map(|s| s.codes().clone().flatten(0, 1))
                .collect();
            let bad = Tensor::cat(codes, 0).not_equal_elem(0).int().sum();
            match self.folded.iter_mut().find(|(d, _)| *d == device) {
                Some((_, count)) => *count = count.clone() + bad,
                None => self.folded.push((device, bad)),
            }
        }
    }
}

impl Pending {
    /// Puts back `older` (statuses a failed check took out) before what was pushed since.
    fn put_back(&mut self, mut older: Pending) {
        older.kept.append(&mut self.kept);
        self.kept = older.kept;
        self.folded.append(&mut older.folded);
        self.folded_forwards += older.folded_forwards;
    }
}

impl StatusLog {
    /// Records the status of one forward, under the calling thread. No read: when the thread's
    /// log holds `2 * KEPT_STATUSES` statuses, the oldest `KEPT_STATUSES` are folded into a
    /// per-device count of bad tokens with one concatenation and one sum on the device
    /// (amortized: two small kernels per `KEPT_STATUSES` forwards).
    pub(crate) fn push(&self, status: InputStatus) {
        let me = std::thread::current().id();
        self.0.with(&me, |log| {
            let log = log.get_or_insert_with(|| ThreadLog {
                // During the thread's own teardown the marker may be gone: an ended thread.
                alive: ALIVE
                    .try_with(Arc::downgrade)
                    .unwrap_or_else(|_| Weak::new()),
                pending: Pending::default(),
            });
            log.pending.push(status);
        });
    }

    /// Reads back the pending statuses this thread's check covers (its own forwards, and
    /// those of threads that have ended: one transfer per device and dtype, plus one for the
    /// folded counts if any) and clears them. The first error is the oldest bad input. If the
    /// read itself panics, the statuses are put back: a report is never lost.
    pub(crate) fn check(
        &self,
        name: impl Fn(burn_positional_kernels::FusedEmbeddingError) -> PositionError,
    ) -> Result<(), PositionError> {
        let me = std::thread::current().id();
        let taken = self.0.take(|&thread, log| log.covered(thread, me));
        let guard = PutBack {
            log: self,
            taken: Some(taken),
        };
        let result = check_logs(guard.taken.as_ref().expect("taken above"), name);
        drop(guard);
        result
    }

    /// How many forwards a check on this thread would cover.
    pub(crate) fn len(&self) -> usize {
        let me = std::thread::current().id();
        self.0.read(|logs| {
            logs.filter(|&(&thread, log)| log.covered(thread, me))
                .map(|(_, log)| log.pending.kept.len() + log.pending.folded_forwards)
                .sum()
        })
    }
}

/// Puts the taken logs back if the check panics (a device read failing), so that a later
/// check still reports what they hold.
struct PutBack<'a> {
    log: &'a StatusLog,
    taken: Option<Vec<(ThreadId, ThreadLog)>>,
}

impl Drop for PutBack<'_> {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(taken) = self.taken.take()
        {
            for (thread, log) in taken {
                self.log.0.with(&thread, |slot| match slot {
                    Some(newer) => newer.pending.put_back(log.pending),
                    None => *slot = Some(log),
                });
            }
        }
    }
}

/// The oldest bad input of the logs: folded counts first (older than anything kept), then
/// the kept statuses in the order they were pushed.
fn check_logs(
    logs: &[(ThreadId, ThreadLog)],
    name: impl Fn(burn_positional_kernels::FusedEmbeddingError) -> PositionError,
) -> Result<(), PositionError> {
    let folded: Vec<&(Device, Tensor<1, Int>)> = logs
        .iter()
        .flat_map(|(_, log)| &log.pending.folded)
        .collect();
    if let Some((device, _)) = folded.first() {
        let counts: Vec<Tensor<1, Int>> = folded
            .iter()
            .map(|(_, count)| count.clone().to_device(device))
            .collect();
        let bad: i64 = Tensor::cat(counts, 0).into_data().iter::<i64>().sum();
        if bad > 0 {
            return Err(PositionError::BadInputInOlderForwards {
                tokens: bad as usize,
                forwards: logs
                    .iter()
                    .map(|(_, log)| log.pending.folded_forwards)
                    .sum(),
                kept: KEPT_STATUSES,
            });
        }
    }
    let mut kept: Vec<&(u64, InputStatus)> =
        logs.iter().flat_map(|(_, log)| &log.pending.kept).collect();
    kept.sort_by_key(|(rank, _)| *rank);
    let kept: Vec<InputStatus> = kept.into_iter().map(|(_, s)| s.clone()).collect();
    InputStatus::check_all(&kept).map_err(name)
}
