//! The register fragments of NVIDIA's `mma.sync.m16n8k16` (f16 or bf16 in, f32 accumulators):
//! which element of which tile each of a warp's 32 lanes holds, and the warp-level operations on
//! them (issue 72, the fragment layer). The FlashAttention-2 kernel keeps S, P and O in these registers; its index
//! logic is written against the functions here, which are cubecl's own layout polyfills
//! (`polyfills::mma::{row_index, col_index}`, what the CUDA lowering of `mma.sync` and
//! `position_of_nth` expand), so the layout the kernel assumes is the one the instruction reads.
//!
//! With `g = lane / 4` and `t = lane % 4` (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
//!
//! | operand | elements a lane | row of element `i` | column of element `i` |
//! | --- | --- | --- | --- |
//! | A (16 x 16) | 8 | `g + 8 ((i >> 1) & 1)` | `2t + (i & 1) + 8 ((i >> 2) & 1)` |
//! | B (16 x 8) | 4 | `2t + (i & 1) + 8 (i >> 1)` (k) | `g` (n) |
//! | C, D (16 x 8) | 4 | `g + 8 (i >> 1)` | `2t + (i & 1)` |
//!
//! Beside the layouts: the products of a warp ([`mma_pair`]), `ldmatrix` ([`ldmatrix_x4`]), the
//! quad's reductions ([`quad_max`], [`quad_sum`]), `exp2` ([`exp2`]) and the async copy with FlashAttention-2's
//! groups ([`copy_16_bytes`], [`commit_group`], [`wait_group`]): each native on CUDA and, with
//! `emulate`, the same operation over a "virtual warp" of 32 consecutive units through shared
//! memory (every adapter without them: lavapipe in CI), so a kernel's index logic is one code.
//!
//! FlashAttention-2's register trick follows from the table: the accumulators of S's n8-tiles
//! `2s` and `2s + 1` (keys `16s..16s + 16`), in that order, are element for element the A
//! operand of `P V` for those keys ([`p_operand_tile`]), so P never leaves registers.

// The tensor-core forward (`mma.rs`) reads these fragments; a few layout helpers
// (`p_operand_tile`, the B layout) serve only the tests and the emulation's documentation.
#![cfg_attr(not(test), allow(dead_code))]

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

// Kernels that run each operation (the tests' on lavapipe, the CUDA check's probes), and the
// tests: apart from the operations, which the attention kernels will call.
#[cfg(any(test, feature = "cuda-check"))]
mod probes;
#[cfg(feature = "cuda-check")]
pub(crate) use probes::cuda_cases;
#[cfg(test)]
mod tests;

/// Lanes of a warp: the fragments are laid out over 32 lanes, real or emulated.
pub(crate) const WARP: usize = 32;
/// 16-bit elements per 32-bit register: the fragments' vectors are pairs.
pub(crate) const PAIR: usize = 2;
/// Elements of A (16 x 16) a lane holds.
pub(crate) const A_ELEMS: usize = 8;
/// Elements of B (16 x 8) a lane holds.
pub(crate) const B_ELEMS: usize = 4;
/// Elements of C or D (16 x 8) a lane holds.
pub(crate) const C_ELEMS: usize = 4;

/// Row of A's element `i` held by `lane`.
#[cube]
pub(crate) fn a_row(lane: u32, i: u32) -> u32 {
    polyfills::mma::row_index(lane, i, PAIR, MatrixIdent::A)
}

/// Column of A's element `i` held by `lane`.
#[cube]
pub(crate) fn a_col(lane: u32, i: u32) -> u32 {
    polyfills::mma::col_index(lane, i, PAIR, MatrixIdent::A)
}

/// Row (the `k` index) of B's element `i` held by `lane`.
#[cube]
pub(crate) fn b_row(lane: u32, i: u32) -> u32 {
    polyfills::mma::row_index(lane, i, PAIR, MatrixIdent::B)
}

/// Column (the `n` index) of B's element `i` held by `lane`.
#[cube]
pub(crate) fn b_col(lane: u32, i: u32) -> u32 {
    polyfills::mma::col_index(lane, i, PAIR, MatrixIdent::B)
}

