//! Softmax attention in tiles of query rows with the position bias in compact form, and its
//! FlashAttention-2 style backward: the forward keeps, besides its output, one log-sum-exp per
//! query row; the backward recomputes each tile's probabilities from it. Neither direction
//! holds more than one tile's `[batch, n_heads, rows, keys]` scores at a time, so memory grows
//! with the sequence, not its square, in training too.
//!
//! For the tile of query rows `r0..r0 + rows` (at positions `offset + r0..`) over the keys it
//! can see (all of them, or for a causal block those up to its last query):
//!
//! ```text
//! S   = q k^T / sqrt(d_head) + bias(rel),  rel = key position - query position
//! S   = -inf where the key is padding or (causal) after the query
//! m   = max(S) clamped to the dtype's lowest finite value      (a fully masked row: finite)
//! l   = sum(exp(S - m)) clamped to the smallest positive normal
//! O   = exp(S - m) / l . v;   lse = m + ln l
//!
//! backward, with dO and Δ = rowsum(dO * O):
//! P   = exp(S - lse)         (0 where masked; a fully masked row is all 0)
//! dV += P^T dO,   dP = dO v^T,   dS = P * (dP - Δ)
//! dQ  = dS k / sqrt(d_head),   dK += dS^T q / sqrt(d_head),   dbias += dS gathered by rel
//! ```
//!
//! `bias(rel)` is ALiBi's `-m_h |rel|` from one slope per head, or a bias per clamped distance
//! (`[n_heads, 2 reach + 1]` at `clamp(rel, -reach, reach) + reach`: T5's buckets, looked up by
//! the caller once per call). Written in backend ops, so every backend runs it; the autodiff
//! implementation in [`crate::autodiff`] records one node whose backward is [`backward`].

use burn::backend::{
    Backend, Scalar, Slice, TensorMetadata, get_or_init_device_settings,
    tensor::{BoolTensor, FloatTensor, IntTensor},
};
use burn::tensor::{FloatDType, Shape};

/// The bias's form. The bias tensor itself travels as an argument of the op (so autodiff can
/// track it); with [`BiasKind::None`] it is any one-element placeholder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BiasKind {
    /// No bias.
    None,
    /// `[n_heads]` slopes: the bias of (query i, key j) is `-m_h |j - i|`.
    Alibi,
    /// `[n_heads, 2 reach + 1]`: the bias of (query i, key j) is entry
    /// `clamp(j - i, -reach, reach) + reach`.
    ByDistance {
        /// The largest distance with a bias of its own.
        reach: usize,
    },
}

/// What the op needs besides its tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileArgs {
    /// The bias's form.
    pub kind: BiasKind,
    /// Whether query i sees only the keys up to its own position.
    pub causal: bool,
    /// Position of the first query (the keys sit at `0..seq_k`).
    pub offset: usize,
    /// Query rows per tile (at least 1).
    pub tile: usize,
    /// Whether the padding argument is a `[batch, seq_k]` mask (else a placeholder).
    pub padded: bool,
}

/// One tile: query rows `r0..r0 + rows`, keys `0..keys`.
#[derive(Clone, Copy, Debug)]
struct Tile {
    r0: usize,
    rows: usize,
    keys: usize,
}

fn tiles(args: &TileArgs, seq_q: usize, seq_k: usize) -> Vec<Tile> {
    let step = args.tile.max(1);
    (0..seq_q)
        .step_by(step)
        .map(|r0| {
            let rows = step.min(seq_q - r0);
            let keys = if args.causal {
                (args.offset + r0 + rows).min(seq_k)
            } else {
                seq_k
            };
            Tile { r0, rows, keys }
        })
        .collect()
}

fn rows_of<B: Backend>(t: FloatTensor<B>, from: usize, len: usize) -> FloatTensor<B> {
    B::float_slice(
        t,
        &[
            Slice::from(..),
            Slice::from(..),
            Slice::from(from..from + len),
            Slice::from(..),
        ],
    )
}

