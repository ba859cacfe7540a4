//! One tile of the attention: which queries and keys it covers, their relative positions, the
//! bias and the mask computed from them, and the grouped-head products. Written in backend ops
//! on primitives, so every backend (and the autodiff op's backward) runs the same code.

use burn::backend::{
    Backend, Scalar, Slice, TensorMetadata, get_or_init_device_settings,
    tensor::{BoolTensor, FloatTensor, IntTensor},
};
use burn::tensor::{FloatDType, Shape};

use super::Window;

/// The bias's form. The bias tensor itself travels as an argument of the op (so autodiff can
/// track it); with [`BiasKind::None`] it is any one-element placeholder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BiasKind {
    /// No bias.
    None,
    /// `[n_heads]` slopes: the bias of (query i, key j) is `-m_h |rel|`.
    Alibi,
    /// `[n_heads, 2 reach + 1]`: the bias of (query i, key j) is entry
    /// `clamp(rel, -reach, reach) + reach`.
    ByDistance {
        /// The largest distance with a bias of its own.
        reach: usize,
    },
}

/// What the op needs besides its tensors. `Clone + Send + Sync + 'static`: the `Fusion`
/// wrapper captures it for deferred execution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TileArgs {
    /// The bias's form.
    pub kind: BiasKind,
    /// Whether query i sees only the keys at or before its own position.
    pub causal: bool,
    /// The keys each query sees around its own position.
    pub window: Option<Window>,
    /// Sequential positions: query i at `query_offset + i`, key j at `key_offset + j`.
    pub query_offset: usize,
    /// See `query_offset`.
    pub key_offset: usize,
    /// Whether the positions argument holds explicit positions `[1 or batch, seq_q + seq_k]`
    /// (queries first, then keys); else it is a placeholder and positions are sequential.
    pub explicit: bool,
    /// Whether the segments argument holds segment ids `[batch, seq_q + seq_k]`.
    pub segments: bool,
    /// Whether the padding argument is a `[batch, seq_k]` mask (else a placeholder).
    pub padded: bool,
    /// Query rows per tile (at least 1).
    pub tile: usize,
    /// The factor of `q . k`.
    pub scale: f64,
    /// `c` of `c tanh(s / c)`, if any.
    pub softcap: Option<f64>,
    /// Whether the caller reads the log-sum-exp output (the autodiff op's forward). The
    /// kernels always write it; the tensor-op default body computes it only when asked.
    pub lse: bool,
    /// The CubeCL kernel the caller asked for (captured when the op is called, so that a
    /// lazily executed op runs its caller's choice); unread elsewhere.
    pub variant: super::FlashVariant,
    /// Into how many runs the shared forward splits each tile's keys, where a test forces it
    /// (captured when the op is called, as `variant`); `None`: by the grid and the device.
    pub key_splits: Option<usize>,
}

/// The tensors besides q, k, v that a tile reads: explicit positions, segment ids, padding.
#[derive(Clone, Debug)]
pub(crate) struct Extras<B: Backend> {
    /// `[1 or batch, seq_q + seq_k]`.
    pub positions: Option<IntTensor<B>>,
    /// `[batch, seq_q + seq_k]`.
    pub segments: Option<IntTensor<B>>,
    /// `[batch, seq_k]`, true at padding.
    pub padding: Option<BoolTensor<B>>,
}

/// One tile: query rows `r0..r0 + rows`, keys `k0..k1`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tile {
    pub r0: usize,
    pub rows: usize,
    pub k0: usize,
    pub k1: usize,
}

impl Tile {
    pub fn keys(&self) -> usize {
        self.k1 - self.k0
    }
}

