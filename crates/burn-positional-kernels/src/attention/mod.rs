//! Softmax attention in tiles of query rows with positions in compact form, and its
//! FlashAttention-2 style backward: the forward keeps, besides its output, one log-sum-exp per
//! query row; the backward recomputes each tile's probabilities from it. Neither direction
//! holds more than one tile's `[batch, n_heads, rows, keys]` scores at a time, so memory grows
//! with the sequence, not its square, in training too.
//!
//! The forward is one kernel call on the backends the kernels cover (`cube/`: CubeCL, for
//! wgpu and CUDA, in a register and a shared-memory variant, see [`FlashVariant`]; `host.rs`:
//! flex and ndarray), which compute the same per-score formula below in registers, shared
//! memory or a block of 64 keys; the tensor-op tiles (`pass.rs`, `tile.rs`) are their
//! slow twin ([`reference_attention`]) and the path of every other backend, and the backward
//! of all.
//!
//! For the tile of query rows `r0..r0 + rows` over the keys it can see:
//!
//! ```text
//! rel = key position - query position     (sequential, or explicit per-token positions)
//! S   = scale q k^T                       (q's heads grouped over k's: no copy of k or v)
//! S   = c tanh(S / c)                     (a softcap c, if any)
//! S   = S + bias(rel)                     (ALiBi -m_h |rel|, or a table per clamped distance)
//! S   = -inf where hidden                 (causal, a window, key padding, another segment)
//! m   = max(S) clamped to the dtype's lowest finite value      (a fully hidden row: finite)
//! l   = sum(exp(S - m)) clamped to the smallest positive normal
//! O   = exp(S - m) / l . v;   lse = m + ln l
//! ```
//!
//! The backward is in `pass.rs`; the tile's geometry (which keys, `rel`, bias, mask, the
//! grouped products) in `tile.rs`.
//!
//! Past 700 lines for one reason to change: the op's interface. The options a caller builds,
//! their checks and the extension's default bodies and output metadata for both directions
//! all follow the op's arguments; the kernels live in the submodules.

mod boundaries;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) mod cube;
#[cfg(any(feature = "flex", feature = "ndarray"))]
pub(crate) mod host;
#[cfg(any(feature = "flex", feature = "ndarray"))]
pub(crate) mod host_backward;
mod pass;
mod tile;
mod variant;

pub use boundaries::{FlashBoundaries, flash_boundaries};
pub(crate) use pass::forward;
pub(crate) use pass::{Saved, backward};
pub(crate) use tile::{BiasKind, Extras, TileArgs};
pub use variant::{
    FLASH_VARIANT_ENV, FlashVariant, flash_variant, flash_variant_for, set_flash_variant,
};
#[cfg(feature = "testing")]
pub use variant::{
    flash_blocked_plane_launches, flash_variant_backward_launches, flash_variant_launches,
    set_flash_planes_forced, set_thread_flash_key_splits, set_thread_flash_variant,
};

use burn::tensor::{Bool, Int, Tensor};

/// Floats one tile's scores may hold when the tile size is left to the op:
/// `batch x n_heads x rows x keys <= TILE_VALUES` (16 MiB of f32), at least one row.
pub(crate) const TILE_VALUES: usize = 1 << 22;

/// A score bias in compact form: what the `bias` of [`AttendOptions`] adds to each score from the
/// relative position `rel = key position - query position`.
#[derive(Clone, Debug, Default)]
pub enum AttentionBias {
    /// No bias (no positions, or RoPE's rotated queries and keys).
    #[default]
    None,
    /// ALiBi: `[n_heads]` slopes; the bias of (query i, key j) is `-m_h |rel|`.
    Alibi(Tensor<1>),
    /// A bias per clamped relative distance: `[n_heads, 2 reach + 1]`, entry
    /// `clamp(rel, -reach, reach) + reach` (T5's buckets, looked up once per call). Gradients
    /// flow into `bias`, and from there into whatever it was gathered from.
    ByDistance {
        /// `[n_heads, 2 reach + 1]`.
        bias: Tensor<2>,
        /// The largest distance with a bias of its own.
        reach: usize,
    },
}