/// The first `keys` keys (or values) `[batch, n_heads, keys, d]`.
fn first_keys<B: Backend>(t: &FloatTensor<B>, keys: usize) -> FloatTensor<B> {
    let [_, _, seq_k, _] = t.shape().dims();
    if keys == seq_k {
        t.clone()
    } else {
        rows_of::<B>(t.clone(), 0, keys)
    }
}

/// key position - query position, `[rows, keys]` ints.
fn relative<B: Backend>(tile: Tile, offset: usize, device: &B::Device) -> IntTensor<B> {
    let int = get_or_init_device_settings::<B>(device).int_dtype;
    let first = (offset + tile.r0) as i64;
    let keys = B::int_reshape(
        B::int_arange(0..tile.keys as i64, device, int),
        Shape::new([1, tile.keys]),
    );
    let queries = B::int_reshape(
        B::int_arange(first..first + tile.rows as i64, device, int),
        Shape::new([tile.rows, 1]),
    );
    B::int_sub(
        B::int_expand(keys, Shape::new([tile.rows, tile.keys])),
        B::int_expand(queries, Shape::new([tile.rows, tile.keys])),
    )
}

/// `[rows * keys]`: the bias column of each (query, key) of a `ByDistance` bias.
fn distance_index<B: Backend>(rel: IntTensor<B>, reach: usize) -> IntTensor<B> {
    let [rows, keys] = rel.shape().dims();
    let reach = reach as i64;
    let index = B::int_add_scalar(
        B::int_clamp(rel, Scalar::from(-reach), Scalar::from(reach)),
        Scalar::from(reach),
    );
    B::int_reshape(index, Shape::new([rows * keys]))
}

/// `-|rel|` as floats `[1, 1, rows, keys]`: ALiBi's bias per unit of slope.
fn neg_distance<B: Backend>(rel: IntTensor<B>, dtype: FloatDType) -> FloatTensor<B> {
    let [rows, keys] = rel.shape().dims();
    let d = B::float_neg(B::int_into_float(B::int_abs(rel), dtype));
    B::float_reshape(d, Shape::new([1, 1, rows, keys]))
}

/// The tile's bias `[1, n_heads, rows, keys]`, if any.
fn bias_term<B: Backend>(
    bias: &FloatTensor<B>,
    rel: &IntTensor<B>,
    kind: BiasKind,
    n_heads: usize,
    dtype: FloatDType,
) -> Option<FloatTensor<B>> {
    let [rows, keys] = rel.shape().dims();
    match kind {
        BiasKind::None => None,
        BiasKind::Alibi => {
            let slopes = B::float_reshape(bias.clone(), Shape::new([1, n_heads, 1, 1]));
            Some(B::float_mul(
                B::float_expand(
                    neg_distance::<B>(rel.clone(), dtype),
                    Shape::new([1, n_heads, rows, keys]),
                ),
                B::float_expand(slopes, Shape::new([1, n_heads, rows, keys])),
            ))
        }
        BiasKind::ByDistance { reach } => {
            let picked = B::float_select(bias.clone(), 1, distance_index::<B>(rel.clone(), reach));
            Some(B::float_reshape(
                picked,
                Shape::new([1, n_heads, rows, keys]),
            ))
        }
    }
}

