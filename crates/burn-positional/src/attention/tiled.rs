//! Attention in tiles of queries, with the position scheme in compact form: the scores and the
//! bias of one tile (`tile x seq_k`) exist at a time, never the `seq_q x seq_k` square.
//!
//! For each tile of query rows `r0..r1` (positions `offset + r0..offset + r1`), over the keys
//! it can see (all, or for a causal block those up to its last query):
//!
//! ```text
//! rel         = key position - query position            [tile, keys] ints, from arange
//! out[r0..r1] = attention(q[r0..r1], k, v, bias(rel), padding, causal)   burn's attention
//! ```
//!
//! with `bias(rel)` computed in the tile from the scheme's compact form: ALiBi's one slope per
//! head (`-m_h |rel|`), or T5's bias per clamped distance (`[n_heads, 2 max_distance + 1]`,
//! gathered from the learned table once per call, so gradients reach the table). Memory is
//! `O(tile x seq_k)` per step, linear in the sequence for a fixed tile.

use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Tensor};

use crate::score_bias::distance::{bias_term, relative};

/// Floats one tile's scores may hold when the tile size is left to the block:
/// `batch x n_heads x tile x seq_k <= TILE_VALUES` (16 MiB of f32), at least one row.
pub(crate) const TILE_VALUES: usize = 1 << 22;

/// A score bias in compact form (the kernels crate's, which also runs the autodiff op).
pub(crate) use burn_positional_kernels::AttentionBias as CompactBias;

/// Rows of queries per tile: `requested`, or as many as [`TILE_VALUES`] allows.
pub(crate) fn tile_rows(
    requested: Option<usize>,
    batch: usize,
    n_heads: usize,
    seq_k: usize,
) -> usize {
    requested
        .unwrap_or_else(|| TILE_VALUES / (batch * n_heads * seq_k).max(1))
        .max(1)
}

/// Softmax attention of `q` (`[batch, n_heads, seq_q, d_head]`, queries at positions
/// `offset..offset + seq_q`) over `k`, `v` (`[batch, n_heads, seq_k, d_head]`, keys at
/// `0..seq_k`), `tile` query rows at a time. `key_padding`: `[batch, seq_k]`, true where a key
/// is padding. Returns `[batch, n_heads, seq_q, d_head]`.
///
/// Each tile is one call of burn's `attention` with the tile's bias: on flex that is burn's own
/// tiled kernel, elsewhere its unfused path on `tile x seq_k` scores. A causal tile attends to
/// the keys up to its last query only (the rest are masked for all its rows), which also halves
/// the work: burn's causal mask is aligned to the last key, which then is the tile's last query.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tiled_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    bias: &CompactBias,
    causal: bool,
    offset: usize,
    key_padding: Option<Tensor<2, Bool>>,
    tile: usize,
) -> Tensor<4> {
    if q.device().is_autodiff() {
        // One graph node with a backward that recomputes each tile: linear memory in training.
        return burn_positional_kernels::tiled_attention(
            q,
            k,
            v,
            bias,
            key_padding,
            causal,
            offset,
            tile,
        );
    }
    let [batch, n_heads, seq_q, d_head] = q.dims();
    let [_, _, seq_k, _] = k.dims();
    let device = q.device();
    let dtype = q.dtype();
    // Cast once per call, not per tile.
    let bias = match bias {
        CompactBias::Alibi(slopes) => CompactBias::Alibi(slopes.clone().cast(dtype)),
        CompactBias::ByDistance { bias, reach } => CompactBias::ByDistance {
            bias: bias.clone().cast(dtype),
            reach: *reach,
        },
        CompactBias::None => CompactBias::None,
    };
    let mut tiles = Vec::with_capacity(seq_q.div_ceil(tile));
    let mut r0 = 0;
    while r0 < seq_q {
        let r1 = (r0 + tile).min(seq_q);
        let rows = r1 - r0;
        // Keys this tile can see: all of them, or (causal) those up to its last query.
        let keys = if causal {
            (offset + r1).min(seq_k)
        } else {
            seq_k
        };
        let q_tile = q.clone().slice([0..batch, 0..n_heads, r0..r1, 0..d_head]);
        let (k_tile, v_tile) = if keys == seq_k {
            (k.clone(), v.clone())
        } else {
            (
                k.clone().slice([0..batch, 0..n_heads, 0..keys, 0..d_head]),
                v.clone().slice([0..batch, 0..n_heads, 0..keys, 0..d_head]),
            )
        };
        let term = match &bias {
            CompactBias::None => None,
            bias => bias_term(bias, relative(offset + r0, rows, keys, &device), dtype),
        };
        let padding = key_padding.as_ref().map(|mask| {
            mask.clone()
                .slice([0..batch, 0..keys])
                .reshape([batch, 1, 1, keys])
                .expand([batch, n_heads, rows, keys])
        });
        tiles.push(attention(
            q_tile,
            k_tile,
            v_tile,
            padding,
            term,
            AttentionModuleOptions {
                is_causal: causal,
                ..Default::default()
            },
        ));
        r0 = r1;
    }
    Tensor::cat(tiles, 2)
}