/// The keys a query sees around its own position `p`: those at `p - before ..= p + after`
/// (with a causal mask, `after` has no effect). Measured with the positions of the call, so a
/// window follows explicit positions too.
///
/// Hugging Face's `sliding_window = w` (Mistral, Gemma 2/3, gpt-oss, Qwen 2) lets a query see
/// itself and the `w - 1` keys before it: [`Window::hf`]`(w)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    /// Keys seen before the query's position.
    pub before: usize,
    /// Keys seen after it.
    pub after: usize,
}

impl Window {
    /// Transformers' `sliding_window = w`: the query and the `w - 1` keys before it
    /// (`q - k < w`). `w = 0` sees nothing, as transformers' mask.
    pub fn hf(sliding_window: usize) -> Self {
        match sliding_window {
            0 => Self {
                before: 0,
                after: 0,
            },
            w => Self {
                before: w - 1,
                after: 0,
            },
        }
    }

    /// `w` keys on each side (bidirectional local attention, for encoders).
    pub fn symmetric(w: usize) -> Self {
        Self {
            before: w,
            after: w,
        }
    }
}

/// Where the queries and keys sit.
#[derive(Clone, Debug)]
// Built once per call and passed by reference: boxing the explicit tensors would only change
// the public enum.
#[allow(clippy::large_enum_variant)]
pub enum AttentionPositions {
    /// Query `i` at `query + i`, key `j` at `key + j`: a whole sequence (both 0), a decoding
    /// step (`query` = the cached length), a rolling cache (`key` = the first kept position).
    Sequential {
        /// Position of the first query.
        query: usize,
        /// Position of the first key.
        key: usize,
    },
    /// One position per token, `[batch or 1, seq_q]` and `[batch or 1, seq_k]` ints: packed
    /// sequences (positions restarting at each document), left padding.
    Explicit {
        /// `[batch or 1, seq_q]`.
        query: Tensor<2, Int>,
        /// `[batch or 1, seq_k]`.
        key: Tensor<2, Int>,
    },
}

impl Default for AttentionPositions {
    fn default() -> Self {
        Self::Sequential { query: 0, key: 0 }
    }
}

/// Everything [`tiled_attention`] takes besides `q`, `k` and `v`, built with its methods from
/// [`AttendOptions::new`] (no bias, no mask, positions from 0, scale `1 / sqrt(d_head)`).
#[derive(Clone, Debug, Default)]
pub struct AttendOptions {
    /// A bias in compact form.
    pub bias: AttentionBias,
    /// Whether a query sees only keys at or before its own position.
    pub causal: bool,
    /// A sliding window, if any.
    pub window: Option<Window>,
    /// `[batch, seq_k]`, true at keys no query may see.
    pub key_padding: Option<Tensor<2, Bool>>,
    /// Segment ids `[batch, seq_q]` and `[batch, seq_k]`: a query sees only keys of its own
    /// segment (packed documents).
    pub segments: Option<(Tensor<2, Int>, Tensor<2, Int>)>,
    /// Where queries and keys sit.
    pub positions: AttentionPositions,
    /// The factor of `q . k`; `1 / sqrt(d_head)` when `None`. T5 uses 1; DeepSeek V2/V3
    /// `mscale^2 / sqrt(d_head)`.
    pub scale: Option<f64>,
    /// Scores become `c tanh(s / c)` before the bias and masks (Gemma 2's
    /// `attn_logit_softcapping`).
    pub softcap: Option<f64>,
    /// Query rows per tile; tiles of at most 2^22 scores
    /// (`batch x n_heads x rows x keys`, 16 MiB of f32) when `None`.
    pub tile_rows: Option<usize>,
}

impl AttendOptions {
    /// No bias, no mask, positions from 0, the default scale.
    pub fn new() -> Self {
        Self::default()
    }

    /// With a score bias in compact form.
    pub fn bias(mut self, bias: AttentionBias) -> Self {
        self.bias = bias;
        self
    }

