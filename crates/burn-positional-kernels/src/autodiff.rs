//! Hand-written backward for `Autodiff<B, C>`.
//!
//! Forward runs the inner backend's fused implementation (`B::fused_embedding_*`); the graph
//! gets one node whose backward step computes:
//!
//! - token table: the token part of the output gradient, times `scale`, summed per id by the
//!   extension's table gradient ([`crate::table_grad`]: ids sorted once, a segment per row);
//!   padding and out-of-range ids give nothing;
//! - learned table: the position part of the gradient summed per position by the same op; bad
//!   positions give nothing. Sequential positions that all lie inside the table need no sort:
//!   the batch sum is placed at rows `offset..offset + seq`;
//! - a constant table (the sinusoid cache) is not tracked: no gradient.
//!
//! The status output is an int tensor: not differentiable.

use burn::backend::{
    AutodiffBackend, Backend, Slice, TensorMetadata,
    autodiff::{
        Autodiff,
        checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
        grads::Gradients,
        ops::{Backward, Ops, OpsKind},
    },
    tensor::{BoolTensor, FloatTensor, IntTensor},
};
use burn::tensor::{FloatDType, Shape};

use crate::PositionalKernels;
use crate::attention::{BackwardArgs, Extras, Saved, TileArgs, Wanted};
use crate::embedding::options::{Combine, FusedEmbeddingOptions, KernelArgs};
use crate::embedding::reference::positions_of;
use crate::rope::RopeArgs;
use crate::table_grad::TableGradArgs;

/// Gradient of the token table `[vocab_size, d_token]` from the output gradient
/// `[batch, seq, d_out]`: the token part, times `scale`, summed per id; padding and
/// out-of-range ids give nothing.
fn token_table_grad<B: Backend + PositionalKernels>(
    grad: FloatTensor<B>,
    tokens: &FloatTensor<B>,
    ids: IntTensor<B>,
    options: &FusedEmbeddingOptions,
) -> FloatTensor<B> {
    let [vocab_size, d_token] = tokens.shape().dims();
    let args = TableGradArgs {
        rows: vocab_size,
        first: 0,
        width: d_token,
        scale: options.scale,
        skip: options.padding_idx,
    };
    B::table_grad(grad, ids, args)
}

/// Gradient of the learned table `[max_len, d_position]`.
fn learned_table_grad<B: Backend + PositionalKernels>(
    grad: FloatTensor<B>,
    table: &FloatTensor<B>,
    ids: &IntTensor<B>,
    positions: IntTensor<B>,
    args: &KernelArgs,
) -> FloatTensor<B> {
    let [max_len, d_position] = table.shape().dims();
    let [_, seq, d_out] = grad.shape().dims();
    let first = usize::try_from(args.offset()).ok();
    if args.sequential()
        && let Some(first) = first.filter(|&first| first + seq <= max_len)
    {
        // Rows first..first + seq, every one inside the table: the gradient is the output
        // gradient's position part summed over the batch, placed at those rows. No sort.
        let grad = match args.options.combine {
            Combine::Add => grad,
            Combine::Concat { .. } => B::float_slice(
                grad,
                &[
                    Slice::from(..),
                    Slice::from(..),
                    Slice::from(d_out - d_position..d_out),
                ],
            ),
        };
        let rows = B::float_reshape(B::float_sum_dim(grad, 0), Shape::new([seq, d_position]));
        return place_rows::<B>(rows, first, max_len, &table.device());
    }
    let positions = positions_of::<B>(positions, ids, args);
    let grad_args = TableGradArgs {
        rows: max_len,
        first: d_out - d_position,
        width: d_position,
        scale: 1.0,
        skip: None,
    };
    B::table_grad(grad, positions, grad_args)
}

/// `[max_len, d]`: `rows` (`[n, d]`) at rows `first..first + n`, zeros elsewhere.
fn place_rows<B: Backend>(
    rows: FloatTensor<B>,
    first: usize,
    max_len: usize,
    device: &B::Device,
) -> FloatTensor<B> {
    let [n, d] = rows.shape().dims();
    let dtype = FloatDType::from(rows.dtype());
    let zeros = |len: usize| B::float_zeros(Shape::new([len, d]), device, dtype);
    let after = max_len - first - n;
    match (first, after) {
        (0, 0) => rows,
        (0, _) => B::float_cat(vec![rows, zeros(after)], 0),
        (_, 0) => B::float_cat(vec![zeros(first), rows], 0),
        _ => B::float_cat(vec![zeros(first), rows, zeros(after)], 0),
    }
}

#[derive(Debug)]
struct EmbeddingBackward;

impl<B: Backend + PositionalKernels> Backward<B, 2> for EmbeddingBackward {
    /// Token table, position table, ids, positions, arguments.
    type State = (
        FloatTensor<B>,
        FloatTensor<B>,
        IntTensor<B>,
        IntTensor<B>,
        KernelArgs,
    );

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_tokens, node_table] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (tokens, table, ids, positions, args) = ops.state;
        if let Some(node) = node_table {
            let g = learned_table_grad::<B>(grad.clone(), &table, &ids, positions, &args);
            grads.register::<B>(node.id, g);
        }
        if let Some(node) = node_tokens {
            let g = token_table_grad::<B>(grad, &tokens, ids, &args.options);
            grads.register::<B>(node.id, g);
        }
    }
}

