//! The body the example models share: [`EmbeddingWithPosition`], a stack of [`SelfAttention`]
//! blocks and a final norm. Heads go on top ([`crate::classifier`], [`crate::tagger`]).

use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{LayerNorm, LayerNormConfig};
use burn::prelude::*;

use crate::schemes::Scheme;
use crate::{
    AbsolutePositionConfig, AttentionInput, Combine, EmbeddingWithPosition,
    EmbeddingWithPositionConfig, KvCache, PositionError, Positions, RopeConfig, ScoreBias,
    ScoreBiasConfig, SelfAttention, SelfAttentionConfig,
};

/// Configuration of [`Encoder`].
#[derive(Config, Debug, PartialEq)]
pub struct EncoderConfig {
    /// Token ids lie in `0..vocab_size`.
    pub vocab_size: usize,
    /// The embedding's position scheme.
    pub scheme: AbsolutePositionConfig,
    /// Width of the embedding's output.
    #[config(default = 64)]
    pub d_model: usize,
    /// Add token and position vectors (default), or concatenate them (the add-or-concatenate question).
    #[config(default = "Combine::Add")]
    pub combine: Combine,
    /// Heads per block.
    #[config(default = 4)]
    pub n_heads: usize,
    /// Attention blocks.
    #[config(default = 2)]
    pub n_blocks: usize,
    /// Rotary positions in every block (see [`crate::schemes`]).
    #[config(default = "None")]
    pub rope: Option<RopeConfig>,
    /// A score bias in every block (ALiBi, T5): one module, its bias computed once per forward
    /// and passed to every block (one T5 table for the stack, as in T5).
    #[config(default = "None")]
    pub score_bias: Option<ScoreBiasConfig>,
    /// Causal blocks (a decoder: each token sees itself and earlier tokens only). Off by
    /// default. The shared score bias follows it (one-directional T5 buckets for a decoder).
    #[config(default = false)]
    pub causal: bool,
}

/// See the [module docs](self).
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::SinusoidalConfig;
/// use burn_positional_examples::encoder::EncoderConfig;
///
/// let device = Device::flex();
/// let encoder = EncoderConfig::new(16, SinusoidalConfig::new().into()).with_d_model(32).init(&device);
/// let (hidden, weights) = encoder.try_forward(Tensor::<2, Int>::zeros([2, 10], &device)).unwrap();
/// assert_eq!(hidden.dims(), [2, 10, 32]); // [batch, seq, d_model]
/// assert_eq!(weights.unwrap().dims(), [2, 4, 10, 10]); // [batch, n_heads, seq, seq]
/// ```
#[derive(Module, Debug)]
pub struct Encoder {
    /// Tokens and positions.
    pub embed: EmbeddingWithPosition,
    /// The attention blocks.
    pub blocks: Vec<SelfAttention>,
    /// The score bias every block shares.
    pub score_bias: Option<ScoreBias>,
    /// Final norm.
    pub norm: LayerNorm,
}

impl EncoderConfig {
    /// Checks the embedding and the blocks (with the shared score bias as a block's own: the
    /// head count must fit), naming the field, the value and the fix.
    pub fn validate(&self) -> Result<(), PositionError> {
        EmbeddingWithPositionConfig::new(self.vocab_size, self.d_model)
            .with_scheme(self.scheme.clone())
            .with_combine(self.combine.clone())
            .validate()?;
        self.block().validate()
    }

    /// One block's config, with the shared score bias as its own (to check the head count).
    fn block(&self) -> SelfAttentionConfig {
        SelfAttentionConfig::new(self.d_model, self.n_heads)
            .with_causal(self.causal)
            .with_rope(self.rope.clone())
            .with_score_bias(self.score_bias.clone())
    }

    /// Builds the encoder.
    ///
    /// # Panics
    ///
    /// As [`EmbeddingWithPositionConfig::init`] and [`SelfAttentionConfig::init`] (which also
    /// checks the shared score bias against the blocks).
    pub fn init(&self, device: &Device) -> Encoder {
        // Validated as a block's own bias: the head count must fit.
        let checked = self.block();
        if let Err(err) = checked.validate() {
            panic!("{err}");
        }
        let block = checked.with_score_bias(None);
        burn_positional::training::materialize(Encoder {
            embed: EmbeddingWithPositionConfig::new(self.vocab_size, self.d_model)
                .with_scheme(self.scheme.clone())
                .with_combine(self.combine.clone())
                .init(device),
            blocks: (0..self.n_blocks).map(|_| block.init(device)).collect(),
            score_bias: self.score_bias.as_ref().map(|bias| bias.init(device)),
            norm: LayerNormConfig::new(self.d_model).init(device),
        })
    }
}

impl EncoderConfig {
    /// This config with `scheme`'s parts in the embedding and in every block, learned tables
    /// `max_len` rows long (see [`Scheme::parts`]). Set `d_model` and `n_heads` first: RoPE's
    /// width and the biases' heads depend on them.
    pub fn with_position(self, scheme: Scheme, max_len: usize) -> Self {
        // n_heads = 0 is refused by `validate`, not divided by here.
        let d_head = self.d_model / self.n_heads.max(1);
        let parts = scheme.parts(max_len, self.n_heads, d_head);
        Self {
            scheme: parts.embedding,
            rope: parts.rope,
            score_bias: parts.score_bias,
            ..self
        }
    }
}

