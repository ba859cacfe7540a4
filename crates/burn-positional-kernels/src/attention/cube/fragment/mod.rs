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
//! Beside the layouts: one product a warp ([`mma`]), `ldmatrix` ([`ldmatrix_x4`]), the quad
//! shuffle ([`shuffle_xor`]), `exp2` ([`exp2`]) and the async copy with FlashAttention-2's
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

/// Per warp, the shared `f32` values an emulated [`mma`] takes: A (16 x 16), then B (16 x 8).
pub(crate) const MMA_SCRATCH: usize = 16 * 16 + 16 * 8;

/// `c += a b` for one m16n8k16 tile on every warp of the cube: `a` is this lane's 8 elements of
/// A (4 pairs), `b` its 4 of B (2 pairs), `c` its 4 f32 accumulators (2 pairs), each in the
/// layout of the table above. Natively one `mma.sync.m16n8k16` (CUDA, sm_80 and up); with
/// `emulate`, the warp (units `32 w..32 w + 32` of the cube) writes its A and B into
/// `scratch[w * MMA_SCRATCH..]` at their own (row, column), `sync_cube`, and each lane sums its 4
/// entries in f32 (16 products each), `sync_cube`. Every unit of the cube must call it: the
/// emulation holds two cube barriers.
#[cube]
pub(crate) fn mma<F: Float>(
    a: &Array<Vector<F, Const<2>>>,
    b: &Array<Vector<F, Const<2>>>,
    c: &mut Array<Vector<f32, Const<2>>>,
    scratch: &mut [f32],
    #[comptime] emulate: bool,
) {
    if comptime!(emulate) {
        let lane = UNIT_POS % 32u32;
        let base = (UNIT_POS / 32u32) as usize * MMA_SCRATCH;
        #[unroll]
        for i in 0..A_ELEMS {
            let at = a_row(lane, i as u32) * 16u32 + a_col(lane, i as u32);
            let x: F = a[i / PAIR].extract(i % PAIR);
            scratch[base + at as usize] = f32::cast_from(x);
        }
        #[unroll]
        for i in 0..B_ELEMS {
            let at = 256u32 + b_row(lane, i as u32) * 8u32 + b_col(lane, i as u32);
            let x: F = b[i / PAIR].extract(i % PAIR);
            scratch[base + at as usize] = f32::cast_from(x);
        }
        sync_cube();
        #[unroll]
        for v in 0..C_ELEMS / PAIR {
            let mut pair: Vector<f32, Const<2>> = c[v];
            #[unroll]
            for e in 0..PAIR {
                let i = (v * PAIR + e) as u32;
                let row = c_row(lane, i) as usize;
                let col = c_col(lane, i) as usize;
                let mut sum: f32 = pair.extract(e);
                #[unroll]
                for k in 0..16usize {
                    sum += scratch[base + row * 16usize + k]
                        * scratch[base + 256usize + k * 8usize + col];
                }
                pair.insert(e, sum);
            }
            c[v] = pair;
        }
        sync_cube();
    } else {
        let def = cmma::MmaDefinition::<F, F, f32>::new(16usize, 8usize, 16usize);
        def.execute_inplace::<Const<2>, Const<2>, Const<2>>(a, b, c);
    }
}

/// Per warp, the shared `u32` values an emulated [`ldmatrix_x4`] or [`shuffle_xor`] takes.
pub(crate) const LANE_SCRATCH: usize = WARP;

