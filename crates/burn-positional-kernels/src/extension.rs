//! The extension trait. Its own module so that `allow(deprecated)` covers the code
//! `#[backend_extension]` generates for the `NdArray` selector (burn-ndarray is deprecated in
//! 0.22; the user asked for it).
#![allow(deprecated)]
// The attention op takes its seven tensors and its arguments: one per kernel input.
#![allow(clippy::too_many_arguments)]
// With no backend feature the generated `Dispatch` method has only its fallback arm, which
// leaves the arguments unread.
#![cfg_attr(
    not(any(
        feature = "flex",
        feature = "ndarray",
        feature = "wgpu",
        feature = "cuda"
    )),
    allow(unused_variables)
)]

use crate::attention::{self, BackwardArgs, TileArgs};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
use crate::embedding::options;
use crate::embedding::options::KernelArgs;
use crate::embedding::reference;
use crate::rope::{self, RopeArgs};
use crate::table_grad::{self, TableGradArgs};
use burn::backend::{
    Backend, backend_extension,
    tensor::{BoolTensor, FloatTensor, IntTensor},
};

/// The fused absolute-position embedding, as a burn backend extension. Plumbing: users call
/// [`fused_embedding`](crate::fused_embedding), which checks what the kernels cannot.
///
/// Shapes:
///
/// - `tokens`: `[vocab_size, d_token]` float
/// - `ids`: `[batch, seq]` int (i32 or i64)
/// - `positions`: `[1 or batch, seq]` int; read only in `PositionMode::Explicit` (in
///   `Sequential { offset }` token `(b, s)` sits at `offset + s` and any int tensor on the device
///   will do)
/// - `table`: `[max_len, d_position]`, the dtype of `tokens`
/// - output 0: `[batch, seq, d_out]`, `d_out = d_token` for `Add` (then `d_position == d_token`)
///   and `d_token + d_position` for `Concat`; dtype of `tokens`
/// - output 1 (status): `[batch, seq]`, dtype of `ids`; see
///   [`STATUS_BAD_ID`](crate::STATUS_BAD_ID), [`STATUS_BAD_POSITION`](crate::STATUS_BAD_POSITION)
///
/// Output 0, for a good token: `tokens[id] * scale` (the stored row for `padding_idx` too, as
/// PyTorch's; only its gradient is zero) combined with
/// `table[position]`. The part with no valid source (a bad id's token part, a bad position's
/// position part) is NaN.
///
/// # Panics
///
/// On inconsistent shapes or dtypes (see [`options::check`]).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[backend_extension(
    Cube,
    Flex: cfg(feature = "flex"),
    NdArray: cfg(feature = "ndarray"),
    Fusion,
    Autodiff: cfg(feature = "autodiff")
)]
pub(crate) trait PositionalKernels: Backend {
    /// Token row (scaled) combined with a row of the position table.
    #[fusion(meta = options::meta)]
    fn fused_embedding(
        tokens: FloatTensor<Self>,
        ids: IntTensor<Self>,
        positions: IntTensor<Self>,
        table: FloatTensor<Self>,
        args: KernelArgs,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        reference::fused_embedding::<Self>(tokens, ids, positions, Some(table), &args)
    }

