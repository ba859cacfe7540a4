//! The tiles of the tensor-core backward (`backward_tensor_cores.rs`): its block products on
//! cooperative matrices (CubeCL's `cmma`: NVIDIA's WMMA on CUDA, `VK_KHR_cooperative_matrix` on
//! Vulkan), 16x16x16 tiles of f16 or bf16 with f32 accumulators, every operand in shared memory,
//! heads padded with zeros to a multiple of 16; the staging of rows and key places; where a
//! cube of query tiles and its planes sit.
//!
//! A tile product is `cmma` where the device has it for the dtype; elsewhere (f32, WGSL,
//! lavapipe) the plane's 32 units compute the same 16x16 tile in f32, 8 entries each
//! ([`tile_product`], `emulate`): the same kernel around it, which is what CI runs.
//!
//! The forward on these tiles (issue 61: 9.4 ms on an H200 where the shared kernel took 3.8,
//! every score tile through shared memory) gave way to the `mma.sync` forward (`mma.rs`, issue
//! 72), whose fragments stay in registers; the backward follows it there next.

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]

use cubecl::prelude::*;

use super::{Scalars, key_place};
use crate::attention::Sizes;

/// Units per plane: the kernel's planes are exactly this wide (NVIDIA's warp).
pub(super) const PLANE: usize = 32;
/// The side of a tile product.
pub(super) const TILE: usize = 16;
/// The values of `k` an emulated tile product takes per iteration of its loop.
pub(super) const EMULATED_STEP: usize = 4;
/// The values a unit copies per iteration of [`stage_rows`]' loop.
const COPY_STEP: usize = 4;
/// llvmpipe (lavapipe's compiler) ends every loop of a shader invocation once the iterations of
/// all its loops add up to this (Mesa's `LP_MAX_TGSI_LOOP_ITERATIONS`, "shared between every
/// loop"), silently: the kernel goes on with wrong sums and skips the rest of its loops. The
/// tensor-core kernels count their iterations on a CPU adapter (`mma::forward_iterations`,
/// `backward_tensor_cores::backward_iterations`) and
/// leave a launch that would pass it to the shared kernel.
pub(super) const LOOP_LIMIT: usize = 65_535;

/// `c[16, 16] (+)= a[16, k] b[k, 16]` in f32, by the 32 units `lane` of one plane.
///
/// `a` starts at `a_at` with `a_stride` between its rows (or, `a_cols`, between its columns);
/// `b` likewise (`b_cols`: stored by columns, as `Kᵀ` is in a row-major `K`); `c` row-major
/// from `c_at`, kept (`accumulate`) or overwritten. `k` is a multiple of 16. With `emulate`
/// each unit computes 8 entries of `c` (column `lane % 16` of rows `lane / 16 + 2 t`) in f32;
/// otherwise one cooperative matrix product per 16 of `k`, `c` loaded as the accumulator and
/// stored back. Every unit of the plane must call it (the matrices are the plane's).
///
/// Emulated, the one run-time loop walks `k` in steps of [`EMULATED_STEP`] (its body
/// unrolled): llvmpipe ends every loop of an invocation once their iterations add up to
/// [`LOOP_LIMIT`], so the iterations per key are what bounds the lengths lavapipe computes
/// right (`backward_tensor_cores::backward_iterations`).
#[cube]
pub(super) fn tile_product<F: Float, C: Float>(
    a: &[F],
    a_at: usize,
    a_stride: usize,
    #[comptime] a_cols: bool,
    b: &[F],
    b_at: usize,
    b_stride: usize,
    #[comptime] b_cols: bool,
    c: &mut [C],
    c_at: usize,
    c_stride: usize,
    #[comptime] k: usize,
    #[comptime] accumulate: bool,
    lane: usize,
    #[comptime] emulate: bool,
) {
    if comptime!(emulate) {
        let col = lane % TILE;
        let row0 = lane / TILE;
        let mut sums = Array::<C>::new(comptime!(TILE * TILE / PLANE));
        #[unroll]
        for t in 0..comptime!(TILE * TILE / PLANE) {
            let mut sum = C::new(0.0);
            if comptime!(accumulate) {
                sum = c[c_at + (row0 + 2 * t) * c_stride + col];
            }
            sums[t] = sum;
        }
        for step in 0..comptime!(k / EMULATED_STEP) {
            #[unroll]
            for u in 0..EMULATED_STEP {
                let kk = step * EMULATED_STEP + u;
                let mut bi = b_at + kk * b_stride + col;
                if comptime!(b_cols) {
                    bi = b_at + col * b_stride + kk;
                }
                let bv = C::cast_from(b[bi]);
                #[unroll]
                for t in 0..comptime!(TILE * TILE / PLANE) {
                    let r = row0 + 2 * t;
                    let mut ai = a_at + r * a_stride + kk;
                    if comptime!(a_cols) {
                        ai = a_at + kk * a_stride + r;
                    }
                    sums[t] += C::cast_from(a[ai]) * bv;
                }
            }
        }
        #[unroll]
        for t in 0..comptime!(TILE * TILE / PLANE) {
            c[c_at + (row0 + 2 * t) * c_stride + col] = sums[t];
        }
    } else {
        let a_layout = comptime!(if a_cols {
            cmma::MatrixLayout::ColMajor
        } else {
            cmma::MatrixLayout::RowMajor
        });
        let b_layout = comptime!(if b_cols {
            cmma::MatrixLayout::ColMajor
        } else {
            cmma::MatrixLayout::RowMajor
        });
        let mut acc = cmma::Matrix::<C>::from_value(
            cmma::MatrixIdent::Accumulator,
            TILE,
            TILE,
            TILE,
            cmma::MatrixLayout::Undefined,
            C::new(0.0),
        );
        if comptime!(accumulate) {
            cmma::load_with_layout(
                &mut acc,
                &c[c_at..c.len()],
                c_stride as u32,
                cmma::MatrixLayout::RowMajor,
            );
        }
        #[unroll]
        for s in 0..comptime!(k / TILE) {
            let mut a_off = a_at + s * TILE;
            if comptime!(a_cols) {
                a_off = a_at + s * TILE * a_stride;
            }
            let mut b_off = b_at + s * TILE * b_stride;
            if comptime!(b_cols) {
                b_off = b_at + s * TILE;
            }
            let am = cmma::Matrix::<F>::from_slice(
                cmma::MatrixIdent::A,
                TILE,
                TILE,
                TILE,
                a_layout,
                &a[a_off..a.len()],
                a_stride as u32,
            );
            let bm = cmma::Matrix::<F>::from_slice(
                cmma::MatrixIdent::B,
                TILE,
                TILE,
                TILE,
                b_layout,
                &b[b_off..b.len()],
                b_stride as u32,
            );
            cmma::execute(&am, &bm, &acc, &acc);
        }
        let end = c.len();
        cmma::store(
            &mut c[c_at..end],
            &acc,
            c_stride as u32,
            cmma::MatrixLayout::RowMajor,
        );
    }
}