impl<B: Backend + PositionalKernels, C: CheckpointStrategy> PositionalKernels for Autodiff<B, C> {
    fn fused_embedding(
        tokens: FloatTensor<Self>,
        ids: IntTensor<Self>,
        positions: IntTensor<Self>,
        table: FloatTensor<Self>,
        args: KernelArgs,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        match EmbeddingBackward
            .prepare::<C>([tokens.node(), table.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (tokens, table) = (tokens.primitive().clone(), table.primitive().clone());
                let (output, status) = B::fused_embedding(
                    tokens.clone(),
                    ids.clone(),
                    positions.clone(),
                    table.clone(),
                    args.clone(),
                );
                (
                    prep.finish((tokens, table, ids, positions, args), output),
                    status,
                )
            }
            OpsKind::UnTracked(prep) => {
                let (output, status) = B::fused_embedding(
                    tokens.into_primitive(),
                    ids,
                    positions,
                    table.into_primitive(),
                    args,
                );
                (prep.finish(output), status)
            }
        }
    }

    fn fused_rope(
        x: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        args: RopeArgs,
    ) -> FloatTensor<Self> {
        // The tables are constants: only `x` is a parent.
        let (cos, sin) = (cos.into_primitive(), sin.into_primitive());
        match RopeBackward
            .prepare::<C>([x.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let output =
                    B::fused_rope(x.into_primitive(), cos.clone(), sin.clone(), args.clone());
                prep.finish((cos, sin, args), output)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::fused_rope(x.into_primitive(), cos, sin, args))
            }
        }
    }

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
        // Not differentiated again: the inner backend's kernel on the values, as constants.
        let (dq, dk, dv, dbias) = B::flash_attention_backward(
            q.into_primitive(),
            k.into_primitive(),
            v.into_primitive(),
            bias.into_primitive(),
            padding,
            positions,
            segments,
            output.into_primitive(),
            lse.into_primitive(),
            grad.into_primitive(),
            args,
        );
        let wrap = <Self as AutodiffBackend>::from_inner;
        (wrap(dq), wrap(dk), wrap(dv), wrap(dbias))
    }

    fn table_grad(
        grad: FloatTensor<Self>,
        index: IntTensor<Self>,
        args: TableGradArgs,
    ) -> FloatTensor<Self> {
        // Not differentiated again: the inner backend's op on the values, as a constant.
        let grad = B::table_grad(grad.into_primitive(), index, args);
        <Self as AutodiffBackend>::from_inner(grad)
    }

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
        // The log-sum-exp is no graph node: a constant.
        let placeholder_lse = |lse: FloatTensor<B>| <Self as AutodiffBackend>::from_inner(lse);
        match AttentionBackward
            .prepare::<C>([q.node(), k.node(), v.node(), bias.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (q, k, v, bias) = (
                    q.into_primitive(),
                    k.into_primitive(),
                    v.into_primitive(),
                    bias.into_primitive(),
                );
                // The inner backend's kernel, keeping one log-sum-exp per query row.
                let args = TileArgs { lse: true, ..args };
                let (output, lse) = B::flash_attention(
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    bias.clone(),
                    padding.clone(),
                    positions.clone(),
                    segments.clone(),
                    args,
                );
                let saved = Saved {
                    q,
                    k,
                    v,
                    bias,
                    extras: Extras::new(padding, positions, segments, &args),
                    output: output.clone(),
                    lse: lse.clone(),
                    args,
                };
                (prep.finish(saved, output), placeholder_lse(lse))
            }
            OpsKind::UnTracked(prep) => {
                let (output, lse) = B::flash_attention(
                    q.into_primitive(),
                    k.into_primitive(),
                    v.into_primitive(),
                    bias.into_primitive(),
                    padding,
                    positions,
                    segments,
                    args,
                );
                (prep.finish(output), placeholder_lse(lse))
            }
        }
    }
}

/// A rotation's gradient: the output gradient rotated back (the transpose of a rotation is
/// its inverse), by the same fused op.
#[derive(Debug)]
struct RopeBackward;

impl<B: Backend + PositionalKernels> Backward<B, 1> for RopeBackward {
    /// Cosines, sines, arguments.
    type State = (FloatTensor<B>, FloatTensor<B>, RopeArgs);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        if let Some(node) = node {
            let (cos, sin, args) = ops.state;
            grads.register::<B>(node.id, B::fused_rope(grad, cos, sin, args.inverted()));
        }
    }
}

#[derive(Debug)]
struct AttentionBackward;

impl<B: Backend + PositionalKernels> Backward<B, 4> for AttentionBackward {
    type State = Saved<B>;

    fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_q, node_k, node_v, node_bias] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let wanted = Wanted {
            q: node_q.is_some(),
            k: node_k.is_some(),
            v: node_v.is_some(),
            bias: node_bias.is_some(),
        };
        let Saved {
            q,
            k,
            v,
            bias,
            extras,
            output,
            lse,
            args,
        } = ops.state;
        let device = q.device();
        let placeholder_int = || {
            let int = burn::backend::get_or_init_device_settings::<B>(&device).int_dtype;
            B::int_zeros(Shape::new([1, 1]), &device, int)
        };
        let padding = extras.padding.unwrap_or_else(|| {
            let bd = burn::backend::get_or_init_device_settings::<B>(&device).bool_dtype;
            B::bool_zeros(Shape::new([1, 1]), &device, bd)
        });
        let positions = extras.positions.unwrap_or_else(placeholder_int);
        let segments = extras.segments.unwrap_or_else(placeholder_int);
        // One kernel call for every gradient (the tensor-op tiles where no kernel covers B).
        crate::attention::count_backward_call();
        let (dq, dk, dv, dbias) = B::flash_attention_backward(
            q,
            k,
            v,
            bias,
            padding,
            positions,
            segments,
            output,
            lse,
            grad,
            BackwardArgs { tile: args, wanted },
        );
        for (node, grad) in [(node_q, dq), (node_k, dk), (node_v, dv), (node_bias, dbias)] {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}
