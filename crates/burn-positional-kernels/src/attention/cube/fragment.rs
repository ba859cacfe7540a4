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

// The forward kernel that reads these fragments is the next part of issue 72; until it lands
// only the tests use them.
#![cfg_attr(not(test), allow(dead_code))]

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

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

/// Slots a lane writes in [`layout_table`]: A's, B's, then the accumulator's elements.
#[cfg(test)]
const SLOTS: usize = A_ELEMS + B_ELEMS + C_ELEMS;

/// Each lane of one warp writes the (row, column) of every element it holds, A then B then C:
/// `out[(lane * SLOTS + slot) * 2 + {0, 1}]`.
#[cfg(test)]
#[cube(launch)]
fn layout_table(out: &mut Tensor<u32>) {
    let lane = UNIT_POS;
    let base = (lane as usize) * SLOTS * 2;
    #[unroll]
    for i in 0..A_ELEMS {
        out[base + i * 2] = a_row(lane, i as u32);
        out[base + i * 2 + 1] = a_col(lane, i as u32);
    }
    #[unroll]
    for i in 0..B_ELEMS {
        let at = base + (A_ELEMS + i) * 2;
        out[at] = b_row(lane, i as u32);
        out[at + 1] = b_col(lane, i as u32);
    }
    #[unroll]
    for i in 0..C_ELEMS {
        let at = base + (A_ELEMS + B_ELEMS + i) * 2;
        out[at] = c_row(lane, i as u32);
        out[at + 1] = c_col(lane, i as u32);
    }
}

/// Each warp `w` of the cube computes `out_w = c_w + a_w b_w` for its own tiles (`a` holds the
/// warps' 16 x 16 tiles row-major one after the other, `b` and `c` their 16 x 8 ones): each lane
/// loads its fragments through the layout functions, calls [`mma`] (emulated, or natively: the
/// CUDA compile check's probe of the native path), and stores its accumulators through them.
#[cfg(any(test, feature = "cuda-check"))]
#[cube(launch, create_dummy_kernel)]
fn mma_tiles<F: Float>(
    a: &Tensor<F>,
    b: &Tensor<F>,
    c: &Tensor<f32>,
    out: &mut Tensor<f32>,
    #[comptime] warps: usize,
    #[comptime] emulate: bool,
) {
    let lane = UNIT_POS % 32u32;
    let warp = (UNIT_POS / 32u32) as usize;
    let mut scratch = Shared::<[f32]>::new_slice(comptime!(warps * MMA_SCRATCH));
    let mut ra = Array::<Vector<F, Const<2>>>::new(comptime!(A_ELEMS / PAIR));
    let mut rb = Array::<Vector<F, Const<2>>>::new(comptime!(B_ELEMS / PAIR));
    let mut rc = Array::<Vector<f32, Const<2>>>::new(comptime!(C_ELEMS / PAIR));
    #[unroll]
    for v in 0..A_ELEMS / PAIR {
        let mut pair = Vector::empty();
        #[unroll]
        for e in 0..PAIR {
            let i = (v * PAIR + e) as u32;
            let at = (a_row(lane, i) * 16u32 + a_col(lane, i)) as usize;
            pair.insert(e, a[warp * 256usize + at]);
        }
        ra[v] = pair;
    }
    #[unroll]
    for v in 0..B_ELEMS / PAIR {
        let mut pair = Vector::empty();
        #[unroll]
        for e in 0..PAIR {
            let i = (v * PAIR + e) as u32;
            let at = (b_row(lane, i) * 8u32 + b_col(lane, i)) as usize;
            pair.insert(e, b[warp * 128usize + at]);
        }
        rb[v] = pair;
    }
    #[unroll]
    for v in 0..C_ELEMS / PAIR {
        let mut pair = Vector::empty();
        #[unroll]
        for e in 0..PAIR {
            let i = (v * PAIR + e) as u32;
            let at = (c_row(lane, i) * 8u32 + c_col(lane, i)) as usize;
            pair.insert(e, c[warp * 128usize + at]);
        }
        rc[v] = pair;
    }
    mma::<F>(&ra, &rb, &mut rc, &mut scratch, emulate);
    #[unroll]
    for v in 0..C_ELEMS / PAIR {
        #[unroll]
        for e in 0..PAIR {
            let i = (v * PAIR + e) as u32;
            let at = (c_row(lane, i) * 8u32 + c_col(lane, i)) as usize;
            out[warp * 128usize + at] = rc[v].extract(e);
        }
    }
}

