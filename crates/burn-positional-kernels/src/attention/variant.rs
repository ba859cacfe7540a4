//! Which of the two CubeCL attention kernels a device runs: the register kernel tuned on
//! lavapipe, or the shared-memory kernel shaped for a discrete GPU (`cube/registers.rs`,
//! `cube/shared.rs`).
//!
//! The choice is made in three places, the first that says something wins: a thread's override
//! (tests only), the process-wide override ([`set_flash_variant`], which starts as the
//! environment variable `BURN_POSITIONAL_FLASH`), and the device itself
//! ([`FlashVariant::Auto`]). The op captures the caller's choice when it is called (it travels
//! in the op's arguments), so a lazily executed op (burn's fusion) runs what its caller chose,
//! on whatever thread it runs.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

use burn::tensor::Device;

/// Which CubeCL flash-attention kernel runs on a wgpu or CUDA device. Both compute the same
/// numbers (the same formula, f32 accumulation, the same masks); only their speed differs.
///
/// Set process-wide with [`set_flash_variant`] or the environment variable
/// `BURN_POSITIONAL_FLASH=auto|registers|shared` (read once, at the first attention call or the
/// first [`flash_variant`]); [`flash_variant`] tells what a device runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FlashVariant {
    /// By the device: [`FlashVariant::Registers`] on an adapter that is a CPU (lavapipe,
    /// llvmpipe, the CubeCL CPU runtime: those report no physical card), otherwise
    /// [`FlashVariant::Shared`].
    #[default]
    Auto,
    /// Each unit keeps a few query rows in registers and reads keys and values straight from
    /// device memory (the backward: keys, or query rows, in registers); no shared memory, no
    /// barrier. Best on CPU-emulated adapters.
    Registers,
    /// Key and value blocks staged in shared memory, loaded once per cube by all its units;
    /// one or two query rows per unit, a cube of whole planes. For GPUs. The backward stages
    /// query rows for its key cubes and keys for its query cubes the same way. Where the
    /// device's shared memory cannot hold even the smallest block (very wide heads), the launch
    /// falls back to [`FlashVariant::Registers`].
    Shared,
}

impl FlashVariant {
    /// `auto`, `registers` or `shared` (any case).
    fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(Self::Auto),
            "registers" => Some(Self::Registers),
            "shared" => Some(Self::Shared),
            _ => None,
        }
    }

    fn code(self) -> u8 {
        match self {
            Self::Auto => 0,
            Self::Registers => 1,
            Self::Shared => 2,
        }
    }

    fn from_code(code: u8) -> Self {
        match code {
            1 => Self::Registers,
            2 => Self::Shared,
            _ => Self::Auto,
        }
    }
}

/// The environment variable that sets the process-wide choice before any
/// [`set_flash_variant`].
pub const FLASH_VARIANT_ENV: &str = "BURN_POSITIONAL_FLASH";

/// The process-wide choice: `UNSET` until the environment is read or a variant is set.
static PROCESS: AtomicU8 = AtomicU8::new(UNSET);
const UNSET: u8 = u8::MAX;
static ENV: OnceLock<FlashVariant> = OnceLock::new();

