//! The two passes over the tiles: the forward (burn's `attention` per tile, or the softmax
//! written out with one log-sum-exp kept per query row for the autodiff op) and the
//! FlashAttention-2 style backward that recomputes each tile's probabilities from it.

// The backward half is called by the autodiff node only.
#![cfg_attr(not(feature = "autodiff"), allow(dead_code))]

use burn::backend::{
    Backend, Scalar, TensorMetadata,
    tensor::{BoolTensor, FloatTensor},
};
use burn::tensor::{FloatDType, Shape, ops::AttentionModuleOptions};

use super::Wanted;
use super::tile::{BiasKind, distance_index, grouped_transpose_matmul, neg_distance};
use super::tile::{Extras, TileArgs, geometry, grouped_matmul, rows_of, scores, tiles, to_groups};

/// `[batch, n_heads, rows, keys]` -> `[batch, n_kv_heads, group * rows, keys]` for a mask.
fn mask_to_groups<B: Backend>(mask: BoolTensor<B>, n_kv_heads: usize) -> BoolTensor<B> {
    let [batch, n_heads, rows, keys] = mask.shape().dims();
    if n_heads == n_kv_heads {
        return mask;
    }
    B::bool_reshape(
        mask,
        Shape::new([batch, n_kv_heads, n_heads / n_kv_heads * rows, keys]),
    )
}

/// Output `[batch, n_heads, seq_q, d_v]` and, with `with_lse`, the log-sum-exp of each query
/// row's scores `[batch, n_heads, seq_q, 1]`. `q`: `[batch, n_heads, seq_q, d_head]`; `k`,
/// `v`: `[batch, n_kv_heads, seq_k >= 1, d]`. A query with no key to see gets a zero output.
///
/// Without `with_lse` each tile is one call of the backend's own `attention` (flex's fused
/// kernel, the Cube backends' implementation) with the tile's bias and mask; with it, the
/// softmax is written out here so that its log-sum-exp can be kept.
pub(crate) fn forward<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    bias: &FloatTensor<B>,
    extras: &Extras<B>,
    args: &TileArgs,
    with_lse: bool,
) -> (FloatTensor<B>, Option<FloatTensor<B>>) {
    let [batch, n_heads, seq_q, _] = q.shape().dims();
    let [_, n_kv_heads, seq_k, _] = k.shape().dims();
    let finfo = q.dtype().finfo().expect("attention on a float tensor");
    let dtype = FloatDType::from(q.dtype());
    let device = q.device();
    let mut outputs = Vec::new();
    let mut lses = Vec::new();
    for tile in tiles(args, seq_q, seq_k) {
        let q_tile = rows_of::<B>(q.clone(), tile.r0, tile.rows);
        let k_keys = rows_of::<B>(k.clone(), tile.k0, tile.keys());
        let v_keys = rows_of::<B>(v.clone(), tile.k0, tile.keys());
        if with_lse {
            let s = scores::<B>(q_tile, k_keys, bias, extras, args, tile, seq_q).s;
            let m = B::float_clamp_min(B::float_max_dim(s.clone(), 3), Scalar::from(finfo.min));
            let p = B::float_exp(B::float_sub(s, m.clone()));
            let l = B::float_clamp_min(B::float_sum_dim(p.clone(), 3), finfo.min_positive.into());
            outputs.push(grouped_matmul::<B>(B::float_div(p, l.clone()), v_keys));
            lses.push(B::float_add(m, B::float_log(l)));
        } else {
            let shape = [batch, n_heads, tile.rows, tile.keys()];
            // A plain causal tile whose last key is its last query's: the backend's own causal
            // mode (aligned to the last key) instead of a mask, as the block ran before.
            let own_causal = args.causal
                && n_heads == n_kv_heads
                && !args.explicit
                && args.window.is_none()
                && tile.k0 == 0
                && tile.k1 + args.key_offset == args.query_offset + tile.r0 + tile.rows;
            let mask_args = TileArgs {
                causal: args.causal && !own_causal,
                ..*args
            };
            let g = geometry::<B>(bias, extras, &mask_args, tile, seq_q, shape, dtype, &device);
            let out = B::attention(
                to_groups::<B>(q_tile, n_kv_heads),
                k_keys,
                v_keys,
                g.mask.map(|mask| mask_to_groups::<B>(mask, n_kv_heads)),
                g.bias.map(|bias| to_groups::<B>(bias, n_kv_heads)),
                AttentionModuleOptions {
                    scale: Some(args.scale),
                    softcap: args.softcap,
                    is_causal: own_causal,
                },
            );
            outputs.push(super::tile::from_groups::<B>(out, n_heads));
        }
    }
    let lse = with_lse.then(|| B::float_cat(lses, 2));
    (B::float_cat(outputs, 2), lse)
}

/// The gradients the backward computes; `None` where the caller did not ask.
pub(crate) struct Grads<B: Backend> {
    pub q: Option<FloatTensor<B>>,
    pub k: Option<FloatTensor<B>>,
    pub v: Option<FloatTensor<B>>,
    pub bias: Option<FloatTensor<B>>,
}

/// What the backward reads besides the output gradient: the inputs, the output and one
/// log-sum-exp per query row; no `seq_q x seq_k` tensor.
#[derive(Clone, Debug)]
pub(crate) struct Saved<B: Backend> {
    pub q: FloatTensor<B>,
    pub k: FloatTensor<B>,
    pub v: FloatTensor<B>,
    pub bias: FloatTensor<B>,
    pub extras: Extras<B>,
    pub output: FloatTensor<B>,
    pub lse: FloatTensor<B>,
    pub args: TileArgs,
}

