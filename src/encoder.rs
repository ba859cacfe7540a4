//! The body the example models share: [`EmbeddingWithPosition`], a stack of [`SelfAttention`]
//! blocks and a final norm. Heads go on top ([`crate::classifier`], [`crate::tagger`]).

use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{LayerNorm, LayerNormConfig};
use burn::prelude::*;

use crate::schemes::Scheme;
use crate::{
    Combine, EmbeddingWithPosition, EmbeddingWithPositionConfig, PositionError,
    PositionSchemeConfig, Positions, RopeConfig, ScoreBiasConfig, SelfAttention,
    SelfAttentionConfig,
};

/// Configuration of [`Encoder`].
#[derive(Config, Debug, PartialEq)]
pub struct EncoderConfig {
    /// Token ids lie in `0..vocab_size`.
    pub vocab_size: usize,
    /// The embedding's position scheme.
    pub scheme: PositionSchemeConfig,
    /// Width of the embedding's output.
    #[config(default = 64)]
    pub d_model: usize,
    /// Add token and position vectors (default), or concatenate them (seed 001).
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
    /// A score bias in every block (ALiBi, T5).
    #[config(default = "None")]
    pub score_bias: Option<ScoreBiasConfig>,
}

/// See the [module docs](self).
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::SinusoidalConfig;
/// use burn_positional::encoder::EncoderConfig;
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
    /// Final norm.
    pub norm: LayerNorm,
}

impl EncoderConfig {
    /// Builds the encoder.
    ///
    /// # Panics
    ///
    /// As [`EmbeddingWithPositionConfig::init`] and [`SelfAttentionConfig::init`].
    pub fn init(&self, device: &Device) -> Encoder {
        let block = SelfAttentionConfig::new(self.d_model, self.n_heads)
            .with_rope(self.rope.clone())
            .with_score_bias(self.score_bias.clone());
        Encoder {
            embed: EmbeddingWithPositionConfig::new(self.vocab_size, self.d_model)
                .with_scheme(self.scheme.clone())
                .with_combine(self.combine.clone())
                .init(device),
            blocks: (0..self.n_blocks).map(|_| block.init(device)).collect(),
            norm: LayerNormConfig::new(self.d_model).init(device),
        }
    }
}

impl EncoderConfig {
    /// This config with `scheme`'s parts in the embedding and in every block, learned tables
    /// `max_len` rows long. Set `d_model` and `n_heads` first: RoPE's width depends on them.
    pub fn with_position(self, scheme: Scheme, max_len: usize) -> Self {
        let parts = scheme.parts(max_len, self.n_heads, self.d_model / self.n_heads);
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
        let x = self.embed.try_forward(ids, Positions::default())?; // [batch, seq, d_model]
        Ok(self.blocks_and_norm(x))
    }

    /// [`try_forward`](Self::try_forward) without a device-to-host read: bad ids come out as
    /// NaN and are named by `self.embed.check_inputs()` (the training loop's path).
    ///
    /// # Shapes
    ///
    /// As [`try_forward`](Self::try_forward).
    pub fn forward(&self, ids: Tensor<2, Int>) -> (Tensor<3>, Option<Tensor<4>>) {
        self.blocks_and_norm(self.embed.forward(ids))
    }

    fn blocks_and_norm(&self, mut x: Tensor<3>) -> (Tensor<3>, Option<Tensor<4>>) {
        let mut weights = None;
        for block in &self.blocks {
            let out = block.forward_with(x, None);
            (x, weights) = (out.output, Some(out.weights));
        }
        (self.norm.forward(x), weights)
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
