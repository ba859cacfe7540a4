//! How the tensor-core kernels (`mma.rs`, `mma_backward.rs`) stage their blocks (keys and
//! values, or query rows and their output gradients): each block's rows copied 16 bytes at a
//! time (`cp.async` natively) into a swizzled stage, and the padding columns cleared.

use cubecl::prelude::*;

use super::fragment::{CHUNK, WARP, chunk_at, copy_16_bytes};
use super::mma::WARPS;

/// One chunk (8 values) of row `from` of `src` to `dst[to..to + 8]`: 16-byte async copies (two
/// for 32-bit values, which only the emulated products take).
#[cube]
fn copy_chunk<F: Float>(
    src: &[F],
    from: usize,
    dst: &mut [F],
    to: usize,
    #[comptime] emulate: bool,
) {
    let size = F::size();
    let per_copy = comptime!(16 / size);
    #[unroll]
    for c in 0..comptime!(CHUNK / per_copy) {
        copy_16_bytes::<F>(src, from + c * per_copy, dst, to + c * per_copy, emulate);
    }
}

/// Rows `first..first + rows` of `src` (`d` values each, `valid` of them real) into the stage
/// `dst[at..]`, `width` values a row, swizzled ([`chunk_at`]). A row past `valid` repeats the
/// last real one (its key is masked: weight 0 times a real value), so the walk copies without
/// a branch; the columns past `d` are left as [`clear_padding`] set them. Each of the cube's
/// units takes a share of the chunks, unrolled. Widths that are not a multiple of 8 are copied
/// value by value, zeros past `d`.
#[cube]
fn stage_block<F: Float>(
    src: &Tensor<F>,
    dst: &mut [F],
    at: usize,
    first: usize,
    valid: usize,
    #[comptime] rows: usize,
    #[comptime] d: usize,
    #[comptime] width: usize,
    #[comptime] emulate: bool,
) {
    let units = comptime!(WARPS * WARP);
    let chunks = comptime!(d.div_ceil(CHUNK));
    let total = comptime!(rows * d.div_ceil(CHUNK));
    #[unroll]
    for s in 0..comptime!(total.div_ceil(units)) {
        let e = UNIT_POS as usize + s * units;
        if e < total {
            let r = e / chunks;
            let c = e % chunks;
            let row = first + min(r, valid - 1);
            let to = at + chunk_at(r, c, width);
            if comptime!(d % CHUNK == 0) {
                copy_chunk::<F>(src, row * d + c * CHUNK, dst, to, emulate);
            } else {
                #[unroll]
                for x in 0..CHUNK {
                    let col = c * CHUNK + x;
                    let mut value = F::new(0.0);
                    if col < d {
                        value = src[row * d + col];
                    }
                    dst[to + x] = value;
                }
            }
        }
    }
}

/// Rows `first..first + rows` (`valid` of them real) of two tensors side by side (keys and
/// values; query rows and their output gradients) into stage `stage` of theirs: `a`, `d_a`
/// values a row, into `a_s`, `b` into `b_s`, each padded to a multiple of 16 ([`stage_block`]).
#[cube]
pub(super) fn stage_pair<F: Float>(
    a: &Tensor<F>,
    a_s: &mut [F],
    b: &Tensor<F>,
    b_s: &mut [F],
    stage: usize,
    first: usize,
    valid: usize,
    #[comptime] rows: usize,
    #[comptime] d_a: usize,
    #[comptime] d_b: usize,
    #[comptime] emulate: bool,
) {
    let wa = comptime!(d_a.next_multiple_of(16));
    let wb = comptime!(d_b.next_multiple_of(16));
    stage_block::<F>(
        a,
        a_s,
        stage * rows * wa,
        first,
        valid,
        rows,
        d_a,
        wa,
        emulate,
    );
    stage_block::<F>(
        b,
        b_s,
        stage * rows * wb,
        first,
        valid,
        rows,
        d_b,
        wb,
        emulate,
    );
}

/// Zeros in the columns past `d` of every row of a stage (`stages x rows` rows `width` wide):
/// no copy writes them, and a product of a zero query column with a stale value could be NaN.
#[cube]
pub(super) fn clear_padding<F: Float>(
    dst: &mut [F],
    #[comptime] rows: usize,
    #[comptime] d: usize,
    #[comptime] width: usize,
) {
    let units = comptime!(WARPS * WARP);
    let first = comptime!(d.div_ceil(CHUNK));
    let chunks = comptime!(width / CHUNK - d.div_ceil(CHUNK));
    let total = comptime!(rows * (width / CHUNK - d.div_ceil(CHUNK)));
    if comptime!(chunks > 0) {
        #[unroll]
        for s in 0..comptime!(total.div_ceil(units)) {
            let e = UNIT_POS as usize + s * units;
            if e < total {
                let to = chunk_at(e / chunks, first + e % chunks, width);
                #[unroll]
                for x in 0..CHUNK {
                    dst[to + x] = F::new(0.0);
                }
            }
        }
    }
}
