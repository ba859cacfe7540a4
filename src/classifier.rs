//! A tiny sequence classifier: [`EmbeddingWithPosition`], a stack of [`SelfAttention`] blocks,
//! mean pooling over the sequence, and a linear head.
//!
//! Mean pooling forgets order, so everything the classifier knows about order comes from the
//! position scheme (or a causal mask).

use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;

use crate::{
    EmbeddingWithPosition, EmbeddingWithPositionConfig, PositionSchemeConfig, RopeConfig,
    ScoreBiasConfig, SelfAttention, SelfAttentionConfig,
};

/// Configuration of [`SequenceClassifier`].
#[derive(Config, Debug)]
pub struct SequenceClassifierConfig {
    /// Token ids lie in `0..vocab_size`.
    pub vocab_size: usize,
    /// Number of classes.
    pub n_classes: usize,
    /// The position scheme.
    pub scheme: PositionSchemeConfig,
    /// Width of the token vectors.
    #[config(default = 32)]
    pub d_model: usize,
    /// Attention heads per block.
    #[config(default = 4)]
    pub n_heads: usize,
    /// Attention blocks.
    #[config(default = 1)]
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
/// use burn_positional::classifier::SequenceClassifierConfig;
///
/// let device = Device::flex();
/// let model = SequenceClassifierConfig::new(14, 8, SinusoidalConfig::new().into()).init(&device);
/// let (logits, weights) = model.forward(Tensor::<2, Int>::zeros([5, 3], &device));
/// assert_eq!(logits.dims(), [5, 8]); // [batch, n_classes]
/// assert_eq!(weights.unwrap().dims(), [5, 4, 3, 3]); // [batch, n_heads, seq, seq]
/// ```
#[derive(Module, Debug)]
pub struct SequenceClassifier {
    /// Tokens and positions.
    pub embed: EmbeddingWithPosition,
    /// The attention blocks.
    pub blocks: Vec<SelfAttention>,
    /// Final norm.
    pub norm: LayerNorm,
    /// `d_model -> n_classes`.
    pub head: Linear,
}

impl SequenceClassifierConfig {
    /// Builds the classifier.
    ///
    /// # Panics
    ///
    /// As [`EmbeddingWithPositionConfig::init`] and [`SelfAttentionConfig::init`].
    pub fn init(&self, device: &Device) -> SequenceClassifier {
        SequenceClassifier {
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
            head: LinearConfig::new(self.d_model, self.n_classes).init(device),
        }
    }
}

impl SequenceClassifier {
    /// Class logits, and the last block's attention weights.
    ///
    /// # Shapes
    ///
    /// - ids: `[batch, seq]`
    /// - logits: `[batch, n_classes]`; weights: `[batch, n_heads, seq, seq]`
    pub fn forward(&self, ids: Tensor<2, Int>) -> (Tensor<2>, Option<Tensor<4>>) {
        let mut x = self.embed.forward(ids); // [batch, seq, d_model]
        let mut weights = None;
        for block in &self.blocks {
            let out = block.forward_with(x, None);
            x = out.output;
            weights = Some(out.weights);
        }
        let pooled = self.norm.forward(x).mean_dim(1).squeeze_dim::<2>(1); // [batch, d_model]
        (self.head.forward(pooled), weights)
    }

    /// Cross-entropy loss and accuracy against `answers` `[batch]`.
    pub fn loss_and_accuracy(
        &self,
        ids: Tensor<2, Int>,
        answers: Tensor<1, Int>,
    ) -> (Tensor<1>, f32) {
        let (logits, _) = self.forward(ids);
        let [batch, _] = logits.dims();
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
        (loss, correct.into_scalar::<i64>() as f32 / batch as f32)
    }
}
