//! Flash-decoding for the shared forward: where the grid of tiles would leave a GPU idle (a
//! decoding step is one query row over thousands of keys: `n_kv_heads x batch` cubes), each
//! tile's keys are split into runs walked by cubes of their own, each writing its rows
//! normalized with their log-sum-exp, and one small kernel combines them. How many runs
//! ([`key_splits`]) and the combine ([`combine_splits`]).
//!
//! The combine on NVIDIA GPUs (NVRTC for `sm_90` and `sm_80`, `docs/gpu.md`): cubes of 256
//! units, 32 registers, 100 % theoretical occupancy.

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]

use burn::backend::{TensorMetadata, cubecl::dtype_to_storage_type};
use burn::tensor::DType;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

/// Cubes a launch aims for where the device does not say how many multiprocessors it has
/// (wgpu does not): two per multiprocessor of a 132-multiprocessor H100 or H200.
const TARGET_CUBES: usize = 256;
/// The fewest keys a split of a tile walks: below this the combine costs more than it saves.
pub(super) const MIN_KEYS_PER_SPLIT: usize = 256;
/// The most splits of one tile's keys.
pub(super) const MAX_SPLITS: usize = 32;

/// Into how many runs the shared forward splits each tile's keys (flash-decoding): enough
/// cubes for the device (`query_tiles x n_kv_heads x batch` times the splits reaching about two
/// per multiprocessor), each split at least [`MIN_KEYS_PER_SPLIT`] keys. One where the grid is
/// large already (a long prefill, a big batch), many for a decoding step (one query row over
/// thousands of keys: `n_kv_heads x batch` cubes otherwise). A test may force a count.
pub(super) fn key_splits(
    sizes: &crate::attention::Sizes,
    query_tiles: usize,
    forced: Option<usize>,
    multiprocessors: Option<u32>,
) -> usize {
    if let Some(forced) = forced {
        return forced.clamp(1, sizes.seq_k.max(1));
    }
    let target = multiprocessors.map_or(TARGET_CUBES, |sm| 2 * sm as usize);
    let grid = query_tiles * sizes.n_kv_heads * sizes.batch;
    target
        .div_ceil(grid.max(1))
        .min(sizes.seq_k / MIN_KEYS_PER_SPLIT)
        .clamp(1, MAX_SPLITS)
}

/// Whether `Auto` runs a call the tensor-core forward would take on the shared forward with its
/// keys split instead (flash-decoding): where the tensor-core kernel's grid (its tiles, which
/// have no split keys) has fewer cubes than the device has multiprocessors and the shared
/// forward would split the keys ([`key_splits`] over its plan's query tiles; `forced` as there).
/// A decoding step is that: one query row over a long cache, `n_kv_heads x batch` cubes.
pub(super) fn splits_for_auto(
    sizes: &crate::attention::Sizes,
    group: usize,
    elem_bytes: usize,
    hardware: &cubecl::ir::HardwareProperties,
    forced: Option<usize>,
) -> bool {
    let sms = hardware
        .num_streaming_multiprocessors
        .map_or(TARGET_CUBES / 2, |sm| sm as usize);
    let small = super::mma::plan(sizes, group, elem_bytes, hardware, false).is_some_and(|mma| {
        let cubes =
            sizes.seq_q.div_ceil(mma.rows()) * sizes.n_kv_heads * (group / mma.span) * sizes.batch;
        cubes < sms
    });
    small
        && super::shared::plan(sizes, group, elem_bytes, hardware).is_some_and(|plan| {
            let tiles = sizes.seq_q.div_ceil(plan.rows);
            key_splits(sizes, tiles, forced, hardware.num_streaming_multiprocessors) > 1
        })
}