    /// With (or without) the causal mask.
    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    /// With a sliding window.
    pub fn window(mut self, window: Window) -> Self {
        self.window = Some(window);
        self
    }

    /// With a key padding mask `[batch, seq_k]`, true at padding.
    pub fn key_padding(mut self, mask: Tensor<2, Bool>) -> Self {
        self.key_padding = Some(mask);
        self
    }

    /// With segment ids for queries `[batch, seq_q]` and keys `[batch, seq_k]` (for
    /// self-attention over one packed row, the same tensor twice).
    pub fn segments(mut self, query: Tensor<2, Int>, key: Tensor<2, Int>) -> Self {
        self.segments = Some((query, key));
        self
    }

    /// Queries from position `offset`, keys from 0 (a decoding step over a full cache).
    pub fn offset(mut self, offset: usize) -> Self {
        self.positions = AttentionPositions::Sequential {
            query: offset,
            key: 0,
        };
        self
    }

    /// Sequential positions from `query` for the queries and `key` for the keys.
    pub fn sequential(mut self, query: usize, key: usize) -> Self {
        self.positions = AttentionPositions::Sequential { query, key };
        self
    }

    /// Explicit positions, `[batch or 1, seq_q]` and `[batch or 1, seq_k]`.
    pub fn positions(mut self, query: Tensor<2, Int>, key: Tensor<2, Int>) -> Self {
        self.positions = AttentionPositions::Explicit { query, key };
        self
    }

    /// With the factor of `q . k`.
    pub fn scale(mut self, scale: f64) -> Self {
        self.scale = Some(scale);
        self
    }

    /// With a softcap `c`: scores `c tanh(s / c)`.
    pub fn softcap(mut self, softcap: f64) -> Self {
        self.softcap = Some(softcap);
        self
    }

    /// With `rows` query rows per tile.
    pub fn tile_rows(mut self, rows: usize) -> Self {
        self.tile_rows = Some(rows);
        self
    }
}

/// Rows per tile: `requested`, or as many as [`TILE_VALUES`] scores allow (a windowed tile
/// holds its rows plus the window's span of keys; any other tile all `seq_k` keys).
fn tile_rows(
    requested: Option<usize>,
    batch: usize,
    n_heads: usize,
    seq_k: usize,
    args: &TileArgs,
) -> usize {
    if let Some(rows) = requested {
        return rows.max(1);
    }
    let budget = (TILE_VALUES / (batch * n_heads).max(1)) as f64;
    let rows = match args.window.filter(|_| !args.explicit) {
        // rows x (rows + span) <= budget
        Some(w) => {
            let span = (w
                .before
                .saturating_add(if args.causal { 0 } else { w.after }))
            .min(seq_k) as f64;
            ((span * span + 4.0 * budget).sqrt() - span) / 2.0
        }
        None => budget / seq_k.max(1) as f64,
    };
    (rows as usize).max(1)
}

