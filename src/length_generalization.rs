//! Train short, test long: decoder-only models trained with teacher forcing on four synthetic
//! tasks at lengths up to `L`, scored by greedy decoding (exact match) at `L`, `1.5L`, `2L` and
//! `3L`, for every position scheme (and RoPE with a context extension applied at test time).
//!
//! The tasks ([`Task`]) put a string of `n` digits (two for addition) after a start token and
//! ask for an answer after `=`, ended by an end token:
//!
//! | task | prompt | answer | what position has to do |
//! | --- | --- | --- | --- |
//! | copy | `^ 3 1 4 =` | `3 1 4 $` | point at the digit `n + 1` places back |
//! | reverse | `^ 3 1 4 =` | `4 1 3 $` | point at a place mirrored around `=` |
//! | sort | `^ 3 1 4 =` | `1 3 4 $` | count: how many of each digit, and how many written |
//! | addition | `^ 3 1 + 4 5 =` | `7 6 0 $` | align digit `i` of both numbers, carry |
//!
//! Addition writes every number least significant digit first (31 + 45 is 13 + 54 = 67,
//! written `7 6 0`), so the digit of each place depends only on that place and the carry from
//! the one before: the format of Lee et al. 2023 ("Teaching Arithmetic to Small Transformers")
//! that small models learn, and the one Kazemnejad et al. 2023 (appendix) use for addition.
//!
//! A model ([`LanguageModel`]) is this crate's [`Encoder`] with causal blocks and a head over
//! the vocabulary; training is burn-train's `SupervisedTraining` with a checkpoint at every
//! epoch, resumed from the last complete one ([`train_cell`]). Decoding ([`greedy`]) feeds
//! each predicted token back on the device through a [`KvCache`] per block, and reads the
//! answers back once at the end. [`run_study`] runs the grid, resumes at the cell it stopped
//! in, and writes the tables ([`StudyResults::markdown`], JSON) and the figure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::{Dataset, DatasetError};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::AdamConfig;
use burn::optim::lr_scheduler::constant::ConstantLr;
use burn::prelude::*;
use burn::train::checkpoint::KeepLastNCheckpoints;
use burn::train::metric::{AccuracyMetric, LossMetric};
use burn::train::{
    ClassificationOutput, InferenceStep, Learner, SupervisedTraining, TrainOutput, TrainStep,
};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{PARTS, PartCheckpointer, last_complete_epoch, write_atomic};
use crate::encoder::{Encoder, EncoderConfig};
use crate::learner::{Event, Recorder, prepare_checkpoint_dir};
pub use crate::rng::SplitMix64;
use crate::schemes::Scheme;
use crate::training::TrainingError;
use crate::{KvCache, PositionError, PositionSchemeConfig, RopeScaling};

/// Digits are tokens `0..=9`.
pub const DIGITS: i64 = 10;
/// Starts every sequence (`^`).
pub const BOS: i64 = 10;
/// Ends the prompt (`=`).
pub const SEP: i64 = 11;
/// Between the two numbers of an addition (`+`).
pub const PLUS: i64 = 12;
/// Ends the answer (`$`).
pub const EOS: i64 = 13;
/// Pads a batch's shorter sequences, and marks the targets that are not trained.
pub const PAD: i64 = 14;
/// Token ids lie in `0..VOCAB`.
pub const VOCAB: usize = 15;

/// A synthetic task; see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Task {
    /// Repeat the digits.
    Copy,
    /// The digits in reverse order.
    Reverse,
    /// The digits in ascending order.
    Sort,
    /// The sum of two `n`-digit numbers, least significant digit first, `n + 1` digits.
    Addition,
}

/// One example: the prompt (from `^` to `=`) and the answer (ended by `$`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// `^ digits... =`.
    pub prompt: Vec<i64>,
    /// `answer digits... $`.
    pub answer: Vec<i64>,
}

impl Task {
    /// Every task.
    pub const ALL: [Task; 4] = [Task::Copy, Task::Reverse, Task::Sort, Task::Addition];

    /// The task's name, as in the tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Copy => "copy",
            Self::Reverse => "reverse",
            Self::Sort => "sort",
            Self::Addition => "addition",
        }
    }

    /// Tokens of the prompt for length `n`, `^` and `=` included.
    pub fn prompt_len(self, n: usize) -> usize {
        match self {
            Self::Addition => 2 * n + 3,
            _ => n + 2,
        }
    }

    /// Tokens of the answer for length `n`, `$` included.
    pub fn answer_len(self, n: usize) -> usize {
        match self {
            Self::Addition => n + 2,
            _ => n + 1,
        }
    }

    /// Tokens a model reads for length `n`: the prompt and the answer but its last token (`$`
    /// is predicted, never read). A learned table needs this many rows.
    pub fn model_len(self, n: usize) -> usize {
        self.prompt_len(n) + self.answer_len(n) - 1
    }

    /// An example of length `n` (digits per number) drawn from `rng`.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn example(self, n: usize, rng: &mut SplitMix64) -> Example {
        assert!(n > 0, "a task needs at least one digit");
        let mut digits = |count: usize| -> Vec<i64> {
            (0..count)
                .map(|_| rng.below(DIGITS as u64) as i64)
                .collect()
        };
        let (prompt_digits, mut answer) = match self {
            Self::Copy => {
                let x = digits(n);
                (x.clone(), x)
            }
            Self::Reverse => {
                let x = digits(n);
                (x.clone(), x.iter().rev().copied().collect())
            }
            Self::Sort => {
                let x = digits(n);
                let mut sorted = x.clone();
                sorted.sort_unstable();
                (x, sorted)
            }
            Self::Addition => {
                let (a, b) = (digits(n), digits(n));
                // Least significant digit first: place i of both, plus the carry.
                let mut sum = Vec::with_capacity(n + 1);
                let mut carry = 0;
                for i in 0..n {
                    let s = a[i] + b[i] + carry;
                    sum.push(s % 10);
                    carry = s / 10;
                }
                sum.push(carry);
                let mut prompt = a;
                prompt.push(PLUS);
                prompt.extend(b);
                (prompt, sum)
            }
        };
        let mut prompt = vec![BOS];
        prompt.extend(prompt_digits);
        prompt.push(SEP);
        answer.push(EOS);
        Example { prompt, answer }
    }

    /// `count` examples of length `n`, drawn from `seed`.
    pub fn examples(self, n: usize, count: usize, seed: u64) -> Vec<Example> {
        let mut rng = SplitMix64::new(seed);
        (0..count).map(|_| self.example(n, &mut rng)).collect()
    }
}