/// Row of the accumulator's element `i` held by `lane`.
#[cube]
pub(crate) fn c_row(lane: u32, i: u32) -> u32 {
    polyfills::mma::row_index(lane, i, PAIR, MatrixIdent::Accumulator)
}

/// Column of the accumulator's element `i` held by `lane`.
#[cube]
pub(crate) fn c_col(lane: u32, i: u32) -> u32 {
    polyfills::mma::col_index(lane, i, PAIR, MatrixIdent::Accumulator)
}

/// Which of S's two n8-tiles (0: keys `16s..16s + 8`, 1: `16s + 8..16s + 16`) and which of its
/// accumulators give element `i` of P's A operand for key slice `s`: `(i / 4, i % 4)`.
pub(crate) const fn p_operand_tile(i: usize) -> (usize, usize) {
    (i / C_ELEMS, i % C_ELEMS)
}

/// Per warp, the shared `f32` values an emulated [`mma_pair`] takes: two slots (see below), each
/// A (16 x 16), then B (16 x 16: the two n8-tiles side by side).
pub(crate) const MMA_SCRATCH: usize = 2 * (16 * 16 + 16 * 16);

/// The emulated warp operations and llvmpipe: a cube barrier is a suspend point of the LLVM
/// coroutine each group of invocations runs as, and LLVM's coroutine split grows faster than
/// linearly with them (issue 72: the forward with two barriers an operation spent minutes in
/// `llvm::coro::buildCoroutineFrame` per kernel). So each emulated exchange takes one barrier,
/// not two: the operation writes one of two slots (`slot`, 0 or 1), `sync_cube`, reads it, and
/// the caller alternates the slots from one call to the next (a comptime count of its calls),
/// so the next write to a slot comes after every unit passed the barrier that followed its last
/// read. `ldmatrix` takes none: every lane's address is a formula of its lane ([`ldmatrix_x4`]).
///
/// `c += a b` for the two n8-tiles of one 16 x 16 B and C (pairs 0 and 1 of `b` and `c` the
/// first tile's, 2 and 3 the second's: what [`ldmatrix_x4`] gives), on every warp of the cube:
/// `a` is this lane's 8 elements of A (4 pairs), `c` its 8 f32 accumulators, in the layouts of
/// the table above. Natively two `mma.sync.m16n8k16` (CUDA, sm_80 and up); with `emulate`,
/// the warp (units `32 w..32 w + 32`) writes its A and B into slot `slot` of
/// `scratch[w * MMA_SCRATCH..]` at their own (row, column), `sync_cube`, and each lane sums its
/// 8 entries in f32 (16 products each). Every unit of the cube must call it.
#[cube]
pub(crate) fn mma_pair<F: Float>(
    a: &Array<Vector<F, Const<2>>>,
    b: &Array<Vector<F, Const<2>>>,
    c: &mut Array<Vector<f32, Const<2>>>,
    scratch: &mut [f32],
    #[comptime] slot: usize,
    #[comptime] emulate: bool,
) {
    if comptime!(emulate) {
        let lane = UNIT_POS % 32u32;
        let base = (UNIT_POS / 32u32) as usize * MMA_SCRATCH + comptime!(slot * MMA_SCRATCH / 2);
        #[unroll]
        for i in 0..A_ELEMS {
            let at = a_row(lane, i as u32) * 16u32 + a_col(lane, i as u32);
            let x: F = a[i / PAIR].extract(i % PAIR);
            scratch[base + at as usize] = f32::cast_from(x);
        }
        #[unroll]
        for half in 0..2usize {
            #[unroll]
            for i in 0..B_ELEMS {
                let row = b_row(lane, i as u32) as usize;
                let col = half * 8usize + b_col(lane, i as u32) as usize;
                let x: F = b[half * 2usize + i / PAIR].extract(i % PAIR);
                scratch[base + 256usize + row * 16usize + col] = f32::cast_from(x);
            }
        }
        sync_cube();
        emulated_tile(scratch, base, 0usize, c);
        emulated_tile(scratch, base, 1usize, c);
    } else {
        let def = cmma::MmaDefinition::<F, F, f32>::new(16usize, 8usize, 16usize);
        #[unroll]
        for half in 0..2usize {
            let mut bh = Array::<Vector<F, Const<2>>>::new(2usize);
            let mut ch = Array::<Vector<f32, Const<2>>>::new(2usize);
            bh[0] = b[2 * half];
            bh[1] = b[2 * half + 1];
            ch[0] = c[2 * half];
            ch[1] = c[2 * half + 1];
            def.execute_inplace::<Const<2>, Const<2>, Const<2>>(a, &bh, &mut ch);
            c[2 * half] = ch[0];
            c[2 * half + 1] = ch[1];
        }
    }
}