/// Softmax attention of `q` over `k`, `v` with positions in compact form (see
/// [`AttendOptions`]): grouped heads without copying keys or values, a bias computed from
/// relative positions inside each tile of query rows, masks from positions (causal, a window,
/// segments) and key padding, any scale and a softcap. A query that sees no key gets a zero
/// output (and zero gradients).
///
/// Where [`crate::fused_covers`] the device the forward is one kernel call: a CubeCL flash
/// kernel on wgpu and CUDA, multi-threaded host code with gemm block products on flex and
/// ndarray; either computes the bias and masks inside its tiles and keeps no score in device
/// memory (`attention/cube/`, `attention/host.rs`). Elsewhere it is the tensor-op tiles of
/// [`reference_attention`], whose memory is one tile's scores, `batch x n_heads x tile x keys`.
/// On an autodiff device the op is one graph node that keeps its inputs, its output and one
/// log-sum-exp per query row (the kernel's), and recomputes each tile's probabilities in the
/// backward, one tile's scores at a time. With sequential positions a tile visits only the keys
/// it can see (causal, a window), so a window's cost stays flat in the sequence's length.
///
/// This is the kernels' op: it checks shapes with plain panics. Model code calls
/// `burn_positional::attend`, which checks everything first and names the fix.
///
/// # Shapes
///
/// - `q`: `[batch, n_heads, seq_q, d_head]`; `k`: `[batch, n_kv_heads, seq_k, d_head]`; `v`:
///   `[batch, n_kv_heads, seq_k, d_v]`, `n_heads` a multiple of `n_kv_heads`
/// - output: `[batch, n_heads, seq_q, d_v]`
///
/// # Panics
///
/// On shapes that do not fit together as above or as [`AttendOptions`] documents, and when the
/// environment variable `BURN_POSITIONAL_FLASH` holds something else than `auto`,
/// `registers` or `shared` (see [`FlashVariant`]).
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_kernels::{AttendOptions, AttentionBias, Window, tiled_attention};
///
/// let device = Device::flex().autodiff();
/// let q = Tensor::<4>::ones([1, 4, 5, 8], &device).require_grad();
/// let kv = Tensor::<4>::ones([1, 2, 5, 8], &device).require_grad(); // 2 kv heads for 4
/// let slopes = Tensor::<1>::from_floats([0.5, 0.25, 0.125, 0.0625], &device);
/// let options = AttendOptions::new()
///     .bias(AttentionBias::Alibi(slopes))
///     .causal(true)
///     .window(Window::hf(3))
///     .tile_rows(2);
/// let out = tiled_attention(q.clone(), kv.clone(), kv.clone(), &options);
/// assert_eq!(out.dims(), [1, 4, 5, 8]);
/// let grads = out.sum().backward();
/// assert_eq!(kv.grad(&grads).unwrap().dims(), [1, 2, 5, 8]);
/// ```
pub fn tiled_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    options: &AttendOptions,
) -> Tensor<4> {
    run(q, k, v, options, true)
}

/// [`tiled_attention`]'s numbers from burn tensor ops, tile by tile (burn's own `attention` per
/// tile with the tile's bias and mask built from tensor ops; on an autodiff device, burn's
/// autodiff through them): the slow twin the kernels are tested against, on any device.
///
/// # Shapes
///
/// As [`tiled_attention`].
///
/// # Panics
///
/// As [`tiled_attention`].
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_kernels::{AttendOptions, AttentionBias, reference_attention, tiled_attention};
///
/// let device = Device::flex();
/// let q = Tensor::<4>::random([1, 2, 9, 8], burn::tensor::Distribution::Default, &device);
/// let slopes = Tensor::<1>::from_floats([0.5, 0.25], &device);
/// let options = AttendOptions::new().bias(AttentionBias::Alibi(slopes)).causal(true);
/// let slow = reference_attention(q.clone(), q.clone(), q.clone(), &options);
/// let fast = tiled_attention(q.clone(), q.clone(), q, &options);
/// assert_eq!(fast.dims(), [1, 2, 9, 8]);
/// assert!(fast.all_close(slow, None, Some(1e-5)));
/// ```
pub fn reference_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    options: &AttendOptions,
) -> Tensor<4> {
    run(q, k, v, options, false)
}

/// `[batch, n_heads, seq_q, d_head]` against `[batch, n_kv_heads, seq_k, d_head | d_v]`.
#[derive(Clone, Copy, Debug)]
// Without a kernel backend (the reference path alone) some sizes go unread.
#[cfg_attr(
    not(any(
        feature = "flex",
        feature = "ndarray",
        feature = "wgpu",
        feature = "cuda"
    )),
    allow(dead_code)
)]
pub(crate) struct Sizes {
    pub batch: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub seq_q: usize,
    pub seq_k: usize,
    pub d_head: usize,
    pub d_v: usize,
}

thread_local! {
    static ATTENTION_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static BACKWARD_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times the calling thread has called the attention's backward kernel (one per
/// backward of a [`tiled_attention`] node, however many tiles). Only with the `testing` feature.
#[cfg(feature = "testing")]
pub fn flash_attention_backward_calls() -> u64 {
    BACKWARD_CALLS.with(std::cell::Cell::get)
}

/// Counts one call of the backward kernel on the calling thread.
#[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
pub(crate) fn count_backward_call() {
    BACKWARD_CALLS.with(|calls| calls.set(calls.get() + 1));
}

/// Which gradients the backward computes.
#[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wanted {
    pub q: bool,
    pub k: bool,
    pub v: bool,
    pub bias: bool,
}