/// Each warp stages the 16 x 16 tile `tile` (row-major) in shared memory and loads it with
/// [`ldmatrix_x4`], plain and transposed, each lane naming the rows of the matrices as the
/// kernels will (matrix `i` at rows `8 (i % 2)`, columns `8 (i / 2)`); lane `l` writes its 8 plain
/// values, then its 8 transposed ones, at `out[(w * 32 + l) * 16..]`. Then the quad's largest
/// of `x = lane` by [`shuffle_xor`] with masks 1 and 2, at `quad[w * 32 + l]`.
#[cfg(any(test, feature = "cuda-check"))]
#[cube(launch, create_dummy_kernel)]
fn ldmatrix_tiles<F: Float>(
    tile: &Tensor<F>,
    out: &mut Tensor<F>,
    quad: &mut Tensor<f32>,
    #[comptime] warps: usize,
    #[comptime] emulate: bool,
) {
    let lane = (UNIT_POS % 32u32) as usize;
    let warp = (UNIT_POS / 32u32) as usize;
    let mut stage = Shared::<[F]>::new_aligned_slice(comptime!(warps * 256), 16usize);
    let mut lanes = Shared::<[u32]>::new_slice(comptime!(warps * LANE_SCRATCH));
    #[unroll]
    for j in 0..8usize {
        stage[warp * 256usize + lane * 8usize + j] = tile[lane * 8usize + j];
    }
    sync_cube();
    let i = lane / 8usize;
    let row = 8usize * (i % 2usize) + lane % 8usize;
    let start = warp * 256usize + row * 16usize + 8usize * (i / 2usize);
    let plain = ldmatrix_x4::<F>(&stage, start, &mut lanes, false, emulate);
    let trans = ldmatrix_x4::<F>(&stage, start, &mut lanes, true, emulate);
    let at = (warp * 32usize + lane) * 16usize;
    #[unroll]
    for v in 0..4usize {
        #[unroll]
        for e in 0..2usize {
            out[at + v * 2usize + e] = plain[v].extract(e);
            out[at + 8usize + v * 2usize + e] = trans[v].extract(e);
        }
    }
    let x = lane as f32;
    let m1 = f32::max(x, shuffle_xor(x, 1u32, &mut lanes, emulate));
    let m2 = f32::max(m1, shuffle_xor(m1, 2u32, &mut lanes, emulate));
    quad[warp * 32usize + lane] = m2;
}

/// Two stages of a double-buffered copy, as the forward will run them: each of the cube's units
/// copies 16 bytes of `src`'s first half into stage 0 and commits, then of its second half into
/// stage 1 and commits; waits for the first group (one left in flight) and writes stage 0 out
/// reversed, waits for the second and writes stage 1 out reversed (`out[i]` holds
/// `src[half - 1 - i]` of its half: every unit reads what others copied).
#[cfg(any(test, feature = "cuda-check"))]
#[cube(launch, create_dummy_kernel)]
fn staged_copy<F: Float>(src: &Tensor<F>, out: &mut Tensor<F>, #[comptime] emulate: bool) {
    let size = F::size();
    let chunk = comptime!(16 / size);
    let half = chunk * CUBE_DIM as usize;
    let mut stage = Shared::<[F]>::new_aligned_slice(comptime!(2 * 64 * chunk), 16usize);
    let at = UNIT_POS as usize * chunk;
    copy_16_bytes::<F>(src, at, &mut stage, at, emulate);
    commit_group(emulate);
    copy_16_bytes::<F>(src, half + at, &mut stage, half + at, emulate);
    commit_group(emulate);
    wait_group(1u32, emulate);
    #[unroll]
    for i in 0..chunk {
        out[at + i] = stage[half - 1 - (at + i)];
    }
    wait_group(0u32, emulate);
    #[unroll]
    for i in 0..chunk {
        out[half + at + i] = stage[half + half - 1 - (at + i)];
    }
}