impl std::str::FromStr for Task {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == name.to_ascii_lowercase())
            .ok_or_else(|| {
                format!("unknown task {name:?}: choose one of copy, reverse, sort, addition")
            })
    }
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The training set of a task: item `i` has a length drawn uniformly from `1..=max_n` and its
/// digits, all from `seed` and `i` alone.
#[derive(Debug, Clone)]
pub struct TaskDataset {
    /// The task.
    pub task: Task,
    /// Longest length drawn (the training length `L`).
    pub max_n: usize,
    /// Examples.
    pub len: usize,
    /// Seed of the whole set.
    pub seed: u64,
}

impl Dataset<Example> for TaskDataset {
    /// # Panics
    ///
    /// If `index >= len` (burn's `Dataset` convention).
    fn get(&self, index: usize) -> Result<Example, DatasetError> {
        assert!(
            index < self.len,
            "index {index} is past the dataset's {} examples",
            self.len
        );
        let mut rng = SplitMix64::new(
            self.seed
                .wrapping_mul(0x2545_F491_4F6C_DD1D)
                .wrapping_add(index as u64),
        );
        let n = 1 + rng.below(self.max_n as u64) as usize;
        Ok(self.task.example(n, &mut rng))
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// A batch for teacher forcing: `inputs` `[batch, seq]` are the examples' tokens but the last,
/// right-padded with [`PAD`]; `targets` `[batch, seq]` are the next tokens where they are
/// answer tokens, [`PAD`] elsewhere (the prompt is given, not predicted).
#[derive(Debug, Clone)]
pub struct LmBatch {
    /// `[batch, seq]`.
    pub inputs: Tensor<2, Int>,
    /// `[batch, seq]`.
    pub targets: Tensor<2, Int>,
}

/// Pads examples into an [`LmBatch`]. Padding sits after every real token, so in causal blocks
/// no real token sees it, and its targets are [`PAD`], which the loss skips.
#[derive(Debug, Clone, Copy, Default)]
pub struct LmBatcher;

impl LmBatcher {
    /// The inputs and targets of `items`, row-major, and the padded length.
    pub fn rows(items: &[Example]) -> (Vec<i64>, Vec<i64>, usize) {
        let seq = items
            .iter()
            .map(|e| e.prompt.len() + e.answer.len() - 1)
            .max()
            .unwrap_or(0);
        let (mut inputs, mut targets) = (Vec::new(), Vec::new());
        for example in items {
            let tokens: Vec<i64> = example
                .prompt
                .iter()
                .chain(&example.answer)
                .copied()
                .collect();
            let answer_from = example.prompt.len(); // index of the first answer token
            for i in 0..seq {
                inputs.push(if i + 1 < tokens.len() { tokens[i] } else { PAD });
                let next = i + 1;
                targets.push(if next >= answer_from && next < tokens.len() {
                    tokens[next]
                } else {
                    PAD
                });
            }
        }
        (inputs, targets, seq)
    }
}

impl Batcher<Example, LmBatch> for LmBatcher {
    fn batch(&self, items: Vec<Example>, device: &Device) -> LmBatch {
        let (inputs, targets, seq) = Self::rows(&items);
        let shape = [items.len(), seq];
        LmBatch {
            inputs: Tensor::from_data(TensorData::new(inputs, shape), device),
            targets: Tensor::from_data(TensorData::new(targets, shape), device),
        }
    }
}

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
/// use burn_positional_examples::length_generalization::LanguageModelConfig;
/// use burn_positional_examples::schemes::Scheme;
/// use burn_positional::PositionSchemeConfig;
///
/// let device = Device::flex();
/// // `with_position` replaces the placeholder scheme with ALiBi's causal parts.
/// let body = EncoderConfig::new(15, PositionSchemeConfig::None)
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
        burn_positional::materialize(LanguageModel {
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
    pub fn forward_cached(&self, ids: Tensor<2, Int>, caches: &mut [KvCache]) -> Tensor<3> {
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
            block.rope = Some(block.rope.as_ref()?.rescaled(scaling));
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

/// Greedy decoding: `steps` tokens after each prompt, each the argmax of the last logits fed
/// back as the next input, on the device. With `cached`, each step runs the new token alone
/// through a [`KvCache`] per block; without, each step runs the whole sequence again (the
/// reference the cache must equal). The positions the decoding will use (`0..prompt + steps -
/// 1`) are checked against the embedding's table before the first forward, on the host (a
/// position past a learned table is an error naming the whole window, not an answer made of
/// NaN); the embedding's check of the ids runs every 32 forwards and at the end (one small
/// read each).
///
/// # Shapes
///
/// - prompts: `[batch, prompt]`; output: `[batch, steps]`
///
/// # Errors
///
/// The embedding's error (a token id outside the vocabulary, a position past a learned table).
pub fn greedy(
    model: &LanguageModel,
    prompts: Tensor<2, Int>,
    steps: usize,
    cached: bool,
) -> Result<Tensor<2, Int>, PositionError> {
    let [batch, prompt] = prompts.dims();
    let device = prompts.device();
    model.body.embed.check_inputs()?; // earlier forwards are not ours to report
    // The last answer token is predicted, never read: the model reads prompt + steps - 1.
    let read = prompt + steps.saturating_sub(1);
    model.body.embed.position.check_window(0, read)?;
    let argmax_last = |logits: Tensor<3>| {
        let [b, s, v] = logits.dims();
        logits
            .slice([0..b, s - 1..s, 0..v])
            .argmax(2)
            .reshape([b, 1])
    };
    let mut out: Vec<Tensor<2, Int>> = Vec::with_capacity(steps);
    let mut caches = model.caches();
    let mut sequence = prompts.clone();
    for step in 0..steps {
        let logits = if cached {
            let input = if step == 0 {
                prompts.clone()
            } else {
                out[step - 1].clone()
            };
            model.forward_cached(input, &mut caches)
        } else {
            model.forward(sequence.clone())
        };
        let next = argmax_last(logits);
        if !cached {
            sequence = Tensor::cat(vec![sequence, next.clone()], 1);
        }
        out.push(next);
        if (step + 1) % 32 == 0 {
            model.body.embed.check_inputs()?;
        }
    }
    model.body.embed.check_inputs()?;
    if out.is_empty() {
        return Ok(Tensor::zeros([batch, 0], &device));
    }
    Ok(Tensor::cat(out, 1))
}

/// The fraction of rows of `predicted` that equal the row of `expected` in every token.
///
/// # Panics
///
/// If the two hold different numbers of rows, or a pair of rows differs in length.
pub fn exact_match(predicted: &[Vec<i64>], expected: &[Vec<i64>]) -> f64 {
    assert_eq!(
        predicted.len(),
        expected.len(),
        "one prediction per example"
    );
    if expected.is_empty() {
        return 0.0;
    }
    let correct = predicted
        .iter()
        .zip(expected)
        .filter(|(p, e)| {
            assert_eq!(p.len(), e.len(), "a prediction as long as its answer");
            p == e
        })
        .count();
    correct as f64 / expected.len() as f64
}

/// Exact match of `model` on `examples` (all of one length) by cached greedy decoding: one
/// read of the answers. `Err` with the embedding's error when the model refuses the length.
///
/// # Panics
///
/// If the examples' prompts or answers differ in length (they form one batch).
pub fn score(
    model: &LanguageModel,
    examples: &[Example],
    device: &Device,
) -> Result<f64, PositionError> {
    let Some(first) = examples.first() else {
        return Ok(0.0);
    };
    let (prompt_len, answer_len) = (first.prompt.len(), first.answer.len());
    assert!(
        examples
            .iter()
            .all(|e| e.prompt.len() == prompt_len && e.answer.len() == answer_len),
        "score takes examples of one length (one batch): the first has a {prompt_len}-token \
         prompt and a {answer_len}-token answer, and another differs; score each length apart"
    );
    let prompts: Vec<i64> = examples.iter().flat_map(|e| e.prompt.clone()).collect();
    let prompts = Tensor::<2, Int>::from_data(
        TensorData::new(prompts, [examples.len(), prompt_len]),
        device,
    );
    let answers = greedy(model, prompts, answer_len, true)?;
    let flat: Vec<i64> = answers.into_data().iter::<i64>().collect();
    let predicted: Vec<Vec<i64>> = flat.chunks(answer_len).map(<[i64]>::to_vec).collect();
    let expected: Vec<Vec<i64>> = examples.iter().map(|e| e.answer.clone()).collect();
    Ok(exact_match(&predicted, &expected))
}

/// The schemes of the study: none (NoPE), sinusoidal, learned, T5, RoPE, ALiBi.
pub const SCHEMES: [Scheme; 6] = [
    Scheme::None,
    Scheme::Sinusoidal,
    Scheme::Learned,
    Scheme::T5,
    Scheme::Rope,
    Scheme::Alibi,
];

/// Configuration of the study: the grid and the model and training of each cell.
#[derive(Config, Debug, PartialEq)]
pub struct StudyConfig {
    /// Training length `L`: training examples have `1..=L` digits per number.
    #[config(default = 8)]
    pub train_len: usize,
    /// Tasks, by name (copy, reverse, sort, addition).
    #[config(
        default = "vec![\"copy\".into(), \"reverse\".into(), \"sort\".into(), \"addition\".into()]"
    )]
    pub tasks: Vec<String>,
    /// Schemes, by name (none, sinusoidal, learned, t5, rope, alibi).
    #[config(
        default = "vec![\"none\".into(), \"sinusoidal\".into(), \"learned\".into(), \"t5\".into(), \"rope\".into(), \"alibi\".into()]"
    )]
    pub schemes: Vec<String>,
    /// Seeds per cell: `0..seeds`.
    #[config(default = 3)]
    pub seeds: u64,
    /// Width of the model.
    #[config(default = 64)]
    pub d_model: usize,
    /// Heads per block.
    #[config(default = 4)]
    pub n_heads: usize,
    /// Causal blocks.
    #[config(default = 2)]
    pub n_blocks: usize,
    /// Optimizer steps per cell (rounded up to whole epochs).
    #[config(default = 1500)]
    pub steps: usize,
    /// Steps per epoch: a checkpoint and a validation after each.
    #[config(default = 500)]
    pub steps_per_epoch: usize,
    /// Examples per step.
    #[config(default = 32)]
    pub batch_size: usize,
    /// Adam's learning rate.
    #[config(default = 1e-3)]
    pub learning_rate: f64,
    /// Test examples per length.
    #[config(default = 100)]
    pub test_examples: usize,
    /// Test lengths as multiples of `L` (rounded up).
    #[config(default = "vec![1.0, 1.5, 2.0, 3.0]")]
    pub test_multiples: Vec<f64>,
}

/// How a model was evaluated: as trained, or with RoPE's context extension by the test
/// length's ratio to `L`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// As trained.
    AsTrained,
    /// RoPE with position interpolation by `n / L`.
    RopeInterpolation,
    /// RoPE with NTK-aware base scaling by `n / L`.
    RopeNtk,
}

