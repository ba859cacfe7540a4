//! The attention as one CubeCL kernel (wgpu, CUDA): FlashAttention-2's loop with the bias and
//! the masks computed inside it, in four variants that compute the same numbers:
//!
//! - `registers.rs`, tuned on lavapipe (the CPU-emulated Vulkan of CI): no shared memory, each
//!   unit keeps a few query rows in registers and reads keys and values from device memory;
//! - `shared.rs`, shaped for a discrete GPU: key and value blocks staged in shared memory by
//!   all the units of a cube, one or two query rows per unit, cubes of whole planes;
//! - `blocked.rs`, the forward on a GPU's FMA units register-blocked as an SGEMM: each unit a
//!   4 x 8 tile of the scores and a 4-row tile of the output, its operands read from shared
//!   memory as 4-wide vectors; `blocked_backward.rs` its backward (dQ; dK and dV) on the
//!   same tiles;
//! - `mma.rs` (the forward) and `mma_backward.rs` (the backward), for f16 and bf16 on NVIDIA's
//!   tensor cores: FlashAttention-2 on `mma.sync` with its fragments in registers
//!   (`fragment/`; what both do per warp `mma_warp.rs`, their staging `mma_stage.rs`),
//!   emulated over virtual warps where the device lacks them.
//!
//! [`FlashVariant`](super::FlashVariant) picks one (`variant.rs`: by the adapter, or forced).
//! This file holds what they share: the tensors every kernel reads ([`Inputs`]: q, k, v, the
//! bias, the padding, the positions and the segments, one launch argument for every kernel),
//! the launch's run-time values ([`Scalars`]), the per-score formula's inputs (positions, the
//! bias's row: `score.rs` is the formula, [`final_score`]), a unit's query rows ([`Rows`]) and
//! their online softmax ([`fold_block`]), and the host side ([`launch`]): checks, outputs,
//! flags, the choice, the launch.
//!
//! The launch's run-time values as the host computes them are `scalars.rs`, the split keys'
//! choice and combine `split.rs`, the backward's kernels `backward*.rs`, each kernel's
//! specializations for the CUDA compile check `cuda_cases.rs`.
//!
//! Both compute in f32 whatever the storage dtype, as the host kernel. A cube takes one tile:
//! `rows` query rows of each of the `group` heads that share one key/value head of one sequence,
//! so the group's units read the same key and value rows.

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]

mod backward;
mod backward_shared;
mod backward_units;
mod blocked;
mod blocked_backward;
mod blocked_tiles;
pub(crate) mod boundaries;
#[cfg(feature = "cuda-check")]
pub(crate) mod cuda_cases;
pub(crate) mod fragment;
mod mma;
mod mma_backward;
mod mma_backward_keys;
mod mma_stage;
mod mma_table;
mod mma_warp;
mod registers;
mod scalars;
mod score;
mod split;

pub(crate) use backward::launch_backward;
pub(crate) use mma::emulation as mma_emulation;
use scalars::{ScalarValues, storage_types};
use score::{biased_score, final_score, visible};
mod shared;

use burn::backend::TensorMetadata;
use burn::tensor::Shape;
use burn_cubecl::{kernel::into_contiguous, ops::numeric::empty_device_dtype, tensor::CubeTensor};
use cubecl::prelude::*;

use super::check_sizes;
use super::tile::TileArgs;
use super::variant::{FlashVariant, count_launch, pick};

/// A hidden score (WGSL has no infinity literal): `exp(HIDDEN - m)` is 0 for any real `m`.
const HIDDEN: f32 = -1.0e30;
/// A running maximum below this has seen no key.
const UNSEEN: f32 = -1.0e29;
/// Bits of [`Scalars::flags`].
const ALIBI: u32 = 1;
const BY_DISTANCE: u32 = 2;
const CAUSAL: u32 = 4;
const WINDOW: u32 = 8;
const EXPLICIT: u32 = 16;
const SEGMENTED: u32 = 32;
const PADDED: u32 = 64;
const CAPPED: u32 = 128;
/// The backward only: the bias's gradient is wanted (the forward ignores it).
const BIAS_GRAD: u32 = 256;

/// Keys scored before the online softmax rescales a row (one rescale per block).
const KEY_BLOCK: usize = 8;
/// Sequential positions, window sizes and explicit positions stay below this, so that the
/// kernel's i32 sums of two never overflow.
const POSITION_LIMIT: usize = 1 << 30;