/// The tiles of `seq_q` queries over `seq_k >= 1` keys. With sequential positions a tile's keys
/// are those its queries can see (causal: none after its last query; a window: none outside
/// it), so a windowed tile holds `rows + window` keys whatever the sequence's length. The range
/// is an optimisation only: the mask decides what is seen. A tile that sees no key keeps one,
/// masked, so every product has a key to run over.
pub(crate) fn tiles(args: &TileArgs, seq_q: usize, seq_k: usize) -> Vec<Tile> {
    let step = args.tile.max(1);
    (0..seq_q)
        .step_by(step)
        .map(|r0| {
            let rows = step.min(seq_q - r0);
            let (mut k0, mut k1) = (0, seq_k);
            if !args.explicit {
                let first = (args.query_offset + r0) as i64;
                let last = first + rows as i64 - 1;
                let key = args.key_offset as i64;
                let mut hi = i64::MAX;
                let mut lo = i64::MIN;
                if args.causal {
                    hi = last;
                }
                if let Some(w) = args.window {
                    hi = hi.min(last.saturating_add(w.after as i64));
                    lo = first.saturating_sub(w.before as i64);
                }
                let clamp = |p: i64| p.clamp(0, seq_k as i64) as usize;
                k0 = clamp(lo.saturating_sub(key));
                k1 = clamp(hi.saturating_sub(key).saturating_add(1));
                if k1 <= k0 {
                    k0 = k0.min(seq_k - 1);
                    k1 = k0 + 1;
                }
            }
            Tile { r0, rows, k0, k1 }
        })
        .collect()
}