/// One warp: each lane loads its accumulators of the two n8-tiles of the 16 x 16 `s` (columns
/// 0..8 and 8..16) through the accumulator layout, turns them into P's A operand
/// ([`p_operand`]) and stores that through the A layout into `out`: `out` is `s` again.
#[cfg(test)]
#[cube(launch)]
fn s_to_p<F: Float>(s: &Tensor<f32>, out: &mut Tensor<F>) {
    let lane = UNIT_POS % 32u32;
    let mut lo = Array::<Vector<f32, Const<2>>>::new(2usize);
    let mut hi = Array::<Vector<f32, Const<2>>>::new(2usize);
    #[unroll]
    for v in 0..2usize {
        let mut l = Vector::empty();
        let mut h = Vector::empty();
        #[unroll]
        for e in 0..2usize {
            let i = (v * 2usize + e) as u32;
            let at = (c_row(lane, i) * 16u32 + c_col(lane, i)) as usize;
            l.insert(e, s[at]);
            h.insert(e, s[at + 8usize]);
        }
        lo[v] = l;
        hi[v] = h;
    }
    let a = p_operand::<F>(&lo, &hi);
    #[unroll]
    for v in 0..4usize {
        #[unroll]
        for e in 0..2usize {
            let i = (v * 2usize + e) as u32;
            out[(a_row(lane, i) * 16u32 + a_col(lane, i)) as usize] = a[v].extract(e);
        }
    }
}

/// `out[i] = 2^x[i]` by [`exp2`], a unit per value (`n` of them).
#[cfg(any(test, feature = "cuda-check"))]
#[cube(launch, create_dummy_kernel)]
fn exp2_values(x: &Tensor<f32>, out: &mut Tensor<f32>, n: u32, #[comptime] emulate: bool) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        out[i] = exp2(x[i], emulate);
    }
}