impl Encoder {
    /// Normalized hidden states and the last block's attention weights, or the embedding's
    /// error (for example, a sequence longer than a learned table).
    ///
    /// # Shapes
    ///
    /// - ids: `[batch, seq]`
    /// - hidden: `[batch, seq, d_model]`; weights: `[batch, n_heads, seq, seq]`
    pub fn try_forward(
        &self,
        ids: Tensor<2, Int>,
    ) -> Result<(Tensor<3>, Option<Tensor<4>>), PositionError> {
        let x = self.embed.try_forward(ids)?; // [batch, seq, d_model]
        Ok(self.blocks_and_norm(x, true))
    }

    /// [`try_forward`](Self::try_forward) without a device-to-host read: bad ids come out as
    /// NaN and are named by `self.embed.check_inputs()`.
    ///
    /// # Shapes
    ///
    /// As [`try_forward`](Self::try_forward).
    pub fn forward(&self, ids: Tensor<2, Int>) -> (Tensor<3>, Option<Tensor<4>>) {
        self.blocks_and_norm(self.embed.forward(ids), true)
    }

    /// Normalized hidden states through burn's fused attention, without weights and without a
    /// device-to-host read (the training loop's path).
    ///
    /// # Shapes
    ///
    /// - ids: `[batch, seq]`; output: `[batch, seq, d_model]`
    pub fn hidden(&self, ids: Tensor<2, Int>) -> Tensor<3> {
        self.blocks_and_norm(self.embed.forward(ids), false).0
    }

    /// Normalized hidden states of the next tokens of sequences whose earlier tokens are in
    /// `caches` (one [`KvCache`] per block, all empty for a new batch), appending theirs: the
    /// new tokens sit at positions `caches[0].len()..`, for the embedding, RoPE and the score
    /// bias alike. Decoding token by token this way gives the rows of [`hidden`](Self::hidden)
    /// on the whole sequence (for causal blocks). No device-to-host read: bad ids and positions
    /// past a learned table come out as NaN and are named by `self.embed.check_inputs()`.
    ///
    /// # Shapes
    ///
    /// - ids: `[batch, seq_new]`; output: `[batch, seq_new, d_model]`
    ///
    /// # Panics
    ///
    /// If `caches` does not hold one cache per block, or a cache holds another batch size.
    pub fn hidden_cached(&self, ids: Tensor<2, Int>, caches: &mut [KvCache]) -> Tensor<3> {
        assert_eq!(
            caches.len(),
            self.blocks.len(),
            "one KvCache per block: the encoder has {} blocks, got {} caches",
            self.blocks.len(),
            caches.len()
        );
        let [_, seq] = ids.dims();
        let offset = caches.first().map_or(0, KvCache::len);
        let mut x = self.embed.forward_at(ids, Positions::Offset(offset));
        let bias = self
            .score_bias
            .as_ref()
            .map(|bias| bias.bias(offset, seq, offset + seq, self.causal()));
        for (block, cache) in self.blocks.iter().zip(caches.iter_mut()) {
            let mut input = AttentionInput::new(x);
            input.score_bias = bias.clone();
            x = block.forward_cache(input, cache);
        }
        self.norm.forward(x)
    }

    /// Whether the blocks are causal (all are, or none): what the shared score bias follows.
    fn causal(&self) -> bool {
        self.blocks.first().is_some_and(|block| block.causal)
    }

    /// The blocks and the final norm; the last block's weights when `weights` is set.
    fn blocks_and_norm(&self, mut x: Tensor<3>, weights: bool) -> (Tensor<3>, Option<Tensor<4>>) {
        let [_, seq, _] = x.dims();
        // One bias for the whole stack, computed once per forward.
        let bias = self
            .score_bias
            .as_ref()
            .map(|bias| bias.bias(0, seq, seq, self.causal()));
        let mut last = None;
        for (i, block) in self.blocks.iter().enumerate() {
            let mut input = AttentionInput::new(x);
            input.score_bias = bias.clone();
            if weights && i + 1 == self.blocks.len() {
                let out = block.forward_weights(input);
                (x, last) = (out.output, Some(out.weights));
            } else {
                x = block.forward_input(input);
            }
        }
        (self.norm.forward(x), last)
    }
}

/// Mean cross-entropy and accuracy of `logits` `[n, classes]` against `answers` `[n]`.
pub fn loss_and_accuracy(logits: Tensor<2>, answers: Tensor<1, Int>) -> (Tensor<1>, f32) {
    let [n, _] = logits.dims();
    let predicted = logits.clone().argmax(1).squeeze_dim::<1>(1);
    let correct = predicted
        .equal(answers.clone())
        .int()
        .sum()
        .into_scalar::<i64>();
    let loss = CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits, answers);
    (loss, correct as f32 / n as f32)
}