impl Variant {
    /// The row's name for `scheme`.
    pub fn label(self, scheme: &str) -> String {
        match self {
            Self::AsTrained => scheme.to_string(),
            Self::RopeInterpolation => format!("{scheme} + PI (s = n/L)"),
            Self::RopeNtk => format!("{scheme} + NTK (s = n/L)"),
        }
    }

    /// The scaling for a test of `n` digits after training on `train_len`.
    pub fn scaling(self, n: usize, train_len: usize) -> RopeScaling {
        let s = (n as f64 / train_len as f64).max(1.0);
        match self {
            Self::AsTrained => RopeScaling::None,
            Self::RopeInterpolation => RopeScaling::Interpolation(s),
            Self::RopeNtk => RopeScaling::NtkAware(s),
        }
    }
}

/// One measurement: a task, scheme, variant, seed and test length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Task name.
    pub task: String,
    /// Scheme name.
    pub scheme: String,
    /// How it was evaluated.
    pub variant: Variant,
    /// RoPE's scaling, as applied (`None` when there is none).
    pub scaling: String,
    /// The seed of the model (its draw and its training set).
    pub seed: u64,
    /// Digits per number.
    pub n: usize,
    /// Exact match in `[0, 1]`, or `None` when the model refused the length.
    pub exact_match: Option<f64>,
    /// The model's error when it refused the length.
    pub refused: Option<String>,
}