    /// Softmax attention with positions in compact form (see [`crate::attention`]):
    /// `positions` `[1 or batch, seq_q + seq_k]` and `segments` `[batch, seq_q + seq_k]` (queries
    /// then keys) and `padding` `[batch, seq_k]` are read only where `args` says they are given.
    /// Outputs: `[batch, n_heads, seq_q, d_v]` and the log-sum-exp of each query row's scores
    /// `[batch, n_heads, seq_q, 1]` (the dtype's lowest finite value for a row that sees no
    /// key; zeros from this default body unless `args.lse`).
    #[fusion(meta = attention::meta)]
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        padding: BoolTensor<Self>,
        positions: IntTensor<Self>,
        segments: IntTensor<Self>,
        args: TileArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        attention::default_body::<Self>(q, k, v, bias, padding, positions, segments, args)
    }

    /// The gradients of [`flash_attention`](Self::flash_attention)'s output from its
    /// gradient `grad` (`[batch, n_heads, seq_q, d_v]`), recomputing the probabilities from the
    /// saved `lse`: `(dq, dk, dv, dbias)` in the shapes and dtype of `q`, `k`, `v` and `bias`;
    /// a gradient `args.wanted` does not ask for is unspecified (zeros from the host and the
    /// default body).
    #[fusion(meta = attention::backward_meta)]
    #[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
    fn flash_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        padding: BoolTensor<Self>,
        positions: IntTensor<Self>,
        segments: IntTensor<Self>,
        output: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        args: BackwardArgs,
    ) -> (
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
    ) {
        attention::backward_body::<Self>(
            q, k, v, bias, padding, positions, segments, output, lse, grad, args,
        )
    }

    /// `x` `[batch, heads, seq, d_head]` rotated by `cos` and `sin` `[1 or batch, seq, pairs]`
    /// (the dtype of `x`); see [`crate::fused_rope`]. Output contiguous, the shape of `x`.
    #[fusion(meta = |x, _cos, _sin, _args| x.clone())]
    fn fused_rope(
        x: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        args: RopeArgs,
    ) -> FloatTensor<Self> {
        rope::reference::rope::<Self>(x, cos, sin, &args)
    }

    /// The gradient of an embedding table `[args.rows, args.width]` (the dtype of `grad`) from
    /// the output gradient `grad` `[batch, seq, d_out]` and the rows the tokens read, `index`
    /// `[1 or batch, seq]` (see [`crate::table_grad`]).
    #[fusion(meta = table_grad::meta)]
    #[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
    fn table_grad(
        grad: FloatTensor<Self>,
        index: IntTensor<Self>,
        args: TableGradArgs,
    ) -> FloatTensor<Self> {
        table_grad::default_body::<Self>(grad, index, &args)
    }

    /// `x [rows, k] . w [k, n]` for a few rows (see [`crate::skinny_matmul`]); called only on
    /// Cube devices without autodiff, the default body is burn's `matmul`.
    #[fusion(meta = crate::skinny::meta)]
    fn skinny_matmul(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        args: crate::skinny::SkinnyArgs,
    ) -> FloatTensor<Self> {
        use burn::backend::ops::FloatTensorOps;
        let w = if args.transposed {
            <Self as FloatTensorOps<Self>>::float_transpose(w)
        } else {
            w
        };
        <Self as FloatTensorOps<Self>>::float_matmul(x, w)
    }
}

// Without a Cube backend there is no `Fusion` wrapper to generate (and `#[fusion]`, which the
// macro reads before `cfg_attr` expands, cannot be switched off): the same trait, CPU selectors.
#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
#[backend_extension(Flex: cfg(feature = "flex"), NdArray: cfg(feature = "ndarray"), Autodiff: cfg(feature = "autodiff"))]
pub(crate) trait PositionalKernels: Backend {
    /// See the Cube-enabled twin above.
    fn fused_embedding(
        tokens: FloatTensor<Self>,
        ids: IntTensor<Self>,
        positions: IntTensor<Self>,
        table: FloatTensor<Self>,
        args: KernelArgs,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        reference::fused_embedding::<Self>(tokens, ids, positions, Some(table), &args)
    }

    /// See the Cube-enabled twin above.
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        padding: BoolTensor<Self>,
        positions: IntTensor<Self>,
        segments: IntTensor<Self>,
        args: TileArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        attention::default_body::<Self>(q, k, v, bias, padding, positions, segments, args)
    }

    /// See the Cube-enabled twin above.
    #[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
    fn flash_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        padding: BoolTensor<Self>,
        positions: IntTensor<Self>,
        segments: IntTensor<Self>,
        output: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        args: BackwardArgs,
    ) -> (
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
    ) {
        attention::backward_body::<Self>(
            q, k, v, bias, padding, positions, segments, output, lse, grad, args,
        )
    }

    /// See the Cube-enabled twin above.
    fn fused_rope(
        x: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        args: RopeArgs,
    ) -> FloatTensor<Self> {
        rope::reference::rope::<Self>(x, cos, sin, &args)
    }

    /// See the Cube-enabled twin above.
    #[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
    fn table_grad(
        grad: FloatTensor<Self>,
        index: IntTensor<Self>,
        args: TableGradArgs,
    ) -> FloatTensor<Self> {
        table_grad::default_body::<Self>(grad, index, &args)
    }
}
