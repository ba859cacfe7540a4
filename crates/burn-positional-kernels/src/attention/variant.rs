//! Which of the four CubeCL attention kernels a device runs: the register kernel tuned on
//! lavapipe, the shared-memory kernel shaped for a discrete GPU, the register-blocked forward on
//! a GPU's FMA units, or the tensor-core kernel for f16 and bf16 on NVIDIA GPUs with `mma.sync`
//! (`cube/registers.rs`, `cube/shared.rs`, `cube/blocked.rs`, `cube/mma.rs`,
//! `cube/mma_backward.rs`).
//!
//! The choice is made in three places, the first that says something wins: a thread's override
//! (tests only), the process-wide override ([`set_flash_variant`], which starts as the
//! environment variable `BURN_POSITIONAL_FLASH`), and the device itself
//! ([`FlashVariant::Auto`]). The op captures the caller's choice when it is called (it travels
//! in the op's arguments), so a lazily executed op (burn's fusion) runs what its caller chose,
//! on whatever thread it runs.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use burn::tensor::Device;

/// Which CubeCL flash-attention kernel runs on a wgpu or CUDA device. All compute the same
/// formula with the same masks and f32 sums; only their speed differs, and the tensor-core
/// kernel's products take their operands in the storage dtype (the weights `p` and the
/// gradients `dS` rounded to f16 or bf16 before their products, as FlashAttention does).
///
/// Set process-wide with [`set_flash_variant`] or the environment variable
/// `BURN_POSITIONAL_FLASH=auto|registers|shared|tensor-cores|blocked` (read once, at the first
/// attention call or the first [`flash_variant`]); [`flash_variant_for`] tells what a device
/// runs for a dtype.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FlashVariant {
    /// By the device and the dtype: [`FlashVariant::Registers`] on an adapter that is a CPU
    /// (lavapipe, llvmpipe, the CubeCL CPU runtime: those report no physical card);
    /// [`FlashVariant::TensorCores`] for f16 and bf16 on a GPU that runs `mma.sync` for that
    /// dtype (CUDA on sm_80 and up), except a forward with fewer tiles than the device has
    /// multiprocessors that the shared kernel would split by keys (a decoding step: one row over
    /// a long cache), which takes the shared kernel's split keys;
    /// otherwise [`FlashVariant::Shared`] (f32 everywhere, and every dtype on wgpu, which has no
    /// `mma.sync`).
    ///
    /// Why: on lavapipe the register kernel is faster than the blocked and the shared ones (the
    /// op alone, causal, f32, `[1, 8, 2048, 32]`: the blocked forward took 1.9x its time, the
    /// shared one 6.9x; `docs/attention.md`). On an H200 through CUDA (`docs/gpu.md`,
    /// 2026-11-28) the shared forward took 3.8 ms
    /// where the WMMA kernel of then took 9.4 ms (f16, causal, `[1, 8, 8192, 32]`), 19x PyTorch's
    /// FlashAttention-2. Its successor on `mma.sync` (issue 72) has FlashAttention-2's inner loop
    /// instruction for instruction in NVRTC's SASS (the tensor-core products, one `MUFU.EX2` a
    /// weight, two barriers a block, no local memory: `tools/cuda/kernels.py`'s gate), where
    /// the shared kernel runs every product on FMA units; it has not been timed on a GPU yet
    /// (the kit's `--check-tensor-cores` and attention rows do that on the next lease).
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
    /// FlashAttention-2 on NVIDIA's tensor cores. The forward is FlashAttention-2's own loop on
    /// `mma.sync.m16n8k16` (CubeCL's register-level MMA, f16 and bf16 with f32 accumulators,
    /// sm_80 and up): each warp of four owns 16 or 32 query rows, the scores, the weights, the
    /// output and the row statistics stay in registers, keys and values are staged by async
    /// copies and read by `ldmatrix`, the bias, the masks, the window, the segments and the
    /// softcap are applied to the accumulators from their row and column, and blocks that every
    /// row sees whole skip the mask tests. The backward is FlashAttention-2's on the same
    /// fragments, in two kernels: dK and dV with each warp's 16 keys in registers over the
    /// query blocks of every head of the group, and dQ on the forward's tiles, which recomputes
    /// the scores instead of adding into dQ by atomics (deterministic gradients), with ALiBi's
    /// slope gradient and a distance table's (summed by the table's diagonals, without
    /// atomics). A distance table's gradient at explicit positions takes the shared backward.
    ///
    /// Where the device has no `mma.sync` at all (WGSL, lavapipe), the same kernels run with
    /// each warp emulated by 32 units exchanging through shared memory: slower, and what CI
    /// checks. f32 on a device that has `mma.sync` for the halves takes the shared kernel.
    ///
    /// `Auto` picks it for f16 and bf16 on a GPU with `mma.sync` for the dtype (see there).
    TensorCores,
    /// FlashAttention-2 on the FMA units, register-blocked as an SGEMM (issue 73,
    /// `cube/blocked.rs`): cubes of 128 units over 64 query rows (32 where the values are wider
    /// than 64, or under a bias, a softcap, explicit positions, segments or padding), each unit a
    /// 4 x 8 (or 4 x 4) tile of the scores and 4 rows of the output in registers, queries, keys,
    /// weights and values read from shared memory as 4-wide vectors (3 loads for 32
    /// multiply-adds in `Q Kᵀ`), the row statistics exchanged across the 8 or 16 units of a row, `exp2` with the `log2 e` folded in, the
    /// tensor-core forward's block classification, split keys for small grids, f32 sums for
    /// every storage dtype. For wgpu GPUs (no matrix instructions in WGSL) and f32 on CUDA. The
    /// backward is FlashAttention-2's split on the same tiles (`cube/blocked_backward.rs`): dK
    /// and dV over the query blocks of every head of the group, and dQ, each unit a 4 x 4 tile of
    /// every product, no atomics; heads wider than 64, or a bias whose gradient is wanted, take
    /// the shared backward.
    ///
    /// `Auto` does not pick it on a GPU yet: it waits for a GPU's timings beside the shared
    /// kernel (the GPU kit's call 4, `docs/gpu.md`). On a CPU adapter the register kernel stays
    /// `Auto`'s, by measurement: on lavapipe (causal, f32, `[1, 8, 2048, 32]`, the op alone)
    /// the blocked forward took 1.9x the register kernel's time and forward + backward 3.3x,
    /// where the shared forward took 6.9x (`docs/attention.md`, "Which one runs").
    Blocked,
}

