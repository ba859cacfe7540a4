//! The decoder-only model of a cell: [`LanguageModelConfig`], [`LanguageModel`] and its
//! training and inference steps.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep};

use super::{LmBatch, PAD, VOCAB};
use crate::encoder::{Encoder, EncoderConfig};
use crate::{KvCache, RopeScaling};

/// Configuration of [`LanguageModel`].
#[derive(Config, Debug, PartialEq)]
pub struct LanguageModelConfig {
    /// The body; must be causal.
    pub encoder: EncoderConfig,
}

/// A decoder-only language model: a causal [`Encoder`] and a linear head over the vocabulary.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_examples::encoder::EncoderConfig;
/// use burn_positional_studies::length_generalization::LanguageModelConfig;
/// use burn_positional_examples::schemes::Scheme;
/// use burn_positional::AbsolutePositionConfig;
///
/// let device = Device::flex();
/// // `with_position` replaces the placeholder scheme with ALiBi's causal parts.
/// let body = EncoderConfig::new(15, AbsolutePositionConfig::None)
///     .with_d_model(32)
///     .with_causal(true)
///     .with_position(Scheme::Alibi, 64);
/// let model = LanguageModelConfig::new(body).init(&device);
/// let ids = Tensor::<2, Int>::zeros([2, 10], &device);
/// assert_eq!(model.forward(ids).dims(), [2, 10, 15]); // [batch, seq, vocab]
/// ```
#[derive(Module, Debug)]
pub struct LanguageModel {
    /// Embedding, causal blocks, norm.
    pub body: Encoder,
    /// `d_model -> vocab_size`.
    pub head: Linear,
}

impl LanguageModelConfig {
    /// Builds the model.
    ///
    /// # Panics
    ///
    /// If the encoder is not causal, or as [`EncoderConfig::init`].
    pub fn init(&self, device: &Device) -> LanguageModel {
        assert!(
            self.encoder.causal,
            "a language model needs causal blocks. Fix: EncoderConfig::with_causal(true), set \
             before with_position"
        );
        burn_positional::training::materialize(LanguageModel {
            body: self.encoder.init(device),
            head: LinearConfig::new(self.encoder.d_model, self.encoder.vocab_size).init(device),
        })
    }
}

impl LanguageModel {
    /// Next-token logits at every position, with no device-to-host read.
    ///
    /// # Shapes
    ///
    /// - ids: `[batch, seq]`; output: `[batch, seq, vocab_size]`
    pub fn forward(&self, ids: Tensor<2, Int>) -> Tensor<3> {
        self.head.forward(self.body.hidden(ids))
    }

    /// Next-token logits of the new tokens of sequences whose earlier tokens are in `caches`
    /// (see [`Encoder::hidden_cached`]).
    ///
    /// # Shapes
    ///
    /// - ids: `[batch, seq_new]`; output: `[batch, seq_new, vocab_size]`
    pub fn forward_cache(&self, ids: Tensor<2, Int>, caches: &mut [KvCache]) -> Tensor<3> {
        self.head.forward(self.body.hidden_cached(ids, caches))
    }

    /// Empty caches, one per block.
    pub fn caches(&self) -> Vec<KvCache> {
        vec![KvCache::new(); self.body.blocks.len()]
    }

    /// This model with RoPE's context extension set to `scaling` in every block (a test-time
    /// knob; see [`crate::Rope::rescaled`]); `None` when the model has no RoPE.
    pub fn with_rope_scaling(&self, scaling: RopeScaling) -> Option<Self> {
        let mut model = self.clone();
        for block in &mut model.body.blocks {
            block.rope = Some(block.rope.as_ref()?.rescaled(scaling.clone()));
        }
        Some(model)
    }

    /// Loss (cross-entropy over the answer tokens) and the predictions at every position, as
    /// burn-train's metrics read them: `output` `[batch * seq, vocab]`, `targets`
    /// `[batch * seq]` with [`PAD`] where nothing is trained. No read.
    pub fn classification(&self, batch: LmBatch) -> ClassificationOutput {
        let [batch_size, seq] = batch.inputs.dims();
        let logits = self.forward(batch.inputs);
        let output = logits.reshape([batch_size * seq, VOCAB]);
        let targets = batch.targets.reshape([batch_size * seq]);
        let loss = CrossEntropyLossConfig::new()
            .with_pad_tokens(Some(vec![PAD as usize]))
            .init(&output.device())
            .forward(output.clone(), targets.clone());
        ClassificationOutput::new(loss, output, targets)
    }
}

/// One teacher-forced step for burn-train: forward, cross-entropy on the answer tokens,
/// backward. No read.
impl TrainStep for LanguageModel {
    type Input = LmBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: LmBatch) -> TrainOutput<ClassificationOutput> {
        let output = self.classification(batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

/// One validation step for burn-train, and the embedding's deferred check (one read per
/// validation batch; see the tagger's).
///
/// # Panics
///
/// With the embedding's error when a forward since the last check had a bad id or position.
impl InferenceStep for LanguageModel {
    type Input = LmBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: LmBatch) -> ClassificationOutput {
        let output = self.classification(batch);
        if let Err(err) = self.body.embed.check_inputs() {
            panic!("{err}");
        }
        output
    }
}