/// Dimension 2 of a `[batch, heads, n, d]` tensor, rows `from..from + len`.
pub(crate) fn rows_of<B: Backend>(t: FloatTensor<B>, from: usize, len: usize) -> FloatTensor<B> {
    let [_, _, n, _] = t.shape().dims();
    if from == 0 && len == n {
        return t;
    }
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

/// `key position - query position` of the tile, `[1 or batch, rows, keys]` ints.
fn relative<B: Backend>(
    tile: Tile,
    args: &TileArgs,
    positions: Option<&IntTensor<B>>,
    seq_q: usize,
    device: &B::Device,
) -> IntTensor<B> {
    let (rows, keys) = (tile.rows, tile.keys());
    let (queries, keys_at, n) = match positions.filter(|_| args.explicit) {
        Some(positions) => {
            let [n, _] = positions.shape().dims();
            let queries = B::int_slice(
                positions.clone(),
                &[Slice::from(..), Slice::from(tile.r0..tile.r0 + rows)],
            );
            let keys_at = B::int_slice(
                positions.clone(),
                &[
                    Slice::from(..),
                    Slice::from(seq_q + tile.k0..seq_q + tile.k1),
                ],
            );
            (queries, keys_at, n)
        }
        None => {
            let int = get_or_init_device_settings::<B>(device).int_dtype;
            let first = (args.query_offset + tile.r0) as i64;
            let key = (args.key_offset + tile.k0) as i64;
            (
                B::int_arange(first..first + rows as i64, device, int),
                B::int_arange(key..key + keys as i64, device, int),
                1,
            )
        }
    };
    let shape = Shape::new([n, rows, keys]);
    B::int_sub(
        B::int_expand(
            B::int_reshape(keys_at, Shape::new([n, 1, keys])),
            shape.clone(),
        ),
        B::int_expand(B::int_reshape(queries, Shape::new([n, rows, 1])), shape),
    )
}

/// `[n * rows * keys]`: the bias column of each (query, key) of a `ByDistance` bias.
pub(crate) fn distance_index<B: Backend>(rel: IntTensor<B>, reach: usize) -> IntTensor<B> {
    let [n, rows, keys] = rel.shape().dims();
    let reach = reach as i64;
    let index = B::int_add_scalar(
        B::int_clamp(rel, Scalar::from(-reach), Scalar::from(reach)),
        Scalar::from(reach),
    );
    B::int_reshape(index, Shape::new([n * rows * keys]))
}

/// `-|rel|` as floats `[n, 1, rows, keys]`: ALiBi's bias per unit of slope.
pub(crate) fn neg_distance<B: Backend>(rel: IntTensor<B>, dtype: FloatDType) -> FloatTensor<B> {
    let [n, rows, keys] = rel.shape().dims();
    let d = B::float_neg(B::int_into_float(B::int_abs(rel), dtype));
    B::float_reshape(d, Shape::new([n, 1, rows, keys]))
}

/// The tile's bias `[1 or batch, n_heads, rows, keys]`, if any.
fn bias_term<B: Backend>(
    bias: &FloatTensor<B>,
    rel: &IntTensor<B>,
    kind: BiasKind,
    n_heads: usize,
    dtype: FloatDType,
) -> Option<FloatTensor<B>> {
    let [n, rows, keys] = rel.shape().dims();
    let shape = Shape::new([n, n_heads, rows, keys]);
    match kind {
        BiasKind::None => None,
        BiasKind::Alibi => {
            let slopes = B::float_reshape(bias.clone(), Shape::new([1, n_heads, 1, 1]));
            Some(B::float_mul(
                B::float_expand(neg_distance::<B>(rel.clone(), dtype), shape.clone()),
                B::float_expand(slopes, shape),
            ))
        }
        BiasKind::ByDistance { reach } => {
            let picked = B::float_select(bias.clone(), 1, distance_index::<B>(rel.clone(), reach));
            let picked = B::float_reshape(picked, Shape::new([n_heads, n, rows, keys]));
            Some(B::float_swap_dims(picked, 0, 1))
        }
    }
}

/// True where a (query, key) of the tile is hidden, `[batch, n_heads, rows, keys]`.
fn hidden<B: Backend>(
    rel: &IntTensor<B>,
    extras: &Extras<B>,
    args: &TileArgs,
    tile: Tile,
    seq_q: usize,
    shape: [usize; 4],
) -> Option<BoolTensor<B>> {
    let [batch, _, rows, keys] = shape;
    let device = rel.device();
    let bd = get_or_init_device_settings::<B>(&device).bool_dtype;
    let per_batch = Shape::new([batch, rows, keys]);
    let mut masks: Vec<BoolTensor<B>> = Vec::new();
    if args.causal {
        masks.push(B::int_greater_elem(rel.clone(), Scalar::from(0i64), bd));
    }
    if let Some(w) = args.window {
        masks.push(B::int_lower_elem(
            rel.clone(),
            Scalar::from(-(w.before.min(i64::MAX as usize) as i64)),
            bd,
        ));
        if !args.causal {
            masks.push(B::int_greater_elem(
                rel.clone(),
                Scalar::from(w.after.min(i64::MAX as usize) as i64),
                bd,
            ));
        }
    }
    if let Some(segments) = extras.segments.as_ref().filter(|_| args.segments) {
        let queries = B::int_slice(
            segments.clone(),
            &[Slice::from(..), Slice::from(tile.r0..tile.r0 + rows)],
        );
        let keys_of = B::int_slice(
            segments.clone(),
            &[
                Slice::from(..),
                Slice::from(seq_q + tile.k0..seq_q + tile.k1),
            ],
        );
        masks.push(B::int_not_equal(
            B::int_expand(
                B::int_reshape(queries, Shape::new([batch, rows, 1])),
                per_batch.clone(),
            ),
            B::int_expand(
                B::int_reshape(keys_of, Shape::new([batch, 1, keys])),
                per_batch.clone(),
            ),
            bd,
        ));
    }
    if let Some(padding) = extras.padding.as_ref().filter(|_| args.padded) {
        let padding = B::bool_slice(
            padding.clone(),
            &[Slice::from(..), Slice::from(tile.k0..tile.k1)],
        );
        masks.push(B::bool_reshape(padding, Shape::new([batch, 1, keys])));
    }
    // Masks from positions alone stay `[1, rows, keys]` (one for the whole batch) until one
    // that differs per sequence joins them: no per-sequence copy of a causal mask.
    let n = masks.iter().map(|m| m.shape().dims::<3>()[0]).max()?;
    let full = [n, rows, keys];
    let combined = masks
        .into_iter()
        .map(|m| {
            if m.shape().dims::<3>() == full {
                m
            } else {
                B::bool_expand(m, Shape::new(full))
            }
        })
        .reduce(B::bool_or)?;
    Some(B::bool_expand(
        B::bool_reshape(combined, Shape::new([n, 1, rows, keys])),
        Shape::new(shape),
    ))
}

/// `[batch, n_heads, rows, n]` -> `[batch, n_kv_heads, group * rows, n]`: the queries (or
/// score rows) of the heads that share one key/value head, stacked. Query head `h` uses kv
/// head `h / group` (transformers' `repeat_kv`), so this is a reshape.
pub(crate) fn to_groups<B: Backend>(t: FloatTensor<B>, n_kv_heads: usize) -> FloatTensor<B> {
    let [batch, n_heads, rows, n] = t.shape().dims();
    if n_heads == n_kv_heads {
        return t;
    }
    let group = n_heads / n_kv_heads;
    B::float_reshape(t, Shape::new([batch, n_kv_heads, group * rows, n]))
}

/// The inverse of [`to_groups`].
pub(crate) fn from_groups<B: Backend>(t: FloatTensor<B>, n_heads: usize) -> FloatTensor<B> {
    let [batch, n_kv_heads, group_rows, n] = t.shape().dims();
    if n_heads == n_kv_heads {
        return t;
    }
    let rows = group_rows / (n_heads / n_kv_heads);
    B::float_reshape(t, Shape::new([batch, n_heads, rows, n]))
}

/// `a b` for `a`: `[batch, n_heads, rows, m]` and `b`: `[batch, n_kv_heads, m, n]`, each head
/// of `a` with its key/value head of `b`: `[batch, n_heads, rows, n]`. No copy of `b`.
pub(crate) fn grouped_matmul<B: Backend>(a: FloatTensor<B>, b: FloatTensor<B>) -> FloatTensor<B> {
    let [_, n_heads, _, _] = a.shape().dims();
    let [_, n_kv_heads, _, _] = b.shape().dims();
    from_groups::<B>(B::float_matmul(to_groups::<B>(a, n_kv_heads), b), n_heads)
}

#[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
/// `a^T b` summed over the heads of each group: `a`: `[batch, n_heads, rows, m]`, `b`:
/// `[batch, n_heads, rows, n]`, output `[batch, n_kv_heads, m, n]` (the gradient of keys and
/// values shared by a group).
pub(crate) fn grouped_transpose_matmul<B: Backend>(
    a: FloatTensor<B>,
    b: FloatTensor<B>,
    n_kv_heads: usize,
) -> FloatTensor<B> {
    B::float_matmul(
        B::float_transpose(to_groups::<B>(a, n_kv_heads)),
        to_groups::<B>(b, n_kv_heads),
    )
}

/// What a tile's scores add and hide, from positions alone: the bias, the mask and the relative
/// positions they were measured with.
pub(crate) struct Geometry<B: Backend> {
    /// `[1 or batch, n_heads, rows, keys]`.
    pub bias: Option<FloatTensor<B>>,
    /// `[batch, n_heads, rows, keys]`, true where hidden.
    pub mask: Option<BoolTensor<B>>,
    /// key position - query position, `[1 or batch, rows, keys]`.
    pub rel: IntTensor<B>,
}

/// The tile's bias, mask and relative positions for scores of `shape`
/// (`[batch, n_heads, rows, keys]`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn geometry<B: Backend>(
    bias: &FloatTensor<B>,
    extras: &Extras<B>,
    args: &TileArgs,
    tile: Tile,
    seq_q: usize,
    shape: [usize; 4],
    dtype: FloatDType,
    device: &B::Device,
) -> Geometry<B> {
    let rel = relative::<B>(tile, args, extras.positions.as_ref(), seq_q, device);
    Geometry {
        bias: bias_term::<B>(bias, &rel, args.kind, shape[1], dtype),
        mask: hidden::<B>(&rel, extras, args, tile, seq_q, shape),
        rel,
    }
}