impl FlashVariant {
    /// `auto`, `registers`, `shared`, `tensor-cores` (`tensor_cores` too) or `blocked`, in any
    /// case.
    fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(Self::Auto),
            "registers" => Some(Self::Registers),
            "shared" => Some(Self::Shared),
            "tensor-cores" | "tensor_cores" => Some(Self::TensorCores),
            "blocked" => Some(Self::Blocked),
            _ => None,
        }
    }

    fn code(self) -> u8 {
        match self {
            Self::Auto => 0,
            Self::Registers => 1,
            Self::Shared => 2,
            Self::TensorCores => 3,
            Self::Blocked => 4,
        }
    }

    fn from_code(code: u8) -> Self {
        match code {
            1 => Self::Registers,
            2 => Self::Shared,
            3 => Self::TensorCores,
            4 => Self::Blocked,
            _ => Self::Auto,
        }
    }

    /// Where this variant's launches are counted (tests): 0 to 3; `None` for `Auto`.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    fn slot(self) -> Option<usize> {
        match self {
            Self::Auto => None,
            Self::Registers => Some(0),
            Self::Shared => Some(1),
            Self::TensorCores => Some(2),
            Self::Blocked => Some(3),
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

/// The kernel the calling thread's next f32 attention on `device` runs, resolved:
/// [`FlashVariant::Registers`], [`FlashVariant::Shared`] or a forced
/// [`FlashVariant::TensorCores`] or [`FlashVariant::Blocked`], never `Auto` (f16 and bf16:
/// [`flash_variant_for`]). Devices whose backend runs host code or tensor ops instead of a
/// CubeCL kernel (flex, ndarray, a backend this crate was built without) answer
/// [`FlashVariant::Registers`]: no kernel runs there, and nothing GPU-shaped either. A forced [`FlashVariant::Shared`] is answered as is, though a
/// head too wide for the device's shared memory would still fall back at launch.
///
/// # Panics
///
/// When `BURN_POSITIONAL_FLASH` holds something else than `auto`, `registers`, `shared`,
/// `tensor-cores` or `blocked`.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_kernels::{FlashVariant, flash_variant};
///
/// assert_eq!(flash_variant(&Device::flex()), FlashVariant::Registers);
/// ```
pub fn flash_variant(device: &Device) -> FlashVariant {
    flash_variant_for(device, burn::tensor::DType::F32)
}

/// The kernel the calling thread's next attention on `device` with inputs of `dtype` runs,
/// resolved as [`flash_variant`] resolves it: `Auto` is [`FlashVariant::TensorCores`] for f16
/// and bf16 on a GPU with `mma.sync` for that dtype (a decoding step's forward, too small a
/// grid for the device, still takes the shared kernel: see [`FlashVariant::Auto`]).
///
/// # Panics
///
/// As [`flash_variant`].
///
/// ```
/// use burn::prelude::*;
/// use burn::tensor::DType;
/// use burn_positional_kernels::{FlashVariant, flash_variant_for};
///
/// assert_eq!(flash_variant_for(&Device::flex(), DType::F16), FlashVariant::Registers);
/// ```
pub fn flash_variant_for(device: &Device, dtype: burn::tensor::DType) -> FlashVariant {
    #[allow(unreachable_patterns)]
    match device.as_dispatch().clone().inner() {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        burn::backend::DispatchDevice::Cube(device) => pick(requested(), &device.client(), dtype),
        _ => {
            let _ = dtype;
            FlashVariant::Registers
        }
    }
}

/// Sets (`Some`) or clears (`None`) the calling thread's own choice, which wins over the
/// process-wide one: tests that force a variant while others run in parallel threads.
#[cfg(feature = "testing")]
pub fn set_thread_flash_variant(variant: Option<FlashVariant>) {
    THREAD.with(|cell| cell.set(variant));
}

/// Whether the register-blocked forward treats every device as having plane operations
/// ([`set_flash_planes_forced`]).
static PLANES_FORCED: AtomicBool = AtomicBool::new(false);

/// Makes the register-blocked forward ([`FlashVariant::Blocked`]) combine its row statistics by
/// plane shuffles on every device, at the device's smallest plane width, also where CubeCL
/// reports no plane operations: it reports none on CPU adapters, whose drivers may still run
/// subgroups (lavapipe: 8 units, or 4 with `LP_NATIVE_VECTOR_WIDTH=128`). For tests of that path
/// on lavapipe, process-wide (a fused op may launch on another thread); on a device whose driver
/// has no subgroups the kernel's compilation fails.
#[cfg(feature = "testing")]
pub fn set_flash_planes_forced(on: bool) {
    PLANES_FORCED.store(on, Ordering::Relaxed);
}

/// Whether [`set_flash_planes_forced`] is on (never without the `testing` feature).
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
pub(crate) fn planes_forced() -> bool {
    PLANES_FORCED.load(Ordering::Relaxed)
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
            panic!("{FLASH_VARIANT_ENV}={text:?}: expected auto, registers, shared, tensor-cores or blocked")
        }),
        _ => FlashVariant::Auto,
    })
}

