//! "Dog bites man" for pictures: the measurements of `examples/dog_bites_man_pictures.rs`,
//! checked by the top-level `tests/dog_bites_man_pictures.rs`. One attention block on a picture
//! and on the same picture with its patches shuffled, per grid scheme ([`compare`]), and a tiny
//! vision transformer trained per scheme on "is red left of blue?" ([`train`],
//! [`crate::red_left_of_blue`]).
//!
//! ```
//! use burn::prelude::*;
//! use burn_positional_examples::pictures::{compare, train, TrainingOptions};
//! use burn_positional_examples::schemes::GridScheme;
//!
//! let device = Device::flex();
//! // Without positions, the shuffled picture gives the picture's rows, shuffled the same way.
//! let blind = compare(GridScheme::None, 42, &device);
//! assert!(blind.rows_shuffled <= 1e-5 * blind.scale && blind.pooled <= 1e-5 * blind.scale);
//! // Two steps of training: too few to learn anything, enough to show the call.
//! let options = TrainingOptions { steps: 2, ..TrainingOptions::default() };
//! let trained = train(GridScheme::Rope, &options, &device, |_, _, _| {});
//! assert_eq!(trained.held_out_pictures, 40);
//! ```

use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams};
use burn::prelude::*;
use burn::tensor::activation::softmax;

use crate::dog_bites_man::max_abs;
use crate::red_left_of_blue::{self, CHANNELS, GRID, PATCH, Picture, SIZE};
use crate::rng::SplitMix64;
use crate::schemes::GridScheme;
use crate::vit::{Vit, VitConfig, patchify};

/// Width of the patch vectors and the block.
pub const D_MODEL: usize = 32;
/// Heads of the block.
pub const N_HEADS: usize = 4;
/// Every `HOLDOUT_EVERY`-th pair of twins (a picture and its colours swapped) is held out.
pub const HOLDOUT_EVERY: usize = 5;
/// Adam's learning rate.
pub const LEARNING_RATE: f64 = 1e-2;
/// Weight of the noise in [`compare`]'s picture (so that every patch differs).
pub const NOISE: f32 = 0.1;
/// Two logits closer than this fraction of the larger (at least 1) are a tie: float rounding
/// picks the answer, so [`loss_and_accuracy`] counts it half right, as a coin would score.
/// Without positions every picture is the same bag of patches (one red, one blue, fourteen
/// white), the model gives all of them the same logits, and training drives those to a tie.
pub const TIE: f32 = 1e-5;
/// Mixed into the seed for the noise and for the shuffle: streams of their own, apart from the
/// split's (which takes the seed as it is).
const NOISE_STREAM: u64 = 0x006e_6f69_7365; // "noise"
const SHUFFLE_STREAM: u64 = 0x0073_6875_6666_6c65; // "shuffle"

/// The demo's model with `scheme`'s positions: patches of [`PATCH`] pixels on a [`GRID`] x
/// [`GRID`] grid, [`D_MODEL`] wide, one block of [`N_HEADS`] heads.
pub fn config(scheme: GridScheme) -> VitConfig {
    VitConfig::new(vec![GRID, GRID])
        .with_patch(PATCH)
        .with_channels(CHANNELS)
        .with_d_model(D_MODEL)
        .with_n_heads(N_HEADS)
        .with_n_blocks(1)
        .with_scheme(scheme)
}

/// The picture of the demo's figure and comparison, and its twin: the first held-out pair of
/// the split with `seed`, red left of blue first (so neither was trained on).
pub fn figure_pictures(seed: u64) -> [Picture; 2] {
    let (_, held_out) = red_left_of_blue::split(seed, HOLDOUT_EVERY);
    let a = held_out[0];
    let a = if a.answer() == 1 { a } else { a.swapped() };
    [a, a.swapped()]
}

/// The pixels of `pictures` as a batch `[n, CHANNELS, SIZE, SIZE]`.
pub fn pixels(pictures: &[Picture], device: &Device) -> Tensor<4> {
    red_left_of_blue::batch(pictures, device).0
}

/// [`compare`]'s picture, `[1, CHANNELS, SIZE, SIZE]`: the figure's first picture with seeded
/// noise on every pixel (`(1 - NOISE) p + NOISE u`, `u` uniform in `0..1`), so that no two
/// patches are equal.
pub fn noisy_picture(seed: u64, device: &Device) -> Tensor<4> {
    let [picture, _] = figure_pictures(seed);
    let mut rng = SplitMix64::new(seed ^ NOISE_STREAM);
    let noisy: Vec<f32> = picture
        .pixels()
        .into_iter()
        .map(|p| (1.0 - NOISE) * p + NOISE * (rng.below(1 << 24) as f32 / (1 << 24) as f32))
        .collect();
    Tensor::from_data(TensorData::new(noisy, [1, CHANNELS, SIZE, SIZE]), device)
}