/// The result of one trained model (cell): its measurements and what training cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    /// Task name.
    pub task: String,
    /// Scheme name.
    pub scheme: String,
    /// Seed.
    pub seed: u64,
    /// Optimizer steps trained.
    pub steps: usize,
    /// Teacher-forced token accuracy on the validation set (lengths up to `L`) at the end.
    pub valid_accuracy: f64,
    /// Wall-clock seconds of training and evaluation (this process's share, after a resume).
    pub seconds: f64,
    /// Every test length and variant.
    pub measurements: Vec<Measurement>,
}

/// Mean and spread of one row entry over seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Task name.
    pub task: String,
    /// The row's name (scheme and variant).
    pub row: String,
    /// Digits per number.
    pub n: usize,
    /// Mean exact match over the seeds that answered.
    pub mean: Option<f64>,
    /// Sample standard deviation over those seeds (0 for one seed).
    pub std: Option<f64>,
    /// Seeds that answered.
    pub seeds: usize,
    /// The refusal, when every seed refused.
    pub refused: Option<String>,
}

/// Everything the study measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudyResults {
    /// The grid and the models.
    pub config: StudyConfig,
    /// The device it ran on.
    pub device: String,
    /// One per trained model.
    pub cells: Vec<CellResult>,
    /// Mean and spread per task, row and length.
    pub summary: Vec<Summary>,
}

/// What [`run_study`] reports as it goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// A cell starts training (`resumed_at` is the step of the checkpoint it resumes from).
    Started {
        /// `task/scheme/seed`.
        cell: String,
        /// Step resumed from, if any.
        resumed_at: Option<usize>,
    },
    /// A cell took an optimizer step.
    Step {
        /// `task/scheme/seed`.
        cell: String,
        /// 1-based step.
        step: usize,
        /// Training loss of the step.
        loss: f32,
    },
    /// A cell is done (trained and evaluated now, or found done on disk).
    Done {
        /// `task/scheme/seed`.
        cell: String,
        /// Its optimizer steps.
        steps: usize,
        /// Found on disk, not run now.
        from_disk: bool,
        /// Teacher-forced token accuracy on the validation set at the end of training.
        valid_accuracy: f64,
    },
}

impl StudyConfig {
    /// The test lengths: `ceil(m * L)` for each multiple `m`.
    pub fn test_lengths(&self) -> Vec<usize> {
        self.test_multiples
            .iter()
            .map(|m| (m * self.train_len as f64).ceil() as usize)
            .collect()
    }

    /// The tasks, parsed.
    pub fn task_list(&self) -> Result<Vec<Task>, TrainingError> {
        self.tasks
            .iter()
            .map(|t| {
                t.parse().map_err(|why: String| TrainingError::Unsupported {
                    what: why,
                    fix: "pass tasks among copy, reverse, sort, addition".into(),
                })
            })
            .collect()
    }

    /// The schemes, parsed.
    pub fn scheme_list(&self) -> Result<Vec<Scheme>, TrainingError> {
        self.schemes
            .iter()
            .map(|s| {
                s.parse().map_err(|why: String| TrainingError::Unsupported {
                    what: why,
                    fix: "pass schemes among none, sinusoidal, learned, t5, rope, alibi".into(),
                })
            })
            .collect()
    }

