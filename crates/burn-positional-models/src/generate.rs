//! Generation with a [`KvCache`] per layer, on a left-padded batch, as transformers'
//! `generate` runs it for one beam: greedy or sampled ([`crate::sampling`]), stopping each row
//! at its eos token.

use std::time::{Duration, Instant};

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use burn_positional::KvCache;

use crate::error::GenerateError;
use crate::generation_config::{DEFAULT_NEW_TOKENS, GenerationConfig, check_sampling, setting};
use crate::sampling::{Sampler, Sampling};

/// A batch of prompts of different lengths, padded on the left as transformers pads a batch for
/// generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// `[batch][len]` token ids, `pad` in front of the shorter prompts.
    pub ids: Vec<Vec<i64>>,
    /// `[batch][len]`: true at a prompt's tokens, false at padding (transformers'
    /// `attention_mask`).
    pub mask: Vec<Vec<bool>>,
}

impl Batch {
    /// Pads `prompts` on the left with `pad` to the longest one.
    ///
    /// # Panics
    ///
    /// If `prompts` is empty or a prompt is empty.
    pub fn left_padded(prompts: &[Vec<i64>], pad: i64) -> Self {
        assert!(
            !prompts.is_empty() && prompts.iter().all(|p| !p.is_empty()),
            "generate: every prompt needs at least one token, got lengths {:?}. Fix: drop empty \
             prompts (or start them with the model's BOS token)",
            prompts.iter().map(Vec::len).collect::<Vec<_>>()
        );
        let len = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let ids = prompts
            .iter()
            .map(|p| {
                let mut row = vec![pad; len - p.len()];
                row.extend(p);
                row
            })
            .collect();
        let mask = prompts
            .iter()
            .map(|p| {
                let mut row = vec![false; len - p.len()];
                row.extend(std::iter::repeat_n(true, p.len()));
                row
            })
            .collect();
        Self { ids, mask }
    }

    /// Rows from `ids` and `mask` as given (a padded batch of one's own, right padding
    /// included).
    pub fn new(ids: Vec<Vec<i64>>, mask: Vec<Vec<bool>>) -> Self {
        Self { ids, mask }
    }

    /// transformers' `position_ids` for generation (`_prepare_position_ids_for_generation`):
    /// `attention_mask.cumsum(-1) - 1`, with padding at 0.
    pub fn positions(&self) -> Vec<Vec<i64>> {
        self.mask
            .iter()
            .map(|row| {
                let mut seen = 0i64;
                row.iter()
                    .map(|&real| {
                        seen += real as i64;
                        if real { seen - 1 } else { 0 }
                    })
                    .collect()
            })
            .collect()
    }
}

/// One call of a decoder: the new tokens, where they sit, and which keys they may see.
#[derive(Debug, Clone)]
pub struct Step {
    /// `[batch, seq]` new token ids.
    pub ids: Tensor<2, Int>,
    /// `[batch, seq]` their position ids.
    pub positions: Tensor<2, Int>,
    /// `[batch, past + seq]` the position ids of every key (cached and new).
    pub key_positions: Tensor<2, Int>,
    /// `[batch, past + seq]`: true at padding, which no query sees.
    pub key_padding: Tensor<2, Bool>,
    /// Keys cached before this call.
    pub past: usize,
    /// `max(positions) + 1` over the batch: the length transformers' rotary modules pick a
    /// length-dependent frequency set from.
    pub len: usize,
    /// Whether every row's positions are `0, 1, ..` and no key is padding (known on the host
    /// when the step is built): the attention may then take sequential positions, whose causal
    /// tiles walk only the keys they can see, instead of explicit ones (every key, masked).
    pub sequential: bool,
}

impl Step {
    /// The step of `seq` new tokens at the end of `ids` (rows of the whole sequence so far),
    /// `positions` and `mask` (host rows of the same length), `past` keys already cached.
    pub fn new(
        ids: &[Vec<i64>],
        positions: &[Vec<i64>],
        mask: &[Vec<bool>],
        past: usize,
        device: &Device,
    ) -> Self {
        let batch = ids.len();
        let total = ids[0].len();
        let seq = total - past;
        let tensor = |rows: &[Vec<i64>], from: usize| {
            let flat: Vec<i64> = rows
                .iter()
                .flat_map(|r| r[from..].iter().copied())
                .collect();
            Tensor::<2, Int>::from_data(TensorData::new(flat, [batch, total - from]), device)
        };
        let padding: Vec<bool> = mask.iter().flat_map(|r| r.iter().map(|&m| !m)).collect();
        let len = positions
            .iter()
            .flat_map(|r| r[past..].iter())
            .copied()
            .max()
            .unwrap_or(0)
            + 1;
        let sequential = mask.iter().all(|r| r.iter().all(|&m| m))
            && positions
                .iter()
                .all(|r| r.iter().enumerate().all(|(i, &p)| p == i as i64));
        Self {
            sequential,
            ids: tensor(ids, past),
            positions: tensor(positions, past),
            key_positions: tensor(positions, 0),
            key_padding: Tensor::from_data(TensorData::new(padding, [batch, total]), device),
            past,
            len: len.max(1) as usize,
        }
        .checked(seq)
    }