/// Gradients of [`forward`]'s output from `grad` (`[batch, n_heads, seq_q, d_v]`), recomputing
/// each tile's probabilities from the saved log-sum-exp:
///
/// ```text
/// P  = exp(S - lse)   (0 where hidden)      Δ = rowsum(dO * O)
/// dV += P^T dO        dP = dO V^T           dS = P * (dP - Δ)
/// dbias += dS gathered by distance          dS' = dS * (1 - t^2) under a softcap
/// dQ = scale dS' K    dK += scale dS'^T Q   (a group's heads summed into their kv head)
/// ```
pub(crate) fn backward<B: Backend>(
    saved: Saved<B>,
    grad: FloatTensor<B>,
    wanted: Wanted,
) -> Grads<B> {
    use burn::backend::Slice;
    use burn::tensor::IndexingUpdateOp;

    let Saved {
        q,
        k,
        v,
        bias,
        extras,
        output,
        lse,
        args,
    } = saved;
    let [batch, n_heads, seq_q, _] = q.shape().dims();
    let [_, n_kv_heads, seq_k, _] = k.shape().dims();
    let device = q.device();
    let dtype = FloatDType::from(q.dtype());
    let wanted_bias = wanted.bias && args.kind != BiasKind::None;
    let delta = B::float_sum_dim(B::float_mul(grad.clone(), output), 3);
    let mut dk = wanted.k.then(|| B::float_zeros(k.shape(), &device, dtype));
    let mut dv = wanted.v.then(|| B::float_zeros(v.shape(), &device, dtype));
    let mut dbias = wanted_bias.then(|| B::float_zeros(bias.shape(), &device, dtype));
    let mut dq = Vec::new();
    let add_keys = |acc: FloatTensor<B>, part: FloatTensor<B>, k0: usize, k1: usize| {
        if k0 == 0 && k1 == seq_k {
            B::float_add(acc, part)
        } else {
            let window = [
                Slice::from(..),
                Slice::from(..),
                Slice::from(k0..k1),
                Slice::from(..),
            ];
            let sum = B::float_add(B::float_slice(acc.clone(), &window), part);
            B::float_slice_assign(acc, &window, sum)
        }
    };
    for tile in tiles(&args, seq_q, seq_k) {
        let (rows, keys) = (tile.rows, tile.keys());
        let q_tile = rows_of::<B>(q.clone(), tile.r0, rows);
        let k_keys = rows_of::<B>(k.clone(), tile.k0, keys);
        let v_keys = rows_of::<B>(v.clone(), tile.k0, keys);
        let scores = scores::<B>(
            q_tile.clone(),
            k_keys.clone(),
            &bias,
            &extras,
            &args,
            tile,
            seq_q,
        );
        let p = B::float_exp(B::float_sub(
            scores.s,
            rows_of::<B>(lse.clone(), tile.r0, rows),
        ));
        let g = rows_of::<B>(grad.clone(), tile.r0, rows);
        if let Some(acc) = dv.take() {
            let part = grouped_transpose_matmul::<B>(p.clone(), g.clone(), n_kv_heads);
            dv = Some(add_keys(acc, part, tile.k0, tile.k1));
        }
        if !(wanted.q || wanted.k || wanted_bias) {
            continue;
        }
        let dp = grouped_matmul::<B>(g, B::float_transpose(v_keys));
        let ds = B::float_mul(
            p,
            B::float_sub(dp, rows_of::<B>(delta.clone(), tile.r0, rows)),
        );
        if let Some(acc) = dbias.take() {
            let [n, _, _] = scores.rel.shape().dims();
            // [n, n_heads, rows, keys], summed over the batch where the bias was shared.
            let ds_n = if n == batch {
                ds.clone()
            } else {
                B::float_sum_dim(ds.clone(), 0)
            };
            let by_head = |t: FloatTensor<B>| {
                B::float_reshape(
                    B::float_swap_dims(t, 0, 1),
                    Shape::new([n_heads, n * rows * keys]),
                )
            };
            dbias = Some(match args.kind {
                BiasKind::Alibi => {
                    let d = B::float_expand(
                        neg_distance::<B>(scores.rel, dtype),
                        Shape::new([n, n_heads, rows, keys]),
                    );
                    let per_head = B::float_sum_dim(by_head(B::float_mul(ds_n, d)), 1);
                    B::float_add(acc, B::float_reshape(per_head, Shape::new([n_heads])))
                }
                BiasKind::ByDistance { reach } => B::float_select_assign(
                    acc,
                    1,
                    distance_index::<B>(scores.rel, reach),
                    by_head(ds_n),
                    IndexingUpdateOp::Add,
                ),
                BiasKind::None => acc,
            });
        }
        let ds = match scores.capped {
            // d(c tanh(x / c)) / dx = 1 - tanh(x / c)^2
            Some(t) => {
                let slope = B::float_neg(B::float_sub_scalar(
                    B::float_mul(t.clone(), t),
                    Scalar::from(1.0),
                ));
                B::float_mul(ds, slope)
            }
            None => ds,
        };
        if wanted.q {
            dq.push(B::float_mul_scalar(
                grouped_matmul::<B>(ds.clone(), k_keys),
                Scalar::from(args.scale),
            ));
        }
        if let Some(acc) = dk.take() {
            let part = B::float_mul_scalar(
                grouped_transpose_matmul::<B>(ds, q_tile, n_kv_heads),
                Scalar::from(args.scale),
            );
            dk = Some(add_keys(acc, part, tile.k0, tile.k1));
        }
    }
    Grads {
        q: wanted.q.then(|| B::float_cat(dq, 2)),
        k: dk,
        v: dv,
        bias: dbias,
    }
}
