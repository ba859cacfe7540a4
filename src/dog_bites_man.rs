//! The dog-bites-man demo's measurements (`examples/dog_bites_man.rs` prints them, the
//! top-level `tests/dog_bites_man.rs` checks them): one attention block on "dog bites man" and
//! "man bites dog" per scheme ([`compare`]), and the "who bites whom?" classifier trained per
//! scheme ([`train`]).
//!
//! ```
//! use burn::prelude::*;
//! use burn_positional_examples::dog_bites_man::{compare, train, TrainingOptions};
//! use burn_positional_examples::schemes::Scheme;
//!
//! let device = Device::flex();
//! // Without positions, "man bites dog" gives "dog bites man"'s rows, swapped.
//! let blind = compare(Scheme::None, 42, &device);
//! assert!(blind.rows_swapped <= 1e-5 * blind.scale && blind.pooled <= 1e-5 * blind.scale);
//! // Two steps of training: too few to learn anything, enough to show the call.
//! let options = TrainingOptions { steps: 2, ..TrainingOptions::default() };
//! let trained = train(Scheme::Rope, &options, &device, |_, _, _| {});
//! assert_eq!(trained.held_out_sentences, 68);
//! ```

use burn::optim::{AdamConfig, GradientsParams};
use burn::prelude::*;

use crate::classifier::{SequenceClassifier, SequenceClassifierConfig};
use crate::encoder::EncoderConfig;
use crate::schemes::{Scheme, SchemeParts};
use crate::who_bites_whom::{self, NOUNS, token_id, vocabulary};
use crate::{AbsolutePositionConfig, EmbeddingWithPositionConfig, SelfAttentionConfig};

/// Width of the demo's embedding and blocks.
pub const D_MODEL: usize = 32;
/// Heads per block.
pub const N_HEADS: usize = 4;
/// Rows of the learned position tables (the sentences have 3 words).
pub const MAX_LEN: usize = 8;
/// Every `HOLDOUT_EVERY`-th pair of sentences (a sentence and its reverse) is held out.
pub const HOLDOUT_EVERY: usize = 5;
/// Adam's learning rate.
pub const LEARNING_RATE: f64 = 1e-2;

/// Each scheme's parts for the demo's blocks (learned tables of [`MAX_LEN`] rows).
pub fn parts(scheme: Scheme) -> SchemeParts {
    scheme.parts(MAX_LEN, N_HEADS, D_MODEL / N_HEADS)
}

/// The token ids `[1, 3]` of a three-word sentence such as `"dog bites man"`.
///
/// # Panics
///
/// If a word is not in the vocabulary, or the sentence does not have three words.
pub fn sentence(text: &str, device: &Device) -> Tensor<2, Int> {
    let ids: Vec<i64> = text.split(' ').map(|w| token_id(w) as i64).collect();
    Tensor::from_data(TensorData::new(ids, [1, 3]), device)
}

/// "man bites dog" is "dog bites man" with words 0 and 2 swapped: the rows of `x`
/// `[batch, 3, d]` in that order.
pub fn swap_first_and_last(x: Tensor<3>) -> Tensor<3> {
    let device = x.device();
    x.select(1, Tensor::<1, Int>::from_data([2, 1, 0], &device))
}

/// The largest `|t|`, read back (the demos' reports; never on a model's path).
pub(crate) fn max_abs(t: Tensor<3>) -> f32 {
    t.abs().max().into_scalar::<f32>()
}

/// One randomly initialized block's outputs on A = "dog bites man" and B = "man bites dog":
/// the largest absolute differences.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// The scheme.
    pub scheme: Scheme,
    /// B's output rows against A's with the first and last swapped: 0 when the block only
    /// permutes (no positions).
    pub rows_swapped: f32,
    /// B's mean-pooled output against A's: 0 when the block only permutes.
    pub pooled: f32,
    /// B's output rows against A's in place: not 0, the words moved.
    pub rows_in_place: f32,
    /// The largest absolute value in A's output, to read the differences against.
    pub scale: f32,
}