/// `variant` resolved for inputs of `dtype` on a device with these `properties`: `Auto` is the
/// register kernel on a CPU-type adapter (no physical card: lavapipe, llvmpipe, the CubeCL CPU
/// runtime), the tensor-core kernel for f16 and bf16 where the device has `mma.sync` for them
/// ([`mma_ready`]), the shared-memory one otherwise. A forced variant is answered as is (the
/// launch may still fall back: a head too wide for the shared memory, a device without
/// `mma.sync`).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn resolve(
    variant: FlashVariant,
    properties: &cubecl::ir::DeviceProperties,
    dtype: burn::tensor::DType,
) -> FlashVariant {
    match variant {
        FlashVariant::Auto if properties.identity.physical.is_none() => FlashVariant::Registers,
        FlashVariant::Auto if mma_ready(properties, dtype) => FlashVariant::TensorCores,
        FlashVariant::Auto => FlashVariant::Shared,
        forced => forced,
    }
}

/// `variant` resolved for a launch on `client` with inputs of `dtype`: [`resolve`].
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn pick(
    variant: FlashVariant,
    client: &cubecl::client::Client,
    dtype: burn::tensor::DType,
) -> FlashVariant {
    resolve(variant, &client.properties(), dtype)
}

/// Whether the device runs `mma.sync.m16n8k16` with `dtype` operands (f16 or bf16 only) and
/// f32 accumulators, on warps of exactly 32 units: CubeCL's manual MMA, which only its C++
/// compilers register (CUDA here: the crate builds no HIP backend), so the tensor-core forward's
/// PTX (`ex2.approx`, `cp.async` groups) is safe where this holds. Elsewhere that kernel runs
/// its emulated warps.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn mma_ready(
    properties: &cubecl::ir::DeviceProperties,
    dtype: burn::tensor::DType,
) -> bool {
    halves_ready(properties, dtype, 8, |config| {
        properties.features.matmul.mma.contains(config)
    })
}

/// Whether `dtype` is f16 or bf16, the device's planes are exactly 32 units, and `has` a
/// 16 x `n` x 16 product of `dtype` operands with f32 accumulators.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn halves_ready(
    properties: &cubecl::ir::DeviceProperties,
    dtype: burn::tensor::DType,
    n: u32,
    has: impl Fn(&cubecl::ir::features::MmaConfig) -> bool,
) -> bool {
    use burn::tensor::DType;
    use cubecl::ir::features::MmaConfig;
    use cubecl::ir::{ElemType, FloatKind};
    let operand = match dtype {
        DType::F16 => ElemType::Float(FloatKind::F16),
        DType::BF16 => ElemType::Float(FloatKind::BF16),
        _ => return false,
    };
    let hardware = &properties.hardware;
    hardware.plane_size_min == 32
        && hardware.plane_size_max == 32
        && has(&MmaConfig {
            a_type: operand,
            b_type: operand,
            cd_type: ElemType::Float(FloatKind::F32),
            m: 16,
            n,
            k: 16,
        })
}