/// The launch's run-time values, uniform across it: one compiled kernel per head width and
/// rows per unit serves every option (the `flags`), grouping and length.
#[derive(CubeType, CubeLaunch, Clone)]
struct Scalars {
    n_heads: u32,
    /// Query heads per key/value head (`n_heads / n_kv_heads`). A run-time value: one compiled
    /// kernel serves every grouping.
    group: u32,
    seq_q: u32,
    seq_k: u32,
    /// Query rows per head in one cube.
    rows: u32,
    query_offset: i32,
    key_offset: i32,
    before: i32,
    after: i32,
    reach: i32,
    /// 1 when explicit positions are `[1, seq_q + seq_k]`, shared by the batch.
    positions_shared: u32,
    scale: f32,
    softcap: f32,
    /// The storage dtype's lowest finite value: the log-sum-exp of a row that sees nothing.
    lowest: f32,
    flags: u32,
    /// The backward: how many cubes (per kv head and sequence) hold keys; the rest hold query
    /// tiles. 0 in the forward.
    key_tiles: u32,
    /// The shared forward: into how many runs a tile's keys are split across cubes (1: none).
    splits: u32,
}

/// The tensors every attention kernel reads, one launch argument: q `[batch, n_heads, seq_q,
/// d_head]`, k and v `[batch, n_kv_heads, seq_k, d_head or d_v]`, the bias in compact form
/// (ALiBi's slopes `[n_heads]` or a distance table `[n_heads, 2 reach + 1]`; one element when
/// there is none), the key padding `[batch, seq_k]`, the explicit positions `[1 or batch,
/// seq_q + seq_k]` and the segment ids `[batch, seq_q + seq_k]` (one element each where the call
/// has none: the flags say which are given). Contiguous.
#[derive(CubeType, CubeLaunch)]
pub(super) struct Inputs<F: Float, I: Int, J: Int, P: Numeric> {
    pub q: OwnedTensor<F>,
    pub k: OwnedTensor<F>,
    pub v: OwnedTensor<F>,
    pub bias: OwnedTensor<F>,
    pub padding: OwnedTensor<P>,
    pub positions: OwnedTensor<I>,
    pub segments: OwnedTensor<J>,
}

/// The seven input tensors (q, k, v, bias, padding, positions, segments), contiguous, as the
/// kernels' [`Inputs`] argument: one for each launch (its element types are the kernel's own).
fn inputs_arg<F: Float, I: Int, J: Int, P: Numeric>(
    tensors: [&CubeTensor; 7],
) -> InputsLaunch<F, I, J, P> {
    let [q, k, v, bias, padding, positions, segments] =
        tensors.map(|t| into_contiguous(t.clone()).into_tensor_arg());
    InputsLaunch::new(q, k, v, bias, padding, positions, segments)
}

/// A cube's geometry, chosen by its variant.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Query rows per unit.
    per_unit: usize,
    /// Query rows per head in one cube (`units_per_head * per_unit`).
    rows: usize,
    /// Units per cube.
    units: usize,
    /// Keys staged in shared memory per block (the shared variant), or `None` (registers).
    stage: Option<usize>,
}

/// Units per head of a register or backward cube: 32 units per cube (at least one per head of
/// the group), whatever the lengths. The cube's size is part of the compiled kernel, and each
/// one costs seconds of LLVM on lavapipe: sized by the lengths (a power of two up to 32), the
/// kernels' test compiled a kernel per length class (issue 70). Units past `seq_q` find their
/// rows missing and skip the key walk.
fn units_per_head(group: usize) -> usize {
    (32 / group).max(1)
}

/// The row of the positions tensor that sequence `b` reads (row 0 when shared).
#[cube]
fn position_row(p: &Scalars, b: usize) -> usize {
    let mut row = b;
    if p.positions_shared == 1 {
        row = 0;
    }
    row * (p.seq_q as usize + p.seq_k as usize)
}

/// Where query row `i` of sequence `b` sits and its segment: `(position, segment)`.
#[cube]
fn query_place<I: Int, J: Int>(
    positions: &Tensor<I>,
    segments: &Tensor<J>,
    p: &Scalars,
    b: usize,
    i: usize,
) -> (i32, i32) {
    let seq_q = p.seq_q as usize;
    let mut position = p.query_offset + i as i32;
    let mut segment = 0i32;
    if i < seq_q {
        if (p.flags & EXPLICIT) != 0 {
            position = i32::cast_from(positions[position_row(p, b) + i]);
        }
        if (p.flags & SEGMENTED) != 0 {
            segment = i32::cast_from(segments[b * (seq_q + p.seq_k as usize) + i]);
        }
    }
    (position, segment)
}