/// The native path for the CUDA compile check: the probe kernel with one `mma.sync` a warp, four
/// warps, in f16 and bf16 (`.ci/checks` fails a tensor-core case whose SASS has no `HMMA`).
#[cfg(feature = "cuda-check")]
pub(crate) fn cuda_cases(target: &crate::cuda_check::Target) -> Vec<crate::cuda_check::Case> {
    use crate::cuda_check::{Case, tensor};
    let mut cases = Vec::new();
    macro_rules! probe {
        ($f:ty, $name:expr) => {
            cases.push(Case::new(
                "attention fragment: mma.sync probe",
                format!("{} m16n8k16, 4 warps", $name),
                true,
                mma_tiles::create_dummy_kernel::<$f>(
                    target.properties.clone(),
                    target.target.clone(),
                    CubeCount::Static(1, 1, 1),
                    CubeDim::new_1d((4 * WARP) as u32),
                    tensor(1),
                    tensor(1),
                    tensor(1),
                    tensor(1),
                    4,
                    false,
                ),
            ))
        };
    }
    probe!(burn::tensor::f16, "F16");
    probe!(burn::tensor::bf16, "BF16");
    cases.push(Case::new(
        "attention fragment: ldmatrix and shuffle probe",
        "F16 x4 and x4.trans, quad max, 2 warps".into(),
        false,
        ldmatrix_tiles::create_dummy_kernel::<burn::tensor::f16>(
            target.properties.clone(),
            target.target.clone(),
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d((2 * WARP) as u32),
            tensor(1),
            tensor(1),
            tensor(1),
            2,
            false,
        ),
    ));
    cases.push(Case::new(
        "attention fragment: async copy probe",
        "F16 two stages, 64 units".into(),
        false,
        staged_copy::create_dummy_kernel::<burn::tensor::f16>(
            target.properties.clone(),
            target.target.clone(),
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(64),
            tensor(1),
            tensor(1),
            false,
        ),
    ));
    cases.push(Case::new(
        "attention fragment: exp2 probe",
        "F32 ex2.approx".into(),
        false,
        exp2_values::create_dummy_kernel(
            target.properties.clone(),
            target.target.clone(),
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(128),
            tensor(1),
            tensor(1),
            1,
            false,
        ),
    ));
    cases
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use burn::tensor::{Device, DeviceKind, f16};
    use cubecl::zspace::{Shape, Strides};

    use super::*;

    /// PTX ISA's table for m16n8k16 with 16-bit inputs, written out independently of cubecl.
    fn ptx(lane: usize, slot: usize) -> (usize, usize) {
        let (g, t) = (lane / 4, lane % 4);
        if slot < A_ELEMS {
            let i = slot;
            (g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * ((i >> 2) & 1))
        } else if slot < A_ELEMS + B_ELEMS {
            let i = slot - A_ELEMS;
            (2 * t + (i & 1) + 8 * (i >> 1), g)
        } else {
            let i = slot - A_ELEMS - B_ELEMS;
            (g + 8 * (i >> 1), 2 * t + (i & 1))
        }
    }

    /// The layouts as a wgpu kernel computes them (lavapipe in CI): PTX's table, each tile
    /// covered once by the warp, and the accumulators of two n8-tiles equal to the A operand.
    #[test]
    fn fragment_layouts_are_ptxs_and_s_is_ps_a_operand() {
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner() else {
            panic!("the wgpu device is a cubecl device");
        };
        let client = cube.client();
        let len = WARP * SLOTS * 2;
        let out = client.create_from_slice(u32::as_bytes(&vec![u32::MAX; len]));
        // SAFETY: one cube of 32 units; unit `lane` writes `out[lane * SLOTS * 2..][..SLOTS * 2]`,
        // inside the `WARP * SLOTS * 2` values.
        unsafe {
            layout_table::launch(
                &client,
                CubeCount::Static(1, 1, 1),
                CubeDim::new_1d(WARP as u32),
                TensorArg::from_raw_parts(out.clone(), [1].into(), [len].into()),
            );
        }
        let bytes = client.read_one_unchecked(out);
        let table = u32::from_bytes(&bytes);
        let at = |lane: usize, slot: usize| {
            let k = (lane * SLOTS + slot) * 2;
            (table[k] as usize, table[k + 1] as usize)
        };
        let (mut a, mut b, mut c) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for lane in 0..WARP {
            for slot in 0..SLOTS {
                assert_eq!(at(lane, slot), ptx(lane, slot), "lane {lane}, slot {slot}");
                let cell = at(lane, slot);
                let fresh = match slot {
                    s if s < A_ELEMS => a.insert(cell),
                    s if s < A_ELEMS + B_ELEMS => b.insert(cell),
                    _ => c.insert(cell),
                };
                assert!(fresh, "lane {lane}, slot {slot}: {cell:?} held twice");
            }
            // P's A operand for keys 16s..16s + 16 from S's tiles 2s and 2s + 1: same row, the
            // second tile's columns 8 further.
            for i in 0..A_ELEMS {
                let (tile, acc) = p_operand_tile(i);
                let (row, col) = at(lane, A_ELEMS + B_ELEMS + acc);
                assert_eq!(
                    at(lane, i),
                    (row, col + 8 * tile),
                    "lane {lane}, A element {i}"
                );
            }
        }
        assert_eq!((a.len(), b.len(), c.len()), (16 * 16, 16 * 8, 16 * 8));
    }

    /// The emulated `ldmatrix` x4 (plain and transposed) on a coordinate-coded tile, two warps
    /// a cube: each lane's pairs are the tile's A fragment, and transposed the B fragments of
    /// its two 16 x 8 halves, as the layout functions place them; the quad max by the emulated
    /// shuffle is each quad's last lane.
    #[test]
    fn emulated_ldmatrix_gives_the_fragments_and_shuffle_the_quad() {
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner() else {
            panic!("the wgpu device is a cubecl device");
        };
        let client = cube.client();
        let warps = 2;
        // tile[r][c] = 16 r + c: every value names its cell (exact in f16).
        let tile: Vec<f16> = (0..256).map(|x| f16::from_f32(x as f32)).collect();
        let tile_h = client.create_from_slice(f16::as_bytes(&tile));
        let out = client.create_from_slice(f16::as_bytes(&vec![f16::NAN; warps * 32 * 16]));
        let quad = client.create_from_slice(f32::as_bytes(&vec![f32::NAN; warps * 32]));
        // SAFETY: contiguous buffers of the lengths given.
        let arg = |handle: cubecl::server::Handle, len: usize| unsafe {
            TensorArg::from_raw_parts(handle, [1].into(), [len].into())
        };
        ldmatrix_tiles::launch::<f16>(
            &client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d((warps * WARP) as u32),
            arg(tile_h, 256),
            arg(out.clone(), warps * 32 * 16),
            arg(quad.clone(), warps * 32),
            warps,
            true,
        );
        let got: Vec<usize> = f16::from_bytes(&client.read_one_unchecked(out))
            .iter()
            .map(|v| v.to_f32() as usize)
            .collect();
        let quads = f32::from_bytes(&client.read_one_unchecked(quad)).to_vec();
        for w in 0..warps {
            for lane in 0..WARP {
                let at = (w * 32 + lane) * 16;
                for i in 0..A_ELEMS {
                    let (row, col) = ptx(lane, i);
                    assert_eq!(got[at + i], 16 * row + col, "warp {w}, lane {lane}, A {i}");
                    // Transposed: pair v of half v / 2 holds B's elements 2 (v % 2), + 1.
                    let (half, b) = (i / 4, i % 4);
                    let (k, n) = ptx(lane, A_ELEMS + b);
                    assert_eq!(
                        got[at + 8 + i],
                        16 * k + 8 * half + n,
                        "warp {w}, lane {lane}, transposed {i}"
                    );
                }
                assert_eq!(
                    quads[w * 32 + lane],
                    (lane | 3) as f32,
                    "warp {w}, lane {lane}"
                );
            }
        }
    }

    /// The emulated `exp2` on the softmax's range (shifted scores, `x <= 0`, and a little above)
    /// against 2^x in f64: within 4 ulp of f32.
    #[test]
    fn emulated_exp2_is_two_to_the_x() {
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner() else {
            panic!("the wgpu device is a cubecl device");
        };
        let client = cube.client();
        let xs: Vec<f32> = (0..256).map(|i| -60.0 + i as f32 * 0.25 + 0.013).collect();
        let n = xs.len();
        let x_h = client.create_from_slice(f32::as_bytes(&xs));
        let out = client.create_from_slice(f32::as_bytes(&vec![f32::NAN; n]));
        // SAFETY: contiguous buffers of `n` values.
        let arg = |handle: cubecl::server::Handle| unsafe {
            TensorArg::from_raw_parts(handle, [1].into(), [n].into())
        };
        exp2_values::launch(
            &client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(n as u32),
            arg(x_h),
            arg(out.clone()),
            n as u32,
            true,
        );
        let got = f32::from_bytes(&client.read_one_unchecked(out)).to_vec();
        for (x, y) in xs.iter().zip(got) {
            let want = 2f64.powf(*x as f64);
            let ulp = (want as f32).abs() * f32::EPSILON;
            assert!(
                ((y as f64) - want).abs() <= 4.0 * ulp as f64,
                "2^{x}: {y}, want {want}"
            );
        }
    }

    /// S's accumulators of two n8-tiles, converted in registers, are P's A operand for the 16
    /// keys: the tile comes back cell for cell (small integers, exact in f16).
    #[test]
    fn s_accumulators_convert_to_ps_a_operand() {
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner() else {
            panic!("the wgpu device is a cubecl device");
        };
        let client = cube.client();
        let s: Vec<f32> = (0..256).map(|x| x as f32 - 100.0).collect();
        let s_h = client.create_from_slice(f32::as_bytes(&s));
        let out = client.create_from_slice(f16::as_bytes(&vec![f16::NAN; 256]));
        // SAFETY: contiguous buffers of 256 values.
        let (s_arg, out_arg) = unsafe {
            (
                TensorArg::from_raw_parts(s_h, [1].into(), [256].into()),
                TensorArg::from_raw_parts(out.clone(), [1].into(), [256].into()),
            )
        };
        s_to_p::launch::<f16>(
            &client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(WARP as u32),
            s_arg,
            out_arg,
        );
        let got: Vec<f32> = f16::from_bytes(&client.read_one_unchecked(out))
            .iter()
            .map(|v| v.to_f32())
            .collect();
        assert_eq!(got, s);
    }

    /// The emulated double-buffered copy: both stages land, and each unit reads what the others
    /// copied.
    #[test]
    fn emulated_async_copy_stages_both_halves() {
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner() else {
            panic!("the wgpu device is a cubecl device");
        };
        let client = cube.client();
        let (units, chunk) = (64, 8);
        let half = units * chunk;
        let src: Vec<f16> = (0..2 * half).map(|x| f16::from_f32(x as f32)).collect();
        let src_h = client.create_from_slice(f16::as_bytes(&src));
        let out = client.create_from_slice(f16::as_bytes(&vec![f16::NAN; 2 * half]));
        // SAFETY: contiguous buffers of `2 half` values.
        let arg = |handle: cubecl::server::Handle| unsafe {
            TensorArg::from_raw_parts(handle, [1].into(), [2 * half].into())
        };
        staged_copy::launch::<f16>(
            &client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(units as u32),
            arg(src_h),
            arg(out.clone()),
            true,
        );
        let got: Vec<f32> = f16::from_bytes(&client.read_one_unchecked(out))
            .iter()
            .map(|v| v.to_f32())
            .collect();
        for i in 0..half {
            assert_eq!(got[i], (half - 1 - i) as f32, "stage 0, value {i}");
            assert_eq!(
                got[half + i],
                (2 * half - 1 - i) as f32,
                "stage 1, value {i}"
            );
        }
    }

    /// The emulated product on coordinate-coded tiles (small integers, exact in f16 and in f32
    /// sums): two warps in one cube, each its own tiles, against the product computed here. A
    /// misplaced element changes a sum by a distinct amount, so the failing entry names it.
    #[test]
    fn emulated_mma_is_the_tile_product() {
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner() else {
            panic!("the wgpu device is a cubecl device");
        };
        let client = cube.client();
        let warps = 2;
        let a: Vec<f32> = (0..warps * 256)
            .map(|x| ((x / 16) * 2 + x % 16) as f32 % 17.0 - 8.0)
            .collect();
        let b: Vec<f32> = (0..warps * 128)
            .map(|x| ((x / 8) * 3 + x % 8) as f32 % 13.0 - 6.0)
            .collect();
        let c: Vec<f32> = (0..warps * 128).map(|x| (x % 7) as f32 * 100.0).collect();
        let halves = |v: &[f32]| -> Vec<f16> { v.iter().map(|&x| f16::from_f32(x)).collect() };
        let (ha, hb) = (halves(&a), halves(&b));
        let a_h = client.create_from_slice(f16::as_bytes(&ha));
        let b_h = client.create_from_slice(f16::as_bytes(&hb));
        let c_h = client.create_from_slice(f32::as_bytes(&c));
        let out = client.create_from_slice(f32::as_bytes(&vec![f32::NAN; warps * 128]));
        let flat = |len: usize| -> (Strides, Shape) { ([1].into(), [len].into()) };
        let arg = |handle: cubecl::server::Handle, len: usize| {
            let (strides, shape) = flat(len);
            // SAFETY: a contiguous buffer of `len` values.
            unsafe { TensorArg::from_raw_parts(handle, strides, shape) }
        };
        // One cube of `warps` warps; warp `w` reads `a[256 w..][..256]`, `b` and `c` at
        // `[128 w..][..128]` and writes `out` there, every index from the layout functions,
        // whose values stay inside a tile (the test above).
        mma_tiles::launch::<f16>(
            &client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d((warps * WARP) as u32),
            arg(a_h, warps * 256),
            arg(b_h, warps * 128),
            arg(c_h, warps * 128),
            arg(out.clone(), warps * 128),
            warps,
            true,
        );
        let got = f32::from_bytes(&client.read_one_unchecked(out)).to_vec();
        for w in 0..warps {
            for r in 0..16 {
                for n in 0..8 {
                    let want = c[w * 128 + r * 8 + n]
                        + (0..16)
                            .map(|k| a[w * 256 + r * 16 + k] * b[w * 128 + k * 8 + n])
                            .sum::<f32>();
                    assert_eq!(
                        got[w * 128 + r * 8 + n],
                        want,
                        "warp {w}, row {r}, column {n}"
                    );
                }
            }
        }
    }
}
