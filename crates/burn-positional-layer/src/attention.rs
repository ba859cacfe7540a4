//! The self-attention block, its inputs, its cache and its score biases.

use crate::materialize::materialize;
use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay};
use burn::nn::transformer::{PositionWiseFeedForward, PositionWiseFeedForwardConfig};
use burn::nn::{Dropout, DropoutConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::softmax;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, DType, Device, Int, Shape, Tensor};

use crate::cache::{self, ShapeCache};
use crate::limits::table_fits;
use crate::{
    Alibi, AlibiConfig, AlibiDirection, PositionError, Rope, RopeConfig, T5Bias, T5BiasConfig,
};

/// Configuration of [`SelfAttention`].
///
/// The position parts can be sized from the block itself, so nothing is said twice:
/// [`with_rotary`](Self::with_rotary), [`with_alibi`](Self::with_alibi) and
/// [`with_t5`](Self::with_t5). Parts given by hand are checked against the block at
/// [`try_init`](Self::try_init).
#[derive(Config, Debug, PartialEq)]
pub struct SelfAttentionConfig {
    /// Width of the token vectors.
    pub d_model: usize,
    /// Number of heads; must divide `d_model` (each head is `d_head = d_model / n_heads` wide).
    pub n_heads: usize,
    /// Hidden width of the feed-forward. `4 * d_model` when `None` (the default), as in the
    /// original Transformer.
    #[config(default = "None")]
    pub d_ff: Option<usize>,
    /// Dropout on the attention weights, inside the feed-forward and on each residual branch.
    /// 0 by default.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Mask attention to later tokens (decoder style). Off by default.
    #[config(default = false)]
    pub causal: bool,
    /// Epsilon of the layer norms.
    #[config(default = 1e-5)]
    pub norm_eps: f64,
    /// Rotary positions on queries and keys (RoPE). None by default.
    #[config(default = "None")]
    pub rope: Option<RopeConfig>,
    /// A score bias this block computes itself (ALiBi, or a T5 table of its own). None by
    /// default; to share one T5 table across blocks, pass its bias in [`AttentionInput`] instead.
    #[config(default = "None")]
    pub score_bias: Option<ScoreBiasConfig>,
}

/// A score bias a block owns.
#[derive(Config, Debug, PartialEq)]
pub enum ScoreBiasConfig {
    /// ALiBi (Press et al. 2022).
    Alibi(AlibiConfig),
    /// T5's relative buckets (Raffel et al. 2020).
    T5(T5BiasConfig),
}

/// An initialized [`ScoreBiasConfig`].
// One per model, matched on every forward: boxing the large variant buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum ScoreBias {
    /// See [`Alibi`].
    Alibi(Alibi),
    /// See [`T5Bias`].
    T5(T5Bias),
}

impl ScoreBiasConfig {
    /// Number of heads the bias is built for.
    pub fn n_heads(&self) -> usize {
        match self {
            Self::Alibi(config) => config.n_heads,
            Self::T5(config) => config.n_heads,
        }
    }

    /// Checks the bias's own config.
    pub fn validate(&self) -> Result<(), PositionError> {
        match self {
            Self::Alibi(config) => config.validate(),
            Self::T5(config) => config.validate(),
        }
    }

    /// Builds the bias.
    ///
    /// # Panics
    ///
    /// If [`validate`](Self::validate) fails.
    pub fn init(&self, device: &Device) -> ScoreBias {
        match self {
            Self::Alibi(config) => ScoreBias::Alibi(config.init(device)),
            Self::T5(config) => ScoreBias::T5(config.init(device)),
        }
    }
}

impl ScoreBias {
    /// The bias for queries at `offset..offset + seq_q` and keys at `0..seq_k`, built on the
    /// device and cached by shape (see [`Alibi::bias`], [`T5Bias::bias`]).
    ///
    /// # Shapes
    ///
    /// - output: `[1, n_heads, seq_q, seq_k]`
    pub fn bias(&self, offset: usize, seq_q: usize, seq_k: usize) -> Tensor<4> {
        match self {
            Self::Alibi(alibi) => alibi.bias(offset, seq_q, seq_k),
            Self::T5(t5) => t5.bias(offset, seq_q, seq_k),
        }
    }