/// Where key `j` of sequence `b` sits, whether it may be seen (`in_range` and not padding) and
/// its segment: `(position, seen, segment)`. Nothing is read unless `in_range`.
#[cube]
fn key_place<I: Int, J: Int, P: Numeric>(
    positions: &Tensor<I>,
    segments: &Tensor<J>,
    padding: &Tensor<P>,
    p: &Scalars,
    b: usize,
    j: usize,
    in_range: bool,
) -> (i32, bool, i32) {
    let seq_q = p.seq_q as usize;
    let seq_k = p.seq_k as usize;
    let mut position = p.key_offset + j as i32;
    let mut seen = in_range;
    let mut segment = 0i32;
    if in_range {
        if (p.flags & EXPLICIT) != 0 {
            position = i32::cast_from(positions[position_row(p, b) + seq_q + j]);
        }
        if (p.flags & PADDED) != 0 {
            seen = padding[b * seq_k + j] == P::from_int(0);
        }
        if (p.flags & SEGMENTED) != 0 {
            segment = i32::cast_from(segments[b * (seq_q + seq_k) + seq_q + j]);
        }
    }
    (position, seen, segment)
}

/// The keys `k_lo..k_hi` the tile of rows `r0..r0 + rows` can see (sequential positions: the
/// causal mask and the window prune them; with explicit ones, all).
#[cube]
fn key_range(p: &Scalars, r0: usize) -> (usize, usize) {
    let seq_q = p.seq_q as usize;
    let mut k_lo = 0i32;
    let mut k_hi = p.seq_k as i32;
    if (p.flags & EXPLICIT) == 0 {
        let last_row = min(r0 + p.rows as usize, seq_q) - 1;
        let first = p.query_offset + r0 as i32;
        let last = p.query_offset + last_row as i32;
        let causal = (p.flags & CAUSAL) != 0;
        if causal {
            k_hi = min(k_hi, last - p.key_offset + 1);
        }
        if (p.flags & WINDOW) != 0 {
            k_lo = max(k_lo, first - p.before - p.key_offset);
            if !causal {
                k_hi = min(k_hi, last + p.after - p.key_offset + 1);
            }
        }
    }
    (max(k_lo, 0) as usize, max(k_hi, 0) as usize)
}

/// Head `head`'s ALiBi slope (0 without ALiBi) and the start of its row of the bias table.
#[cube]
fn head_bias<F: Float, C: Float>(bias: &Tensor<F>, p: &Scalars, head: usize) -> (C, usize) {
    let mut slope = C::new(0.0);
    if (p.flags & ALIBI) != 0 {
        slope = C::cast_from(bias[head]);
    }
    (slope, head * (2 * p.reach as usize + 1))
}

/// A unit's `per_unit` query rows: scaled (`q`, `[per_unit, d_head]`), their running maximum
/// `m`, sum `l` and output `acc` (`[per_unit, d_v]`), their positions and segments.
#[derive(CubeType)]
struct Rows<C: Float> {
    q: Array<C>,
    acc: Array<C>,
    m: Array<C>,
    l: Array<C>,
    position: Array<i32>,
    segment: Array<i32>,
}

/// `per_unit` query rows from `i0` of head `head` of sequence `b` (none past `seq_q`), with
/// their running state cleared.
#[cube]
fn start_rows<F: Float, C: Float, I: Int, J: Int>(
    q: &Tensor<F>,
    positions: &Tensor<I>,
    segments: &Tensor<J>,
    p: &Scalars,
    b: usize,
    head: usize,
    i0: usize,
    #[comptime] per_unit: usize,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
) -> Rows<C> {
    let seq_q = p.seq_q as usize;
    let mut rows = Rows::<C> {
        q: Array::<C>::new(comptime!(per_unit * d_head)),
        acc: Array::<C>::new(comptime!(per_unit * d_v)),
        m: Array::<C>::new(per_unit),
        l: Array::<C>::new(per_unit),
        position: Array::<i32>::new(per_unit),
        segment: Array::<i32>::new(per_unit),
    };
    #[unroll]
    for t in 0..per_unit {
        let i = i0 + t;
        let q_base = ((b * p.n_heads as usize + head) * seq_q + i) * d_head;
        #[unroll]
        for d in 0..d_head {
            let mut x = C::new(0.0);
            if i < seq_q {
                x = C::cast_from(q[q_base + d]) * C::cast_from(p.scale);
            }
            rows.q[t * d_head + d] = x;
        }
        #[unroll]
        for d in 0..d_v {
            rows.acc[t * d_v + d] = C::new(0.0);
        }
        rows.m[t] = C::new(HIDDEN);
        rows.l[t] = C::new(0.0);
        let (position, segment) = query_place(positions, segments, p, b, i);
        rows.position[t] = position;
        rows.segment[t] = segment;
    }
    rows
}