/// The backward's arguments: the forward's, and which gradients are wanted. `Clone + Send +
/// Sync + 'static` for the `Fusion` wrapper.
#[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct BackwardArgs {
    pub tile: TileArgs,
    pub wanted: Wanted,
}

/// How many times the calling thread has called the attention kernel through
/// [`tiled_attention`] (one per call, however many tiles). Only with the `testing` feature.
#[cfg(feature = "testing")]
pub fn flash_attention_calls() -> u64 {
    ATTENTION_CALLS.with(std::cell::Cell::get)
}

/// `[batch, n_heads, seq_q, d_head]`, `[batch, n_kv_heads, seq_k, d_head]` and
/// `[batch, n_kv_heads, seq_k, d_v]` checked to fit together.
///
/// # Panics
///
/// With the three shapes, when they do not.
pub(crate) fn check_sizes(q: &[usize], k: &[usize], v: &[usize]) -> Sizes {
    let fits = q.len() == 4
        && k.len() == 4
        && v.len() == 4
        && k[0] == q[0]
        && k[3] == q[3]
        && v[..3] == k[..3]
        && k[1] > 0
        && q[1].is_multiple_of(k[1]);
    assert!(
        fits,
        "tiled_attention: q {q:?}, k {k:?} and v {v:?} do not fit together (q [batch, n_heads, \
         seq_q, d_head], k [batch, n_kv_heads, seq_k, d_head], v [batch, n_kv_heads, seq_k, \
         d_v], n_heads a multiple of n_kv_heads)"
    );
    Sizes {
        batch: q[0],
        n_heads: q[1],
        n_kv_heads: k[1],
        seq_q: q[2],
        seq_k: k[2],
        d_head: q[3],
        d_v: v[3],
    }
}

/// Output metadata of the extension method for the `Fusion` wrapper: the output and the
/// log-sum-exp, computed on the calling thread (bad shapes panic at the call).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn meta(
    q: &burn::backend::fusion::custom::TensorSpec,
    k: &burn::backend::fusion::custom::TensorSpec,
    v: &burn::backend::fusion::custom::TensorSpec,
    _bias: &burn::backend::fusion::custom::TensorSpec,
    _padding: &burn::backend::fusion::custom::TensorSpec,
    _positions: &burn::backend::fusion::custom::TensorSpec,
    _segments: &burn::backend::fusion::custom::TensorSpec,
    _args: &TileArgs,
) -> (
    burn::backend::fusion::custom::TensorSpec,
    burn::backend::fusion::custom::TensorSpec,
) {
    use burn::backend::fusion::custom::TensorSpec;
    use burn::tensor::Shape;
    let s = check_sizes(
        &q.shape.dims::<4>(),
        &k.shape.dims::<4>(),
        &v.shape.dims::<4>(),
    );
    (
        TensorSpec::new(Shape::new([s.batch, s.n_heads, s.seq_q, s.d_v]), q.dtype),
        TensorSpec::new(Shape::new([s.batch, s.n_heads, s.seq_q, 1]), q.dtype),
    )
}

/// Output metadata of the backward for the `Fusion` wrapper: `dq`, `dk`, `dv` and the bias's
/// gradient, each the shape and dtype of its input.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward_meta(
    q: &burn::backend::fusion::custom::TensorSpec,
    k: &burn::backend::fusion::custom::TensorSpec,
    v: &burn::backend::fusion::custom::TensorSpec,
    bias: &burn::backend::fusion::custom::TensorSpec,
    _padding: &burn::backend::fusion::custom::TensorSpec,
    _positions: &burn::backend::fusion::custom::TensorSpec,
    _segments: &burn::backend::fusion::custom::TensorSpec,
    _output: &burn::backend::fusion::custom::TensorSpec,
    _lse: &burn::backend::fusion::custom::TensorSpec,
    _grad: &burn::backend::fusion::custom::TensorSpec,
    _args: &BackwardArgs,
) -> (
    burn::backend::fusion::custom::TensorSpec,
    burn::backend::fusion::custom::TensorSpec,
    burn::backend::fusion::custom::TensorSpec,
    burn::backend::fusion::custom::TensorSpec,
) {
    check_sizes(
        &q.shape.dims::<4>(),
        &k.shape.dims::<4>(),
        &v.shape.dims::<4>(),
    );
    (q.clone(), k.clone(), v.clone(), bias.clone())
}