/// Launches of the register, shared, tensor-core and register-blocked kernels, forward (0 to 3)
/// and backward (4 to 7: the blocked forward's backward counts as the shared kernel's).
#[cfg(feature = "testing")]
static LAUNCHES: [std::sync::atomic::AtomicU64; 8] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 8];

/// Counts one launch of `variant`'s forward kernel (resolved: never `Auto`).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn count_launch(variant: FlashVariant) {
    #[cfg(feature = "testing")]
    if let Some(at) = variant.slot() {
        LAUNCHES[at].fetch_add(1, Ordering::Relaxed);
    }
    #[cfg(not(feature = "testing"))]
    let _ = variant;
}

/// Launches of the register-blocked forward by how its row statistics were combined: `[whole]`
/// (the plane shuffles reached the whole row group, or only part of it and shared memory the
/// rest) times the log2 of the units the shuffles combined (1 to 16: 0 to 4).
#[cfg(feature = "testing")]
static PLANE_LAUNCHES: [[std::sync::atomic::AtomicU64; 5]; 2] =
    [const { [const { std::sync::atomic::AtomicU64::new(0) }; 5] }; 2];

/// Counts one launch of the register-blocked forward whose shuffles combine `plane_width`
/// units (1: shared memory alone) of row groups of `groups`.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn count_plane_launch(plane_width: usize, groups: usize) {
    #[cfg(feature = "testing")]
    PLANE_LAUNCHES[usize::from(plane_width == groups)][plane_width.trailing_zeros() as usize]
        .fetch_add(1, Ordering::Relaxed);
    #[cfg(not(feature = "testing"))]
    let _ = (plane_width, groups);
}

/// How many launches of the register-blocked forward this process made whose plane shuffles
/// combined `plane_width` units (a power of two up to 16; 1: shared memory alone) of each row
/// group, `whole` where that was the whole row group (else shared memory combined the planes'
/// partials). Only with the `testing` feature.
#[cfg(feature = "testing")]
pub fn flash_blocked_plane_launches(plane_width: usize, whole: bool) -> u64 {
    assert!(
        plane_width.is_power_of_two() && plane_width <= 16,
        "flash_blocked_plane_launches: plane_width = {plane_width}, expected 1, 2, 4, 8 or 16"
    );
    PLANE_LAUNCHES[usize::from(whole)][plane_width.trailing_zeros() as usize]
        .load(Ordering::Relaxed)
}

/// Counts one launch of `variant`'s backward kernel (resolved: never `Auto`).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
pub(crate) fn count_backward_launch(variant: FlashVariant) {
    #[cfg(feature = "testing")]
    if let Some(at) = variant.slot() {
        LAUNCHES[4 + at].fetch_add(1, Ordering::Relaxed);
    }
    #[cfg(not(feature = "testing"))]
    let _ = variant;
}

/// How many times this process launched `variant`'s backward kernel, on any thread; 0 for
/// `Auto`. Only with the `testing` feature.
#[cfg(feature = "testing")]
pub fn flash_variant_backward_launches(variant: FlashVariant) -> u64 {
    variant
        .slot()
        .map_or(0, |at| LAUNCHES[4 + at].load(Ordering::Relaxed))
}

/// How many times this process launched `variant`'s forward kernel, on any thread (a fused op
/// runs where its stream runs); 0 for `Auto`. Only with the `testing` feature.
#[cfg(feature = "testing")]
pub fn flash_variant_launches(variant: FlashVariant) -> u64 {
    variant
        .slot()
        .map_or(0, |at| LAUNCHES[at].load(Ordering::Relaxed))
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
        assert_eq!(
            FlashVariant::parse("Tensor-Cores"),
            Some(FlashVariant::TensorCores)
        );
        assert_eq!(FlashVariant::parse("tensor cores"), None);
        assert_eq!(FlashVariant::parse("Blocked"), Some(FlashVariant::Blocked));
        for v in [
            FlashVariant::Auto,
            FlashVariant::Registers,
            FlashVariant::Shared,
            FlashVariant::TensorCores,
            FlashVariant::Blocked,
        ] {
            assert_eq!(FlashVariant::from_code(v.code()), v);
        }
    }
}