    fn checked(self, seq: usize) -> Self {
        debug_assert_eq!(self.ids.dims()[1], seq);
        self
    }

    /// The last `n` keys' positions and padding (a rolling cache attends to the last ones).
    pub fn last_keys(&self, n: usize) -> (Tensor<2, Int>, Tensor<2, Bool>) {
        let [batch, all] = self.key_positions.dims();
        let n = n.min(all);
        (
            self.key_positions.clone().slice([0..batch, all - n..all]),
            self.key_padding.clone().slice([0..batch, all - n..all]),
        )
    }
}

/// A decoder-only language model that decodes with one [`KvCache`] per layer.
pub trait CausalLm {
    /// Number of layers (caches).
    fn n_layers(&self) -> usize;

    /// Hidden states `[batch, seq, hidden]` of `step`'s tokens after the final norm. With
    /// `caches`, the new keys and values are appended to them and the queries see the cached
    /// ones; without, the step is the whole sequence.
    fn hidden(&self, step: &Step, caches: Option<&mut [KvCache]>) -> Tensor<3>;

    /// Logits `[batch, seq, vocab]` of hidden states.
    fn head(&self, hidden: Tensor<3>) -> Tensor<3>;

    /// Logits `[batch, seq, vocab]` of `step`'s tokens: [`head`](Self::head) of
    /// [`hidden`](Self::hidden).
    fn forward(&self, step: &Step, caches: Option<&mut [KvCache]>) -> Tensor<3> {
        self.head(self.hidden(step, caches))
    }

    /// Whether generation drops its caches and runs the whole sequence again before the step
    /// that brings the (padded) sequence to `total` tokens with `cached` of them cached:
    /// Phi-3's `prepare_inputs_for_generation` does, once, when the sequence first passes
    /// `original_max_position_embeddings`, so every key gets the long factors. No by default.
    fn recompute_cache(&self, total: usize, cached: usize) -> bool {
        let _ = (total, cached);
        false
    }

    /// Rows of the token table: prompt ids must be below it. Read from the table's shape,
    /// without touching the device.
    fn vocab_size(&self) -> usize;

    /// Positions the model has weights for (GPT-2's `n_positions`), if it has a limit.
    fn position_limit(&self) -> Option<usize> {
        None
    }
}

/// What [`generate`] produced.
#[derive(Debug, Clone)]
pub struct Generated {
    /// `[batch][steps]` the generated ids: `max_new_tokens` of them, or fewer when every row
    /// met an eos token first. A row that met one keeps it, then `pad_token_id` (as
    /// transformers returns it).
    pub tokens: Vec<Vec<i64>>,
    /// The logits `[batch, vocab]` each token was chosen from, before any processor
    /// (transformers' `output_logits`).
    pub step_logits: Vec<Tensor<2>>,
    /// Time of the prompt's forward and its first token (read back).
    pub prefill: Duration,
    /// Time of the other tokens.
    pub decode: Duration,
}

/// How [`try_generate`] (and [`t5::try_generate`](crate::t5::try_generate)) generate: length,
/// special tokens, sampling and its seed. Built from a checkpoint's
/// [`GenerationConfig`] with [`from_config`](Self::from_config) or
/// greedy with [`greedy`](Self::greedy); every field can be set after.
///
/// `#[non_exhaustive]`: a new setting is not a break. Build from [`greedy`](Self::greedy) or
/// [`from_config`](Self::from_config) and change a field with its `with_*` method (or by
/// assignment); a struct literal does not compile outside this crate.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct GenerateOptions {
    /// New tokens at most (wins over `max_length`).
    pub max_new_tokens: Option<usize>,
    /// Input and new tokens together at most, the input being the padded prompt (decoder-only)
    /// or the decoder's start token (T5); used without `max_new_tokens`. Without either,
    /// [`crate::generation_config::DEFAULT_NEW_TOKENS`].
    pub max_length: Option<usize>,
    /// Padding left of the shorter prompts (right of T5's), and after a row's eos.
    pub pad_token_id: i64,
    /// Tokens that end a row; none: every row runs to the length.
    pub eos_token_ids: Vec<i64>,
    /// Greedy or sampling, and the processors.
    pub sampling: Sampling,
    /// The seed of the draw ([`Sampler`]); unused when greedy.
    pub seed: u64,
    /// T5's first decoder token; `None`: the model's own
    /// ([`T5::decoder_start_token_id`](crate::t5::T5::decoder_start_token_id)).
    pub decoder_start_token_id: Option<i64>,
}