/// The backward's default body: the tensor-op tiles of [`backward`] (zeros for a gradient not
/// wanted).
#[allow(clippy::too_many_arguments)]
#[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
pub(crate) fn backward_body<B: burn::backend::Backend>(
    q: burn::backend::tensor::FloatTensor<B>,
    k: burn::backend::tensor::FloatTensor<B>,
    v: burn::backend::tensor::FloatTensor<B>,
    bias: burn::backend::tensor::FloatTensor<B>,
    padding: burn::backend::tensor::BoolTensor<B>,
    positions: burn::backend::tensor::IntTensor<B>,
    segments: burn::backend::tensor::IntTensor<B>,
    output: burn::backend::tensor::FloatTensor<B>,
    lse: burn::backend::tensor::FloatTensor<B>,
    grad: burn::backend::tensor::FloatTensor<B>,
    args: BackwardArgs,
) -> (
    burn::backend::tensor::FloatTensor<B>,
    burn::backend::tensor::FloatTensor<B>,
    burn::backend::tensor::FloatTensor<B>,
    burn::backend::tensor::FloatTensor<B>,
) {
    use burn::backend::TensorMetadata;
    use burn::tensor::FloatDType;
    let (device, dtype) = (q.device(), FloatDType::from(q.dtype()));
    let shapes = (q.shape(), k.shape(), v.shape(), bias.shape());
    let saved = Saved {
        q,
        k,
        v,
        bias,
        extras: Extras::new(padding, positions, segments, &args.tile),
        output,
        lse,
        args: args.tile,
    };
    let g = backward::<B>(saved, grad, args.wanted);
    let or_zeros = |t: Option<burn::backend::tensor::FloatTensor<B>>, shape| {
        t.unwrap_or_else(|| B::float_zeros(shape, &device, dtype))
    };
    (
        or_zeros(g.q, shapes.0),
        or_zeros(g.k, shapes.1),
        or_zeros(g.v, shapes.2),
        or_zeros(g.bias, shapes.3),
    )
}

/// The extension's default body: the tensor-op tiles, the log-sum-exp only when `args.lse`
/// (else zeros: the caller drops it).
#[allow(clippy::too_many_arguments)]
pub(crate) fn default_body<B: burn::backend::Backend>(
    q: burn::backend::tensor::FloatTensor<B>,
    k: burn::backend::tensor::FloatTensor<B>,
    v: burn::backend::tensor::FloatTensor<B>,
    bias: burn::backend::tensor::FloatTensor<B>,
    padding: burn::backend::tensor::BoolTensor<B>,
    positions: burn::backend::tensor::IntTensor<B>,
    segments: burn::backend::tensor::IntTensor<B>,
    args: TileArgs,
) -> (
    burn::backend::tensor::FloatTensor<B>,
    burn::backend::tensor::FloatTensor<B>,
) {
    use burn::backend::TensorMetadata;
    use burn::tensor::{FloatDType, Shape};
    let extras = Extras::new(padding, positions, segments, &args);
    let [batch, n_heads, seq_q, _] = q.shape().dims();
    let (device, dtype) = (q.device(), FloatDType::from(q.dtype()));
    let (output, lse) = forward::<B>(q, k, v, &bias, &extras, &args, args.lse);
    let lse = lse
        .unwrap_or_else(|| B::float_zeros(Shape::new([batch, n_heads, seq_q, 1]), &device, dtype));
    (output, lse)
}

