//! The one relative distance of the crate: key position minus query position, and the bias each
//! compact form gives it. ALiBi's and T5's spelled-out biases and the tiled attention's tiles are
//! all built here, so they cannot disagree. (The kernels crate's own autodiff op works on backend
//! primitives and has its twin, `relative` in `burn-positional-kernels/src/attention/tile.rs`; the
//! tiled-versus-spelled-out tests hold the two together.)
//!
//! ```text
//! rel[r, j]  = j - (first_query + r)                       key j at position j
//! ALiBi      = -m_h |rel|                                  one slope per head
//! by distance = table[h, clamp(rel, -reach, reach) + reach] T5's bias per clamped distance
//! ```

use burn::tensor::{DType, Device, Int, Tensor};

use crate::attention::CompactBias;

/// `key - query` for queries at `first_query..first_query + rows` and keys at `0..keys`.
///
/// # Shapes
///
/// - output: `[rows, keys]`
pub(crate) fn relative(
    first_query: usize,
    rows: usize,
    keys: usize,
    device: &Device,
) -> Tensor<2, Int> {
    let first = first_query as i64;
    let key_positions = Tensor::<1, Int>::arange(0..keys as i64, device).reshape([1, keys]);
    let query_positions =
        Tensor::<1, Int>::arange(first..first + rows as i64, device).reshape([rows, 1]);
    key_positions - query_positions
}

/// The column of a `[n_heads, 2 reach + 1]` table that each distance reads:
/// `clamp(rel, -reach, reach) + reach`, flattened to `[rows * keys]`.
pub(crate) fn distance_index(rel: Tensor<2, Int>, reach: usize) -> Tensor<1, Int> {
    let [rows, keys] = rel.dims();
    let reach = reach as i64;
    rel.clamp(-reach, reach)
        .add_scalar(reach)
        .reshape([rows * keys])
}

/// The bias of each (head, query, key) from `rel`, in `dtype`; `None` for no bias.
///
/// # Shapes
///
/// - rel: `[rows, keys]`
/// - output: `[1, n_heads, rows, keys]`
pub(crate) fn bias_term(
    bias: &CompactBias,
    rel: Tensor<2, Int>,
    dtype: DType,
) -> Option<Tensor<4>> {
    let [rows, keys] = rel.dims();
    match bias {
        CompactBias::None => None,
        CompactBias::Alibi(slopes) => {
            let [n_heads] = slopes.dims();
            let slopes = slopes.clone().cast(dtype).reshape([1, n_heads, 1, 1]);
            // |rel| is exact in integers and converted once.
            let distance = rel.abs().float().cast(dtype).reshape([1, 1, rows, keys]);
            Some(distance.mul(slopes).neg())
        }
        CompactBias::ByDistance { bias, reach } => {
            let [n_heads, _] = bias.dims();
            let picked = bias
                .clone()
                .cast(dtype)
                .select(1, distance_index(rel, *reach));
            Some(picked.reshape([1, n_heads, rows, keys]))
        }
    }
}