    /// Optimizer steps each cell trains: `steps` rounded up to whole epochs.
    pub fn trained_steps(&self) -> usize {
        self.steps.div_ceil(self.steps_per_epoch.max(1)) * self.steps_per_epoch
    }

    /// Checks the grid and the model, naming the field, the value and the fix.
    pub fn validate(&self) -> Result<(), TrainingError> {
        let positive = [
            ("train_len", self.train_len),
            ("seeds", self.seeds as usize),
            ("steps", self.steps),
            ("steps_per_epoch", self.steps_per_epoch),
            ("batch_size", self.batch_size),
            ("test_examples", self.test_examples),
            ("n_blocks", self.n_blocks),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(TrainingError::Unsupported {
                    what: format!("StudyConfig::{field} is 0"),
                    fix: format!("give {field} a positive value"),
                });
            }
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return Err(TrainingError::Unsupported {
                what: format!("StudyConfig::learning_rate is {}", self.learning_rate),
                fix: "use a positive finite learning rate such as 1e-3".into(),
            });
        }
        if let Some(m) = self
            .test_multiples
            .iter()
            .find(|m| !(m.is_finite() && **m >= 1.0))
        {
            return Err(TrainingError::Unsupported {
                what: format!("test multiple {m} (tests are at lengths m * L)"),
                fix: "use multiples of at least 1, such as 1, 1.5, 2, 3".into(),
            });
        }
        if self.steps_per_epoch.checked_mul(self.batch_size).is_none() {
            return Err(TrainingError::Unsupported {
                what: "steps_per_epoch * batch_size overflows a usize".into(),
                fix: "use the defaults (500 steps of 32)".into(),
            });
        }
        self.task_list()?;
        for scheme in self.scheme_list()? {
            self.model_config(Task::Copy, scheme).encoder.validate()?;
        }
        Ok(())
    }

    /// The model of a cell: learned tables as long as the longest training sequence of the
    /// task, so every test past `L` is past the table.
    pub fn model_config(&self, task: Task, scheme: Scheme) -> LanguageModelConfig {
        let encoder = EncoderConfig::new(VOCAB, PositionSchemeConfig::None)
            .with_d_model(self.d_model)
            .with_n_heads(self.n_heads)
            .with_n_blocks(self.n_blocks)
            .with_causal(true)
            .with_position(scheme, task.model_len(self.train_len));
        LanguageModelConfig::new(encoder)
    }
}

/// Serializes model draws: flex has one random generator for the process, so seeding and
/// drawing must not interleave with another cell's.
static INIT: Mutex<()> = Mutex::new(());

/// Trains one cell (or resumes it from its last complete checkpoint in `<dir>/checkpoint`)
/// with burn-train, and returns the trained model (without autodiff) and its validation
/// token accuracy. `on_step` hears each optimizer step.
///
/// # Errors
///
/// [`TrainingError::Io`] when `dir` cannot be written.
pub fn train_cell(
    config: &StudyConfig,
    task: Task,
    scheme: Scheme,
    seed: u64,
    device: &Device,
    dir: &Path,
    on_step: impl Fn(usize, f32) + Send + Sync + 'static,
) -> Result<(LanguageModel, f64), TrainingError> {
    let checkpoint_dir = prepare_checkpoint_dir(dir)?;
    let device = device.clone().autodiff();
    let model = {
        let _draw = INIT.lock().unwrap_or_else(|e| e.into_inner());
        device.seed(seed);
        config.model_config(task, scheme).init(&device)
    };
    let train = TaskDataset {
        task,
        max_n: config.train_len,
        len: config.steps_per_epoch * config.batch_size,
        seed,
    };
    let valid = TaskDataset {
        task,
        max_n: config.train_len,
        len: 4 * config.batch_size,
        seed: seed ^ 0x5EED_0F_7A11D,
    };
    let valid_accuracy = Arc::new(Mutex::new(f64::NAN));
    let heard = valid_accuracy.clone();
    let recorder = Recorder::new(
        config.steps_per_epoch,
        1,
        Box::new(move |event: &Event| match event {
            Event::Step { step, train } => on_step(*step, train.loss),
            Event::Validated { valid, .. } => {
                *heard.lock().unwrap_or_else(|e| e.into_inner()) = valid.accuracy as f64;
            }
        }),
    );
    let learner = Learner::new(
        model,
        AdamConfig::new().init(),
        ConstantLr::new(config.learning_rate),
    );
    let mut training = SupervisedTraining::new(
        dir,
        DataLoaderBuilder::new(LmBatcher)
            .batch_size(config.batch_size)
            .build(train),
        DataLoaderBuilder::new(LmBatcher)
            .batch_size(config.batch_size)
            .build(valid),
    )
    .num_epochs(config.trained_steps() / config.steps_per_epoch)
    .metric_train_numeric(LossMetric::new())
    .metric_valid_numeric(LossMetric::new())
    .metric_train_numeric(AccuracyMetric::new().with_pad_token(PAD as usize))
    .metric_valid_numeric(AccuracyMetric::new().with_pad_token(PAD as usize))
    .with_custom_checkpointers(
        PartCheckpointer::new(&checkpoint_dir, PARTS[0]),
        PartCheckpointer::new(&checkpoint_dir, PARTS[1]),
        PartCheckpointer::new(&checkpoint_dir, PARTS[2]),
    )
    .with_checkpointing_strategy(KeepLastNCheckpoints::new(2))
    .with_application_logger(None)
    .renderer(Box::new(recorder));
    if let Some(epoch) = last_complete_epoch(&checkpoint_dir) {
        training = training.checkpoint(epoch);
    }
    let model = training.launch(learner).model;
    let accuracy = *valid_accuracy.lock().unwrap_or_else(|e| e.into_inner());
    Ok((model, accuracy))
}