/// True where a (query, key) of the tile is hidden: padding, or (causal) a later key.
/// `[batch, n_heads, rows, keys]`.
fn hidden<B: Backend>(
    rel: &IntTensor<B>,
    padding: Option<&BoolTensor<B>>,
    causal: bool,
    shape: [usize; 4],
) -> Option<BoolTensor<B>> {
    let [batch, n_heads, rows, keys] = shape;
    let device = rel.device();
    let bd = get_or_init_device_settings::<B>(&device).bool_dtype;
    let later = causal.then(|| {
        let later = B::int_greater_elem(rel.clone(), Scalar::from(0i64), bd);
        B::bool_expand(
            B::bool_reshape(later, Shape::new([1, 1, rows, keys])),
            Shape::new(shape),
        )
    });
    let padded = padding.map(|mask| {
        let mask = B::bool_slice(mask.clone(), &[Slice::from(..), Slice::from(0..keys)]);
        B::bool_expand(
            B::bool_reshape(mask, Shape::new([batch, 1, 1, keys])),
            Shape::new([batch, n_heads, rows, keys]),
        )
    });
    match (later, padded) {
        (Some(a), Some(b)) => Some(B::bool_or(a, b)),
        (a, b) => a.or(b),
    }
}

/// The tile's scores `[batch, n_heads, rows, keys]`, hidden entries at -inf, and `rel`.
#[allow(clippy::too_many_arguments)]
fn scores<B: Backend>(
    q_tile: FloatTensor<B>,
    k_keys: FloatTensor<B>,
    bias: &FloatTensor<B>,
    padding: Option<&BoolTensor<B>>,
    args: &TileArgs,
    tile: Tile,
    scale: f64,
) -> (FloatTensor<B>, IntTensor<B>) {
    let [batch, n_heads, _, _] = q_tile.shape().dims();
    let dtype = FloatDType::from(q_tile.dtype());
    let device = q_tile.device();
    let rel = relative::<B>(tile, args.offset, &device);
    let s = B::float_mul_scalar(
        B::float_matmul(q_tile, B::float_transpose(k_keys)),
        Scalar::from(scale),
    );
    let s = match bias_term::<B>(bias, &rel, args.kind, n_heads, dtype) {
        Some(term) => B::float_add(s, term),
        None => s,
    };
    let shape = [batch, n_heads, tile.rows, tile.keys];
    let s = match hidden::<B>(&rel, padding, args.causal, shape) {
        Some(mask) => B::float_mask_fill(s, mask, Scalar::from(f32::NEG_INFINITY)),
        None => s,
    };
    (s, rel)
}

fn scale_of(d_head: usize) -> f64 {
    1.0 / (d_head as f64).sqrt()
}

/// Output `[batch, n_heads, seq_q, d_head]` and log-sum-exp per query row
/// `[batch, n_heads, seq_q, 1]`. `q`: `[batch, n_heads, seq_q, d_head]`; `k`, `v`:
/// `[batch, n_heads, seq_k, d_head]`; `padding`: `[batch, seq_k]`, true at padding keys.
/// A query with no key to see gets a zero output.
pub(crate) fn forward<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    bias: &FloatTensor<B>,
    padding: Option<&BoolTensor<B>>,
    args: &TileArgs,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let [_, _, seq_q, d_head] = q.shape().dims();
    let [_, _, seq_k, _] = k.shape().dims();
    let finfo = q.dtype().finfo().expect("attention on a float tensor");
    let scale = scale_of(d_head);
    let mut outputs = Vec::new();
    let mut lses = Vec::new();
    for tile in tiles(args, seq_q, seq_k) {
        let q_tile = rows_of::<B>(q.clone(), tile.r0, tile.rows);
        let (s, _) = scores::<B>(
            q_tile,
            first_keys::<B>(&k, tile.keys),
            bias,
            padding,
            args,
            tile,
            scale,
        );
        let m = B::float_clamp_min(B::float_max_dim(s.clone(), 3), Scalar::from(finfo.min));
        let p = B::float_exp(B::float_sub(s, m.clone()));
        let l = B::float_clamp_min(B::float_sum_dim(p.clone(), 3), finfo.min_positive.into());
        let o = B::float_matmul(B::float_div(p, l.clone()), first_keys::<B>(&v, tile.keys));
        outputs.push(o);
        lses.push(B::float_add(m, B::float_log(l)));
    }
    (B::float_cat(outputs, 2), B::float_cat(lses, 2))
}

