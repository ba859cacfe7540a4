//! The extension trait. Its own module so that `allow(deprecated)` covers the code
//! `#[backend_extension]` generates for the `NdArray` selector (burn-ndarray is deprecated in
//! 0.22; the user asked for it).
#![allow(deprecated)]

use crate::options::{FusedEmbeddingOptions, Sinusoid};
use crate::{options, reference};
use burn::backend::{
    Backend, backend_extension,
    tensor::{FloatTensor, IntTensor},
};

/// The fused absolute-position embedding, as a burn backend extension.
///
/// Shapes (both methods):
///
/// - `tokens`: `[vocab, d_token]` float
/// - `ids`: `[batch, seq]` int
/// - `positions`: `[1 or batch, seq]` int; the position of token `(b, s)` is
///   `positions[b or 0, s] + options.offset`. With `options.sequential_positions` it is
///   `s + options.offset` and `positions` is not read (any int tensor on the device will do)
/// - `table` (learned only): `[max_len, d_position]` float
/// - output 0: `[batch, seq, d_out]`, `d_out = d_token` for `Add` (then `d_position == d_token`)
///   and `d_token + d_position` for `Concat`; dtype of `tokens`
/// - output 1 (status): `[batch, seq]`, dtype of `ids`; see [`STATUS_BAD_ID`](crate::STATUS_BAD_ID),
///   [`STATUS_BAD_POSITION`](crate::STATUS_BAD_POSITION)
///
/// Output 0, for a good token: `tokens[id] * scale` (zero when `id == padding_idx`) combined with
/// the position vector. Sinusoidal columns are interleaved: `sin(p·w_i)` at `2i`, `cos(p·w_i)` at
/// `2i+1`, `w_i = base^(-2i/d_position)`.
///
/// # Panics
///
/// On inconsistent shapes (see [`options::check_shapes`]).
#[backend_extension(Cube, Flex, NdArray, Fusion, Autodiff)]
pub trait PositionalKernels: Backend {
    /// Token row (scaled, padding zeroed) combined with a sinusoidal position computed from the
    /// position and the column.
    #[fusion(meta = options::meta_sinusoidal)]
    fn fused_embedding_sinusoidal(
        tokens: FloatTensor<Self>,
        ids: IntTensor<Self>,
        positions: IntTensor<Self>,
        options: FusedEmbeddingOptions,
        sinusoid: Sinusoid,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        reference::fused_embedding::<Self>(
            tokens,
            ids,
            positions,
            reference::Position::Sinusoidal(sinusoid),
            &options,
        )
    }

    /// Token row (scaled, padding zeroed) combined with a row of a learned position table.
    #[fusion(meta = options::meta_learned)]
    fn fused_embedding_learned(
        tokens: FloatTensor<Self>,
        ids: IntTensor<Self>,
        positions: IntTensor<Self>,
        table: FloatTensor<Self>,
        options: FusedEmbeddingOptions,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        reference::fused_embedding::<Self>(
            tokens,
            ids,
            positions,
            reference::Position::Learned(table),
            &options,
        )
    }
}
