//! [`SelfAttention`]: the block, its display and its forwards.

use burn::module::{Content, DisplaySettings, Module, ModuleDisplay};
use burn::nn::transformer::PositionWiseFeedForward;
use burn::nn::{Dropout, LayerNorm, Linear};
use burn::tensor::activation::softmax;
use burn::tensor::module::attention as burn_attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Int, Shape, Tensor};

use super::kv_cache::BlockId;
use super::mask::CausalMasks;
use super::{
    AttendOptions, AttentionInput, AttentionOutput, AttentionPositions, KvCache, Window, attend,
};
use crate::AttentionBias;
use crate::Rope;
use crate::ScoreBias;
use crate::score_bias::cast;
use crate::score_bias::distance::relative;

/// A small self-attention block: multi-head attention and a feed-forward, each behind a
/// pre-norm residual (as in GPT-2 and most models since).
///
/// ```text
/// x = x + Attention(LayerNorm(x))
/// x = x + FeedForward(LayerNorm(x))
/// ```
///
/// Without positions and without a causal mask the block is permutation-equivariant:
/// `Block(P x) = P Block(x)` for any permutation `P` of the sequence, because every part of it
/// but attention acts on each token alone, and attention's output for a token is a weighted sum
/// over *all* tokens whose weights depend only on the tokens' contents. Position has to come
/// from somewhere else: the embedding (sinusoidal, learned), or the scores themselves.
///
/// Schemes that act on attention plug in through parameters: rotary positions on queries and
/// keys ([`SelfAttentionConfig::rope`](crate::SelfAttentionConfig::rope)), a score bias the
/// block owns ([`SelfAttentionConfig::score_bias`](crate::SelfAttentionConfig::score_bias):
/// ALiBi, T5), or a score bias computed outside and passed
/// to [`forward_weights`](SelfAttention::forward_weights) (one T5 table shared by every block).
///
/// # As models use it
///
/// - [`forward`](SelfAttention::forward) never holds a `seq x seq` tensor of its own: it runs
///   [`attend`](crate::attend), one flash kernel per call with the bias and masks computed in
///   its tiles (CubeCL on wgpu and CUDA, multi-threaded host code on flex and ndarray; in
///   training one graph node whose backward recomputes each tile, see
///   [`SelfAttentionConfig::tile_rows`](crate::SelfAttentionConfig::tile_rows)). On a backend
///   the kernels do not cover, a block without a bias runs burn's fused
///   [`attention`](burn::tensor::module::attention) and the others the tensor-op tiles.
///   [`forward_weights`](SelfAttention::forward_weights) spells the scores out and returns the
///   weights too, for pictures and probes; the two agree to float tolerance. A bias passed in
///   from outside (a dense tensor) goes to burn's `attention` with the block's own bias added
///   to it (its flash kernel on flex, its unfused path on the Cube backends); on an autodiff
///   device it, and training with dropout, take the spelled-out path.
/// - Score biases and masks that depend only on shapes are built on the device and cached (see
///   [`Alibi::bias`](crate::Alibi::bias), [`T5Bias::buckets`](crate::T5Bias::buckets)).
/// - Padded keys are kept out of attention by a key padding mask ([`AttentionInput::key_padding`],
///   [`padding_mask`](crate::padding_mask)), as burn's `MultiHeadAttention` does with `mask_pad`.
/// - A causal block decodes token by token with a [`KvCache`]
///   ([`forward_cache`](SelfAttention::forward_cache)): RoPE rotates at the cached length, ALiBi
///   and T5 measure distances from it.
///
/// A causal mask breaks equivariance on its own: token `i` attends to tokens `0..=i`, so moving
/// a token changes which tokens can see it. The mask is itself a (weak) source of position.
///
/// # Example
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::{AttentionInput, SelfAttentionConfig};
///
/// let device = Device::flex();
/// let block = SelfAttentionConfig::new(32, 4).init(&device);
/// let x = Tensor::<3>::zeros([2, 5, 32], &device); // [batch, seq, d_model]
/// assert_eq!(block.forward(x.clone()).dims(), [2, 5, 32]);
/// let weights = block.forward_weights(AttentionInput::new(x)).weights;
/// assert_eq!(weights.dims(), [2, 4, 5, 5]); // [batch, n_heads, seq, seq]
/// ```
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct SelfAttention {
    /// Norm before attention.
    pub norm_attention: LayerNorm,
    /// `d_model -> d_model` projections to queries, keys and values, and back.
    pub query: Linear,
    /// Key projection.
    pub key: Linear,
    /// Value projection.
    pub value: Linear,
    /// Output projection.
    pub output: Linear,
    /// Norm before the feed-forward.
    pub norm_feed_forward: LayerNorm,
    /// burn's `d_model -> d_ff -> d_model` feed-forward with a GELU.
    pub feed_forward: PositionWiseFeedForward,
    /// Dropout on weights and residual branches.
    pub dropout: Dropout,
    /// Number of query heads.
    pub n_heads: usize,
    /// Number of key and value heads (`n_heads` without grouping).
    pub n_kv_heads: usize,
    /// Whether later tokens are masked: the one place this is decided. The score biases follow
    /// it (T5's buckets are asked for with it; ALiBi's bias is the same either way).
    pub causal: bool,
    /// Rotary positions on queries and keys.
    pub rope: Option<Rope>,
    /// The block's own score bias.
    pub score_bias: Option<ScoreBias>,
    /// The sliding window, if any (from `SelfAttentionConfig::sliding_window`).
    #[module(skip)]
    pub window: Option<Window>,
    /// This block's identity, which a [`KvCache`] is bound to.
    #[module(skip)]
    pub(super) id: BlockId,
    /// Causal masks by shape (the spelled-out path), shared by clones.
    #[module(skip)]
    pub(super) causal_masks: CausalMasks,
    /// Query rows per tile of the tiled attention (see
    /// [`SelfAttentionConfig::tile_rows`](crate::SelfAttentionConfig::tile_rows)).
    #[module(skip)]
    pub tile_rows: Option<usize>,
    /// Whether a [`KvCache`] holds keys as rotated when cached, under a length-dependent rope
    /// (see [`SelfAttentionConfig::cache_rotated_keys`](crate::SelfAttentionConfig::cache_rotated_keys)).
    #[module(skip)]
    pub cache_rotated_keys: bool,
}