impl GenerateOptions {
    /// Greedy decoding of `max_new_tokens` with `pad`, no eos token: what [`generate`] runs.
    pub fn greedy(max_new_tokens: usize, pad: i64) -> Self {
        Self {
            max_new_tokens: Some(max_new_tokens),
            max_length: None,
            pad_token_id: pad,
            eos_token_ids: Vec::new(),
            sampling: Sampling::greedy(),
            seed: 0,
            decoder_start_token_id: None,
        }
    }

    /// The settings of `config` with transformers' defaults: the pad token is
    /// `pad_token_id`, else the first eos id, else 0 (padding is masked, any id serves);
    /// seed 0.
    pub fn from_config(config: &GenerationConfig) -> Self {
        let positive = |n: Option<i64>| n.map(|n| n.max(0) as usize);
        Self {
            max_new_tokens: positive(config.max_new_tokens),
            max_length: positive(config.max_length),
            pad_token_id: config.pad_token_id().unwrap_or(0),
            eos_token_ids: config.eos_token_ids(),
            sampling: config.sampling(),
            seed: 0,
            decoder_start_token_id: config.decoder_start_token_id(),
        }
    }

    /// These options with `max_new_tokens` new tokens at most.
    pub fn with_max_new_tokens(mut self, max_new_tokens: usize) -> Self {
        self.max_new_tokens = Some(max_new_tokens);
        self
    }

    /// These options with the draw seeded by `seed`.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// These options with `sampling`.
    pub fn with_sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// These options with `eos_token_ids` ending a row.
    pub fn with_eos(mut self, eos_token_ids: Vec<i64>) -> Self {
        self.eos_token_ids = eos_token_ids;
        self
    }

    /// These options with at most `max_length` tokens, input included (used without
    /// `max_new_tokens`; see [`max_length`](Self::max_length)).
    pub fn with_max_length(mut self, max_length: Option<usize>) -> Self {
        self.max_length = max_length;
        self
    }

    /// These options with `pad_token_id` as the padding.
    pub fn with_pad_token_id(mut self, pad_token_id: i64) -> Self {
        self.pad_token_id = pad_token_id;
        self
    }

    /// These options with T5's first decoder token (`None`: the model's own).
    pub fn with_decoder_start_token_id(mut self, decoder_start_token_id: Option<i64>) -> Self {
        self.decoder_start_token_id = decoder_start_token_id;
        self
    }

    /// Refuses sampling settings transformers' processors refuse.
    ///
    /// # Errors
    ///
    /// [`GenerateError::Setting`] naming the field, the value and the range.
    pub fn check(&self) -> Result<(), GenerateError> {
        check_sampling(&self.sampling, "GenerateOptions")
    }

    /// The new tokens for an input of `input_len` tokens: `max_new_tokens`, else
    /// `max_length - input_len`, else 20 (transformers' `_prepare_generated_length`).
    ///
    /// # Errors
    ///
    /// [`GenerateError::Setting`] when `max_length` leaves no room (transformers'
    /// `ValueError`).
    pub fn new_tokens(&self, input_len: usize) -> Result<usize, GenerateError> {
        match (self.max_new_tokens, self.max_length) {
            (Some(n), _) => Ok(n),
            (None, Some(total)) if total <= input_len => Err(setting(
                "GenerateOptions",
                "max_length",
                total,
                &format!("more than the input's {input_len} tokens"),
                "set max_new_tokens instead, or a larger max_length",
            )),
            (None, Some(total)) => Ok(total - input_len),
            (None, None) => Ok(DEFAULT_NEW_TOKENS),
        }
    }
}

