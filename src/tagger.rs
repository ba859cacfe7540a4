//! A small transformer that predicts one token per position: [`EmbeddingWithPosition`], a stack
//! of [`SelfAttention`] blocks, a final norm and a linear head.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;

use crate::{
    EmbeddingWithPosition, EmbeddingWithPositionConfig, PositionError, PositionSchemeConfig,
    Positions, RopeConfig, ScoreBiasConfig, SelfAttention, SelfAttentionConfig,
};

/// Configuration of [`TokenTagger`].
#[derive(Config, Debug, PartialEq)]
pub struct TokenTaggerConfig {
    /// Token ids (inputs and outputs) lie in `0..vocab_size`.
    pub vocab_size: usize,
    /// The position scheme.
    pub scheme: PositionSchemeConfig,
    /// Width of the token vectors.
    #[config(default = 64)]
    pub d_model: usize,
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
/// use burn_positional::LearnedConfig;
/// use burn_positional::tagger::TokenTaggerConfig;
///
/// let device = Device::flex();
/// let model = TokenTaggerConfig::new(16, LearnedConfig::new(32).into()).with_d_model(32).init(&device);
/// let ids = Tensor::<2, Int>::zeros([2, 10], &device);
/// assert_eq!(model.try_forward(ids).unwrap().dims(), [2, 10, 16]); // [batch, seq, vocab_size]
/// ```
#[derive(Module, Debug)]
pub struct TokenTagger {
    /// Tokens and positions.
    pub embed: EmbeddingWithPosition,
    /// The attention blocks.
    pub blocks: Vec<SelfAttention>,
    /// Final norm.
    pub norm: LayerNorm,
    /// `d_model -> vocab_size`.
    pub head: Linear,
}

impl TokenTaggerConfig {
    /// Builds the model.
    ///
    /// # Panics
    ///
    /// As [`EmbeddingWithPositionConfig::init`] and [`SelfAttentionConfig::init`].
    pub fn init(&self, device: &Device) -> TokenTagger {
        TokenTagger {
            embed: EmbeddingWithPositionConfig::new(self.vocab_size, self.d_model)
                .with_scheme(self.scheme.clone())
                .init(device),
            blocks: (0..self.n_blocks)
                .map(|_| {
                    SelfAttentionConfig::new(self.d_model, self.n_heads)
                        .with_rope(self.rope.clone())
                        .with_score_bias(self.score_bias.clone())
                        .init(device)
                })
                .collect(),
            norm: LayerNormConfig::new(self.d_model).init(device),
            head: LinearConfig::new(self.d_model, self.vocab_size).init(device),
        }
    }
}

impl TokenTagger {
    /// Logits per position, or the embedding's error (for example, a sequence longer than a
    /// learned table).
    ///
    /// # Shapes
    ///
    /// - ids: `[batch, seq]`
    /// - output: `[batch, seq, vocab_size]`
    pub fn try_forward(&self, ids: Tensor<2, Int>) -> Result<Tensor<3>, PositionError> {
        let mut x = self.embed.try_forward(ids, Positions::default())?; // [batch, seq, d_model]
        for block in &self.blocks {
            x = block.forward(x);
        }
        Ok(self.head.forward(self.norm.forward(x)))
    }

    /// Cross-entropy and accuracy of the predictions at positions `k..` against `answers`
    /// (`[batch, seq - k]`).
    pub fn try_loss_and_accuracy(
        &self,
        ids: Tensor<2, Int>,
        answers: Tensor<2, Int>,
        k: usize,
    ) -> Result<(Tensor<1>, f32), PositionError> {
        let logits = self.try_forward(ids)?;
        let [batch, seq, vocab] = logits.dims();
        let n = batch * (seq - k);
        let logits = logits
            .slice([0..batch, k..seq, 0..vocab])
            .reshape([n, vocab]);
        let answers = answers.reshape([n]);
        let correct = logits
            .clone()
            .argmax(1)
            .squeeze_dim::<1>(1)
            .equal(answers.clone())
            .int()
            .sum();
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits, answers);
        Ok((loss, correct.into_scalar::<i64>() as f32 / n as f32))
    }
}
