//! The register-blocked backward's tiles (`blocked_backward.rs`, issue 73): a cube of
//! [`UNITS`] units over [`ROWS`] rows (or keys) against blocks of [`BLOCK`] columns, unit
//! `(ty, tx) = (u / 16, u % 16)` owning rows `4 ty..4 ty + 4` and columns `4 tx..4 tx + 4`, and the
//! two products every kernel of it is made of: [`product_t`] (both operands staged transposed,
//! a dimension a step) and [`product_n`] (weights already transposed in shared memory against
//! rows staged as they are).

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]
// Only the autodiff node calls the backward.
#![cfg_attr(not(feature = "autodiff"), allow(dead_code))]

use cubecl::prelude::*;

use super::blocked::{BLOCK, UNITS};

/// Rows (or keys) a cube.
pub(super) const ROWS: usize = 32;
/// Units a row group: `UNITS / (ROWS / 4)`.
pub(super) const GROUPS: usize = UNITS / (ROWS / 4);
/// Vectors of 4 a transposed row of the cube's side: 8 and one of padding.
pub(super) const ROW_STRIDE: usize = ROWS / 4 + 1;
/// Vectors of 4 a transposed row of a block's side: 16 and one of padding.
pub(super) const COL_STRIDE: usize = BLOCK / 4 + 1;
/// Dimensions or rows of one unrolled step of the inner loops.
const STEP: usize = 4;

pub(super) type Quad = Vector<f32, Const<4>>;

/// `acc[t] += Σ_d a[a_row + 4 ty + t][d] b[b_row + c][d]` for the unit's 4 rows `t` and the
/// block's columns `c = 4 tx + e` (component `e` of `acc[t]`): `a` has `ROWS` rows from
/// `a_row` (zeros from row `a_valid` on), `b` [`BLOCK`] from `b_row` (zeros from `b_valid`), both
/// `width` wide; staged in `stage` transposed, `chunk` dimensions at a time. Every unit calls it;
/// it starts with a copy and ends with a barrier (what was written to shared memory before it is
/// published by its first barrier).
#[cube]
pub(super) fn product_t<F: Float>(
    a: &Tensor<F>,
    a_row: usize,
    a_valid: usize,
    b: &Tensor<F>,
    b_row: usize,
    b_valid: usize,
    stage: &mut [Quad],
    acc: &mut Array<Quad>,
    #[comptime] width: usize,
    #[comptime] chunk: usize,
) {
    let unit = UNIT_POS as usize;
    let units = CUBE_DIM_X as usize;
    let ty = unit / GROUPS;
    let tx = unit % GROUPS;
    let b_at = comptime!(chunk * ROW_STRIDE);
    #[unroll]
    for ci in 0..comptime!(width.div_ceil(chunk)) {
        let d0 = ci * chunk;
        // The block's side (64 rows) and the cube's (32): vectors of 4 rows at one dimension.
        let mut w = unit;
        while w < comptime!(chunk * (BLOCK / 4)) {
            let d = w % chunk;
            let r4 = (w / chunk) * 4;
            let in_width = d0 + d < width;
            let mut av = Quad::empty();
            let mut bv = Quad::empty();
            #[unroll]
            for c in 0..4usize {
                let mut x = 0.0f32;
                if r4 < ROWS && r4 + c < a_valid && in_width {
                    x = f32::cast_from(a[(a_row + r4 + c) * width + d0 + d]);
                }
                av.insert(c, x);
                let mut y = 0.0f32;
                if r4 + c < b_valid && in_width {
                    y = f32::cast_from(b[(b_row + r4 + c) * width + d0 + d]);
                }
                bv.insert(c, y);
            }
            if r4 < ROWS {
                stage[d * ROW_STRIDE + r4 / 4] = av;
            }
            stage[b_at + d * COL_STRIDE + r4 / 4] = bv;
            w += units;
        }
        sync_cube();
        let mut d = 0usize;
        while d < chunk {
            #[unroll]
            for dd in 0..STEP {
                let av = stage[(d + dd) * ROW_STRIDE + ty];
                let bv = stage[b_at + (d + dd) * COL_STRIDE + tx];
                #[unroll]
                for t in 0..4usize {
                    acc[t] += Quad::new(av.extract(t)) * bv;
                }
            }
            d += STEP;
        }
        sync_cube();
    }
}

/// `acc[t * n_out + n] += Σ_c w_s[c][4 ty + t] b[b_row + c][4 (tx + 16 n)..]` over the block's
/// [`BLOCK`] columns `c`: `w_s` holds the weights transposed (`[c][ROW_STRIDE]`, written before
/// the call), `b` has `width` columns, rows from `b_row` (zeros from `b_valid`), staged row by
/// row `b_rows` at a time. Every unit calls it; it ends with a barrier.
#[cube]
pub(super) fn product_n<F: Float>(
    w_s: &[Quad],
    b: &Tensor<F>,
    b_row: usize,
    b_valid: usize,
    stage: &mut [Quad],
    acc: &mut Array<Quad>,
    #[comptime] width: usize,
    #[comptime] b_rows: usize,
) {
    let unit = UNIT_POS as usize;
    let units = CUBE_DIM_X as usize;
    let ty = unit / GROUPS;
    let tx = unit % GROUPS;
    let row = comptime!(width.next_multiple_of(4 * GROUPS) / 4);
    let n_out = comptime!(width.div_ceil(4 * GROUPS));
    #[unroll]
    for vs in 0..comptime!(BLOCK / b_rows) {
        let mut w = unit;
        while w < comptime!(b_rows * width.next_multiple_of(4 * GROUPS) / 4) {
            let c = w / row;
            let cv = w % row;
            let r = vs * b_rows + c;
            let mut quad = Quad::empty();
            #[unroll]
            for x in 0..4usize {
                let col = cv * 4 + x;
                let mut y = 0.0f32;
                if r < b_valid && col < width {
                    y = f32::cast_from(b[(b_row + r) * width + col]);
                }
                quad.insert(x, y);
            }
            stage[w] = quad;
            w += units;
        }
        sync_cube();
        let mut c = 0usize;
        while c < b_rows {
            #[unroll]
            for cc in 0..STEP {
                let weights = w_s[(vs * b_rows + c + cc) * ROW_STRIDE + ty];
                #[unroll]
                for n in 0..n_out {
                    let values = stage[(c + cc) * row + tx + GROUPS * n];
                    #[unroll]
                    for t in 0..4usize {
                        acc[t * n_out + n] += Quad::new(weights.extract(t)) * values;
                    }
                }
            }
            c += STEP;
        }
        sync_cube();
    }
}

/// Clears `len` vectors.
#[cube]
pub(super) fn zeros(#[comptime] len: usize) -> Array<Quad> {
    let mut a = Array::<Quad>::new(len);
    #[unroll]
    for i in 0..len {
        a[i] = Quad::new(0.0);
    }
    a
}
