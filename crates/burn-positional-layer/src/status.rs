//! The statuses of forwards not yet checked: how [`EmbeddingWithPosition::forward`] stays free
//! of device-to-host reads without ever being silent about bad input.
//!
//! [`EmbeddingWithPosition::forward`]: crate::EmbeddingWithPosition::forward

use std::sync::{Arc, Mutex};

use burn::tensor::{Device, Int, Tensor};
use burn_positional_kernels::InputStatus;

use crate::PositionError;

/// Statuses kept with full detail (enough to name the bad id); older ones are folded into a
/// count on the device.
pub const KEPT_STATUSES: usize = 64;

/// The pending statuses of one embedding, shared by its clones: a training step maps the model
/// into a new value, and the statuses of the step before must survive that.
#[derive(Clone, Default)]
pub(crate) struct StatusLog(Arc<Mutex<Pending>>);

#[derive(Default)]
struct Pending {
    /// The last forwards, oldest first, at most `2 * KEPT_STATUSES`.
    kept: Vec<InputStatus>,
    /// Per device: the number of bad tokens in folded (older) forwards, a `[1]` int tensor.
    folded: Vec<(Device, Tensor<1, Int>)>,
    /// How many forwards were folded.
    folded_forwards: usize,
}

impl core::fmt::Debug for StatusLog {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
        write!(
            f,
            "StatusLog {{ kept: {}, folded: {} }}",
            pending.kept.len(),
            pending.folded_forwards
        )
    }
}

impl StatusLog {
    /// Records the status of one forward. No read: when the log holds `2 * KEPT_STATUSES`
    /// statuses, the oldest `KEPT_STATUSES` are folded into a per-device count of bad tokens
    /// with one concatenation and one sum on the device (amortized: two small kernels per
    /// `KEPT_STATUSES` forwards).
    pub(crate) fn push(&self, status: InputStatus) {
        let mut pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
        pending.kept.push(status);
        if pending.kept.len() < 2 * KEPT_STATUSES {
            return;
        }
        let old: Vec<InputStatus> = pending.kept.drain(..KEPT_STATUSES).collect();
        pending.folded_forwards += old.len();
        let mut devices: Vec<Device> = Vec::new();
        for status in &old {
            let device = status.codes().device();
            if !devices.contains(&device) {
                devices.push(device);
            }
        }
        for device in devices {
            let codes: Vec<Tensor<1, Int>> = old
                .iter()
                .filter(|s| s.codes().device() == device)
                .map(|s| s.codes().clone().flatten(0, 1))
                .collect();
            let bad = Tensor::cat(codes, 0).not_equal_elem(0).int().sum();
            match pending.folded.iter_mut().find(|(d, _)| *d == device) {
                Some((_, count)) => *count = count.clone() + bad,
                None => pending.folded.push((device, bad)),
            }
        }
    }

    /// Reads back every pending status (one transfer per device, plus one for the folded
    /// counts if any) and clears the log. The first error is the oldest bad input.
    pub(crate) fn check(
        &self,
        name: impl Fn(burn_positional_kernels::FusedEmbeddingError) -> PositionError,
    ) -> Result<(), PositionError> {
        let Pending {
            kept,
            folded,
            folded_forwards,
        } = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some((device, _)) = folded.first() {
            let device = device.clone();
            let counts: Vec<Tensor<1, Int>> = folded
                .into_iter()
                .map(|(_, count)| count.to_device(&device))
                .collect();
            let bad: i64 = Tensor::cat(counts, 0).into_data().iter::<i64>().sum();
            if bad > 0 {
                return Err(PositionError::BadInputInOlderForwards {
                    tokens: bad as usize,
                    forwards: folded_forwards,
                    kept: KEPT_STATUSES,
                });
            }
        }
        InputStatus::check_all(&kept).map_err(name)
    }

    /// How many forwards are waiting for a check.
    pub(crate) fn len(&self) -> usize {
        let pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
        pending.kept.len() + pending.folded_forwards
    }
}