/// `scale q.k`, softcapped: the scores `[batch, n_heads, rows, keys]` before bias and mask, and
/// `tanh(scale q.k / c)` where a softcap `c` is set (the backward's `1 - t^2`).
pub(crate) fn products<B: Backend>(
    q_tile: FloatTensor<B>,
    k_keys: FloatTensor<B>,
    args: &TileArgs,
) -> (FloatTensor<B>, Option<FloatTensor<B>>) {
    let s = B::float_mul_scalar(
        grouped_matmul::<B>(q_tile, B::float_transpose(k_keys)),
        Scalar::from(args.scale),
    );
    match args.softcap {
        Some(c) => {
            let t = B::float_tanh(B::float_div_scalar(s, Scalar::from(c)));
            (B::float_mul_scalar(t.clone(), Scalar::from(c)), Some(t))
        }
        None => (s, None),
    }
}

/// A tile's scores written out, and what the backward needs to differentiate them.
#[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
pub(crate) struct Scores<B: Backend> {
    /// `[batch, n_heads, rows, keys]`: capped, biased, hidden entries at -inf.
    pub s: FloatTensor<B>,
    /// `tanh(scale q.k / c)` where a softcap is set.
    pub capped: Option<FloatTensor<B>>,
    /// key position - query position, `[1 or batch, rows, keys]`.
    pub rel: IntTensor<B>,
}