thread_local! {
    static THREAD: std::cell::Cell<Option<FlashVariant>> = const { std::cell::Cell::new(None) };
    static KEY_SPLITS: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Sets which flash-attention kernel every later [`tiled_attention`](crate::tiled_attention)
/// call of this process runs on a CubeCL device (wgpu, CUDA), replacing the environment's
/// `BURN_POSITIONAL_FLASH`; [`FlashVariant::Auto`] goes back to choosing by device. For
/// benches and measurements; a model has no reason to call it. Calls already made keep the
/// variant they were made with.
///
/// ```
/// use burn_positional_kernels::{FlashVariant, set_flash_variant};
///
/// set_flash_variant(FlashVariant::Shared); // time the shared-memory kernel, even on lavapipe
/// // ... the attention calls to time ...
/// set_flash_variant(FlashVariant::Auto); // back to the adapter's choice
/// ```
pub fn set_flash_variant(variant: FlashVariant) {
    // The environment is read only while nothing was set.
    PROCESS.store(variant.code(), Ordering::Relaxed);
}

/// The kernel the calling thread's next attention on `device` runs, resolved:
/// [`FlashVariant::Registers`] or [`FlashVariant::Shared`], never `Auto`. Devices whose
/// backend runs host code or tensor ops instead of a CubeCL kernel (flex, ndarray, a backend
/// this crate was built without) answer [`FlashVariant::Registers`]: neither kernel runs there,
/// and nothing GPU-shaped either. A forced [`FlashVariant::Shared`] is answered as is, though a
/// head too wide for the device's shared memory would still fall back at launch.
///
/// # Panics
///
/// When `BURN_POSITIONAL_FLASH` holds something else than `auto`, `registers` or `shared`.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_kernels::{FlashVariant, flash_variant};
///
/// assert_eq!(flash_variant(&Device::flex()), FlashVariant::Registers);
/// ```
pub fn flash_variant(device: &Device) -> FlashVariant {
    #[allow(unreachable_patterns)]
    match device.as_dispatch().clone().inner() {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        burn::backend::DispatchDevice::Cube(device) => {
            resolve(requested(), &device.client().properties().identity)
        }
        _ => FlashVariant::Registers,
    }
}

/// Sets (`Some`) or clears (`None`) the calling thread's own choice, which wins over the
/// process-wide one: tests that force a variant while others run in parallel threads.
#[cfg(feature = "testing")]
pub fn set_thread_flash_variant(variant: Option<FlashVariant>) {
    THREAD.with(|cell| cell.set(variant));
}

/// Sets (`Some`) or clears (`None`) how many runs the shared-memory forward splits each
/// tile's keys into for the calling thread's attention calls (normally chosen by the grid
/// size and the device): tests of the split path on small cases.
#[cfg(feature = "testing")]
pub fn set_thread_flash_key_splits(splits: Option<usize>) {
    KEY_SPLITS.with(|cell| cell.set(splits));
}

/// The calling thread's forced key splits (tests only), else `None`.
pub(crate) fn requested_key_splits() -> Option<usize> {
    KEY_SPLITS.with(std::cell::Cell::get)
}

/// The caller's choice, unresolved: the thread's, else the process's (or the environment's).
///
/// # Panics
///
/// As [`flash_variant`].
pub(crate) fn requested() -> FlashVariant {
    if let Some(variant) = THREAD.with(std::cell::Cell::get) {
        return variant;
    }
    match PROCESS.load(Ordering::Relaxed) {
        UNSET => env_variant(),
        code => FlashVariant::from_code(code),
    }
}

/// `BURN_POSITIONAL_FLASH`, read once (`Auto` when unset or empty).
fn env_variant() -> FlashVariant {
    *ENV.get_or_init(|| match std::env::var(FLASH_VARIANT_ENV) {
        Ok(text) if !text.trim().is_empty() => FlashVariant::parse(&text).unwrap_or_else(|| {
            panic!("{FLASH_VARIANT_ENV}={text:?}: expected auto, registers or shared")
        }),
        _ => FlashVariant::Auto,
    })
}

/// `Auto` decided by the device: a CPU-type adapter (no physical card: lavapipe, llvmpipe, the
/// CubeCL CPU runtime) runs the register kernel, anything else the shared-memory one.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn resolve(
    variant: FlashVariant,
    identity: &cubecl::ir::DeviceIdentity,
) -> FlashVariant {
    match variant {
        FlashVariant::Auto if identity.physical.is_none() => FlashVariant::Registers,
        FlashVariant::Auto => FlashVariant::Shared,
        forced => forced,
    }
}

/// Launches of the register and the shared kernel, forward (0, 1) and backward (2, 3).
#[cfg(feature = "testing")]
static LAUNCHES: [std::sync::atomic::AtomicU64; 4] = [
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
];

/// Counts one launch of the shared-memory kernel (`shared`) or the register kernel.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn count_launch(shared: bool) {
    #[cfg(feature = "testing")]
    LAUNCHES[usize::from(shared)].fetch_add(1, Ordering::Relaxed);
    #[cfg(not(feature = "testing"))]
    let _ = shared;
}

/// Counts one launch of the shared-memory backward kernel (`shared`) or the register one.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
pub(crate) fn count_backward_launch(shared: bool) {
    #[cfg(feature = "testing")]
    LAUNCHES[2 + usize::from(shared)].fetch_add(1, Ordering::Relaxed);
    #[cfg(not(feature = "testing"))]
    let _ = shared;
}

/// How many times this process launched the `Registers` or the `Shared` backward kernel, on
/// any thread; 0 for `Auto`. Only with the `testing` feature.
#[cfg(feature = "testing")]
pub fn flash_variant_backward_launches(variant: FlashVariant) -> u64 {
    let at = match variant {
        FlashVariant::Auto => return 0,
        FlashVariant::Registers => 2,
        FlashVariant::Shared => 3,
    };
    LAUNCHES[at].load(Ordering::Relaxed)
}

/// How many times this process launched the `Registers` or the `Shared` kernel, on any thread
/// (a fused op runs where its stream runs); 0 for `Auto`. Only with the `testing` feature.
#[cfg(feature = "testing")]
pub fn flash_variant_launches(variant: FlashVariant) -> u64 {
    let at = match variant {
        FlashVariant::Auto => return 0,
        FlashVariant::Registers => 0,
        FlashVariant::Shared => 1,
    };
    LAUNCHES[at].load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_parse_in_any_case() {
        assert_eq!(FlashVariant::parse(" Shared"), Some(FlashVariant::Shared));
        assert_eq!(
            FlashVariant::parse("REGISTERS"),
            Some(FlashVariant::Registers)
        );
        assert_eq!(FlashVariant::parse("auto"), Some(FlashVariant::Auto));
        assert_eq!(FlashVariant::parse("tensor-cores"), None);
        for v in [
            FlashVariant::Auto,
            FlashVariant::Registers,
            FlashVariant::Shared,
        ] {
            assert_eq!(FlashVariant::from_code(v.code()), v);
        }
    }
}