/// Trains and evaluates one cell: every test length, and for RoPE the context extensions.
pub fn run_cell(
    config: &StudyConfig,
    task: Task,
    scheme: Scheme,
    seed: u64,
    device: &Device,
    dir: &Path,
    on_step: impl Fn(usize, f32) + Send + Sync + 'static,
) -> Result<CellResult, TrainingError> {
    let start = Instant::now();
    let (model, valid_accuracy) = train_cell(config, task, scheme, seed, device, dir, on_step)?;
    let variants: &[Variant] = if scheme == Scheme::Rope {
        &[
            Variant::AsTrained,
            Variant::RopeInterpolation,
            Variant::RopeNtk,
        ]
    } else {
        &[Variant::AsTrained]
    };
    let mut measurements = Vec::new();
    for n in config.test_lengths() {
        // Test sets differ from the training set's seed and from each other.
        let examples = task.examples(n, config.test_examples, 0x7E57 ^ (seed << 32) ^ n as u64);
        for &variant in variants {
            let scaling = variant.scaling(n, config.train_len);
            let scaled;
            let model = if variant == Variant::AsTrained {
                &model
            } else {
                scaled = model.with_rope_scaling(scaling).expect("a RoPE model");
                &scaled
            };
            let result = score(model, &examples, device);
            measurements.push(Measurement {
                task: task.name().into(),
                scheme: scheme.to_string(),
                variant,
                scaling: format!("{scaling:?}"),
                seed,
                n,
                exact_match: result.as_ref().ok().copied(),
                refused: result.err().map(|err| err.to_string()),
            });
        }
    }
    Ok(CellResult {
        task: task.name().into(),
        scheme: scheme.to_string(),
        seed,
        steps: config.trained_steps(),
        valid_accuracy,
        seconds: start.elapsed().as_secs_f64(),
        measurements,
    })
}

/// Runs the grid on `device`, `jobs` cells at a time, in `out`: each cell trains in
/// `out/cells/<task>-<scheme>-seed<k>` and writes `result.json` there when done, so a run
/// stopped anywhere resumes from the cell's last checkpoint, and done cells are read, not rerun.
/// `out/study.json` records the config; another config in the same folder is refused.
///
/// # Errors
///
/// An invalid config, a folder made with another config, an unwritable folder.
pub fn run_study(
    config: &StudyConfig,
    device: &Device,
    jobs: usize,
    out: &Path,
    progress: Arc<dyn Fn(&Progress) + Send + Sync>,
) -> Result<StudyResults, TrainingError> {
    config.validate()?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error: std::io::Error| TrainingError::Io {
            path: path.clone(),
            error: error.to_string(),
        }
    };
    std::fs::create_dir_all(out).map_err(io(out))?;
    let study_path = out.join("study.json");
    if study_path.exists() {
        let before = StudyConfig::load(&study_path).map_err(|err| TrainingError::Unsupported {
            what: format!("{} cannot be read ({err})", study_path.display()),
            fix: "start fresh (--fresh, or delete the folder)".into(),
        })?;
        if before != *config {
            return Err(TrainingError::Unsupported {
                what: format!(
                    "{} holds a study made with another config ({})",
                    out.display(),
                    study_path.display()
                ),
                fix: "pass the same settings to resume it, or start fresh (--fresh, or another \
                      --out)"
                    .into(),
            });
        }
    }
    let json = serde_json::to_vec_pretty(config).expect("a config serializes");
    write_atomic(&study_path, &json).map_err(io(&study_path))?;

    let mut cells = Vec::new();
    for task in config.task_list()? {
        for scheme in config.scheme_list()? {
            for seed in 0..config.seeds {
                cells.push((task, scheme, seed));
            }
        }
    }
    let queue = Mutex::new(cells.clone().into_iter());
    let results = Mutex::new(BTreeMap::new());
    let first_error = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some((task, scheme, seed)) = next else {
                        return;
                    };
                    let outcome = cell(config, task, scheme, seed, device, out, progress.clone());
                    match outcome {
                        Ok(result) => {
                            results
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .insert((task, scheme.to_string(), seed), result);
                        }
                        Err(err) => {
                            first_error
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get_or_insert(err);
                            return;
                        }
                    }
                }
            });
        }
    });
    if let Some(err) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(err);
    }
    let by_key = results.into_inner().unwrap_or_else(|e| e.into_inner());
    // In the grid's order.
    let cells: Vec<CellResult> = cells
        .iter()
        .filter_map(|(task, scheme, seed)| by_key.get(&(*task, scheme.to_string(), *seed)).cloned())
        .collect();
    let summary = summarize(config, &cells);
    Ok(StudyResults {
        config: config.clone(),
        device: format!("{device:?}"),
        cells,
        summary,
    })
}