/// The tile's full scores (the autodiff op's forward and backward). `q_tile`:
/// `[batch, n_heads, rows, d]`; `k_keys`: `[batch, n_kv_heads, keys, d]`.
pub(crate) fn scores<B: Backend>(
    q_tile: FloatTensor<B>,
    k_keys: FloatTensor<B>,
    bias: &FloatTensor<B>,
    extras: &Extras<B>,
    args: &TileArgs,
    tile: Tile,
    seq_q: usize,
) -> Scores<B> {
    let [batch, n_heads, rows, _] = q_tile.shape().dims();
    let dtype = FloatDType::from(q_tile.dtype());
    let device = q_tile.device();
    let shape = [batch, n_heads, rows, tile.keys()];
    let geometry = geometry::<B>(bias, extras, args, tile, seq_q, shape, dtype, &device);
    let (mut s, capped) = products::<B>(q_tile, k_keys, args);
    if let Some(term) = geometry.bias {
        s = B::float_add(s, term);
    }
    if let Some(mask) = geometry.mask {
        s = B::float_mask_fill(s, mask, Scalar::from(f32::NEG_INFINITY));
    }
    Scores {
        s,
        capped,
        rel: geometry.rel,
    }
}

impl<B: Backend> Extras<B> {
    /// The op's tensor arguments, placeholders dropped as `args` says.
    pub(crate) fn new(
        padding: BoolTensor<B>,
        positions: IntTensor<B>,
        segments: IntTensor<B>,
        args: &TileArgs,
    ) -> Self {
        Self {
            positions: args.explicit.then_some(positions),
            segments: args.segments.then_some(segments),
            padding: args.padded.then_some(padding),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(causal: bool, window: Option<Window>, query_offset: usize, tile: usize) -> TileArgs {
        TileArgs {
            kind: BiasKind::None,
            causal,
            window,
            query_offset,
            key_offset: 0,
            explicit: false,
            segments: false,
            padded: false,
            tile,
            scale: 1.0,
            softcap: None,
            lse: false,
            variant: crate::attention::FlashVariant::Auto,
            key_splits: None,
        }
    }

    /// A windowed tile holds its rows plus the window's keys, wherever it sits: the work and
    /// memory of a windowed attention grow with the sequence, not its square.
    #[test]
    fn windowed_tiles_hold_only_the_keys_they_see() {
        let w = Window::hf(4); // 3 keys back
        let cut = tiles(&args(true, Some(w), 0, 2), 10, 10);
        let ranges: Vec<_> = cut.iter().map(|t| (t.r0, t.k0, t.k1)).collect();
        assert_eq!(
            ranges,
            [(0, 0, 2), (2, 0, 4), (4, 1, 6), (6, 3, 8), (8, 5, 10)]
        );
        // Bidirectional: 1 back, 2 ahead, clamped to the keys there are.
        let w = Window {
            before: 1,
            after: 2,
        };
        let cut = tiles(&args(false, Some(w), 0, 3), 7, 7);
        let ranges: Vec<_> = cut.iter().map(|t| (t.r0, t.k0, t.k1)).collect();
        assert_eq!(ranges, [(0, 0, 5), (3, 2, 7), (6, 5, 7)]);
        // A causal tile after a cache of 5 keys sees the cache and itself.
        let cut = tiles(&args(true, None, 5, 4), 7, 12);
        let ranges: Vec<_> = cut.iter().map(|t| (t.r0, t.k0, t.k1)).collect();
        assert_eq!(ranges, [(0, 0, 9), (4, 0, 12)]);
    }
}