/// `ldmatrix.sync.aligned.m8n8.x4[.trans].b16`: four 8 x 8 matrices of 16-bit values from
/// `stage` (shared memory), lane `l` naming where row `l % 8` of matrix `l / 8` starts
/// (`start`, an index into `stage`; natively 16-byte aligned). Lane `l` gets, of matrix `i`,
/// the pair (row `l / 4`, columns `2 (l % 4)`, `+ 1`), or with `transpose` the pair (rows
/// `2 (l % 4)`, `+ 1`; column `l / 4`): with matrix `i` at rows `8 (i % 2)`, columns `8 (i / 2)`
/// of a 16 x 16 tile, the four pairs are that tile's A fragment, or with `transpose` the B
/// fragments of its two 16 x 8 halves (V for `P V`). Emulated, each lane publishes `start` in
/// `lanes[w * LANE_SCRATCH..]`, `sync_cube`, reads its pairs from the named rows, `sync_cube`:
/// the addresses (and the swizzle that makes them) are checked by the emulation too.
#[cube]
pub(crate) fn ldmatrix_x4<F: Float>(
    stage: &[F],
    start: usize,
    lanes: &mut [u32],
    #[comptime] transpose: bool,
    #[comptime] emulate: bool,
) -> Array<Vector<F, Const<2>>> {
    if comptime!(emulate) {
        let lane = (UNIT_POS % 32u32) as usize;
        let base = (UNIT_POS / 32u32) as usize * LANE_SCRATCH;
        lanes[base + lane] = start as u32;
        sync_cube();
        let mut out = Array::<Vector<F, Const<2>>>::new(4usize);
        #[unroll]
        for i in 0..4usize {
            let mut pair = Vector::empty();
            if comptime!(transpose) {
                let r = base + i * 8usize + 2usize * (lane % 4usize);
                pair.insert(0usize, stage[lanes[r] as usize + lane / 4usize]);
                pair.insert(1usize, stage[lanes[r + 1usize] as usize + lane / 4usize]);
            } else {
                let row = lanes[base + i * 8usize + lane / 4usize] as usize;
                pair.insert(0usize, stage[row + 2usize * (lane % 4usize)]);
                pair.insert(1usize, stage[row + 2usize * (lane % 4usize) + 1usize]);
            }
            out[i] = pair;
        }
        sync_cube();
        out
    } else {
        let def = cmma::MmaDefinition::<F, F, f32>::new(16usize, 8usize, 16usize);
        def.load_matrix::<F, Const<2>>(
            &stage[start..start + 8usize],
            MatrixIdent::A,
            4usize,
            transpose,
        )
    }
}

/// `x` of lane `lane ^ mask` of this warp (`mask` below 32): natively `SHFL.BFLY`; emulated,
/// through `lanes[w * LANE_SCRATCH..]` between two `sync_cube` (every unit must call it).
#[cube]
pub(crate) fn shuffle_xor(
    x: f32,
    #[comptime] mask: u32,
    lanes: &mut [u32],
    #[comptime] emulate: bool,
) -> f32 {
    if comptime!(emulate) {
        let lane = UNIT_POS % 32u32;
        let base = (UNIT_POS / 32u32) as usize * LANE_SCRATCH;
        lanes[base + lane as usize] = u32::reinterpret(x);
        sync_cube();
        let other = f32::reinterpret(lanes[base + (lane ^ mask) as usize]);
        sync_cube();
        other
    } else {
        plane_shuffle_xor(x, mask)
    }
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

/// P's A operand for keys `16s..16s + 16` from the accumulators of S's n8-tiles `2s` (`lo`) and
/// `2s + 1` (`hi`), in registers: `[lo[0], lo[1], hi[0], hi[1]]` rounded to `F` pairs
/// (FlashAttention-2's `convert_layout_acc_Aregs`; natively one `F2FP` a pair). The layouts make
/// it exact: see [`p_operand_tile`].
#[cube]
pub(crate) fn p_operand<F: Float>(
    lo: &Array<Vector<f32, Const<2>>>,
    hi: &Array<Vector<f32, Const<2>>>,
) -> Array<Vector<F, Const<2>>> {
    let mut a = Array::<Vector<F, Const<2>>>::new(4usize);
    a[0] = Vector::<F, Const<2>>::cast_from(lo[0]);
    a[1] = Vector::<F, Const<2>>::cast_from(lo[1]);
    a[2] = Vector::<F, Const<2>>::cast_from(hi[0]);
    a[3] = Vector::<F, Const<2>>::cast_from(hi[1]);
    a
}