/// Key `c` of a block (`s[t * block + c]` holding its `scale q . k` for each row) made final
/// for every row: see [`final_score`]. `i0` is the first row's query index.
#[cube]
fn score_rows<F: Float, C: Float>(
    s: &mut Array<C>,
    rows: &Rows<C>,
    c: usize,
    key_position: i32,
    key_seen: bool,
    key_segment: i32,
    i0: usize,
    bias: &Tensor<F>,
    slope: C,
    table_base: usize,
    p: &Scalars,
    #[comptime] per_unit: usize,
    #[comptime] block: usize,
) {
    #[unroll]
    for t in 0..per_unit {
        s[t * block + c] = final_score::<F, C>(
            s[t * block + c],
            key_position - rows.position[t],
            key_seen && i0 + t < p.seq_q as usize,
            rows.segment[t],
            key_segment,
            bias,
            slope,
            table_base,
            p,
        );
    }
}

/// The online softmax over one block, row by row: each row's scores `s[t * block..][..block]`
/// rescale what it summed so far by the block's maximum, then become their weights.
#[cube]
fn fold_block<C: Float>(
    s: &mut Array<C>,
    rows: &mut Rows<C>,
    #[comptime] per_unit: usize,
    #[comptime] block: usize,
    #[comptime] d_v: usize,
) {
    #[unroll]
    for t in 0..per_unit {
        let mut block_max = C::new(HIDDEN);
        #[unroll]
        for c in 0..block {
            block_max = max(block_max, s[t * block + c]);
        }
        let m_new = max(rows.m[t], block_max);
        let seen = m_new > C::new(UNSEEN);
        if seen {
            let correction = C::exp(rows.m[t] - m_new);
            rows.l[t] *= correction;
            #[unroll]
            for d in 0..d_v {
                rows.acc[t * d_v + d] *= correction;
            }
            rows.m[t] = m_new;
        }
        #[unroll]
        for c in 0..block {
            let mut w = C::new(0.0);
            if seen {
                w = C::exp(s[t * block + c] - m_new);
            }
            rows.l[t] += w;
            s[t * block + c] = w;
        }
    }
}

/// The rows written out (query `i0 + t` of head `head`, sequence `b`; none past `seq_q`):
/// `acc / l` and `m + ln l` (zeros and the dtype's lowest value for a row that saw no key).
#[cube]
fn write_rows<F: Float, C: Float>(
    output: &mut Tensor<F>,
    lse: &mut Tensor<F>,
    rows: &Rows<C>,
    p: &Scalars,
    b: usize,
    head: usize,
    i0: usize,
    #[comptime] per_unit: usize,
    #[comptime] d_v: usize,
) {
    #[unroll]
    for t in 0..per_unit {
        let i = i0 + t;
        if i < p.seq_q as usize {
            let row = (b * p.n_heads as usize + head) * p.seq_q as usize + i;
            let mut inv = C::new(0.0);
            let mut log_sum = C::cast_from(p.lowest);
            if rows.l[t] > C::new(0.0) {
                inv = C::new(1.0) / rows.l[t];
                log_sum = rows.m[t] + C::ln(rows.l[t]);
            }
            #[unroll]
            for d in 0..d_v {
                output[row * d_v + d] = F::cast_from(rows.acc[t * d_v + d] * inv);
            }
            lse[row] = F::cast_from(log_sum);
        }
    }
}