/// The shuffle of [`compare`]: patch `i` of the shuffled picture is patch `order[i]` of the
/// picture. Seeded; never the identity.
pub fn shuffle(seed: u64) -> Vec<usize> {
    let mut rng = SplitMix64::new(seed ^ SHUFFLE_STREAM);
    loop {
        let mut order: Vec<usize> = (0..GRID * GRID).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        if order.iter().enumerate().any(|(i, &j)| i != j) {
            return order;
        }
    }
}

/// One randomly initialized block's outputs on A = a picture and B = the same picture with its
/// patches shuffled: the largest absolute differences.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// The scheme.
    pub scheme: GridScheme,
    /// B's output rows against A's rows shuffled the same way: 0 when the block only permutes
    /// (no positions).
    pub rows_shuffled: f32,
    /// B's mean-pooled output against A's: 0 when the block only permutes.
    pub pooled: f32,
    /// B's output rows against A's in place: not 0, the patches moved.
    pub rows_in_place: f32,
    /// The largest absolute value in A's output, to read the differences against.
    pub scale: f32,
}

/// Part 1 of the demo: the model's patch projection, positions, one block and norm, with random
/// weights (seeded with `seed` on `device`), on [`noisy_picture`] and on it with its patches
/// shuffled by [`shuffle`]. The positions stay with the grid's cells: a shuffled patch gets the
/// position of the cell it lands in.
pub fn compare(scheme: GridScheme, seed: u64, device: &Device) -> Comparison {
    device.seed(seed);
    let model = config(scheme).init(device);
    let (a, grid) = patchify(noisy_picture(seed, device), PATCH); // [1, 16, 48]
    let order = Tensor::<1, Int>::from_data(
        TensorData::new(
            shuffle(seed)
                .into_iter()
                .map(|i| i as i64)
                .collect::<Vec<_>>(),
            [GRID * GRID],
        ),
        device,
    );
    let b = a.clone().select(1, order.clone());
    let (a, _) = model.hidden(a, &grid, false);
    let (b, _) = model.hidden(b, &grid, false);
    Comparison {
        scheme,
        rows_shuffled: max_abs(b.clone() - a.clone().select(1, order)),
        pooled: max_abs(b.clone().mean_dim(1) - a.clone().mean_dim(1)),
        rows_in_place: max_abs(b - a.clone()),
        scale: max_abs(a),
    }
}

/// How to train the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainingOptions {
    /// Full-batch Adam steps.
    pub steps: usize,
    /// Seed for initialization and the train/held-out split.
    pub seed: u64,
}

impl Default for TrainingOptions {
    /// The example's defaults: 300 steps (what the learned table needs: it starts as ViT's,
    /// `N(0, 0.02)`, and leaves chance after about 200), seed 42.
    fn default() -> Self {
        Self {
            steps: 300,
            seed: 42,
        }
    }
}

/// A model trained on "is red left of blue?".
#[derive(Debug)]
pub struct Trained {
    /// The scheme.
    pub scheme: GridScheme,
    /// The trained model, on the device it was trained on (without autodiff).
    pub model: Vit,
    /// Accuracy on the training pictures at the last step (before its update); 0 without steps.
    pub train_accuracy: f32,
    /// The training loss at the last step (before its update); NaN without steps.
    pub train_loss: f32,
    /// Accuracy on the held-out pictures.
    pub held_out_accuracy: f32,
    /// The loss on the held-out pictures.
    pub held_out_loss: f32,
    /// How many pictures were held out.
    pub held_out_pictures: usize,
}