/// Unit per output element `[row, d]` of the final `[rows, d_v]` output: the splits' rows
/// weighted by `exp(lse_s - lse)`, `lse = log Σ exp(lse_s)` over the splits (in f32), written
/// in `F`; the unit of column 0 writes the row's log-sum-exp. A split that saw no key has the
/// dtype's lowest log-sum-exp and zeros: weight 0, or a row of zeros where no split saw a key.
#[cube(launch_unchecked, create_dummy_kernel)]
pub(super) fn combine_splits_kernel<F: Float, C: Float>(
    partial: &Tensor<F>,
    partial_lse: &Tensor<F>,
    output: &mut Tensor<F>,
    lse: &mut Tensor<F>,
    rows: u32,
    d_v: u32,
    splits: u32,
    lowest: f32,
    #[define(F, C)] _dtypes: [ElemType; 2],
) {
    let rows = rows as usize;
    let d_v = d_v as usize;
    if ABSOLUTE_POS >= rows * d_v {
        terminate!();
    }
    let row = ABSOLUTE_POS / d_v;
    let d = ABSOLUTE_POS % d_v;
    let splits = splits as usize;
    let mut m = C::cast_from(lowest);
    for s in 0..splits {
        m = max(m, C::cast_from(partial_lse[s * rows + row]));
    }
    let mut l = C::new(0.0);
    let mut acc = C::new(0.0);
    for s in 0..splits {
        let w = C::exp(C::cast_from(partial_lse[s * rows + row]) - m);
        l += w;
        acc += w * C::cast_from(partial[(s * rows + row) * d_v + d]);
    }
    output[ABSOLUTE_POS] = F::cast_from(acc / l);
    if d == 0 {
        lse[row] = F::cast_from(m + C::ln(l));
    }
}

/// Launches [`combine_splits_kernel`] over the `[batch, n_heads, seq_q, d_v]` output.
pub(super) fn combine_splits(
    partial: &CubeTensor,
    partial_lse: &CubeTensor,
    output: &CubeTensor,
    lse: &CubeTensor,
    splits: usize,
    d_v: usize,
    lowest: f32,
) {
    let client = output.client.clone();
    let elements = output.shape().num_elements();
    let rows = elements / d_v;
    let cube_dim = CubeDim::new(&client, elements);
    let cube_count = cubecl::calculate_cube_count_elemwise(&client, elements, cube_dim);
    let u32_of = |v: usize, what: &str| {
        u32::try_from(v).unwrap_or_else(|_| panic!("tiled_attention: {what} = {v} exceeds u32"))
    };
    u32_of(elements * splits, "the split keys' partial outputs");
    // SAFETY: units stop at the output's elements; `partial` is `[splits * rows, d_v]` and
    // `partial_lse` `[splits * rows]` (allocated so by `launch`, written by the kernel for every
    // row of every split), the output `[rows, d_v]` and `lse` `[rows]`; all contiguous.
    unsafe {
        combine_splits_kernel::launch_unchecked(
            &client,
            cube_count,
            cube_dim,
            partial.clone().into_tensor_arg(),
            partial_lse.clone().into_tensor_arg(),
            output.clone().into_tensor_arg(),
            lse.clone().into_tensor_arg(),
            u32_of(rows, "the output's rows"),
            u32_of(d_v, "d_v"),
            u32_of(splits, "the key splits"),
            lowest,
            [
                dtype_to_storage_type(output.dtype),
                dtype_to_storage_type(DType::F32),
            ],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::Sizes;

    fn sizes(batch: usize, n_kv_heads: usize, seq_q: usize, seq_k: usize) -> Sizes {
        Sizes {
            batch,
            n_heads: n_kv_heads,
            n_kv_heads,
            seq_q,
            seq_k,
            d_head: 32,
            d_v: 32,
        }
    }

    /// A decoding step (one query row over 4096 keys, 12 heads: 12 cubes) splits its keys 16
    /// ways (256 keys each, the fewest a split walks); a long prefill fills the device alone.
    #[test]
    fn splits_follow_the_grid() {
        assert_eq!(key_splits(&sizes(1, 12, 1, 4096), 1, None, None), 16);
        assert_eq!(key_splits(&sizes(8, 12, 1, 4096), 1, None, None), 3);
        // 2048 tokens, 8 heads, tiles of 256 rows: 64 cubes, each tile's keys split 4 ways.
        assert_eq!(key_splits(&sizes(1, 8, 2048, 2048), 8, None, None), 4);
        assert_eq!(key_splits(&sizes(1, 8, 8192, 8192), 32, None, None), 1);
        // A device that says how many multiprocessors it has: two cubes each.
        assert_eq!(key_splits(&sizes(1, 8, 2048, 2048), 8, None, Some(132)), 5);
        // Short key runs are never split; a forced count is kept within the keys.
        assert_eq!(key_splits(&sizes(1, 1, 1, 300), 1, None, None), 1);
        assert_eq!(key_splits(&sizes(1, 1, 1, 2), 1, Some(3), None), 2);
    }
}