/// One cell of [`run_study`]: read from disk when done, else trained (resumed) and evaluated.
fn cell(
    config: &StudyConfig,
    task: Task,
    scheme: Scheme,
    seed: u64,
    device: &Device,
    out: &Path,
    progress: Arc<dyn Fn(&Progress) + Send + Sync>,
) -> Result<CellResult, TrainingError> {
    let label = format!("{task}/{scheme}/seed {seed}");
    let dir = out
        .join("cells")
        .join(format!("{task}-{scheme}-seed{seed}"));
    let done = dir.join("result.json");
    if let Ok(bytes) = std::fs::read(&done)
        && let Ok(result) = serde_json::from_slice::<CellResult>(&bytes)
    {
        progress(&Progress::Done {
            cell: label,
            steps: result.steps,
            from_disk: true,
            valid_accuracy: result.valid_accuracy,
        });
        return Ok(result);
    }
    let resumed_at =
        last_complete_epoch(&dir.join("checkpoint")).map(|epoch| epoch * config.steps_per_epoch);
    progress(&Progress::Started {
        cell: label.clone(),
        resumed_at,
    });
    let heard = progress.clone();
    let step_label = label.clone();
    let result = run_cell(
        config,
        task,
        scheme,
        seed,
        device,
        &dir,
        move |step, loss| {
            heard(&Progress::Step {
                cell: step_label.clone(),
                step,
                loss,
            })
        },
    )?;
    let json = serde_json::to_vec_pretty(&result).expect("a result serializes");
    write_atomic(&done, &json).map_err(|error| TrainingError::Io {
        path: done.clone(),
        error: error.to_string(),
    })?;
    // The checkpoints served their purpose; the result is what is kept.
    let _ = std::fs::remove_dir_all(dir.join("checkpoint"));
    progress(&Progress::Done {
        cell: label,
        steps: result.steps,
        from_disk: false,
        valid_accuracy: result.valid_accuracy,
    });
    Ok(result)
}