#[cfg(feature = "autodiff")]
/// The gradients the backward computes; `None` where the caller did not ask.
pub(crate) struct Grads<B: Backend> {
    pub q: Option<FloatTensor<B>>,
    pub k: Option<FloatTensor<B>>,
    pub v: Option<FloatTensor<B>>,
    pub bias: Option<FloatTensor<B>>,
}

#[cfg(feature = "autodiff")]
/// Which gradients to compute.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wanted {
    pub q: bool,
    pub k: bool,
    pub v: bool,
    pub bias: bool,
}

#[cfg(feature = "autodiff")]
/// Gradients of [`forward`]'s output from `grad` (`[batch, n_heads, seq_q, d_head]`),
/// recomputing each tile's probabilities from the saved log-sum-exp.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    bias: FloatTensor<B>,
    padding: Option<BoolTensor<B>>,
    output: FloatTensor<B>,
    lse: FloatTensor<B>,
    grad: FloatTensor<B>,
    args: &TileArgs,
    wanted: Wanted,
) -> Grads<B> {
    use burn::tensor::IndexingUpdateOp;

    let [batch, n_heads, seq_q, d_head] = q.shape().dims();
    let [_, _, seq_k, _] = k.shape().dims();
    let device = q.device();
    let dtype = FloatDType::from(q.dtype());
    let scale = scale_of(d_head);
    let wanted_bias = wanted.bias && args.kind != BiasKind::None;
    // Δ = rowsum(dO * O), [batch, n_heads, seq_q, 1]
    let delta = B::float_sum_dim(B::float_mul(grad.clone(), output), 3);
    let kv_shape = Shape::new([batch, n_heads, seq_k, d_head]);
    let mut dk = wanted
        .k
        .then(|| B::float_zeros(kv_shape.clone(), &device, dtype));
    let mut dv = wanted.v.then(|| B::float_zeros(kv_shape, &device, dtype));
    let mut dbias = wanted_bias.then(|| B::float_zeros(bias.shape(), &device, dtype));
    let mut dq = Vec::new();
    let add_keys = |acc: FloatTensor<B>, part: FloatTensor<B>, keys: usize| {
        if keys == seq_k {
            B::float_add(acc, part)
        } else {
            let window = [
                Slice::from(..),
                Slice::from(..),
                Slice::from(0..keys),
                Slice::from(..),
            ];
            let sum = B::float_add(B::float_slice(acc.clone(), &window), part);
            B::float_slice_assign(acc, &window, sum)
        }
    };
    for tile in tiles(args, seq_q, seq_k) {
        let q_tile = rows_of::<B>(q.clone(), tile.r0, tile.rows);
        let k_keys = first_keys::<B>(&k, tile.keys);
        let v_keys = first_keys::<B>(&v, tile.keys);
        let (s, rel) = scores::<B>(
            q_tile.clone(),
            k_keys.clone(),
            &bias,
            padding.as_ref(),
            args,
            tile,
            scale,
        );
        let p = B::float_exp(B::float_sub(
            s,
            rows_of::<B>(lse.clone(), tile.r0, tile.rows),
        ));
        let g = rows_of::<B>(grad.clone(), tile.r0, tile.rows);
        if let Some(acc) = dv.take() {
            let part = B::float_matmul(B::float_transpose(p.clone()), g.clone());
            dv = Some(add_keys(acc, part, tile.keys));
        }
        if !(wanted.q || wanted.k || wanted_bias) {
            continue;
        }
        let dp = B::float_matmul(g, B::float_transpose(v_keys));
        let ds = B::float_mul(
            p,
            B::float_sub(dp, rows_of::<B>(delta.clone(), tile.r0, tile.rows)),
        );
        if let Some(acc) = dbias.take() {
            // Summed over the batch: [n_heads, rows, keys]
            let ds_heads = B::float_reshape(
                B::float_sum_dim(ds.clone(), 0),
                Shape::new([n_heads, tile.rows, tile.keys]),
            );
            let part = match args.kind {
                BiasKind::Alibi => {
                    let d = B::float_reshape(
                        neg_distance::<B>(rel, dtype),
                        Shape::new([1, tile.rows, tile.keys]),
                    );
                    let d = B::float_expand(d, Shape::new([n_heads, tile.rows, tile.keys]));
                    let per_head = B::float_sum_dim(
                        B::float_reshape(
                            B::float_mul(ds_heads, d),
                            Shape::new([n_heads, tile.rows * tile.keys]),
                        ),
                        1,
                    );
                    B::float_add(acc, B::float_reshape(per_head, Shape::new([n_heads])))
                }
                BiasKind::ByDistance { reach } => B::float_select_assign(
                    acc,
                    1,
                    distance_index::<B>(rel, reach),
                    B::float_reshape(ds_heads, Shape::new([n_heads, tile.rows * tile.keys])),
                    IndexingUpdateOp::Add,
                ),
                BiasKind::None => acc,
            };
            dbias = Some(part);
        }
        if wanted.q {
            dq.push(B::float_mul_scalar(
                B::float_matmul(ds.clone(), k_keys),
                Scalar::from(scale),
            ));
        }
        if let Some(acc) = dk.take() {
            let part = B::float_mul_scalar(
                B::float_matmul(B::float_transpose(ds), q_tile),
                Scalar::from(scale),
            );
            dk = Some(add_keys(acc, part, tile.keys));
        }
    }
    Grads {
        q: wanted.q.then(|| B::float_cat(dq, 2)),
        k: dk,
        v: dv,
        bias: dbias,
    }
}

