//! A tiny sequence classifier: an [`Encoder`], mean pooling over the sequence, and a linear
//! head.
//!
//! Mean pooling forgets order, so everything the classifier knows about order comes from the
//! position scheme (or a causal mask).

#[cfg(feature = "train")]
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
#[cfg(feature = "train")]
use burn::train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep};

#[cfg(feature = "train")]
use crate::who_bites_whom::SentenceBatch;

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
        burn_positional::training::materialize(SequenceClassifier {
            encoder: self.encoder.init(device),
            head: LinearConfig::new(self.encoder.d_model, self.n_classes).init(device),
        })
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
        (self.head_of(hidden), weights)
    }

    /// Class logits through the blocks' fused attention (the training path): no attention
    /// weights and no device-to-host read. Bad ids come out as NaN logits and are named by
    /// `self.encoder.embed.check_inputs()`.
    ///
    /// # Shapes
    ///
    /// - ids: `[batch, seq]`
    /// - logits: `[batch, n_classes]`
    pub fn logits(&self, ids: Tensor<2, Int>) -> Tensor<2> {
        self.head_of(self.encoder.hidden(ids))
    }

    /// Mean pooling over the sequence, then the head: `[batch, seq, d_model]` hidden states to
    /// `[batch, n_classes]` logits.
    fn head_of(&self, hidden: Tensor<3>) -> Tensor<2> {
        self.head.forward(hidden.mean_dim(1).squeeze_dim::<2>(1)) // pooled: [batch, d_model]
    }

    /// Cross-entropy loss and accuracy against `answers` `[batch]`, from
    /// [`logits`](Self::logits): one read (the accuracy), none for the input check.
    pub fn loss_and_accuracy(
        &self,
        ids: Tensor<2, Int>,
        answers: Tensor<1, Int>,
    ) -> (Tensor<1>, f32) {
        loss_and_accuracy(self.logits(ids), answers)
    }
}

/// burn-train's steps (the `train` feature, which the studies crate turns on; the demo trains
/// with a plain loop and does not build burn-train).
#[cfg(feature = "train")]
impl SequenceClassifier {
    /// Logits and cross-entropy as burn-train's metrics read them. Reads nothing from the
    /// device (bad ids come out as NaN; `encoder.embed.check_inputs()` names them).
    ///
    /// # Shapes
    ///
    /// - `batch.ids`: `[batch, seq]`; `batch.answers`: `[batch]`
    /// - output: `[batch, n_classes]`; targets: `[batch]`
    pub fn classification(&self, batch: SentenceBatch) -> ClassificationOutput {
        let output = self.logits(batch.ids);
        let loss = CrossEntropyLossConfig::new()
            .init(&output.device())
            .forward(output.clone(), batch.answers.clone());
        ClassificationOutput::new(loss, output, batch.answers)
    }
}

/// One training step for burn-train's `Learner`.
#[cfg(feature = "train")]
impl TrainStep for SequenceClassifier {
    type Input = SentenceBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: SentenceBatch) -> TrainOutput<ClassificationOutput> {
        let output = self.classification(batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

/// One validation step for burn-train's `Learner`.
#[cfg(feature = "train")]
impl InferenceStep for SequenceClassifier {
    type Input = SentenceBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: SentenceBatch) -> ClassificationOutput {
        self.classification(batch)
    }
}
