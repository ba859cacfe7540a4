//! A tiny sequence classifier: an [`Encoder`], mean pooling over the sequence, and a linear
//! head.
//!
//! Mean pooling forgets order, so everything the classifier knows about order comes from the
//! position scheme (or a causal mask).

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;

use crate::encoder::{Encoder, EncoderConfig, loss_and_accuracy};

/// Configuration of [`SequenceClassifier`].
#[derive(Config, Debug)]
pub struct SequenceClassifierConfig {
    /// The body.
    pub encoder: EncoderConfig,
    /// Number of classes.
    pub n_classes: usize,
}

/// See the [module docs](self).
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::SinusoidalConfig;
/// use burn_positional_examples::classifier::SequenceClassifierConfig;
/// use burn_positional_examples::encoder::EncoderConfig;
///
/// let device = Device::flex();
/// let encoder = EncoderConfig::new(14, SinusoidalConfig::new().into()).with_d_model(32);
/// let model = SequenceClassifierConfig::new(encoder, 8).init(&device);
/// let (logits, weights) = model.forward(Tensor::<2, Int>::zeros([5, 3], &device));
/// assert_eq!(logits.dims(), [5, 8]); // [batch, n_classes]
/// assert_eq!(weights.unwrap().dims(), [5, 4, 3, 3]); // [batch, n_heads, seq, seq]
/// ```
#[derive(Module, Debug)]
pub struct SequenceClassifier {
    /// Embedding, blocks, norm.
    pub encoder: Encoder,
    /// `d_model -> n_classes`.
    pub head: Linear,
}

impl SequenceClassifierConfig {
    /// Builds the classifier.
    ///
    /// # Panics
    ///
    /// As [`EncoderConfig::init`].
    pub fn init(&self, device: &Device) -> SequenceClassifier {
        SequenceClassifier {
            encoder: self.encoder.init(device),
            head: LinearConfig::new(self.encoder.d_model, self.n_classes).init(device),
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
    ///
    /// # Panics
    ///
    /// With the embedding's message on bad input (see
    /// [`EmbeddingWithPosition::try_forward`](crate::EmbeddingWithPosition::try_forward)).
    pub fn forward(&self, ids: Tensor<2, Int>) -> (Tensor<2>, Option<Tensor<4>>) {
        let (hidden, weights) = self
            .encoder
            .try_forward(ids)
            .unwrap_or_else(|err| panic!("{err}"));
        let pooled = hidden.mean_dim(1).squeeze_dim::<2>(1); // [batch, d_model]
        (self.head.forward(pooled), weights)
    }

    /// Cross-entropy loss and accuracy against `answers` `[batch]`.
    pub fn loss_and_accuracy(
        &self,
        ids: Tensor<2, Int>,
        answers: Tensor<1, Int>,
    ) -> (Tensor<1>, f32) {
        loss_and_accuracy(self.forward(ids).0, answers)
    }
}