/// Host side: checks shapes, makes inputs contiguous, allocates the output and the
/// log-sum-exp, picks the variant (`args.variant`, `Auto` by the adapter) and launches its
/// kernel once.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    q: CubeTensor,
    k: CubeTensor,
    v: CubeTensor,
    bias: CubeTensor,
    padding: CubeTensor,
    positions: CubeTensor,
    segments: CubeTensor,
    args: &TileArgs,
) -> (CubeTensor, CubeTensor) {
    let sizes = check_sizes(
        &q.shape().dims::<4>(),
        &k.shape().dims::<4>(),
        &v.shape().dims::<4>(),
    );
    let client = q.client.clone();
    let dtype = q.dtype;
    assert!(
        k.dtype == dtype && v.dtype == dtype && bias.dtype == dtype,
        "tiled_attention: q, k, v and the bias must share one float dtype, got {:?}, {:?}, {:?} \
         and {:?}",
        dtype,
        k.dtype,
        v.dtype,
        bias.dtype
    );
    let output = empty_device_dtype(
        client.clone(),
        q.device.clone(),
        Shape::new([sizes.batch, sizes.n_heads, sizes.seq_q, sizes.d_v]),
        dtype,
    );
    let lse = empty_device_dtype(
        client.clone(),
        q.device.clone(),
        Shape::new([sizes.batch, sizes.n_heads, sizes.seq_q, 1]),
        dtype,
    );
    if sizes.batch * sizes.n_heads * sizes.seq_q == 0 {
        return (output, lse);
    }
    assert!(
        sizes.seq_k > 0,
        "tiled_attention: the kernel needs at least one key (the entry point returns zeros)"
    );
    let group = sizes.n_heads / sizes.n_kv_heads;
    let properties = client.properties();
    let mut variant = pick(args.variant, &client, dtype);
    // `Auto`'s tensor-core kernel has no split keys: a grid of fewer tiles than the device's
    // multiprocessors that the shared kernel would split (a decoding step: one query row over a
    // long cache, `n_kv_heads x batch` cubes) runs there.
    if args.variant == FlashVariant::Auto
        && variant == FlashVariant::TensorCores
        && split::splits_for_auto(
            &sizes,
            group,
            dtype.size(),
            &properties.hardware,
            args.key_splits,
        )
    {
        variant = FlashVariant::Shared;
    }
    let cpu_adapter = properties.identity.physical.is_none();
    if variant == FlashVariant::TensorCores
        && let Some(emulate) = mma::emulation(&properties, dtype)
        && let Some(plan) = mma::plan(&sizes, group, dtype.size(), &properties.hardware, emulate)
        && !mma::cut_short(mma::forward_iterations(&plan, &sizes), emulate, cpu_adapter)
    {
        count_launch(FlashVariant::TensorCores);
        let values = ScalarValues::new(&sizes, args, plan.rows(), &positions, dtype, 0);
        let dtypes = storage_types(dtype, &positions, &segments, &padding);
        let u32_of = |v: usize, what: &str| {
            u32::try_from(v).unwrap_or_else(|_| panic!("tiled_attention: {what} = {v} exceeds u32"))
        };
        let count = CubeCount::Static(
            u32_of(sizes.seq_q.div_ceil(plan.rows()), "the query tiles"),
            u32_of(
                sizes.n_kv_heads * (group / plan.span),
                "the key/value heads times their runs of heads",
            ),
            u32_of(sizes.batch, "batch"),
        );
        // SAFETY: the inputs are made contiguous with the shapes `check_sizes` accepted; q,
        // the output and the log-sum-exp are read and written at rows `i < seq_q` of heads
        // `kv_head * group + run * span + w / tiles < n_heads`, columns below `d_head` and
        // `d_v`; k and v at keys `j0 + min(r, valid - 1) < seq_k` of this cube's (sequence, kv
        // head), columns below `d_head` and `d_v` (a 16-byte copy only where the width is a
        // multiple of 8); the bias, positions, segments and padding as the other kernels read
        // them; shared memory indices stay below the sizes the kernel declares (the swizzle
        // permutes chunks within a row), which the plan fitted to the device, as its units.
        unsafe {
            mma::flash_mma_kernel::launch_unchecked(
                &client,
                count,
                CubeDim::new_1d(u32_of(plan.units(), "the cube's units")),
                inputs_arg([&q, &k, &v, &bias, &padding, &positions, &segments]),
                output.clone().into_tensor_arg(),
                lse.clone().into_tensor_arg(),
                values.launch(),
                u32_of(group, "the group"),
                u32_of(plan.span, "the heads per cube"),
                sizes.d_head,
                sizes.d_v,
                plan.block,
                plan.m_tiles,
                plan.stages,
                mma::general(values.flags),
                emulate,
                dtypes,
            )
        }
        return (output, lse);
    }
    if variant == FlashVariant::Blocked
        && blocked::launch(
            [&q, &k, &v, &bias, &padding, &positions, &segments],
            &output,
            &lse,
            &sizes,
            args,
        )
    {
        return (output, lse);
    }
    // The tensor-core kernel falls back to the shared one where it does not fit, or where
    // llvmpipe would cut its loop short; the blocked one where its cube does not fit.
    let plan = match variant {
        FlashVariant::Shared | FlashVariant::TensorCores | FlashVariant::Blocked => {
            shared::plan(&sizes, group, dtype.size(), &properties.hardware)
        }
        _ => None,
    }
    .unwrap_or_else(|| registers::plan(&sizes, group));
    count_launch(if plan.stage.is_some() {
        FlashVariant::Shared
    } else {
        FlashVariant::Registers
    });
    let mut values = ScalarValues::new(&sizes, args, plan.rows, &positions, dtype, 0);
    let query_tiles = sizes.seq_q.div_ceil(plan.rows);
    let splits = match plan.stage {
        Some(_) => split::key_splits(
            &sizes,
            query_tiles,
            args.key_splits,
            properties.hardware.num_streaming_multiprocessors,
        ),
        None => 1,
    };
    values.splits = splits as u32;
    let dtypes = storage_types(dtype, &positions, &segments, &padding);
    let u32_of = |v: usize, what: &str| {
        u32::try_from(v).unwrap_or_else(|_| panic!("tiled_attention: {what} = {v} exceeds u32"))
    };
    let scalars = values.launch();
    let count = CubeCount::Static(
        u32_of(query_tiles * splits, "the query tiles times the key splits"),
        u32_of(sizes.n_kv_heads, "n_kv_heads"),
        u32_of(sizes.batch, "batch"),
    );
    // Split keys: each split writes its rows, normalized, and their log-sum-exp into
    // `[splits * batch, ..]` partial outputs (the storage dtype, as the kernel writes it),
    // combined in f32 after the launch.
    let (out_buffer, lse_buffer) = if splits > 1 {
        let partial = |d: usize| {
            empty_device_dtype(
                client.clone(),
                q.device.clone(),
                Shape::new([splits * sizes.batch, sizes.n_heads, sizes.seq_q, d]),
                dtype,
            )
        };
        (partial(sizes.d_v), partial(1))
    } else {
        (output.clone(), lse.clone())
    };
    // SAFETY: the inputs are made contiguous with the shapes `check_sizes` accepted; every
    // read of q, the output and the log-sum-exp is guarded by `i < seq_q`; k and v are read at
    // keys `j < k_hi <= seq_k` of this cube's (sequence, kv head); the bias at head
    // `h < n_heads` (slopes) or `h * (2 reach + 1) + [0, 2 reach]` (table); positions at row 0
    // or `b` of `[1 or batch, seq_q + seq_k]`, segments at row `b` of `[batch, seq_q + seq_k]`
    // and padding at row `b` of `[batch, seq_k]`, each only when `args` says it is given (the
    // api checked those shapes). The shared variant's plan fits the device's shared memory and
    // cube size. Both kernels take the same arguments; the fourth comptime one is the keys per
    // block (registers) or per stage (shared). The group is a run-time value (`Scalars`).
    macro_rules! launch_with {
        ($kernel:path, $keys:expr) => {
            unsafe {
                $kernel(
                    &client,
                    count,
                    CubeDim::new_1d(u32_of(plan.units, "the cube's units")),
                    inputs_arg([&q, &k, &v, &bias, &padding, &positions, &segments]),
                    out_buffer.clone().into_tensor_arg(),
                    lse_buffer.clone().into_tensor_arg(),
                    scalars,
                    sizes.d_head,
                    sizes.d_v,
                    plan.per_unit,
                    $keys,
                    dtypes,
                )
            }
        };
    }
    match plan.stage {
        Some(stage) => launch_with!(shared::flash_shared_kernel::launch_unchecked, stage),
        None => launch_with!(
            registers::flash_registers_kernel::launch_unchecked,
            KEY_BLOCK
        ),
    }
    if splits > 1 {
        split::combine_splits(
            &out_buffer,
            &lse_buffer,
            &output,
            &lse,
            splits,
            sizes.d_v,
            values.lowest,
        );
    }
    (output, lse)
}