/// The emulated product's sums for n8-tile `half` (columns `8 half..8 half + 8` of the B in
/// `scratch[base..]`: A at `base`, B at `base + 256`, 16 values a row), into pairs `2 half`,
/// `2 half + 1` of `c`.
#[cube]
fn emulated_tile(
    scratch: &mut [f32],
    base: usize,
    #[comptime] half: usize,
    c: &mut Array<Vector<f32, Const<2>>>,
) {
    let lane = UNIT_POS % 32u32;
    #[unroll]
    for v in 0..C_ELEMS / PAIR {
        let mut pair: Vector<f32, Const<2>> = c[half * 2 + v];
        #[unroll]
        for e in 0..PAIR {
            let i = (v * PAIR + e) as u32;
            let row = c_row(lane, i) as usize;
            let col = half * 8 + c_col(lane, i) as usize;
            let mut sum: f32 = pair.extract(e);
            #[unroll]
            for k in 0..16usize {
                sum += scratch[base + row * 16usize + k]
                    * scratch[base + 256usize + k * 16usize + col];
            }
            pair.insert(e, sum);
        }
        c[half * 2 + v] = pair;
    }
}

/// 16-bit elements of one `ldmatrix` row and of one async copy: 16 bytes.
pub(crate) const CHUNK: usize = 8;

/// Where 16-byte chunk `chunk` of row `row` of a stage `width` values wide starts: the chunks of
/// each row permuted by `row % span` (`span` the largest power of two, at most 8, that divides
/// the chunks a row), so that the 8 rows one `ldmatrix` matrix reads fall in different banks
/// (FlashAttention-2's `Swizzle<3, 3, 3>` at widths of 64 and more).
#[cube]
pub(crate) fn chunk_at(row: usize, chunk: usize, #[comptime] width: usize) -> usize {
    let span = comptime!(swizzle_span(width / CHUNK));
    row * width + (chunk ^ (row % span)) * CHUNK
}

/// The largest power of two, at most 8, that divides `chunks`.
pub(crate) const fn swizzle_span(chunks: usize) -> usize {
    let low = chunks & chunks.wrapping_neg();
    if low > 8 { 8 } else { low }
}

/// `ldmatrix.sync.aligned.m8n8.x4[.trans].b16` on a 16 x 16 tile of a stage (shared memory,
/// `width` values a row, swizzled by [`chunk_at`]) whose first row is `row` and first 8-value
/// chunk `chunk`, past `base`: matrix `i` of the four is the tile's 8 x 8 at rows `8 (i % 2)`,
/// chunk `i / 2` (the A fragment's order), or with `columns_first` at rows `8 (i / 2)`, chunk
/// `i % 2` (the B fragments of two n8-tiles: keys for `Q Kᵀ`). Lane `l` names row `l % 8` of
/// matrix `l / 8` ([`ldmatrix_row`]) and gets, of matrix `i`, the pair (row `l / 4`, columns
/// `2 (l % 4)`, `+ 1`), or with `transpose` the pair (rows `2 (l % 4)`, `+ 1`; column `l / 4`).
/// Emulated, each lane reads its pairs from the rows the other lanes would name, the same
/// formula ([`ldmatrix_row`]) for another lane: no exchange, no barrier, and the addresses (and
/// the swizzle that makes them) are still the kernel's.
#[cube]
pub(crate) fn ldmatrix_x4<F: Float>(
    stage: &[F],
    base: usize,
    row: usize,
    chunk: usize,
    #[comptime] width: usize,
    #[comptime] columns_first: bool,
    #[comptime] transpose: bool,
    #[comptime] emulate: bool,
) -> Array<Vector<F, Const<2>>> {
    let lane = (UNIT_POS % 32u32) as usize;
    if comptime!(emulate) {
        let mut out = Array::<Vector<F, Const<2>>>::new(4usize);
        #[unroll]
        for i in 0..4usize {
            let mut pair = Vector::empty();
            if comptime!(transpose) {
                let r = i * 8usize + 2usize * (lane % 4usize);
                let lo = ldmatrix_row(r, base, row, chunk, width, columns_first);
                let hi = ldmatrix_row(r + 1usize, base, row, chunk, width, columns_first);
                pair.insert(0usize, stage[lo + lane / 4usize]);
                pair.insert(1usize, stage[hi + lane / 4usize]);
            } else {
                let at = ldmatrix_row(
                    i * 8usize + lane / 4usize,
                    base,
                    row,
                    chunk,
                    width,
                    columns_first,
                );
                pair.insert(0usize, stage[at + 2usize * (lane % 4usize)]);
                pair.insert(1usize, stage[at + 2usize * (lane % 4usize) + 1usize]);
            }
            out[i] = pair;
        }
        out
    } else {
        let start = ldmatrix_row(lane, base, row, chunk, width, columns_first);
        let def = cmma::MmaDefinition::<F, F, f32>::new(16usize, 8usize, 16usize);
        def.load_matrix::<F, Const<2>>(
            &stage[start..start + 8usize],
            MatrixIdent::A,
            4usize,
            transpose,
        )
    }
}

