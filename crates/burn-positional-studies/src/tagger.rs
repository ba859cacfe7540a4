//! A small transformer that predicts one token per position: an [`Encoder`] and a linear head.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep};

use crate::PositionError;
use crate::copy_back::CopyBackBatch;
use crate::encoder::{Encoder, EncoderConfig, loss_and_accuracy};

/// Configuration of [`TokenTagger`]: the encoder; the head predicts one of `vocab_size` tokens.
#[derive(Config, Debug, PartialEq)]
pub struct TokenTaggerConfig {
    /// The body.
    pub encoder: EncoderConfig,
}

/// See the [module docs](self).
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::LearnedConfig;
/// use burn_positional_examples::encoder::EncoderConfig;
/// use burn_positional_studies::tagger::TokenTaggerConfig;
///
/// let device = Device::flex();
/// let encoder = EncoderConfig::new(16, LearnedConfig::new(32).into()).with_d_model(32);
/// let model = TokenTaggerConfig::new(encoder).init(&device);
/// let ids = Tensor::<2, Int>::zeros([2, 10], &device);
/// assert_eq!(model.try_forward(ids).unwrap().dims(), [2, 10, 16]); // [batch, seq, vocab_size]
/// ```
#[derive(Module, Debug)]
pub struct TokenTagger {
    /// Embedding, blocks, norm.
    pub encoder: Encoder,
    /// `d_model -> vocab_size`.
    pub head: Linear,
}

impl TokenTaggerConfig {
    /// Builds the model.
    ///
    /// # Panics
    ///
    /// As [`EncoderConfig::init`].
    pub fn init(&self, device: &Device) -> TokenTagger {
        let EncoderConfig {
            vocab_size,
            d_model,
            ..
        } = self.encoder;
        burn_positional::training::materialize(TokenTagger {
            encoder: self.encoder.init(device),
            head: LinearConfig::new(d_model, vocab_size).init(device),
        })
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
        let (hidden, _) = self.encoder.try_forward(ids)?;
        Ok(self.head.forward(hidden))
    }

    /// Cross-entropy and accuracy of the predictions at positions `k..` against `answers`
    /// (`[batch, seq - k]`), after checking the ids (one read).
    pub fn try_loss_and_accuracy(
        &self,
        ids: Tensor<2, Int>,
        answers: Tensor<2, Int>,
        k: usize,
    ) -> Result<(Tensor<1>, f32), PositionError> {
        let logits = self.try_forward(ids)?;
        Ok(loss_and_accuracy_at(logits, answers, k))
    }

    /// [`try_loss_and_accuracy`](Self::try_loss_and_accuracy) with the embedding's deferred
    /// check (`self.encoder.embed.check_inputs()`), as a training step runs it.
    pub fn loss_and_accuracy(
        &self,
        ids: Tensor<2, Int>,
        answers: Tensor<2, Int>,
        k: usize,
    ) -> (Tensor<1>, f32) {
        let hidden = self.encoder.hidden(ids);
        loss_and_accuracy_at(self.head.forward(hidden), answers, k)
    }
}

/// Loss and accuracy of `logits` `[batch, seq, vocab]` at positions `k..`.
fn loss_and_accuracy_at(logits: Tensor<3>, answers: Tensor<2, Int>, k: usize) -> (Tensor<1>, f32) {
    let [batch, seq, vocab] = logits.dims();
    let n = batch * (seq - k);
    // Positions k.. only: [batch, seq - k, vocab] -> [n, vocab].
    let logits = logits
        .slice([0..batch, k..seq, 0..vocab])
        .reshape([n, vocab]);
    loss_and_accuracy(logits, answers.reshape([n]))
}

impl TokenTagger {
    /// The predictions at the answered positions and their cross-entropy, as burn-train's
    /// metrics read them: `output` `[batch * (seq - k), vocab_size]`, `targets`
    /// `[batch * (seq - k)]`, with `k = seq - answers' seq` (from the shapes: no read).
    ///
    /// # Shapes
    ///
    /// - `batch.ids`: `[batch, seq]`
    /// - `batch.answers`: `[batch, seq - k]`
    pub fn classification(&self, batch: CopyBackBatch) -> ClassificationOutput {
        let [batch_size, seq] = batch.ids.dims();
        let [_, answered] = batch.answers.dims();
        let k = seq - answered;
        let logits = self.head.forward(self.encoder.hidden(batch.ids));
        let vocab = logits.dims()[2];
        let n = batch_size * answered;
        let output = logits
            .slice([0..batch_size, k..seq, 0..vocab])
            .reshape([n, vocab]);
        let targets = batch.answers.reshape([n]);
        let loss = CrossEntropyLossConfig::new()
            .init(&output.device())
            .forward(output.clone(), targets.clone());
        ClassificationOutput::new(loss, output, targets)
    }
}

/// One training step for burn-train's `Learner`: forward, cross-entropy, backward. Nothing
/// is read from the device (bad ids come out as NaN; `encoder.embed.check_inputs()` names them).
impl TrainStep for TokenTagger {
    type Input = CopyBackBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: CopyBackBatch) -> TrainOutput<ClassificationOutput> {
        let output = self.classification(batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

/// One validation step for burn-train's `Learner`, and the embedding's deferred check: one read
/// per validation batch names any bad token id or position of the training steps since the
/// last check (their rows were NaN).
///
/// # Panics
///
/// With the embedding's error (the value, the limit and the fix) when a forward since the last
/// check had a bad token id or position: burn-train's step cannot return an error, and
/// training on NaN rows would only hide it.
impl InferenceStep for TokenTagger {
    type Input = CopyBackBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: CopyBackBatch) -> ClassificationOutput {
        let output = self.classification(batch);
        if let Err(err) = self.encoder.embed.check_inputs() {
            panic!("{err}");
        }
        output
    }
}