    /// [`bias`](Self::bias) in `dtype`.
    fn bias_as(&self, offset: usize, seq_q: usize, seq_k: usize, dtype: DType) -> Tensor<4> {
        match self {
            Self::Alibi(alibi) => alibi.bias_as(offset, seq_q, seq_k, dtype),
            Self::T5(t5) => cast(t5.bias(offset, seq_q, seq_k), dtype),
        }
    }
}

fn cast(x: Tensor<4>, dtype: DType) -> Tensor<4> {
    if x.dtype() == dtype { x } else { x.cast(dtype) }
}

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
/// keys ([`SelfAttentionConfig::rope`]), a score bias the block owns
/// ([`SelfAttentionConfig::score_bias`]: ALiBi, T5), or a score bias computed outside and passed
/// to [`forward_with`](SelfAttention::forward_with) (one T5 table shared by every block).
///
/// # As models use it
///
/// - [`forward`](SelfAttention::forward) runs burn's fused
///   [`attention`](burn::tensor::module::attention) (flash kernels on flex and the Cube backends)
///   with the score bias and masks passed in; [`forward_with`](SelfAttention::forward_with) spells
///   the scores out and returns the weights too, for pictures and probes. The two agree to float
///   tolerance. On an autodiff device `forward` spells the scores out as well: burn 0.22.1 has no
///   fused attention with a backward (its `attention` there is a fallback of separate ops, which
///   measured slower in training), and dropout on the weights needs them.
/// - Score biases and masks that depend only on shapes are built on the device and cached (see
///   [`Alibi::bias`](crate::Alibi::bias), [`T5Bias::buckets`](crate::T5Bias::buckets)).
/// - Padded keys are kept out of attention by a key padding mask ([`AttentionInput::key_padding`],
///   [`padding_mask`]), as burn's `MultiHeadAttention` does with `mask_pad`.
/// - A causal block decodes token by token with a [`KvCache`]
///   ([`forward_cached`](SelfAttention::forward_cached)): RoPE rotates at the cached length, ALiBi
///   and T5 measure distances from it.
///
/// A causal mask breaks equivariance on its own: token `i` attends to tokens `0..=i`, so moving
/// a token changes which tokens can see it. The mask is itself a (weak) source of position.
///
/// # Example
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_layer::SelfAttentionConfig;
///
/// let device = Device::flex();
/// let block = SelfAttentionConfig::new(32, 4).init(&device);
/// let x = Tensor::<3>::zeros([2, 5, 32], &device); // [batch, seq, d_model]
/// assert_eq!(block.forward(x.clone()).dims(), [2, 5, 32]);
/// assert_eq!(block.forward_with(x, None).weights.dims(), [2, 4, 5, 5]); // [batch, n_heads, seq, seq]
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
    /// Number of heads.
    pub n_heads: usize,
    /// Whether later tokens are masked.
    pub causal: bool,
    /// Rotary positions on queries and keys.
    pub rope: Option<Rope>,
    /// The block's own score bias.
    pub score_bias: Option<ScoreBias>,
    /// This block's identity, which a [`KvCache`] is bound to.
    #[module(skip)]
    id: BlockId,
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
            .add("causal", &self.causal)
            .add("position", &position.to_string())
            .optional()
    }
}

/// The block's output and the attention weights that produced it.
#[derive(Debug, Clone)]
pub struct AttentionOutput {
    /// `[batch, seq, d_model]`.
    pub output: Tensor<3>,
    /// `[batch, n_heads, seq, seq_k]`: row `i` is how token `i` spreads its attention
    /// (`seq_k = seq` without a cache).
    pub weights: Tensor<4>,
}