/// Where lane `lane` of an [`ldmatrix_x4`] names its row: row `lane % 8` of matrix `lane / 8`.
#[cube]
pub(crate) fn ldmatrix_row(
    lane: usize,
    base: usize,
    row: usize,
    chunk: usize,
    #[comptime] width: usize,
    #[comptime] columns_first: bool,
) -> usize {
    let i = lane / 8usize;
    let mut r = row + lane % 8usize;
    let mut c = chunk;
    if comptime!(columns_first) {
        r += 8usize * (i / 2usize);
        c += i % 2usize;
    } else {
        r += 8usize * (i % 2usize);
        c += i / 2usize;
    }
    base + chunk_at(r, c, width)
}

/// Per warp, the shared `u32` values an emulated quad reduction takes: two slots of a warp.
pub(crate) const LANE_SCRATCH: usize = 2 * WARP;

/// The largest `x` of this lane's quad (lanes `4 g..4 g + 4`, which share a row of the
/// accumulators): natively `SHFL.BFLY` 1 and 2; emulated through slot `slot` (see [`mma_pair`])
/// of `lanes[w * LANE_SCRATCH..]`, one `sync_cube` (every unit must call it).
#[cube]
pub(crate) fn quad_max(
    x: f32,
    lanes: &mut [u32],
    #[comptime] slot: usize,
    #[comptime] emulate: bool,
) -> f32 {
    if comptime!(emulate) {
        let q = quad_values(x, lanes, slot);
        max(max(q[0], q[1]), max(q[2], q[3]))
    } else {
        let m = max(x, plane_shuffle_xor(x, 1u32));
        max(m, plane_shuffle_xor(m, 2u32))
    }
}

/// The sum of `x` over this lane's quad, in the butterfly's order (`(x + x^1) + (x^2 + x^3)` for
/// lane `x`: the same on every lane, natively and emulated); as [`quad_max`].
#[cube]
pub(crate) fn quad_sum(
    x: f32,
    lanes: &mut [u32],
    #[comptime] slot: usize,
    #[comptime] emulate: bool,
) -> f32 {
    if comptime!(emulate) {
        let q = quad_values(x, lanes, slot);
        (q[0] + q[1]) + (q[2] + q[3])
    } else {
        let s = x + plane_shuffle_xor(x, 1u32);
        s + plane_shuffle_xor(s, 2u32)
    }
}

/// The quad's values of `x` through slot `slot` of the warp's lane scratch, this lane's first,
/// then lanes `^ 1`, `^ 2`, `^ 3` (emulated: one `sync_cube`).
#[cube]
fn quad_values(x: f32, lanes: &mut [u32], #[comptime] slot: usize) -> Array<f32> {
    let lane = UNIT_POS % 32u32;
    let base = (UNIT_POS / 32u32) as usize * LANE_SCRATCH + comptime!(slot * WARP);
    lanes[base + lane as usize] = u32::reinterpret(x);
    sync_cube();
    let mut q = Array::<f32>::new(4usize);
    #[unroll]
    for j in 0..4u32 {
        q[j as usize] = f32::reinterpret(lanes[base + (lane ^ j) as usize]);
    }
    q
}