/// Checks every prompt id against the vocabulary, on the host: a model gathers an embedding
/// row per id, and one past the table reads garbage or fails inside a kernel.
///
/// # Errors
///
/// [`GenerateError::EmptyPrompt`] for no prompts or an empty one,
/// [`GenerateError::PromptToken`] naming the first id outside `0..vocab_size`, its row and
/// column.
pub fn check_prompts(prompts: &[Vec<i64>], vocab_size: usize) -> Result<(), GenerateError> {
    if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
        return Err(GenerateError::EmptyPrompt {
            lengths: prompts.iter().map(Vec::len).collect(),
        });
    }
    for (row, prompt) in prompts.iter().enumerate() {
        for (column, &id) in prompt.iter().enumerate() {
            if !usize::try_from(id).is_ok_and(|id| id < vocab_size) {
                return Err(GenerateError::PromptToken {
                    id,
                    row,
                    column,
                    vocab_size,
                });
            }
        }
    }
    Ok(())
}

/// Checks a special token the model is fed (padding, T5's decoder start).
///
/// # Errors
///
/// [`GenerateError::SpecialToken`] if `id` is outside `0..vocab_size`.
pub(crate) fn check_special(
    field: &'static str,
    id: i64,
    vocab_size: usize,
) -> Result<(), GenerateError> {
    if !usize::try_from(id).is_ok_and(|id| id < vocab_size) {
        return Err(GenerateError::SpecialToken {
            field,
            id,
            vocab_size,
        });
    }
    Ok(())
}

/// The choice of each step's tokens and the rows' ends, shared by the decoder-only and the T5
/// loops: transformers' `_sample` with its `unfinished_sequences`.
pub(crate) struct Chooser<'a> {
    options: &'a GenerateOptions,
    sampler: Sampler,
    unfinished: Vec<bool>,
}

impl<'a> Chooser<'a> {
    pub(crate) fn new(options: &'a GenerateOptions, batch: usize) -> Self {
        Self {
            options,
            sampler: Sampler::new(options.seed),
            unfinished: vec![true; batch],
        }
    }

    /// The next token of each row from `logits` `[batch, vocab]`, `history(row)` the row's
    /// sequence so far (what the repetition penalty sees): the argmax on the device when
    /// greedy without a penalty (one read of `batch` ids), else the processors and the draw on
    /// the host. Rows already finished get the pad token, and a row meeting an eos token is
    /// finished.
    pub(crate) fn next<'h>(
        &mut self,
        logits: Tensor<2>,
        history: impl Fn(usize) -> &'h [i64],
    ) -> Vec<i64> {
        let sampling = &self.options.sampling;
        let mut next: Vec<i64> = if sampling.is_plain_argmax() {
            logits.argmax(1).into_data().iter::<i64>().collect()
        } else {
            let vocab = logits.dims()[1];
            let mut rows: Vec<f32> = logits.into_data().iter::<f32>().collect();
            rows.chunks_mut(vocab)
                .enumerate()
                .map(|(row, scores)| self.sampler.next_token(sampling, scores, history(row)))
                .collect()
        };
        for (token, unfinished) in next.iter_mut().zip(&mut self.unfinished) {
            if !*unfinished {
                *token = self.options.pad_token_id;
            } else if self.options.eos_token_ids.contains(token) {
                *unfinished = false;
            }
        }
        next
    }

    /// Whether every row has met an eos token.
    pub(crate) fn all_finished(&self) -> bool {
        self.unfinished.iter().all(|u| !u)
    }
}

