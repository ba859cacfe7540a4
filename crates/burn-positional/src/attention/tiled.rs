//! Attention in tiles of queries, with the position scheme in compact form: the scores and the
//! bias of one tile (`tile x seq_k`) exist at a time, never the `seq_q x seq_k` square.
//!
//! For each tile of query rows `r0..r1` (positions `offset + r0..offset + r1`):
//!
//! ```text
//! rel      = key position - query position                  [tile, seq_k] ints, from arange
//! scores   = q[r0..r1] k^T / sqrt(d_head) + bias(rel)        [batch, n_heads, tile, seq_k]
//! scores   = -inf where rel > 0 (causal) or the key is padding
//! out[r0..r1] = softmax(scores) v                           (a row with no key left is 0)
//! ```
//!
//! with `bias(rel)` computed in the tile from the scheme's compact form: ALiBi's one slope per
//! head (`-m_h |rel|`), or T5's bias per clamped distance (`[n_heads, 2 max_distance + 1]`,
//! gathered from the learned table once per call, so gradients reach the table). Memory is
//! `O(tile x seq_k)` per step, linear in the sequence for a fixed tile.

use burn::tensor::{Bool, Int, Tensor, activation::softmax};

/// Floats one tile's scores may hold when the tile size is left to the block:
/// `batch x n_heads x tile x seq_k <= TILE_VALUES` (16 MiB of f32), at least one row.
pub const TILE_VALUES: usize = 1 << 22;

/// A score bias in compact form.
#[derive(Clone, Debug)]
pub(crate) enum CompactBias {
    /// No bias (no positions, or RoPE's rotated queries and keys).
    None,
    /// ALiBi: `[n_heads]` slopes; the bias of (query i, key j) is `-m_h |j - i|`.
    Alibi(Tensor<1>),
    /// A bias per clamped relative distance: `[n_heads, 2 reach + 1]`, entry
    /// `clamp(j - i, -reach, reach) + reach` (T5's buckets, looked up once per call).
    ByDistance { bias: Tensor<2>, reach: usize },
}

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
    let [batch, n_heads, seq_q, d_head] = q.dims();
    let [_, _, seq_k, _] = k.dims();
    let device = q.device();
    let dtype = q.dtype();
    let scale = 1.0 / (d_head as f64).sqrt();
    let k_t = k.swap_dims(2, 3); // [batch, n_heads, d_head, seq_k]
    // [batch, seq_k] -> [batch, 1, 1, seq_k], broadcast over heads and rows.
    let padding = key_padding.map(|mask| mask.reshape([batch, 1, 1, seq_k]));
    let bias = match bias {
        CompactBias::Alibi(slopes) => CompactBias::Alibi(slopes.clone().cast(dtype)),
        CompactBias::ByDistance { bias, reach } => CompactBias::ByDistance {
            bias: bias.clone().cast(dtype),
            reach: *reach,
        },
        CompactBias::None => CompactBias::None,
    };
    let keys = Tensor::<1, Int>::arange(0..seq_k as i64, &device).reshape([1, seq_k]);
    let mut tiles = Vec::with_capacity(seq_q.div_ceil(tile));
    let mut r0 = 0;
    while r0 < seq_q {
        let r1 = (r0 + tile).min(seq_q);
        let rows = r1 - r0;
        let q_tile = q.clone().slice([0..batch, 0..n_heads, r0..r1, 0..d_head]);
        let mut scores = q_tile.matmul(k_t.clone()).mul_scalar(scale); // [batch, n_heads, rows, seq_k]
        let needs_positions = causal || !matches!(bias, CompactBias::None);
        let relative = needs_positions.then(|| {
            let first = (offset + r0) as i64;
            let queries =
                Tensor::<1, Int>::arange(first..first + rows as i64, &device).reshape([rows, 1]);
            keys.clone() - queries // [rows, seq_k]: key position - query position
        });
        match (&bias, &relative) {
            (CompactBias::Alibi(slopes), Some(relative)) => {
                let distance = relative.clone().abs().float().cast(dtype);
                let term = distance
                    .reshape([1, 1, rows, seq_k])
                    .mul(slopes.clone().reshape([1, n_heads, 1, 1]))
                    .neg();
                scores = scores + term;
            }
            (CompactBias::ByDistance { bias, reach }, Some(relative)) => {
                let reach = *reach as i64;
                let index = relative
                    .clone()
                    .clamp(-reach, reach)
                    .add_scalar(reach)
                    .reshape([rows * seq_k]);
                let term = bias
                    .clone()
                    .select(1, index)
                    .reshape([1, n_heads, rows, seq_k]);
                scores = scores + term;
            }
            _ => {}
        }
        if causal {
            let later = relative
                .as_ref()
                .expect("computed when causal")
                .clone()
                .greater_elem(0)
                .reshape([1, 1, rows, seq_k])
                .expand([batch, n_heads, rows, seq_k]);
            scores = scores.mask_fill(later, f32::NEG_INFINITY);
        }
        if let Some(padding) = &padding {
            scores = scores.mask_fill(
                padding.clone().expand([batch, n_heads, rows, seq_k]),
                f32::NEG_INFINITY,
            );
        }
        let mut weights = softmax(scores, 3);
        if padding.is_some() {
            // A query whose keys are all padding: zero attention, as burn's fused attention.
            weights = weights.clone().mask_fill(weights.is_nan(), 0.0);
        }
        tiles.push(weights.matmul(v.clone()));
        r0 = r1;
    }
    Tensor::cat(tiles, 2)
}