/// Part 2 of the demo: the ViT with `scheme`'s positions, trained with full-batch Adam on
/// `device.autodiff()`, then scored on the held-out pictures. `on_step(step, loss,
/// train_accuracy)` is called at every step (the loss stays on the device unless read).
///
/// Without positions it scores exactly 50 % on either set: every picture is the same bag of
/// patches, so the model gives all of them one answer (or a [tie](TIE), counted half), and half
/// of each set is red left of blue (each picture's twin is in the same set: see
/// [`crate::red_left_of_blue`]).
pub fn train(
    scheme: GridScheme,
    options: &TrainingOptions,
    device: &Device,
    mut on_step: impl FnMut(usize, &Tensor<1>, f32),
) -> Trained {
    let (train_set, held_out) = red_left_of_blue::split(options.seed, HOLDOUT_EVERY);
    let training = device.clone().autodiff();
    training.seed(options.seed);
    let mut model = config(scheme).init(&training);
    let (pictures, answers) = red_left_of_blue::batch(&train_set, &training);
    let mut optim = AdamConfig::new().init();
    let (mut train_accuracy, mut train_loss) = (0.0, f32::NAN);
    for step in 0..options.steps {
        let (loss, accuracy) = loss_and_accuracy(model.logits(pictures.clone()), answers.clone());
        train_accuracy = accuracy;
        on_step(step, &loss, accuracy);
        if step + 1 == options.steps {
            train_loss = loss.clone().into_scalar::<f32>();
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(LEARNING_RATE, model, grads);
    }
    let model = model.valid();
    let (held_pictures, held_answers) = red_left_of_blue::batch(&held_out, device);
    let (held_out_loss, held_out_accuracy) =
        loss_and_accuracy(model.logits(held_pictures), held_answers);
    Trained {
        scheme,
        model,
        train_accuracy,
        train_loss,
        held_out_accuracy,
        held_out_loss: held_out_loss.into_scalar::<f32>(),
        held_out_pictures: held_out.len(),
    }
}

/// Cross-entropy loss and accuracy of `logits` `[n, 2]` against `answers` `[n]`, a [tie](TIE)
/// counting half: one read (the accuracy).
pub fn loss_and_accuracy(logits: Tensor<2>, answers: Tensor<1, Int>) -> (Tensor<1>, f32) {
    let [n, _] = logits.dims();
    let blue = logits.clone().narrow(1, 0, 1).squeeze_dim::<1>(1); // [n]
    let red = logits.clone().narrow(1, 1, 1).squeeze_dim::<1>(1);
    let scale = blue
        .clone()
        .abs()
        .max_pair(red.clone().abs())
        .clamp_min(1.0);
    let margin = red - blue;
    let tie = margin.clone().abs().lower_equal(scale.mul_scalar(TIE));
    let right = margin
        .greater_elem(0.0)
        .int()
        .equal(answers.clone())
        .bool_and(tie.clone().bool_not());
    let score = (right.float() + tie.float().mul_scalar(0.5))
        .sum()
        .into_scalar::<f32>();
    let loss = CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits, answers);
    (loss, score / n as f32)
}

/// What a trained model says about one picture, and where its red patch looks.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The picture.
    pub picture: Picture,
    /// The predicted class (an index in [`red_left_of_blue::ANSWERS`]); `None` for a [tie](TIE).
    pub predicted: Option<usize>,
    /// The model's probability of "red left of blue".
    pub red_left: f32,
    /// The attention from the red patch to every patch, mean over heads, row-major on the grid.
    pub from_red: Vec<f32>,
}

impl Verdict {
    /// Whether the prediction is the picture's answer (false for a tie).
    pub fn correct(&self) -> bool {
        self.predicted == Some(self.picture.answer())
    }
}

/// Part 3 of the demo: `model`'s answer on each picture and its last block's attention from the
/// red patch (the scores spelled out: [`Vit::forward_weights`]).
pub fn verdicts(model: &Vit, pictures: &[Picture], device: &Device) -> Vec<Verdict> {
    let (logits, weights) = model.forward_weights(pixels(pictures, device));
    let values: Vec<f32> = logits.clone().into_data().iter::<f32>().collect();
    let probabilities: Vec<f32> = softmax(logits, 1).into_data().iter::<f32>().collect();
    let seq = GRID * GRID;
    let weights: Vec<f32> = weights
        .mean_dim(1) // [n, 1, seq, seq]
        .into_data()
        .iter::<f32>()
        .collect();
    pictures
        .iter()
        .enumerate()
        .map(|(i, &picture)| {
            let [blue, red] = [values[2 * i], values[2 * i + 1]];
            let tie = (red - blue).abs() <= TIE * blue.abs().max(red.abs()).max(1.0);
            let row = (i * seq + picture.red.patch()) * seq;
            Verdict {
                picture,
                predicted: (!tie).then_some(usize::from(red > blue)),
                red_left: probabilities[2 * i + 1],
                from_red: weights[row..row + seq].to_vec(),
            }
        })
        .collect()
}