/// Copies `rows` rows of `d` values from `src` (row `first + r` at `(first + r) * d`) into
/// `dst[at..at + rows * width]`, `width` being `d` padded to a multiple of 16: rows from `valid`
/// on and columns past `d` as zeros (their products are then 0, where a stale value could make
/// a NaN). Each of the cube's `units` units takes a share, [`COPY_STEP`] values per iteration
/// ([`LOOP_LIMIT`]).
#[cube]
pub(super) fn stage_rows<F: Float>(
    src: &Tensor<F>,
    dst: &mut [F],
    at: usize,
    first: usize,
    valid: usize,
    #[comptime] rows: usize,
    #[comptime] d: usize,
    #[comptime] units: usize,
) {
    let width = comptime!(d.next_multiple_of(TILE));
    let len = comptime!(rows * d.next_multiple_of(TILE));
    for step in 0..comptime!(len.div_ceil(units * COPY_STEP)) {
        #[unroll]
        for u in 0..COPY_STEP {
            let e = UNIT_POS_X as usize + (step * COPY_STEP + u) * units;
            if e < len {
                let r = e / width;
                let col = e % width;
                let mut x = F::new(0.0);
                if r < valid && col < d {
                    x = src[(first + r) * d + col];
                }
                dst[at + e] = x;
            }
        }
    }
}

/// Run-time iterations of [`stage_rows`] for `rows` rows of `d` values over `units` units.
pub(super) fn copy_iterations(rows: usize, d: usize, units: usize) -> usize {
    (rows * d.next_multiple_of(TILE)).div_ceil(units * COPY_STEP)
}

/// `dst[..len] = 0`, each of the cube's `units` units taking a share, unrolled.
#[cube]
pub(super) fn clear<C: Float>(dst: &mut [C], #[comptime] len: usize, #[comptime] units: usize) {
    #[unroll]
    for i in 0..comptime!(len.div_ceil(units)) {
        let e = UNIT_POS_X as usize + i * units;
        if e < len {
            dst[e] = C::new(0.0);
        }
    }
}