/// Greedy generation: the prompts left-padded with `pad`, one forward over them filling a
/// cache per layer, then one token per step, each the argmax of the last logits, for
/// `max_new_tokens` steps (no stop token: as transformers with `eos_token_id=None`). Each step
/// reads the chosen ids back from the device. [`try_generate`] with
/// [`GenerateOptions::greedy`].
///
/// # Panics
///
/// With [`try_generate`]'s error message: an empty prompt, a prompt id or `pad` outside the
/// model's vocabulary, or the longest prompt and the new tokens past the model's
/// [`position_limit`](CausalLm::position_limit).
pub fn generate<M: CausalLm>(
    model: &M,
    prompts: &[Vec<i64>],
    pad: i64,
    max_new_tokens: usize,
    device: &Device,
) -> Generated {
    try_generate(
        model,
        prompts,
        &GenerateOptions::greedy(max_new_tokens, pad),
        device,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Generation as transformers' `generate` runs it for one beam: the prompts left-padded with
/// `options.pad_token_id`, one forward over them filling a cache per layer, then one token per
/// step from the last logits (the argmax, or the processors of `options.sampling` and a draw
/// seeded by `options.seed`), until the length or until every row has met an eos token; a
/// row's tokens after its eos are the pad token. Everything is checked on the host before the
/// model runs.
///
/// # Errors
///
/// [`GenerateError::Setting`] for a sampling setting out of range or a `max_length` that
/// leaves no room, [`GenerateError::EmptyPrompt`], [`GenerateError::PromptToken`] for a
/// prompt id outside the vocabulary, [`GenerateError::SpecialToken`] for such a pad token,
/// [`GenerateError::PositionLimit`] when the model has no weights for the positions needed.
pub fn try_generate<M: CausalLm>(
    model: &M,
    prompts: &[Vec<i64>],
    options: &GenerateOptions,
    device: &Device,
) -> Result<Generated, GenerateError> {
    try_generate_streaming(model, prompts, options, device, |_| {})
}

/// [`try_generate`], calling `on_tokens` after every step with the token each row got (a
/// finished row's is the pad token): for text streamed as it is decoded (`text::TextStream`
/// with the `tokenizers` feature) or any progress of one's own. The tokens are host data
/// already read for the next step; the callback adds no device read.
///
/// # Errors
///
/// As [`try_generate`].
pub fn try_generate_streaming<M: CausalLm>(
    model: &M,
    prompts: &[Vec<i64>],
    options: &GenerateOptions,
    device: &Device,
    mut on_tokens: impl FnMut(&[i64]),
) -> Result<Generated, GenerateError> {
    options.check()?;
    let vocab_size = model.vocab_size();
    check_prompts(prompts, vocab_size)?;
    let pad = options.pad_token_id;
    check_special("pad_token_id", pad, vocab_size)?;
    let batch = Batch::left_padded(prompts, pad);
    let longest = batch.ids[0].len();
    let max_new_tokens = options.new_tokens(longest)?;
    if let Some(limit) = model.position_limit() {
        // The last token fed sits at position longest + max_new_tokens - 2.
        let needed = longest + max_new_tokens.max(1) - 1;
        if needed > limit {
            return Err(GenerateError::PositionLimit {
                longest,
                max_new_tokens,
                needed,
                limit,
            });
        }
    }
    // transformers' repetition penalty skips the left padding (`prompt_ignore_length`).
    let padding: Vec<usize> = prompts.iter().map(|p| longest - p.len()).collect();
    let mut ids = batch.ids.clone();
    let mut positions = batch.positions();
    let mut mask = batch.mask.clone();
    let mut caches = vec![KvCache::new(); model.n_layers()];
    let mut tokens = vec![Vec::with_capacity(max_new_tokens); prompts.len()];
    let mut step_logits = Vec::with_capacity(max_new_tokens);
    let mut chooser = Chooser::new(options, prompts.len());
    let start = Instant::now();
    let mut prefill = Duration::ZERO;
    let mut past = 0;
    for step_index in 0..max_new_tokens {
        if past > 0 && model.recompute_cache(ids[0].len(), past) {
            caches.iter_mut().for_each(KvCache::clear);
            past = 0;
        }
        let step = Step::new(&ids, &positions, &mask, past, device);
        past = ids[0].len();
        // The head on the last position only (transformers' `logits_to_keep=1`).
        let hidden = model.hidden(&step, Some(&mut caches));
        let [b, seq, width] = hidden.dims();
        let logits = model.head(hidden.slice([0..b, seq - 1..seq, 0..width]));
        let vocab = logits.dims()[2];
        let last = logits.reshape([b, vocab]);
        let next = chooser.next(last.clone(), |row| &ids[row][padding[row]..]);
        step_logits.push(last);
        on_tokens(&next);
        for (row, &token) in next.iter().enumerate() {
            tokens[row].push(token);
            ids[row].push(token);
            let position = positions[row]
                .iter()
                .zip(&mask[row])
                .filter(|(_, m)| **m)
                .count() as i64;
            positions[row].push(position);
            // transformers extends the attention mask with ones, finished rows included.
            mask[row].push(true);
        }
        if step_index == 0 {
            prefill = start.elapsed();
        }
        if chooser.all_finished() {
            break;
        }
    }
    Ok(Generated {
        tokens,
        step_logits,
        prefill,
        decode: start.elapsed() - prefill,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn left_padding_and_positions_follow_transformers() {
        let batch = Batch::left_padded(&[vec![5, 6, 7], vec![8]], 0);
        assert_eq!(batch.ids, vec![vec![5, 6, 7], vec![0, 0, 8]]);
        assert_eq!(batch.mask[1], vec![false, false, true]);
        // attention_mask.cumsum(-1) - 1, padding filled with 0.
        assert_eq!(batch.positions(), vec![vec![0, 1, 2], vec![0, 0, 0]]);
    }
}
