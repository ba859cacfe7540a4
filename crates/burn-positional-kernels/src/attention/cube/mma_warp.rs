//! What the tensor-core kernels (`mma.rs`, the forward; `mma_backward.rs`, the backward) do the
//! same way at the level of one warp: an A fragment straight from device memory
//! ([`a_fragment`]), a product of A fragments in registers by B fragments from a stage in
//! shared memory ([`warp_product`]), the accumulators' zeros ([`zeros`]) and the test of a block
//! every row sees whole ([`full_block`]: FlexAttention's full blocks, which skip the masks).

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]

use cubecl::prelude::*;

use super::fragment::{self, MMA_SCRATCH, chunk_at, ldmatrix_x4, mma_pair};
use super::{CAUSAL, Scalars, WINDOW};

/// The accumulators of two n8-tiles side by side (16 x 16: pairs 0 and 1 the first tile's,
/// 2 and 3 the second's, as [`mma_pair`] takes them), zeros. The kernels keep their products as
/// lists of these: n8-tile `n` of m-tile `mt` in a product `n_pairs` pairs wide is entry
/// `mt x n_pairs + n / 2`, pair `2 (n % 2) + h` for row `g + 8 h`.
#[cube]
pub(super) fn zeros() -> Array<Vector<f32, Const<2>>> {
    let mut c = Array::<Vector<f32, Const<2>>>::new(4usize);
    #[unroll]
    for i in 0..4usize {
        c[i] = Vector::new(0.0);
    }
    c
}

/// `count` entries of [`zeros`].
#[cube]
pub(super) fn zeros_list(#[comptime] count: usize) -> Sequence<Array<Vector<f32, Const<2>>>> {
    let mut list = Sequence::<Array<Vector<f32, Const<2>>>>::new();
    #[unroll]
    for _ in 0..count {
        list.push(zeros());
    }
    list
}

/// This lane's A fragment (4 pairs) of the 16 x 16 tile at rows `row0..row0 + 16` and columns
/// `col0..col0 + 16` of a row-major tensor `d` values wide whose row `r` is `src[(base + r) *
/// d..]`: zeros at rows from `rows` and columns from `d` (the padding of a head to 16).
#[cube]
pub(super) fn a_fragment<F: Float>(
    src: &Tensor<F>,
    base: usize,
    row0: usize,
    rows: usize,
    col0: usize,
    #[comptime] d: usize,
) -> Array<Vector<F, Const<2>>> {
    let lane = UNIT_POS % 32u32;
    let mut a = Array::<Vector<F, Const<2>>>::new(4usize);
    #[unroll]
    for v2 in 0..4usize {
        let mut pair = Vector::<F, Const<2>>::empty();
        #[unroll]
        for e in 0..2usize {
            let i = (v2 * 2 + e) as u32;
            let row = row0 + fragment::a_row(lane, i) as usize;
            let col = col0 + fragment::a_col(lane, i) as usize;
            let mut x = F::new(0.0);
            if row < rows && col < d {
                x = src[(base + row) * d + col];
            }
            pair.insert(e, x);
        }
        a[v2] = pair;
    }
    a
}

