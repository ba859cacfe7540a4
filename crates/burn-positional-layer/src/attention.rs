//! A small self-attention block: multi-head attention and a feed-forward, each behind a
//! pre-norm residual (as in GPT-2 and most models since).
//!
//! ```text
//! x = x + Attention(LayerNorm(x))
//! x = x + FeedForward(LayerNorm(x))
//! ```
//!
//! Without positions and without a causal mask the block is permutation-equivariant:
//! `Block(P x) = P Block(x)` for any permutation `P` of the sequence, because every part of it
//! but attention acts on each token alone, and attention's output for a token is a weighted sum
//! over *all* tokens whose weights depend only on the tokens' contents. Position has to come
//! from somewhere else: the embedding (sinusoidal, learned), or the scores themselves.
//!
//! Schemes that act on attention plug in through parameters: rotary positions on queries and
//! keys ([`SelfAttentionConfig::rope`]), a score bias the block owns
//! ([`SelfAttentionConfig::score_bias`]: ALiBi, T5), or a score bias computed outside and passed
//! to [`forward_with`](SelfAttention::forward_with) (one T5 table shared by every block).
//!
//! A causal mask breaks equivariance on its own: token `i` attends to tokens `0..=i`, so moving
//! a token changes which tokens can see it. The mask is itself a (weak) source of position.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Gelu, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::softmax;
use burn::tensor::{Bool, Device, Tensor};

use crate::{Alibi, AlibiConfig, Rope, RopeConfig, T5Bias, T5BiasConfig};

/// Configuration of [`SelfAttention`].
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
    /// Dropout on the attention weights and on each residual branch. 0 by default.
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
    /// default; to share one T5 table across blocks, pass its bias to `forward_with` instead.
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
    /// Builds the bias.
    pub fn init(&self, device: &Device) -> ScoreBias {
        match self {
            Self::Alibi(config) => ScoreBias::Alibi(config.init(device)),
            Self::T5(config) => ScoreBias::T5(config.init(device)),
        }
    }
}

impl ScoreBias {
    /// The bias for queries at `offset..offset + seq_q` and keys at `0..seq_k`.
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
}

/// A pre-norm self-attention block, see the [module docs](self).
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
    /// `d_model -> d_ff`.
    pub feed_forward_in: Linear,
    /// `d_ff -> d_model`.
    pub feed_forward_out: Linear,
    /// The feed-forward's activation.
    pub activation: Gelu,
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
}

/// The block's output and the attention weights that produced it.
#[derive(Debug, Clone)]
pub struct AttentionOutput {
    /// `[batch, seq, d_model]`.
    pub output: Tensor<3>,
    /// `[batch, n_heads, seq, seq]`: row `i` is how token `i` spreads its attention.
    pub weights: Tensor<4>,
}

impl SelfAttentionConfig {
    /// Builds the block.
    ///
    /// # Panics
    ///
    /// If `n_heads` is 0 or does not divide `d_model`.
    pub fn init(&self, device: &Device) -> SelfAttention {
        let Self {
            d_model, n_heads, ..
        } = *self;
        assert!(
            n_heads > 0 && d_model % n_heads == 0,
            "n_heads ({n_heads}) must divide d_model ({d_model}): each head gets d_model / n_heads \
             dimensions. Fix: choose n_heads among the divisors of {d_model}"
        );
        let d_ff = self.d_ff.unwrap_or(4 * d_model);
        let linear = |d_in, d_out| LinearConfig::new(d_in, d_out).init(device);
        let norm = || {
            LayerNormConfig::new(d_model)
                .with_epsilon(self.norm_eps)
                .init(device)
        };
        SelfAttention {
            norm_attention: norm(),
            query: linear(d_model, d_model),
            key: linear(d_model, d_model),
            value: linear(d_model, d_model),
            output: linear(d_model, d_model),
            norm_feed_forward: norm(),
            feed_forward_in: linear(d_model, d_ff),
            feed_forward_out: linear(d_ff, d_model),
            activation: Gelu::new(),
            dropout: DropoutConfig::new(self.dropout).init(),
            n_heads,
            causal: self.causal,
            rope: self.rope.as_ref().map(|rope| {
                assert_eq!(
                    rope.d_head,
                    d_model / n_heads,
                    "RopeConfig::d_head ({}) must be d_model / n_heads ({})",
                    rope.d_head,
                    d_model / n_heads
                );
                rope.init(device)
            }),
            score_bias: self.score_bias.as_ref().map(|bias| bias.init(device)),
        }
    }
}

impl SelfAttention {
    /// Applies the block.
    ///
    /// # Shapes
    ///
    /// - x: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        self.forward_with(x, None).output
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
        let (attended, weights) = self.attend(self.norm_attention.forward(x.clone()), score_bias);
        let x = x + self.dropout.forward(attended);
        let hidden = self.activation.forward(
            self.feed_forward_in
                .forward(self.norm_feed_forward.forward(x.clone())),
        );
        let output = x + self.dropout.forward(self.feed_forward_out.forward(hidden));
        AttentionOutput { output, weights }
    }

    /// Multi-head attention over already normalized tokens.
    fn attend(&self, x: Tensor<3>, score_bias: Option<Tensor<4>>) -> (Tensor<3>, Tensor<4>) {
        let [batch, seq, d_model] = x.dims();
        let (n_heads, d_head) = (self.n_heads, d_model / self.n_heads);
        // [batch, seq, d_model] -> [batch, n_heads, seq, d_head]
        let split = |t: Tensor<3>| t.reshape([batch, seq, n_heads, d_head]).swap_dims(1, 2);
        let mut q = split(self.query.forward(x.clone()));
        let mut k = split(self.key.forward(x.clone()));
        let v = split(self.value.forward(x));
        if let Some(rope) = &self.rope {
            (q, k) = (rope.apply(q, 0), rope.apply(k, 0));
        }
        let score_bias = match (&self.score_bias, score_bias) {
            (Some(own), Some(given)) => Some(own.bias(0, seq, seq) + given),
            (Some(own), None) => Some(own.bias(0, seq, seq)),
            (None, given) => given,
        };

        let mut scores = q
            .matmul(k.swap_dims(2, 3))
            .div_scalar((d_head as f64).sqrt()); // [batch, n_heads, seq, seq]
        if let Some(bias) = score_bias {
            let [b, h, sq, sk] = bias.dims();
            assert!(
                (b == 1 || b == batch) && (h == 1 || h == n_heads) && sq == seq && sk == seq,
                "score bias of shape {:?} does not broadcast to the scores' [batch {batch}, n_heads \
                 {n_heads}, seq {seq}, seq {seq}]",
                [b, h, sq, sk]
            );
            scores = scores + bias;
        }
        if self.causal {
            // true above the diagonal: token i may not see tokens after i.
            let later = Tensor::<2, Bool>::tril_mask([seq, seq], 0, &scores.device());
            scores = scores.mask_fill(
                later.unsqueeze::<4>().expand([batch, n_heads, seq, seq]),
                f32::NEG_INFINITY,
            );
        }
        let weights = softmax(scores, 3);
        let context = self.dropout.forward(weights.clone()).matmul(v); // [batch, n_heads, seq, d_head]
        let merged = context.swap_dims(1, 2).reshape([batch, seq, d_model]);
        (self.output.forward(merged), weights)
    }
}