/// Parts 1 and 2 of the demo: one self-attention block with random weights (seeded with `seed`
/// on `device`) and `scheme`'s positions, on both sentences.
pub fn compare(scheme: Scheme, seed: u64, device: &Device) -> Comparison {
    let parts = parts(scheme);
    device.seed(seed);
    let embed = EmbeddingWithPositionConfig::new(vocabulary().len(), D_MODEL)
        .with_scheme(parts.embedding)
        .init(device);
    let block = SelfAttentionConfig::new(D_MODEL, N_HEADS)
        .with_rope(parts.rope)
        .with_score_bias(parts.score_bias)
        .init(device);
    let a = block.forward(embed.forward(sentence("dog bites man", device)));
    let b = block.forward(embed.forward(sentence("man bites dog", device)));
    Comparison {
        scheme,
        rows_swapped: max_abs(b.clone() - swap_first_and_last(a.clone())),
        pooled: max_abs(b.clone().mean_dim(1) - a.clone().mean_dim(1)),
        rows_in_place: max_abs(b - a.clone()),
        scale: max_abs(a),
    }
}

/// How to train the classifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainingOptions {
    /// Full-batch Adam steps.
    pub steps: usize,
    /// Seed for initialization and the train/held-out split.
    pub seed: u64,
}

impl Default for TrainingOptions {
    /// The example's defaults: 150 steps, seed 42.
    fn default() -> Self {
        Self {
            steps: 150,
            seed: 42,
        }
    }
}

/// A classifier trained on "who bites whom?".
#[derive(Debug)]
pub struct Trained {
    /// The scheme.
    pub scheme: Scheme,
    /// The trained model, on the device it was trained on (without autodiff).
    pub model: SequenceClassifier,
    /// Accuracy on the training sentences at the last step (before its update); 0 without steps.
    pub train_accuracy: f32,
    /// The training loss at the last step (before its update); NaN without steps.
    pub train_loss: f32,
    /// Accuracy on the held-out sentences.
    pub held_out_accuracy: f32,
    /// The loss on the held-out sentences.
    pub held_out_loss: f32,
    /// How many sentences were held out.
    pub held_out_sentences: usize,
}

/// Part 3 of the demo: the "who bites whom?" classifier (embedding, one attention block, mean
/// pooling, a linear head) with `scheme`'s positions, trained with full-batch Adam on
/// `device.autodiff()`, then scored on the held-out sentences. `on_step(step, loss,
/// train_accuracy)` is called at every step (the loss stays on the device unless read). The
/// steps run the blocks' fused attention ([`SequenceClassifier::logits`]), and the embedding's
/// input check is read once, after the held-out pass.
///
/// Without positions (and with symmetric ALiBi) it cannot beat 50 % on held-out sentences:
/// each one's reverse is held out too, and a model blind to order gives both the same answer.
///
/// # Panics
///
/// With the embedding's message if a sentence's ids were refused (never for the demo's
/// vocabulary).
pub fn train(
    scheme: Scheme,
    options: &TrainingOptions,
    device: &Device,
    mut on_step: impl FnMut(usize, &Tensor<1>, f32),
) -> Trained {
    let (train_set, held_out) = who_bites_whom::split(options.seed, HOLDOUT_EVERY);
    let training = device.clone().autodiff();
    training.seed(options.seed);
    let encoder = EncoderConfig::new(vocabulary().len(), AbsolutePositionConfig::None)
        .with_d_model(D_MODEL)
        .with_n_heads(N_HEADS)
        .with_n_blocks(1)
        .with_position(scheme, MAX_LEN);
    let mut model = SequenceClassifierConfig::new(encoder, NOUNS.len()).init(&training);
    let (ids, answers) = who_bites_whom::batch(&train_set, &training);
    let mut optim = AdamConfig::new().init();
    let (mut train_accuracy, mut train_loss) = (0.0, f32::NAN);
    for step in 0..options.steps {
        let (loss, accuracy) = model.loss_and_accuracy(ids.clone(), answers.clone());
        train_accuracy = accuracy;
        on_step(step, &loss, accuracy);
        if step + 1 == options.steps {
            train_loss = loss.clone().into_scalar::<f32>();
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(LEARNING_RATE, model, grads);
    }
    let model = model.valid();
    let (held_ids, held_answers) = who_bites_whom::batch(&held_out, device);
    let (held_out_loss, held_out_accuracy) = model.loss_and_accuracy(held_ids, held_answers);
    // One read of the input check for every step and the held-out pass: the statuses are the
    // embedding's clones' (`valid()` keeps them).
    if let Err(err) = model.encoder.embed.check_inputs() {
        panic!("{err}");
    }
    Trained {
        scheme,
        model,
        train_accuracy,
        train_loss,
        held_out_accuracy,
        held_out_loss: held_out_loss.into_scalar::<f32>(),
        held_out_sentences: held_out.len(),
    }
}