/// Mean and sample standard deviation of `values` (0 for one value).
pub fn mean_and_std(values: &[f64]) -> Option<(f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let std = if values.len() > 1 {
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    Some((mean, std))
}

/// Per task, row (scheme and variant) and length: the mean and spread over seeds.
pub fn summarize(config: &StudyConfig, cells: &[CellResult]) -> Vec<Summary> {
    let mut groups: BTreeMap<(String, String, Variant, usize), Vec<&Measurement>> = BTreeMap::new();
    for m in cells.iter().flat_map(|c| &c.measurements) {
        groups
            .entry((m.task.clone(), m.scheme.clone(), m.variant, m.n))
            .or_default()
            .push(m);
    }
    let mut summary = Vec::new();
    // In the config's order of tasks and schemes, then variant, then length.
    for task in &config.tasks {
        for scheme in &config.schemes {
            for variant in [
                Variant::AsTrained,
                Variant::RopeInterpolation,
                Variant::RopeNtk,
            ] {
                for n in config.test_lengths() {
                    let Some(group) = groups.get(&(task.clone(), scheme.clone(), variant, n))
                    else {
                        continue;
                    };
                    let values: Vec<f64> = group.iter().filter_map(|m| m.exact_match).collect();
                    let stats = mean_and_std(&values);
                    summary.push(Summary {
                        task: task.clone(),
                        row: variant.label(scheme),
                        n,
                        mean: stats.map(|s| s.0),
                        std: stats.map(|s| s.1),
                        seeds: values.len(),
                        refused: if values.is_empty() {
                            group.iter().find_map(|m| m.refused.clone())
                        } else {
                            None
                        },
                    });
                }
            }
        }
    }
    summary
}

impl StudyResults {
    /// One Markdown table per task: a row per scheme (and RoPE variant), a column per test
    /// length, `mean ± sd` exact match in percent over the seeds, or the refusal.
    pub fn markdown(&self) -> String {
        let lengths = self.config.test_lengths();
        let mut out = String::new();
        let l = self.config.train_len;
        for task in &self.config.tasks {
            out.push_str(&format!("**{task}** (exact match, %, mean ± sd over {} seeds; trained on 1..={l} digits)\n\n", self.config.seeds));
            out.push_str("| scheme |");
            for (n, m) in lengths.iter().zip(&self.config.test_multiples) {
                out.push_str(&format!(" n = {n} ({m}L) |"));
            }
            out.push_str("\n| --- |");
            for _ in &lengths {
                out.push_str(" --- |");
            }
            out.push('\n');
            let mut rows: Vec<&str> = Vec::new();
            for s in self.summary.iter().filter(|s| &s.task == task) {
                if !rows.contains(&s.row.as_str()) {
                    rows.push(&s.row);
                }
            }
            for row in rows {
                out.push_str(&format!("| {row} |"));
                for &n in &lengths {
                    let entry = self
                        .summary
                        .iter()
                        .find(|s| &s.task == task && s.row == row && s.n == n);
                    let text = match entry {
                        Some(Summary {
                            mean: Some(mean),
                            std: Some(std),
                            ..
                        }) => format!("{:.1} ± {:.1}", 100.0 * mean, 100.0 * std),
                        Some(Summary {
                            refused: Some(_), ..
                        }) => "refused: past the table".to_string(),
                        _ => "–".to_string(),
                    };
                    out.push_str(&format!(" {text} |"));
                }
                out.push('\n');
            }
            out.push('\n');
        }
        let refusal = self.summary.iter().find_map(|s| s.refused.as_deref());
        if let Some(refusal) = refusal {
            out.push_str(&format!(
                // Double backticks: the message quotes code in single ones.
                "A refusal is the model's own error, for example: `` {refusal} ``\n"
            ));
        }
        out
    }

    /// Writes `results.json` and `results.md` into `out`.
    ///
    /// # Errors
    ///
    /// When a file cannot be written.
    pub fn save(&self, out: &Path) -> Result<Vec<PathBuf>, TrainingError> {
        let json_path = out.join("results.json");
        let md_path = out.join("results.md");
        let json = serde_json::to_vec_pretty(self).expect("results serialize");
        for (path, bytes) in [(&json_path, json), (&md_path, self.markdown().into_bytes())] {
            write_atomic(path, &bytes).map_err(|error| TrainingError::Io {
                path: path.clone(),
                error: error.to_string(),
            })?;
        }
        Ok(vec![json_path, md_path])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digits_of(tokens: &[i64]) -> Vec<i64> {
        tokens.iter().copied().filter(|t| *t < DIGITS).collect()
    }

    #[test]
    fn every_example_is_right_and_as_long_as_asked() {
        let mut rng = SplitMix64::new(3);
        for task in Task::ALL {
            for n in 1..=24 {
                for _ in 0..20 {
                    let e = task.example(n, &mut rng);
                    assert_eq!(e.prompt.len(), task.prompt_len(n), "{task} n {n}");
                    assert_eq!(e.answer.len(), task.answer_len(n), "{task} n {n}");
                    assert_eq!((e.prompt[0], *e.prompt.last().unwrap()), (BOS, SEP));
                    assert_eq!(*e.answer.last().unwrap(), EOS);
                    let x = digits_of(&e.prompt);
                    let y = digits_of(&e.answer);
                    match task {
                        Task::Copy => assert_eq!(y, x),
                        Task::Reverse => assert_eq!(y, x.iter().rev().copied().collect::<Vec<_>>()),
                        Task::Sort => {
                            let mut sorted = x.clone();
                            sorted.sort();
                            assert_eq!(y, sorted);
                        }
                        Task::Addition => {
                            // Both numbers and the sum read least significant digit first;
                            // checked with u128 arithmetic on the numbers themselves.
                            assert_eq!(e.prompt[n + 1], PLUS);
                            let value = |d: &[i64]| {
                                d.iter().rev().fold(0u128, |acc, &d| acc * 10 + d as u128)
                            };
                            let (a, b) = x.split_at(n);
                            assert_eq!(value(&y), value(a) + value(b), "{e:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_dataset_draws_lengths_up_to_l_and_the_batcher_trains_only_answers() {
        let dataset = TaskDataset {
            task: Task::Reverse,
            max_n: 5,
            len: 400,
            seed: 9,
        };
        let items: Vec<Example> = (0..400).map(|i| dataset.get(i).unwrap()).collect();
        let lengths: Vec<usize> = items.iter().map(|e| e.prompt.len() - 2).collect();
        for n in 1..=5 {
            assert!(lengths.contains(&n), "length {n} drawn");
        }
        assert!(lengths.iter().all(|n| (1..=5).contains(n)));
        assert_eq!(
            items[7],
            dataset.get(7).unwrap(),
            "an item is a function of its index"
        );

        let (inputs, targets, seq) = LmBatcher::rows(&items[..3]);
        for (row, e) in items[..3].iter().enumerate() {
            let tokens: Vec<i64> = e.prompt.iter().chain(&e.answer).copied().collect();
            let input = &inputs[row * seq..(row + 1) * seq];
            let target = &targets[row * seq..(row + 1) * seq];
            assert_eq!(&input[..tokens.len() - 1], &tokens[..tokens.len() - 1]);
            assert!(input[tokens.len() - 1..].iter().all(|t| *t == PAD));
            // The trained targets are exactly the answer, predicted from `=` on.
            let trained: Vec<i64> = target.iter().copied().filter(|t| *t != PAD).collect();
            assert_eq!(trained, e.answer);
            assert_eq!(target[e.prompt.len() - 1], e.answer[0]);
        }
    }

    #[test]
    fn exact_match_counts_whole_rows() {
        let expected = vec![
            vec![1, 2, EOS],
            vec![3, 4, EOS],
            vec![5, 6, EOS],
            vec![7, 8, EOS],
        ];
        let mut predicted = expected.clone();
        assert_eq!(exact_match(&predicted, &expected), 1.0);
        predicted[1][2] = 0; // no end token: wrong
        predicted[3][0] = 8;
        assert_eq!(exact_match(&predicted, &expected), 0.5);
        assert_eq!(exact_match(&[], &[]), 0.0);
    }

    #[test]
    #[should_panic(expected = "score takes examples of one length")]
    fn score_refuses_a_batch_of_mixed_lengths() {
        let device = Device::flex();
        let model = StudyConfig::new()
            .with_d_model(16)
            .with_n_blocks(1)
            .model_config(Task::Copy, Scheme::Alibi)
            .init(&device);
        let mut rng = SplitMix64::new(1);
        let examples = [
            Task::Copy.example(2, &mut rng),
            Task::Copy.example(3, &mut rng),
        ];
        let _ = score(&model, &examples, &device);
    }

    #[test]
    fn mean_and_sample_spread() {
        let (mean, std) = mean_and_std(&[0.2, 0.4, 0.6]).unwrap();
        assert!((mean - 0.4).abs() < 1e-12);
        assert!((std - 0.2).abs() < 1e-12);
        assert_eq!(mean_and_std(&[0.5]), Some((0.5, 0.0)));
        assert_eq!(mean_and_std(&[]), None);
    }

    #[test]
    fn configs_are_checked_by_name() {
        let err = StudyConfig::new()
            .with_tasks(vec!["multiply".into()])
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("multiply"), "{err}");
        let err = StudyConfig::new().with_seeds(0).validate().unwrap_err();
        assert!(err.to_string().contains("seeds"), "{err}");
        let err = StudyConfig::new()
            .with_test_multiples(vec![0.5])
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("0.5"), "{err}");
        StudyConfig::new().validate().unwrap();
        assert_eq!(StudyConfig::new().test_lengths(), vec![8, 12, 16, 24]);
    }
}