/// `acc += A B` for the warp's `m_tiles` m-tiles (at most 2): `a[mt x k_slices + kk]` is the A
/// fragment of m-tile `mt` and 16-wide slice `kk` of the inner dimension, `acc[mt x n_pairs +
/// np]` the accumulators of output columns `16 np..16 np + 16`; B comes from the stage at
/// `base` (`width` values a row, swizzled by [`chunk_at`]). `rows_are_n`: the stage's rows are
/// B's columns (`Kᵀ` in `Q Kᵀ`: keys are rows of K); else its rows are the inner dimension
/// (`V` in `P V`). Every unit of the cube must call it.
///
/// Natively one `ldmatrix` x4 per (slice, column pair) (`.trans` where the rows are the inner
/// dimension) feeding `m_tiles` pairs of `mma.sync`. Emulated, one exchange per slice
/// ([`exchanges`]): the warp's A fragments of the slice go to their (row, column) in slot
/// `(call0 + kk) % 2` of the warp's `scratch` (`fragment::MMA_SCRATCH`: the caller numbers its
/// exchanges since its last barrier so that the slots alternate), one `sync_cube`, and each
/// lane sums its accumulators in f32 with B read from the stage at the element's own swizzled
/// address. A barrier is a suspend point of llvmpipe's coroutines, whose split grows faster
/// than linearly with them: one a slice rather than one a product (issue 72: with one barrier a
/// product, LLVM was still splitting the backward's kernels after 15 minutes of the first
/// test, when it was stopped).
#[cube]
pub(super) fn warp_product<F: Float>(
    a: &Sequence<Array<Vector<F, Const<2>>>>,
    stage: &[F],
    base: usize,
    acc: &mut Sequence<Array<Vector<f32, Const<2>>>>,
    scratch: &mut [f32],
    #[comptime] m_tiles: usize,
    #[comptime] k_slices: usize,
    #[comptime] n_pairs: usize,
    #[comptime] width: usize,
    #[comptime] rows_are_n: bool,
    #[comptime] call0: usize,
    #[comptime] emulate: bool,
) {
    if comptime!(emulate) {
        let lane = UNIT_POS % 32u32;
        let w = (UNIT_POS / 32u32) as usize;
        #[unroll]
        for kk in 0..k_slices {
            let at = w * MMA_SCRATCH + comptime!((call0 + kk) % 2 * (MMA_SCRATCH / 2));
            #[unroll]
            for mt in 0..m_tiles {
                #[unroll]
                for i in 0..8usize {
                    let x: F = a.index(mt * k_slices + kk)[i / 2].extract(i % 2);
                    let row = fragment::a_row(lane, i as u32) as usize;
                    let col = fragment::a_col(lane, i as u32) as usize;
                    scratch[at + mt * 256 + row * 16 + col] = f32::cast_from(x);
                }
            }
            sync_cube();
            #[unroll]
            for np in 0..n_pairs {
                #[unroll]
                for mt in 0..m_tiles {
                    #[unroll]
                    for v in 0..4usize {
                        let mut pair = acc.index(mt * n_pairs + np)[v];
                        #[unroll]
                        for e in 0..2usize {
                            let i = ((v % 2) * 2 + e) as u32;
                            let row = fragment::c_row(lane, i) as usize;
                            let col = (v / 2) * 8 + fragment::c_col(lane, i) as usize;
                            let mut sum: f32 = pair.extract(e);
                            #[unroll]
                            for k in 0..16usize {
                                let b = if comptime!(rows_are_n) {
                                    stage[base
                                        + chunk_at(np * 16 + col, kk * 2 + k / 8, width)
                                        + k % 8]
                                } else {
                                    stage[base
                                        + chunk_at(kk * 16 + k, np * 2 + col / 8, width)
                                        + col % 8]
                                };
                                sum += scratch[at + mt * 256 + row * 16 + k] * f32::cast_from(b);
                            }
                            pair.insert(e, sum);
                        }
                        acc.index_mut(mt * n_pairs + np)[v] = pair;
                    }
                }
            }
        }
    } else {
        #[unroll]
        for kk in 0..k_slices {
            #[unroll]
            for np in 0..n_pairs {
                let row = comptime!(if rows_are_n { np * 16 } else { kk * 16 });
                let chunk = comptime!(if rows_are_n { kk * 2 } else { np * 2 });
                let bf = ldmatrix_x4::<F>(
                    stage,
                    base,
                    row,
                    chunk,
                    width,
                    rows_are_n,
                    comptime!(!rows_are_n),
                    false,
                );
                #[unroll]
                for mt in 0..m_tiles {
                    mma_pair::<F>(
                        a.index(mt * k_slices + kk),
                        &bf,
                        acc.index_mut(mt * n_pairs + np),
                        scratch,
                        0usize,
                        false,
                    );
                }
            }
        }
    }
}

/// The exchanges (barriers) one emulated [`warp_product`] over `k_slices` slices takes: what a
/// caller adds to the `call0` of its next product.
pub(super) const fn exchanges(k_slices: usize) -> usize {
    k_slices
}

/// Whether every query row of `first..=last` sees every key of `j0..j0 + keys` (sequential
/// positions, no segments or padding: the caller's test): all keys exist, and the causal mask
/// and the window leave them all.
#[cube]
pub(super) fn full_block(
    p: &Scalars,
    first: usize,
    last: usize,
    j0: usize,
    #[comptime] keys: usize,
) -> bool {
    let first = p.query_offset + first as i32;
    let last = p.query_offset + last as i32;
    let k_first = p.key_offset + j0 as i32;
    let k_last = k_first + keys as i32 - 1;
    let mut full = j0 + keys <= p.seq_k as usize;
    let causal = (p.flags & CAUSAL) != 0;
    if causal {
        full = full && k_last <= first;
    }
    if (p.flags & WINDOW) != 0 {
        full = full && k_first >= last - p.before;
        if !causal {
            full = full && k_last <= first + p.after;
        }
    }
    full
}