/// What a block attends over: the tokens, and optionally a key padding mask and a score bias
/// computed outside (one T5 table shared by every block), as burn's `MhaInput` carries `mask_pad`.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_layer::{AttentionInput, SelfAttentionConfig, padding_mask};
///
/// let device = Device::flex();
/// let block = SelfAttentionConfig::new(32, 4).init(&device);
/// let ids = Tensor::<2, Int>::from_data([[0, 0, 7, 8], [5, 6, 7, 8]], &device); // 0 pads
/// let x = Tensor::<3>::ones([2, 4, 32], &device);
/// let input = AttentionInput::new(x).key_padding(padding_mask(ids, 0));
/// assert_eq!(block.forward_input(input).dims(), [2, 4, 32]);
/// ```
#[derive(Debug, Clone)]
pub struct AttentionInput {
    /// `[batch, seq, d_model]`.
    pub x: Tensor<3>,
    /// `[batch, seq_k]`, true where the key is padding (`seq_k` counts cached keys too).
    pub key_padding: Option<Tensor<2, Bool>>,
    /// `[batch or 1, n_heads or 1, seq, seq_k]`, added to the scores beside the block's own.
    pub score_bias: Option<Tensor<4>>,
}

impl AttentionInput {
    /// Tokens alone.
    pub fn new(x: Tensor<3>) -> Self {
        Self {
            x,
            key_padding: None,
            score_bias: None,
        }
    }

    /// Keeps padded keys out of attention: `mask` is `[batch, seq_k]`, true at padding (see
    /// [`padding_mask`]). A query whose keys are all padding gets zero attention.
    pub fn key_padding(mut self, mask: Tensor<2, Bool>) -> Self {
        self.key_padding = Some(mask);
        self
    }

    /// Adds `bias` (`[batch or 1, n_heads or 1, seq, seq_k]`) to the scores.
    pub fn score_bias(mut self, bias: Tensor<4>) -> Self {
        self.score_bias = Some(bias);
        self
    }
}

/// The key padding mask of token ids: true where the id is `padding_idx`. No read.
///
/// # Shapes
///
/// - ids: `[batch, seq]`; output: `[batch, seq]`
pub fn padding_mask(ids: Tensor<2, Int>, padding_idx: usize) -> Tensor<2, Bool> {
    ids.equal_elem(padding_idx as i64)
}

/// The keys and values a causal block has seen, for decoding one token (or chunk) at a time
/// with [`SelfAttention::forward_cached`]. One cache per block.
///
/// Keys are stored after RoPE's rotation. Each step concatenates the new keys and values on
/// the device (no read).
///
/// A cache is bound to the block that filled it (that block and its clones) and to its batch
/// size: another block, or a batch of another size, is refused with a message before the
/// cache is touched, so a mistake never gives silently wrong output nor empties the cache.
/// [`clear`](Self::clear) unbinds it.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    keys: Option<Tensor<4>>,
    values: Option<Tensor<4>>,
    /// The block and batch size that filled it.
    owner: Option<(BlockId, usize)>,
}

/// The identity of a block, drawn at `init`: kept by clones, record loads and device moves
/// (the same weights), new for every other block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BlockId(u64);