/// A score bias in compact form, for [`tiled_attention`].
#[derive(Clone, Debug)]
pub enum AttentionBias {
    /// No bias (no positions, or RoPE's rotated queries and keys).
    None,
    /// ALiBi: `[n_heads]` slopes; the bias of (query i, key j) is `-m_h |j - i|`.
    Alibi(burn::tensor::Tensor<1>),
    /// A bias per clamped relative distance: `[n_heads, 2 reach + 1]`, entry
    /// `clamp(j - i, -reach, reach) + reach` (T5's buckets, looked up once per call). Gradients
    /// flow into `bias`, and from there into whatever it was gathered from.
    ByDistance {
        /// `[n_heads, 2 reach + 1]`.
        bias: burn::tensor::Tensor<2>,
        /// The largest distance with a bias of its own.
        reach: usize,
    },
}

/// Softmax attention of `q` (`[batch, n_heads, seq_q, d_head]`, queries at positions
/// `offset..offset + seq_q`) over `k`, `v` (`[batch, n_heads, seq_k, d_head]`, keys at
/// `0..seq_k`), `tile` query rows at a time, scores scaled by `1 / sqrt(d_head)`, plus `bias`;
/// `key_padding` (`[batch, seq_k]`) is true at keys no query may see, `causal` hides the keys
/// after each query. A query that sees no key gets a zero output (and zero gradients).
///
/// Memory is one tile's scores, `batch x n_heads x tile x seq_k`, in the forward and in the
/// backward: on an autodiff device the op is one graph node that keeps its inputs, its output
/// and one log-sum-exp per query row, and recomputes each tile's probabilities in the backward
/// (FlashAttention-2's scheme, here over query tiles). On a device whose backend this crate's
/// features leave out it runs the same tiles as plain tensor ops (gradients then come from the
/// ops, one tile's scores kept per tile).
///
/// # Shapes
///
/// - `q`: `[batch, n_heads, seq_q, d_head]`; `k`, `v`: `[batch, n_heads, seq_k, d_head]`
/// - `key_padding`: `[batch, seq_k]`
/// - output: `[batch, n_heads, seq_q, d_head]`
///
/// # Panics
///
/// On shapes that do not fit together as above, or a bias whose first dimension is not
/// `n_heads`.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_kernels::{AttentionBias, tiled_attention};
///
/// let device = Device::flex().autodiff();
/// let q = Tensor::<4>::ones([1, 2, 5, 4], &device).require_grad();
/// let slopes = Tensor::<1>::from_floats([0.5, 0.25], &device);
/// let out = tiled_attention(q.clone(), q.clone(), q.clone(), &AttentionBias::Alibi(slopes), None, true, 0, 2);
/// assert_eq!(out.dims(), [1, 2, 5, 4]);
/// let grads = out.sum().backward();
/// assert_eq!(q.grad(&grads).unwrap().dims(), [1, 2, 5, 4]);
/// ```
#[allow(clippy::too_many_arguments)]
pub fn tiled_attention(
    q: burn::tensor::Tensor<4>,
    k: burn::tensor::Tensor<4>,
    v: burn::tensor::Tensor<4>,
    bias: &AttentionBias,
    key_padding: Option<burn::tensor::Tensor<2, burn::tensor::Bool>>,
    causal: bool,
    offset: usize,
    tile: usize,
) -> burn::tensor::Tensor<4> {
    use burn::backend::Dispatch;
    use burn::tensor::Tensor;

    let [batch, n_heads, _, d_head] = q.dims();
    let [kb, kh, seq_k, kd] = k.dims();
    assert!(
        [kb, kh, kd] == [batch, n_heads, d_head] && v.dims() == k.dims(),
        "tiled_attention: q {:?}, k {:?} and v {:?} do not fit together \
         (q [batch, n_heads, seq_q, d_head], k and v [batch, n_heads, seq_k, d_head])",
        q.dims(),
        k.dims(),
        v.dims()
    );
    if let Some(mask) = &key_padding {
        assert_eq!(
            mask.dims(),
            [batch, seq_k],
            "tiled_attention: key_padding must be [batch, seq_k] = [{batch}, {seq_k}]"
        );
    }
    let dtype = q.dtype();
    let (kind, bias) = match bias {
        AttentionBias::None => (
            BiasKind::None,
            Tensor::<1>::zeros([1], &q.device()).into_dispatch(),
        ),
        AttentionBias::Alibi(slopes) => {
            assert_eq!(
                slopes.dims(),
                [n_heads],
                "tiled_attention: one ALiBi slope per head"
            );
            (BiasKind::Alibi, slopes.clone().cast(dtype).into_dispatch())
        }
        AttentionBias::ByDistance { bias, reach } => {
            assert_eq!(
                bias.dims(),
                [n_heads, 2 * reach + 1],
                "tiled_attention: the bias by distance must be [n_heads, 2 reach + 1]"
            );
            let bias = bias.clone().cast(dtype).into_dispatch();
            (BiasKind::ByDistance { reach: *reach }, bias)
        }
    };
    let args = TileArgs {
        kind,
        causal,
        offset,
        tile: tile.max(1),
        padded: key_padding.is_some(),
    };
    if crate::fused_covers(&q.device()) {
        let padding = key_padding
            .unwrap_or_else(|| Tensor::<2, burn::tensor::Bool>::empty([1, 1], &q.device()))
            .into_dispatch();
        Tensor::from_dispatch(<Dispatch as crate::PositionalKernels>::tiled_attention(
            q.into_dispatch(),
            k.into_dispatch(),
            v.into_dispatch(),
            bias,
            padding,
            args,
        ))
    } else {
        let padding = key_padding.map(Tensor::into_dispatch);
        let (output, _) = forward::<Dispatch>(
            q.into_dispatch(),
            k.into_dispatch(),
            v.into_dispatch(),
            &bias,
            padding.as_ref(),
            &args,
        );
        Tensor::from_dispatch(output)
    }
}