impl ModuleDisplay for SelfAttention {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new()
            .with_new_line_after_attribute(false)
            .optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        let [d_model, _] = self.query.weight.shape().dims();
        let position = match (&self.rope, &self.score_bias) {
            (Some(_), _) => "rope",
            (None, Some(ScoreBias::Alibi(_))) => "alibi",
            (None, Some(ScoreBias::T5(_))) => "t5",
            (None, None) => "none",
        };
        content
            .add("d_model", &d_model)
            .add("n_heads", &self.n_heads)
            .add("n_kv_heads", &self.n_kv_heads)
            .add(
                "window",
                &self.window.map_or("none".to_string(), |w| {
                    format!("{}..={}", w.before, w.after)
                }),
            )
            .add("causal", &self.causal)
            .add("position", &position.to_string())
            .optional()
    }
}

/// What to compute besides the output.
#[derive(Clone, Copy, PartialEq)]
enum Path {
    /// burn's fused attention; no weights.
    Fused,
    /// Scores spelled out; weights returned.
    Weights,
}

impl SelfAttention {
    /// Width of the token vectors.
    pub fn d_model(&self) -> usize {
        self.query.weight.shape().dims::<2>()[0]
    }

    /// Applies the block: burn's fused attention, or the tiled attention for a block with its
    /// own ALiBi or T5 bias and on autodiff devices (see the type's docs).
    ///
    /// # Shapes
    ///
    /// - x: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]` (empty when `batch` or `seq` is 0)
    ///
    /// # Panics
    ///
    /// If the last dimension of `x` is not `d_model`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        self.forward_input(AttentionInput::new(x))
    }

    /// Applies the block to `input` (tokens, key padding, an outside score bias) with burn's
    /// fused attention or the tiled attention (see the type's docs). An outside score bias goes
    /// to burn's `attention` as a dense tensor; on an autodiff device it, and dropout, spell
    /// the scores out.
    ///
    /// # Shapes
    ///
    /// See [`AttentionInput`]; output: `[batch, seq, d_model]`.
    ///
    /// # Panics
    ///
    /// If a shape does not fit: `x`'s width is not `d_model`, the padding mask is not
    /// `[batch, seq]`, or the bias does not broadcast to `[batch, n_heads, seq, seq]`.
    pub fn forward_input(&self, input: AttentionInput) -> Tensor<3> {
        self.run(input, None, Path::Fused).0
    }

    /// [`forward_input`](Self::forward_input) with the scores spelled out, returning the
    /// attention weights beside the output.
    ///
    /// # Shapes
    ///
    /// See [`AttentionInput`]; weights: `[batch, n_heads, seq, seq]`.
    ///
    /// # Panics
    ///
    /// As [`forward_input`](Self::forward_input).
    pub fn forward_weights(&self, input: AttentionInput) -> AttentionOutput {
        let (output, weights) = self.run(input, None, Path::Weights);
        AttentionOutput {
            output,
            weights: weights.expect("the weights path returns weights"),
        }
    }

    /// Applies the block to the next token(s) of sequences whose earlier tokens are in
    /// `cache`, and appends the new keys and values to it. The new queries sit at positions
    /// `cache.len()..`: RoPE rotates them there, ALiBi and T5 measure distances from there, and
    /// a causal block lets each see every cached key and the new keys up to itself. Decoding a
    /// sequence token by token this way gives the rows of the full causal forward.
    ///
    /// # Shapes
    ///
    /// - input.x: `[batch, seq_new, d_model]`; key padding, if any: `[batch, cache.len() + seq_new]`
    /// - output: `[batch, seq_new, d_model]`
    ///
    /// # Panics
    ///
    /// As [`forward_input`](Self::forward_input), and if the cache was filled by another block or
    /// holds another batch size (the cache is left untouched; see [`KvCache`]).
    pub fn forward_cache(&self, input: AttentionInput, cache: &mut KvCache) -> Tensor<3> {
        self.run(input, Some(cache), Path::Fused).0
    }

    fn run(
        &self,
        input: AttentionInput,
        cache: Option<&mut KvCache>,
        path: Path,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let AttentionInput {
            x,
            key_padding,
            score_bias,
            positions,
            segments,
            rotary,
        } = input;
        let [batch, seq, d_model] = x.dims();
        assert_eq!(
            d_model,
            self.d_model(),
            "the block takes tokens {} wide (d_model), got [batch {batch}, seq {seq}, {d_model}]. \
             Fix: build the block with d_model = {d_model}, or project the input to {}",
            self.d_model(),
            self.d_model()
        );
        if let Some(cache) = &cache {
            cache.check_owner(self.id, batch);
        }
        assert!(
            cache.is_none() || rotary.is_none(),
            "rotary positions on a grid are for whole sequences, not for decoding with a KvCache. \
             Fix: run the grid's tokens with `forward_input`"
        );
        assert!(
            positions.is_none() || rotary.is_none(),
            "give one kind of positions: per-token positions (`positions`) or grid positions for \
             the rope (`rotary_at`)"
        );
        assert!(
            cache.is_none() || (positions.is_none() && segments.is_none()),
            "explicit positions and segment ids are for whole (packed) sequences, not for \
             decoding with a KvCache. Fix: decode each sequence with `forward_cache` from \
             sequential positions, or run the packed rows with `forward_input`"
        );
        if let Some(p) = &positions {
            let [b, s] = p.dims();
            assert!(
                s == seq && (b == 1 || b == batch),
                "positions must be [batch {batch} or 1, seq {seq}], got {:?}. Fix: one position \
                 per token",
                p.dims()
            );
        }
        if let Some(ids) = &segments {
            assert_eq!(
                ids.dims(),
                [batch, seq],
                "segment ids must be [batch {batch}, seq {seq}], got {:?}. Fix: one document id \
                 per token",
                ids.dims()
            );
        }
        let offset = cache.as_ref().map_or(0, |cache| cache.len());
        let seq_k = offset + seq;
        if let Some(mask) = &key_padding {
            assert_eq!(
                mask.dims(),
                [batch, seq_k],
                "the key padding mask must be [batch {batch}, keys {seq_k}] (cached and new \
                 keys), got {:?}. Fix: one flag per key, true at padding",
                mask.dims()
            );
        }
        if let Some(bias) = &score_bias {
            let [b, h, sq, sk] = bias.dims();
            assert!(
                (b == 1 || b == batch) && (h == 1 || h == self.n_heads) && sq == seq && sk == seq_k,
                "score bias of shape {:?} does not broadcast to the scores' [batch {batch}, n_heads \
                 {}, seq {seq}, keys {seq_k}]",
                [b, h, sq, sk],
                self.n_heads
            );
        }
        if batch == 0 || seq == 0 {
            // Nothing to attend: the output is as empty as the input (and nothing is cached).
            let weights = (path == Path::Weights).then(|| {
                Tensor::zeros(
                    Shape::new([batch, self.n_heads, seq, seq_k]),
                    (&x.device(), x.dtype()),
                )
            });
            return (x, weights);
        }
        let normed = self.norm_attention.forward(x.clone());
        let packed = Packed {
            positions,
            segments,
            rotary,
        };
        let (attended, weights) =
            self.attend(normed, cache, offset, key_padding, score_bias, packed, path);
        let x = x + self.dropout.forward(attended);
        let fed = self
            .feed_forward
            .forward(self.norm_feed_forward.forward(x.clone()));
        (x + self.dropout.forward(fed), weights)
    }

    /// Multi-head attention over already normalized tokens at positions `offset..`.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        x: Tensor<3>,
        cache: Option<&mut KvCache>,
        offset: usize,
        key_padding: Option<Tensor<2, Bool>>,
        score_bias: Option<Tensor<4>>,
        packed: Packed,
        path: Path,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let [batch, seq, d_model] = x.dims();
        let (n_heads, n_kv_heads) = (self.n_heads, self.n_kv_heads);
        let d_head = d_model / n_heads;
        let device = x.device();
        // [batch, seq, heads * d_head] -> [batch, heads, seq, d_head]
        let split =
            |t: Tensor<3>, heads: usize| t.reshape([batch, seq, heads, d_head]).swap_dims(1, 2);
        let mut q = split(self.query.forward(x.clone()), n_heads);
        let mut k = split(self.key.forward(x.clone()), n_kv_heads);
        let mut v = split(self.value.forward(x), n_kv_heads);
        // A rope whose frequencies follow the sequence's length (dynamic, longrope) caches its
        // keys unrotated and rotates all of them with the current frequencies at every step, so
        // decoding equals one forward over the whole sequence (see the `rope` module docs).
        let rotate_after_cache = cache.is_some()
            && !self.cache_rotated_keys
            && self
                .rope
                .as_ref()
                .is_some_and(|rope| rope.scaling().is_length_dependent());
        if let Some(rope) = &self.rope {
            match (&packed.positions, &packed.rotary) {
                (_, Some(rotary)) => {
                    let turn = |x| {
                        rope.try_apply_positions(x, rotary.clone())
                            .unwrap_or_else(|err| panic!("{err}"))
                    };
                    q = turn(q);
                    k = turn(k);
                }
                (Some(positions), None) => {
                    q = rope.apply_at(q, positions.clone());
                    k = rope.apply_at(k, positions.clone());
                }
                (None, None) => {
                    q = rope.apply(q, offset);
                    if !rotate_after_cache {
                        k = rope.apply(k, offset);
                    }
                }
            }
        }
        // Position of the first key attended: 0, or where a rolling cache starts.
        let mut key_start = 0;
        if let Some(cache) = cache {
            // Bound to this block and batch: checked in `run` before anything was touched.
            key_start = cache.start;
            // A windowed block keeps the keys the next query can see, and no more.
            let keep = self.window.map(|w| w.before.max(1));
            (k, v) = cache.push(k, v, keep);
            cache.owner = Some((self.id, batch));
        }
        if let (true, Some(rope)) = (rotate_after_cache, &self.rope) {
            // Positions key_start..offset + seq: the same length, the same frequencies.
            k = rope.apply(k, key_start);
        }
        let seq_k = k.dims()[2];
        // The user's padding covers every key seen; a rolling cache attends to the last ones.
        let key_padding = key_padding.map(|mask| {
            let all = mask.dims()[1];
            mask.slice([0..batch, all - seq_k..all])
        });
        // The tiled path (`attend`): positions in compact form inside tiles of queries, never
        // the seq x seq square, in the forward and (one node that recomputes its tiles) in the
        // backward. Taken for every scheme where the kernels cover the device (one flash
        // kernel per call with the bias and masks in its tiles: flex, ndarray, the Cube
        // backends), and elsewhere for ALiBi and T5, grouped heads, a window, packed rows, on
        // an autodiff device (the alternative there keeps every score for the backward), and
        // wherever tile_rows is set; not for a dense bias from outside, nor in training with
        // dropout, which drops attention weights the tiles never hold.
        let dropout_on_weights = device.is_autodiff() && self.dropout.prob > 0.0;
        let compact_only = n_kv_heads != n_heads
            || self.window.is_some()
            || packed.positions.is_some()
            || packed.segments.is_some();
        let tiled = path == Path::Fused
            && score_bias.is_none()
            && !dropout_on_weights
            && (compact_only
                || burn_positional_kernels::fused_covers(&device)
                || self.tile_rows.is_some()
                || self.score_bias.is_some()
                || device.is_autodiff());
        if tiled {
            let mut options = AttendOptions::new().causal(self.causal);
            options.bias = self
                .score_bias
                .as_ref()
                .map_or(AttentionBias::None, |bias| bias.attention_bias(self.causal));
            options.window = self.window;
            options.key_padding = key_padding;
            options.tile_rows = self.tile_rows;
            options.positions = match packed.positions {
                Some(p) => AttentionPositions::Explicit {
                    query: p.clone(),
                    key: p,
                },
                None => AttentionPositions::Sequential {
                    query: offset,
                    key: key_start,
                },
            };
            options.segments = packed.segments.map(|ids| (ids.clone(), ids));
            let context = attend(q, k, v, &options);
            let merged = context.swap_dims(1, 2).reshape([batch, seq, d_model]);
            return (self.output.forward(merged), None);
        }
        assert!(
            packed.positions.is_none() && packed.segments.is_none(),
            "explicit positions and segment ids run on the tiled path only: not with \
             `forward_weights`, a score bias from outside, or dropout in training. Fix: \
             `forward_input` without an outside bias (dropout 0 in training)"
        );
        // Grouped heads on the spelled-out paths: each query head with its kv head's copy.
        let group = n_heads / n_kv_heads;
        let repeat = |t: Tensor<4>| {
            if group == 1 {
                return t;
            }
            let [b, h, s, d] = t.dims();
            t.unsqueeze_dim::<5>(2)
                .expand([b, h, group, s, d])
                .reshape([b, h * group, s, d])
        };
        let (k, v) = (repeat(k), repeat(v));
        // Distances only matter from here on: measure queries from the first key held.
        let offset = offset - key_start;
        let dtype = q.dtype();
        let own = self
            .score_bias
            .as_ref()
            .map(|bias| bias.bias_as(offset, seq, seq_k, self.causal, dtype));
        let bias = match (own, score_bias.map(|b| cast(b, dtype))) {
            (Some(own), Some(given)) => Some(own + given),
            (own, given) => own.or(given),
        };
        // [batch, seq_k] -> [batch, 1, seq, seq_k]: one mask for every head.
        let padding = key_padding.map(|mask| {
            mask.reshape([batch, 1, 1, seq_k])
                .expand([batch, n_heads, seq, seq_k])
        });
        // On an autodiff device burn 0.22.1 has no fused attention: its `attention` is the
        // fallback spelled out in separate ops with two extra clamps, which measured slower
        // in forward plus backward than the scores spelled out here (see docs/performance.md).
        let use_weights = path == Path::Weights || device.is_autodiff() || self.window.is_some();
        if !use_weights {
            let context = burn_attention(
                q,
                k,
                v,
                padding,
                // Passed as it is, `[1 or batch, 1 or n_heads, ..]`: flex steps over the
                // broadcast dimensions without copying, the other backends add with broadcasting.
                // Expanding it here would make flex materialize `batch` copies per call.
                bias,
                AttentionModuleOptions {
                    is_causal: self.causal,
                    ..Default::default()
                },
            );
            let merged = context.swap_dims(1, 2).reshape([batch, seq, d_model]);
            return (self.output.forward(merged), None);
        }
        let mut scores = q
            .matmul(k.swap_dims(2, 3))
            .div_scalar((d_head as f64).sqrt()); // [batch, n_heads, seq, seq_k]
        if let Some(bias) = bias {
            scores = scores + bias;
        }
        if self.causal {
            // true where the key comes after the query: query i (at offset + i) sees keys 0..=offset + i.
            let later = self.causal_masks.get(&device, offset, seq, seq_k);
            scores = scores.mask_fill(
                later.unsqueeze::<4>().expand([batch, n_heads, seq, seq_k]),
                f32::NEG_INFINITY,
            );
        }
        if let Some(w) = self.window {
            // Outside the window: farther back than `before`, or (not causal) ahead of `after`.
            let rel = relative(offset, seq, seq_k, &device);
            let outside = rel
                .clone()
                .lower_elem(-(w.before as i64))
                .bool_or(rel.greater_elem(w.after as i64));
            scores = scores.mask_fill(
                outside
                    .unsqueeze::<4>()
                    .expand([batch, n_heads, seq, seq_k]),
                f32::NEG_INFINITY,
            );
        }
        let padded = padding.is_some();
        if let Some(padding) = padding {
            scores = scores.mask_fill(padding, f32::NEG_INFINITY);
        }
        let mut weights = softmax(scores, 3);
        if padded {
            // A query whose keys are all padding: zero attention, as burn's fused attention.
            weights = weights.clone().mask_fill(weights.is_nan(), 0.0);
        }
        let context = self.dropout.forward(weights.clone()).matmul(v); // [batch, n_heads, seq, d_head]
        let merged = context.swap_dims(1, 2).reshape([batch, seq, d_model]);
        (self.output.forward(merged), Some(weights))
    }
}

/// Explicit positions and segment ids of packed rows, `[batch or 1, seq]` and `[batch, seq]`.
struct Packed {
    positions: Option<Tensor<2, Int>>,
    segments: Option<Tensor<2, Int>>,
    /// Grid positions for the rope alone.
    rotary: Option<crate::Positions>,
}