impl BlockId {
    fn next() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Self(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tokens cached so far: the position of the next query.
    pub fn len(&self) -> usize {
        self.keys.as_ref().map_or(0, |k| k.dims()[2])
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything (a new sequence), and the block and batch it was bound to.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Panics, leaving the cache as it is, unless it is empty or was filled by `block` (or a
    /// clone of it) with `batch` sequences.
    fn check_owner(&self, block: BlockId, batch: usize) {
        let Some((owner, cached)) = self.owner else {
            return;
        };
        assert!(
            owner == block,
            "this KvCache was filled by another attention block (it holds {} tokens of that \
             block's keys and values). Fix: give every block its own cache (one KvCache per \
             block, for example `vec![KvCache::new(); n_blocks]`), or `clear` it first",
            self.len()
        );
        assert!(
            cached == batch,
            "this KvCache holds {cached} sequences, the input has {batch}. Fix: decode the same \
             batch of sequences with it, or `clear` it to start a new batch (the cache was left \
             as it was)"
        );
    }
}

impl SelfAttentionConfig {
    /// This config with RoPE sized from the block (`d_head = d_model / n_heads`), default
    /// base and layout. Set `d_model` and `n_heads` first.
    pub fn with_rotary(self) -> Self {
        let rope = RopeConfig::new(self.d_model / self.n_heads.max(1));
        self.with_rope(Some(rope))
    }

    /// This config with ALiBi for this block's heads.
    pub fn with_alibi(self, direction: AlibiDirection) -> Self {
        let alibi = AlibiConfig::new(self.n_heads).with_direction(direction);
        self.with_score_bias(Some(ScoreBiasConfig::Alibi(alibi)))
    }

    /// This config with a T5 table of its own for this block's heads: decoder-style buckets
    /// when the block is causal, encoder-style otherwise (set `causal` first).
    pub fn with_t5(self) -> Self {
        let t5 = T5BiasConfig::new(self.n_heads).with_bidirectional(!self.causal);
        self.with_score_bias(Some(ScoreBiasConfig::T5(t5)))
    }

    /// Checks the config and that its position parts fit the block.
    pub fn validate(&self) -> Result<(), PositionError> {
        let Self {
            d_model, n_heads, ..
        } = *self;
        if n_heads == 0 || d_model == 0 || d_model % n_heads != 0 {
            let divisors: Vec<String> = (1..=d_model.min(64))
                .filter(|h| d_model % h == 0)
                .map(|h| h.to_string())
                .collect();
            return Err(PositionError::InvalidConfig {
                field: "SelfAttentionConfig::n_heads",
                value: format!("{n_heads} (with d_model = {d_model})"),
                rule: "n_heads must be positive and divide d_model: each head gets \
                       d_model / n_heads dimensions",
                fix: format!(
                    "choose n_heads among the divisors of d_model ({})",
                    if divisors.is_empty() {
                        "d_model must be positive".to_string()
                    } else {
                        divisors.join(", ")
                    }
                ),
            });
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(PositionError::InvalidConfig {
                field: "SelfAttentionConfig::dropout",
                value: self.dropout.to_string(),
                rule: "a dropout probability lies in [0, 1)",
                fix: "use 0 (no dropout) or a probability such as 0.1".into(),
            });
        }
        if self.d_ff == Some(0) {
            return Err(PositionError::InvalidConfig {
                field: "SelfAttentionConfig::d_ff",
                value: "Some(0)".into(),
                rule: "the feed-forward needs a hidden width",
                fix: format!(
                    "use None (4 * d_model = {}) or a positive width",
                    d_model.saturating_mul(4)
                ),
            });
        }
        if !(self.norm_eps > 0.0 && self.norm_eps.is_finite()) {
            return Err(PositionError::InvalidConfig {
                field: "SelfAttentionConfig::norm_eps",
                value: self.norm_eps.to_string(),
                rule: "the layer norms' epsilon must be a positive finite number",
                fix: "use the default 1e-5".into(),
            });
        }
        // The projections are d_model x d_model, the feed-forward d_model x d_ff.
        let fix = || "use the width of the model's token vectors".to_string();
        table_fits("SelfAttentionConfig::d_model", d_model, d_model, fix)?;
        table_fits(
            "SelfAttentionConfig::d_ff",
            self.d_ff.unwrap_or(4 * d_model),
            d_model,
            || "use None (4 * d_model) or the feed-forward width of the checkpoint".to_string(),
        )?;
        let d_head = d_model / n_heads;
        if let Some(rope) = &self.rope {
            rope.validate()?;
            if rope.d_head != d_head {
                return Err(PositionError::PartDoesNotFitBlock {
                    part: "RopeConfig",
                    field: "d_head",
                    value: rope.d_head,
                    block: d_head,
                    fix: "build it with `SelfAttentionConfig::with_rotary`, or set \
                          `RopeConfig::d_head` to d_model / n_heads",
                });
            }
        }
        if let Some(bias) = &self.score_bias {
            bias.validate()?;
            if bias.n_heads() != n_heads {
                return Err(PositionError::PartDoesNotFitBlock {
                    part: match bias {
                        ScoreBiasConfig::Alibi(_) => "AlibiConfig",
                        ScoreBiasConfig::T5(_) => "T5BiasConfig",
                    },
                    field: "n_heads",
                    value: bias.n_heads(),
                    block: n_heads,
                    fix: "build it with `SelfAttentionConfig::with_alibi` or `with_t5`, or give \
                          the bias the block's n_heads",
                });
            }
        }
        Ok(())
    }

    /// Builds the block, or says which setting is wrong and how to fix it.
    pub fn try_init(&self, device: &Device) -> Result<SelfAttention, PositionError> {
        self.validate()?;
        let d_model = self.d_model;
        let d_ff = self.d_ff.unwrap_or(4 * d_model); // checked by `validate`
        let linear = |d_in, d_out| LinearConfig::new(d_in, d_out).init(device);
        let norm = || {
            LayerNormConfig::new(d_model)
                .with_epsilon(self.norm_eps)
                .init(device)
        };
        Ok(materialize(SelfAttention {
            norm_attention: norm(),
            query: linear(d_model, d_model),
            key: linear(d_model, d_model),
            value: linear(d_model, d_model),
            output: linear(d_model, d_model),
            norm_feed_forward: norm(),
            feed_forward: PositionWiseFeedForwardConfig::new(d_model, d_ff)
                .with_dropout(self.dropout)
                .init(device),
            dropout: DropoutConfig::new(self.dropout).init(),
            n_heads: self.n_heads,
            causal: self.causal,
            rope: self.rope.as_ref().map(|rope| rope.init(device)),
            score_bias: self.score_bias.as_ref().map(|bias| bias.init(device)),
            id: BlockId::next(),
        }))
    }

    /// Builds the block.
    ///
    /// # Panics
    ///
    /// With [`try_init`](Self::try_init)'s message if the config is invalid: `n_heads` is 0 or
    /// does not divide `d_model`, dropout is outside `[0, 1)`, or a position part was built for
    /// another head count or width.
    pub fn init(&self, device: &Device) -> SelfAttention {
        self.try_init(device).unwrap_or_else(|err| panic!("{err}"))
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

    /// Applies the block with burn's fused attention.
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
    /// fused attention. On an autodiff device the scores are spelled out instead: burn has no
    /// fused attention with a backward, its fallback measured slower, and dropout on the
    /// weights needs them.
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

    /// Applies the block with an additive bias on the attention scores, and returns the
    /// attention weights beside the output.
    ///
    /// # Shapes
    ///
    /// - x: `[batch, seq, d_model]`
    /// - score_bias: `[batch or 1, n_heads or 1, seq, seq]`, added to `q·k / sqrt(d_head)`
    /// - output: `[batch, seq, d_model]`; weights: `[batch, n_heads, seq, seq]`
    ///
    /// # Panics
    ///
    /// If the bias does not broadcast to `[batch, n_heads, seq, seq]`.
    pub fn forward_with(&self, x: Tensor<3>, score_bias: Option<Tensor<4>>) -> AttentionOutput {
        let mut input = AttentionInput::new(x);
        input.score_bias = score_bias;
        self.forward_with_weights(input)
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
    pub fn forward_with_weights(&self, input: AttentionInput) -> AttentionOutput {
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
    pub fn forward_cached(&self, input: AttentionInput, cache: &mut KvCache) -> Tensor<3> {
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
        let (attended, weights) = self.attend(normed, cache, offset, key_padding, score_bias, path);
        let x = x + self.dropout.forward(attended);
        let fed = self
            .feed_forward
            .forward(self.norm_feed_forward.forward(x.clone()));
        (x + self.dropout.forward(fed), weights)
    }

    /// Multi-head attention over already normalized tokens at positions `offset..`.
    fn attend(
        &self,
        x: Tensor<3>,
        cache: Option<&mut KvCache>,
        offset: usize,
        key_padding: Option<Tensor<2, Bool>>,
        score_bias: Option<Tensor<4>>,
        path: Path,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let [batch, seq, d_model] = x.dims();
        let (n_heads, d_head) = (self.n_heads, d_model / self.n_heads);
        let seq_k = offset + seq;
        let device = x.device();
        // [batch, seq, d_model] -> [batch, n_heads, seq, d_head]
        let split = |t: Tensor<3>| t.reshape([batch, seq, n_heads, d_head]).swap_dims(1, 2);
        let mut q = split(self.query.forward(x.clone()));
        let mut k = split(self.key.forward(x.clone()));
        let mut v = split(self.value.forward(x));
        if let Some(rope) = &self.rope {
            (q, k) = (rope.apply(q, offset), rope.apply(k, offset));
        }
        if let Some(cache) = cache {
            // Bound to this block and batch: checked in `run` before anything was touched.
            if let (Some(past_k), Some(past_v)) = (cache.keys.take(), cache.values.take()) {
                k = Tensor::cat(vec![past_k, k], 2);
                v = Tensor::cat(vec![past_v, v], 2);
            }
            cache.keys = Some(k.clone());
            cache.values = Some(v.clone());
            cache.owner = Some((self.id, batch));
        }
        let dtype = q.dtype();
        let own = self
            .score_bias
            .as_ref()
            .map(|bias| bias.bias_as(offset, seq, seq_k, dtype));
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
        // in forward plus backward than the scores spelled out here (see the README's bench).
        let use_weights = path == Path::Weights || device.is_autodiff();
        if !use_weights {
            let context = attention(
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
            let later = causal_mask(&device, offset, seq, seq_k);
            scores = scores.mask_fill(
                later.unsqueeze::<4>().expand([batch, n_heads, seq, seq_k]),
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

/// `[seq_q, seq_k]`, true where key `j` comes after query `offset + i`; cached by shape.
fn causal_mask(device: &Device, offset: usize, seq_q: usize, seq_k: usize) -> Tensor<2, Bool> {
    let cache: ShapeCache<Tensor<2, Bool>> = cache::shared("causal".into());
    // Bool tensors come in the device's bool dtype; the key needs only to be constant.
    cache.get(device, DType::U8, offset, seq_q, seq_k, |n| {
        Tensor::<2, Bool>::tril_mask([n, n], 0, device)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(config: SelfAttentionConfig) -> String {
        config.validate().expect_err("must be refused").to_string()
    }

    #[test]
    fn heads_that_do_not_divide_d_model_are_refused_with_the_divisors() {
        let message = refusal(SelfAttentionConfig::new(512, 12));
        assert!(message.contains("12 (with d_model = 512)"), "{message}");
        assert!(message.contains("1, 2, 4, 8, 16, 32, 64"), "{message}");
        assert!(refusal(SelfAttentionConfig::new(16, 0)).contains("n_heads"));
        assert!(refusal(SelfAttentionConfig::new(0, 4)).contains("d_model = 0"));
    }

    #[test]
    fn parts_built_for_another_block_are_refused_at_init() {
        let alibi = SelfAttentionConfig::new(32, 4)
            .with_score_bias(Some(ScoreBiasConfig::Alibi(AlibiConfig::new(8))));
        let message = refusal(alibi);
        assert!(
            message.contains("`AlibiConfig` has n_heads = 8")
                && message.contains("block has n_heads = 4"),
            "{message}"
        );
        let t5 = SelfAttentionConfig::new(32, 4)
            .with_score_bias(Some(ScoreBiasConfig::T5(T5BiasConfig::new(2))));
        assert!(refusal(t5).contains("`T5BiasConfig` has n_heads = 2"));
        let rope = SelfAttentionConfig::new(32, 4).with_rope(Some(RopeConfig::new(16)));
        let message = refusal(rope);
        assert!(
            message.contains("d_head = 16") && message.contains("d_head = 8"),
            "{message}"
        );
        let odd = SelfAttentionConfig::new(36, 4).with_rotary();
        assert!(refusal(odd).contains("rotary_dims is 9"));
        let dropout = SelfAttentionConfig::new(32, 4).with_dropout(1.0);
        assert!(refusal(dropout).contains("dropout"));
        let buckets = SelfAttentionConfig::new(32, 4).with_score_bias(Some(ScoreBiasConfig::T5(
            T5BiasConfig::new(4).with_num_buckets(2),
        )));
        assert!(refusal(buckets).contains("num_buckets"));
    }

    #[test]
    fn parts_sized_from_the_block_fit_it() {
        let base = SelfAttentionConfig::new(48, 6);
        for config in [
            base.clone().with_rotary(),
            base.clone().with_alibi(AlibiDirection::Causal),
            base.clone().with_causal(true).with_t5(),
        ] {
            config.validate().expect("sized from the block");
        }
        let t5 = base.with_causal(true).with_t5();
        assert!(matches!(
            t5.score_bias,
            Some(ScoreBiasConfig::T5(T5BiasConfig {
                n_heads: 6,
                bidirectional: false,
                ..
            }))
        ));
    }
}