/// `2^x` for the online softmax (the log2(e) folded into the scale, as FlashAttention-2 does):
/// natively PTX's `ex2.approx.ftz.f32`, one `MUFU.EX2` (about 2 ulp, denormals flushed) where
/// CubeCL's `Exp` is the accurate `expf` (about 8 instructions); emulated `e^(x ln 2)`.
#[cube]
pub(crate) fn exp2(x: f32, #[comptime] emulate: bool) -> f32 {
    if comptime!(emulate) {
        f32::exp(x * core::f32::consts::LN_2)
    } else {
        let out: f32;
        gpu_asm!("ex2.approx.ftz.f32 {}, {};", out(_) out, in(_) x, options(nomem));
        out
    }
}

/// `tanh(x)` for the softcap: natively PTX's `tanh.approx.f32`, one `MUFU.TANH` (about 2^-11
/// relative error, as FlashAttention-2's softcap through `cutlass::fast_tanh`), where CubeCL's
/// `Tanh` is an accurate sequence around `MUFU.EX2` and a division; emulated `tanh`.
#[cube]
pub(crate) fn tanh(x: f32, #[comptime] emulate: bool) -> f32 {
    if comptime!(emulate) {
        f32::tanh(x)
    } else {
        let out: f32;
        gpu_asm!("tanh.approx.f32 {}, {};", out(_) out, in(_) x, options(nomem));
        out
    }
}

/// 16 bytes of `src` (global memory) to `dst` (shared memory, 16-byte aligned), without waiting:
/// natively `cp.async.cg` (sm_80 and up), which lands after [`commit_group`] and [`wait_group`];
/// emulated, a plain copy. FlashAttention-2 stages each key and value block this way, the next
/// block's copies in flight while the current one is computed.
#[cube]
pub(crate) fn copy_16_bytes<F: Float>(
    src: &[F],
    src_at: usize,
    dst: &mut [F],
    dst_at: usize,
    #[comptime] emulate: bool,
) {
    // The element's size as the kernel is expanded for its dtype (inside `comptime!` the generic
    // is a placeholder type).
    let size = F::size();
    let n = comptime!(16 / size);
    if comptime!(emulate) {
        #[unroll]
        for i in 0..n {
            dst[dst_at + i] = src[src_at + i];
        }
    } else {
        cubecl::frontend::barrier::copy_async(
            &src[src_at..src_at + n],
            &mut dst[dst_at..dst_at + n],
            n as u32,
        );
    }
}

/// Closes the group of the unit's [`copy_16_bytes`] issued since the last one (`cp.async.commit_group`;
/// nothing emulated).
#[cube]
pub(crate) fn commit_group(#[comptime] emulate: bool) {
    if comptime!(!emulate) {
        gpu_asm!("cp.async.commit_group;", options(explicit_mem));
    }
}

/// Waits until at most `pending` of the unit's committed groups are still in flight
/// (`cp.async.wait_group`), then `sync_cube` so every unit's copies are visible (emulated: the
/// barrier alone). Every unit of the cube must call it.
#[cube]
pub(crate) fn wait_group(#[comptime] pending: u32, #[comptime] emulate: bool) {
    if comptime!(!emulate) {
        gpu_asm!("cp.async.wait_group {n};", n = const pending, options(explicit_mem));
    }
    sync_cube();
}

/// P's A operand for keys `16s..16s + 16` from the accumulators of S's n8-tiles `2s` and
/// `2s + 1` side by side (`s`: pairs 0 and 1 the first tile's, 2 and 3 the second's, as
/// [`mma_pair`] holds them), in registers: the four pairs in that order rounded to `F`
/// (FlashAttention-2's `convert_layout_acc_Aregs`; natively one `F2FP` a pair). The layouts make
/// it exact: see [`p_operand_tile`].
#[cube]
pub(crate) fn p_operand<F: Float>(s: &Array<Vector<f32, Const<2>>>) -> Array<Vector<F, Const<2>>> {
    let mut a = Array::<Vector<F, Const<2>>>::new(4usize);
    #[unroll]
    for i in 0..4usize {
        a[i] = Vector::<F, Const<2>>::cast_from(s[i]);
    }
    a
}