/// The two entry points: the kernel where [`crate::fused_covers`] the device (`fused`), burn
/// tensor ops otherwise.
fn run(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    options: &AttendOptions,
    fused: bool,
) -> Tensor<4> {
    use burn::backend::Dispatch;

    let Sizes {
        batch,
        n_heads,
        seq_q,
        d_head,
        seq_k,
        d_v,
        ..
    } = check_sizes(&q.dims(), &k.dims(), &v.dims());
    let device = q.device();
    let dtype = q.dtype();
    if batch == 0 || seq_q == 0 || n_heads == 0 || seq_k == 0 {
        // Nothing to attend: zeros, as for a query that sees no key.
        return Tensor::zeros([batch, n_heads, seq_q, d_v], (&device, dtype));
    }
    let (kind, bias) = match &options.bias {
        AttentionBias::None => (
            BiasKind::None,
            Tensor::<1>::zeros([1], (&device, dtype)).into_dispatch(),
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
    let (query_offset, key_offset, positions) = match &options.positions {
        AttentionPositions::Sequential { query, key } => (*query, *key, None),
        AttentionPositions::Explicit { query, key } => {
            let [qb, qs] = query.dims();
            let [pb, ps] = key.dims();
            assert!(
                qs == seq_q && ps == seq_k && (qb == 1 || qb == batch) && (pb == 1 || pb == batch),
                "tiled_attention: positions must be [batch or 1, seq_q] and [batch or 1, seq_k]"
            );
            let n = qb.max(pb);
            let query = query.clone().expand([n, seq_q]);
            let key = key.clone().expand([n, seq_k]).cast(query.dtype());
            (0, 0, Some(Tensor::cat(vec![query, key], 1)))
        }
    };
    let segments = options.segments.as_ref().map(|(query, key)| {
        assert!(
            query.dims() == [batch, seq_q] && key.dims() == [batch, seq_k],
            "tiled_attention: segments must be [batch, seq_q] and [batch, seq_k]"
        );
        Tensor::cat(vec![query.clone(), key.clone().cast(query.dtype())], 1)
    });
    if let Some(mask) = &options.key_padding {
        assert_eq!(
            mask.dims(),
            [batch, seq_k],
            "tiled_attention: key_padding must be [batch, seq_k] = [{batch}, {seq_k}]"
        );
    }
    let mut args = TileArgs {
        kind,
        causal: options.causal,
        window: options.window,
        query_offset,
        key_offset,
        explicit: positions.is_some(),
        segments: segments.is_some(),
        padded: options.key_padding.is_some(),
        tile: 1,
        scale: options.scale.unwrap_or(1.0 / (d_head as f64).sqrt()),
        softcap: options.softcap,
        lse: false,
        variant: variant::requested(),
        key_splits: variant::requested_key_splits(),
    };
    args.tile = tile_rows(options.tile_rows, batch, n_heads, seq_k, &args);
    if fused && crate::fused_covers(&device) {
        ATTENTION_CALLS.with(|calls| calls.set(calls.get() + 1));
        let int = || Tensor::<2, Int>::zeros([1, 1], &device).into_dispatch();
        Tensor::from_dispatch(
            <Dispatch as crate::PositionalKernels>::flash_attention(
                q.into_dispatch(),
                k.into_dispatch(),
                v.into_dispatch(),
                bias,
                options
                    .key_padding
                    .clone()
                    .unwrap_or_else(|| Tensor::<2, Bool>::empty([1, 1], &device))
                    .into_dispatch(),
                positions.map_or_else(int, Tensor::into_dispatch),
                segments.map_or_else(int, Tensor::into_dispatch),
                args,
            )
            .0,
        )
    } else {
        let extras = Extras {
            positions: positions.map(Tensor::into_dispatch),
            segments: segments.map(Tensor::into_dispatch),
            padding: options.key_padding.clone().map(Tensor::into_dispatch),
        };
        let (output, _) = forward::<Dispatch>(
            q.into_dispatch(),
            k.into_dispatch(),
            v.into_dispatch(),
            &bias,
            &extras,
            &args,
            device.is_autodiff(),
        );
        Tensor::from_dispatch(output)
    }
}
