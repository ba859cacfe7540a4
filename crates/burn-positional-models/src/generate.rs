//! Greedy generation with a [`KvCache`] per layer, on a left-padded batch, as transformers'
//! `generate(do_sample=False)` runs it.

use std::time::{Duration, Instant};

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use burn_positional::KvCache;

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
        Self {
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

    /// Positions the model has weights for (GPT-2's `n_positions`), if it has a limit.
    fn position_limit(&self) -> Option<usize> {
        None
    }
}

/// What [`generate`] produced.
#[derive(Debug, Clone)]
pub struct Generated {
    /// `[batch][max_new_tokens]` the generated ids.
    pub tokens: Vec<Vec<i64>>,
    /// The logits `[batch, vocab]` each token was chosen from (transformers' `output_logits`).
    pub step_logits: Vec<Tensor<2>>,
    /// Time of the prompt's forward and its first token (read back).
    pub prefill: Duration,
    /// Time of the other tokens.
    pub decode: Duration,
}

/// Greedy generation: the prompts left-padded with `pad`, one forward over them filling a
/// cache per layer, then one token per step, each the argmax of the last logits, for
/// `max_new_tokens` steps (no stop token: as transformers with `eos_token_id=None`). Each step reads the chosen ids back from the device.
///
/// # Panics
///
/// If `prompts` is empty or holds an empty prompt, or the longest prompt and the new tokens
/// pass the model's [`position_limit`](CausalLm::position_limit).
pub fn generate<M: CausalLm>(
    model: &M,
    prompts: &[Vec<i64>],
    pad: i64,
    max_new_tokens: usize,
    device: &Device,
) -> Generated {
    let batch = Batch::left_padded(prompts, pad);
    let longest = batch.ids[0].len();
    if let Some(limit) = model.position_limit() {
        // The last token fed sits at position longest + max_new_tokens - 2.
        let needed = longest + max_new_tokens.max(1) - 1;
        assert!(
            needed <= limit,
            "generate: the longest prompt ({longest} tokens) and {max_new_tokens} new tokens need \
             positions up to {}, the model has weights for {limit} (n_positions). Fix: at most \
             {} new tokens, or a shorter prompt",
            needed - 1,
            (limit + 1).saturating_sub(longest)
        );
    }
    let mut ids = batch.ids.clone();
    let mut positions = batch.positions();
    let mut mask = batch.mask.clone();
    let mut caches = vec![KvCache::new(); model.n_layers()];
    let mut tokens = vec![Vec::with_capacity(max_new_tokens); prompts.len()];
    let mut step_logits = Vec::with_capacity(max_new_tokens);
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
        let next = last.clone().argmax(1).into_data();
        let next: Vec<i64> = next.iter::<i64>().collect();
        step_logits.push(last);
        for (row, &token) in next.iter().enumerate() {
            tokens[row].push(token);
            ids[row].push(token);
            let position = positions[row]
                .iter()
                .zip(&mask[row])
                .filter(|(_, m)| **m)
                .count() as i64;
            positions[row].push(position);
            mask[row].push(true);
        }
        if step_index == 0 {
            prefill = start.elapsed();
        }
    }
    Generated {
        tokens,
        step_logits,
        prefill,
        decode: start.elapsed() - prefill,
    }
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