/// Where keys `first..first + count` of sequence `b` sit ([`key_place`]: position, whether it
/// may be seen, segment) into three shared arrays; keys from `end` on are out of range (never
/// seen). Each of the cube's `units` units takes a share, unrolled.
#[cube]
pub(super) fn stage_places<I: Int, J: Int, P: Numeric>(
    positions: &Tensor<I>,
    segments: &Tensor<J>,
    padding: &Tensor<P>,
    p: &Scalars,
    b: usize,
    first: usize,
    end: usize,
    kp_s: &mut [i32],
    seen_s: &mut [u32],
    segment_s: &mut [i32],
    #[comptime] count: usize,
    #[comptime] units: usize,
) {
    #[unroll]
    for i in 0..comptime!(count.div_ceil(units)) {
        let c = UNIT_POS_X as usize + i * units;
        if c < count {
            let j = first + c;
            let (kp, seen, segment) = key_place(positions, segments, padding, p, b, j, j < end);
            kp_s[c] = kp;
            let mut bit = 0u32;
            if seen {
                bit = 1u32;
            }
            seen_s[c] = bit;
            segment_s[c] = segment;
        }
    }
}

/// The first row of a plane's tile in its head's rows of a `[.., seq_q, ..]` tensor, and how
/// many of its 16 rows exist: plane `pw` of a cube whose tiles start at row `r0` of sequence
/// `b`, its head `first_head + pw / tiles`.
#[cube]
pub(super) fn plane_rows(
    p: &Scalars,
    b: usize,
    first_head: usize,
    r0: usize,
    pw: usize,
    tiles: usize,
) -> (usize, usize) {
    let seq_q = p.seq_q as usize;
    let start = r0 + (pw % tiles) * TILE;
    let mut valid = 0;
    if start < seq_q {
        valid = seq_q - start;
    }
    (
        (b * p.n_heads as usize + first_head + pw / tiles) * seq_q + start,
        valid,
    )
}

/// Where a cube of query tiles and its planes sit (the forward's cubes and the backward's query
/// cubes): `(CUBE_POS_X, CUBE_POS_Y, CUBE_POS_Z)` = (query tile, key/value head and run of
/// `span` of its `group` heads, sequence), plane `w` owning 16 rows from `i0` of head `head`.
/// The group and the heads per cube are run-time values: one compiled kernel per head widths,
/// stage and plane count serves every grouping.
#[derive(CubeType)]
pub(super) struct RowTile {
    pub b: usize,
    /// The cube's first row in each of its heads.
    pub r0: usize,
    pub first_head: usize,
    pub tiles: usize,
    /// The unit's plane and its place in it.
    pub w: usize,
    pub lane: usize,
    /// The plane's head and first row.
    pub head: usize,
    pub i0: usize,
    /// The first row of the cube's key/value head in `k` and `v`.
    pub kv_base: usize,
}

#[cube]
pub(super) fn row_tile(p: &Scalars, group: u32, span: u32, #[comptime] planes: usize) -> RowTile {
    let group = group as usize;
    let span = span as usize;
    let tiles = planes / span;
    let runs = group / span;
    let kv_head = CUBE_POS_Y as usize / runs;
    let run = CUBE_POS_Y as usize % runs;
    let b = CUBE_POS_Z as usize;
    let unit = UNIT_POS_X as usize;
    let w = unit / PLANE;
    let r0 = CUBE_POS_X as usize * p.rows as usize;
    let first_head = kv_head * group + run * span;
    RowTile {
        b,
        r0,
        first_head,
        tiles,
        w,
        lane: unit % PLANE,
        head: first_head + w / tiles,
        i0: r0 + (w % tiles) * TILE,
        kv_base: (b * (p.n_heads as usize / group) + kv_head) * p.seq_k as usize,
    }
}

/// Padded head widths whose `cmma` products were checked against the slow twin on a GPU (an
/// H200 through CUDA, 2026-11-28, f16 and bf16): 32 and 64 across every boundary of the plan,
/// 128 at 300 tokens. Widths 48 (a head of 40) and 96 gave wrong numbers there, from one key
/// on; the cause is not found yet. `cmma` launches take the shared kernel for any other width.
const CMMA_CHECKED_WIDTHS: [usize; 3] = [32, 64, 128];

/// Whether the `cmma` products may run heads of these widths ([`CMMA_CHECKED_WIDTHS`]); the
/// emulated products run every width.
pub(super) fn width_checked(sizes: &Sizes, emulate: bool) -> bool {
    emulate
        || [sizes.d_head, sizes.d_v]
            .iter()
            .all(|d| CMMA_CHECKED_WIDTHS.contains(&d.next_multiple_of(TILE)))
}

/// Whether a launch of `iterations` loop iterations an invocation would be cut short on this
/// device: a CPU adapter (lavapipe's llvmpipe) running the emulated products.
pub(super) fn cut_short(iterations: usize, emulate: bool, cpu_adapter: bool) -> bool {
    emulate && cpu_adapter && iterations >= LOOP_LIMIT
}
