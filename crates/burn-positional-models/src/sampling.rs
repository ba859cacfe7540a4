//! transformers' logits processors and warpers on host rows of logits, then a seeded draw.
//!
//! Each function takes one row `[vocab]` of one batch item's last logits, as transformers 5.24's
//! `generation/logits_process.py` computes it on a `[batch, vocab]` tensor, in float32 like
//! transformers on float32 logits:
//!
//! | ours | transformers |
//! | --- | --- |
//! | [`repetition_penalty`] | `RepetitionPenaltyLogitsProcessor` |
//! | [`temperature`] | `TemperatureLogitsWarper` |
//! | [`top_k`] | `TopKLogitsWarper` |
//! | [`top_p`] | `TopPLogitsWarper` |
//! | [`min_p`] | `MinPLogitsWarper` |
//! | [`Sampling::process`] | the list `GenerationMixin._get_logits_processor` builds |
//!
//! Removed tokens get [`FILTER_VALUE`] (`-inf`), as the warpers' default `filter_value`. The
//! draw is ours: [`Sampler`] takes a [`ChaCha8Rng`] from a seed, so a seed gives the same tokens
//! on every run and every device (the draw reads the logits row on the host); it does not
//! reproduce `torch.multinomial`'s stream.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// What the warpers put at removed tokens: `-inf` (transformers' `filter_value`).
pub const FILTER_VALUE: f32 = f32::NEG_INFINITY;

/// transformers' `RepetitionPenaltyLogitsProcessor`: every token id in `ids` (the sequence so
/// far: prompt and generated) gets its score divided by `penalty` where the score is positive
/// (zero included), multiplied where negative; each id once, however often it occurs. Ids at or
/// past the row's end are skipped (transformers clamps them to a dropped column), as are
/// negative ids.
///
/// # Panics
///
/// If `penalty` is not strictly positive (transformers' `ValueError`).
pub fn repetition_penalty(row: &mut [f32], ids: &[i64], penalty: f32) {
    assert!(
        penalty > 0.0,
        "repetition_penalty: `penalty` must be strictly positive, got {penalty}"
    );
    let vocab = row.len();
    let mut seen = vec![false; vocab];
    for &id in ids {
        let Ok(id) = usize::try_from(id) else {
            continue;
        };
        if id >= vocab || seen[id] {
            continue;
        }
        seen[id] = true;
        // `torch.where(score < 0, score * penalty, score / penalty)`, gathered before the
        // scatter: a repeated id is penalised once.
        let score = row[id];
        row[id] = if score < 0.0 {
            score * penalty
        } else {
            score / penalty
        };
    }
}

/// transformers' `TemperatureLogitsWarper`: `scores / temperature`.
///
/// # Panics
///
/// If `temperature` is not strictly positive (transformers' `ValueError`).
pub fn temperature(row: &mut [f32], temperature: f32) {
    assert!(
        temperature > 0.0,
        "temperature: must be strictly positive, got {temperature}"
    );
    row.iter_mut().for_each(|s| *s /= temperature);
}

/// transformers' `TopKLogitsWarper`: keeps the scores at least the `max(top_k,
/// min_tokens_to_keep)`-th largest (ties with it all kept), the others to [`FILTER_VALUE`]. A
/// `k` past the row's length keeps everything.
///
/// # Panics
///
/// If `top_k` is 0 (transformers' `ValueError`; its `_get_logits_processor` skips 0 instead).
pub fn top_k(row: &mut [f32], top_k: usize, min_tokens_to_keep: usize) {
    assert!(top_k > 0, "top_k: must be strictly positive, got 0");
    let k = top_k.max(min_tokens_to_keep).min(row.len());
    if k == 0 {
        return;
    }
    // `torch.topk(scores, k)[0][..., -1]`: the k-th largest value.
    let mut sorted = row.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let kth = sorted[k - 1];
    // `scores < kth` removed: NaN is never less, so it stays, as in torch.
    row.iter_mut()
        .filter(|s| **s < kth)
        .for_each(|s| *s = FILTER_VALUE);
}

/// transformers' `TopPLogitsWarper`: the scores sorted ascending, their softmax summed from
/// the smallest; a token whose running sum is at most `1 - top_p` is removed, except the
/// `min_tokens_to_keep` largest.
///
/// Two differences, both at a boundary: equal scores are sorted in index order (a stable sort),
/// where torch's CPU `sort` is unstable, so when equal scores straddle the threshold the same
/// number of them is removed, possibly not the same ones; and the softmax and the running sum
/// are in f64 (transformers: float32), so a sum within a rounding error of `1 - top_p` may fall
/// the other way.
///
/// # Panics
///
/// If `top_p` is outside `[0, 1]` or `min_tokens_to_keep` is 0 (transformers' `ValueError`s).
pub fn top_p(row: &mut [f32], top_p: f64, min_tokens_to_keep: usize) {
    assert!(
        (0.0..=1.0).contains(&top_p) && min_tokens_to_keep > 0,
        "top_p: must be in [0, 1] with min_tokens_to_keep at least 1, got {top_p} and \
         {min_tokens_to_keep}"
    );
    let vocab = row.len();
    let mut order: Vec<usize> = (0..vocab).collect();
    // A stable sort: equal scores keep their index order.
    order.sort_by(|&a, &b| row[a].total_cmp(&row[b]));
    let sorted: Vec<f32> = order.iter().map(|&i| row[i]).collect();
    let probs = softmax(&sorted);
    let threshold = 1.0 - top_p;
    let keep_from = vocab.saturating_sub(min_tokens_to_keep);
    let mut cumulative = 0.0;
    let mut remove = vec![false; vocab];
    for (at, (&index, p)) in order.iter().zip(probs).enumerate() {
        cumulative += p;
        remove[index] = at < keep_from && cumulative <= threshold;
    }
    for (score, removed) in row.iter_mut().zip(remove) {
        if removed {
            *score = FILTER_VALUE;
        }
    }
}

/// transformers' `MinPLogitsWarper` (Nguyen et al. 2024, "Turning Up the Heat: Min-p Sampling
/// for Creative and Coherent LLM Outputs"): a token whose probability is below `min_p` times
/// the largest probability is removed, except the `min_tokens_to_keep` largest. The cut scales
/// with the model's confidence: a peaked row keeps few tokens, a flat one many. `min_p` 0
/// removes nothing, 1 keeps only the tokens tied with the largest.
///
/// Probabilities in f64 (transformers: float32), so a probability within a rounding error of
/// the cut may fall the other way; the kept largest are the first among equal scores, where
/// torch's `topk` keeps any of them (the same number). A row of only `-inf` has NaN
/// probabilities, which no comparison removes (as in torch).
///
/// # Panics
///
/// If `min_p` is outside `[0, 1]` or `min_tokens_to_keep` is 0 (transformers' `ValueError`s).
pub fn min_p(row: &mut [f32], min_p: f64, min_tokens_to_keep: usize) {
    assert!(
        (0.0..=1.0).contains(&min_p) && min_tokens_to_keep > 0,
        "min_p: must be in [0, 1] with min_tokens_to_keep at least 1, got {min_p} and \
         {min_tokens_to_keep}"
    );
    let probs = softmax(row);
    let top = probs.iter().fold(f64::NEG_INFINITY, |m, &p| m.max(p));
    let cut = min_p * top;
    let mut remove: Vec<bool> = probs.iter().map(|&p| p < cut).collect();
    // The largest `min_tokens_to_keep` (the first among equals) stay.
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
    for &i in order.iter().take(min_tokens_to_keep.min(row.len())) {
        remove[i] = false;
    }
    for (score, removed) in row.iter_mut().zip(remove) {
        if removed {
            *score = FILTER_VALUE;
        }
    }
}

/// `softmax(row)` in f64: `exp(s - max) / sum`, 0 at `-inf`. A row of only `-inf` gives NaN
/// (as torch's softmax).
pub fn softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &s| m.max(s as f64));
    let exps: Vec<f64> = row.iter().map(|&s| (s as f64 - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

/// The index of the largest score, the first one among equals (torch's `argmax`).
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &s) in row.iter().enumerate() {
        if s > row[best] {
            best = i;
        }
    }
    best
}

/// transformers' sampling settings (`GenerationConfig`'s `do_sample`, `temperature`, `top_k`,
/// `top_p`, `min_p`, `repetition_penalty`), each with its neutral value when unset: greedy,
/// 1.0, 0 (none), 1.0, none, 1.0.
///
/// `#[non_exhaustive]`: a new setting (as `min_p` was) is not a break. Start from
/// [`greedy`](Self::greedy) or [`sample`](Self::sample) and set what differs with the `with_*`
/// methods; a struct literal does not compile outside this crate.
///
/// ```
/// use burn_positional_models::sampling::Sampling;
///
/// let sampling = Sampling::sample()
///     .with_temperature(0.8)
///     .with_top_k(20)
///     .with_top_p(0.95)
///     .with_repetition_penalty(1.2);
/// assert!(sampling.do_sample && sampling.min_p.is_none());
/// ```
///
/// A literal, even one naming every field, is refused outside this crate (so no user code can
/// depend on the list of fields):
///
/// ```compile_fail
/// use burn_positional_models::sampling::Sampling;
///
/// let sampling = Sampling {
///     do_sample: true,
///     temperature: 0.8,
///     top_k: 20,
///     top_p: 0.95,
///     min_p: None,
///     repetition_penalty: 1.2,
/// };
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Sampling {
    /// Draw from the warped distribution (`do_sample`); argmax when false.
    pub do_sample: bool,
    /// `temperature`, applied when sampling and not 1.
    pub temperature: f64,
    /// `top_k`, applied when sampling and not 0.
    pub top_k: usize,
    /// `top_p`, applied when sampling and below 1.
    pub top_p: f64,
    /// `min_p`, applied when sampling and set (0 included, as transformers builds the warper
    /// whenever the value is not `None`).
    pub min_p: Option<f64>,
    /// `repetition_penalty`, applied (greedy too) when not 1.
    pub repetition_penalty: f64,
}

impl Default for Sampling {
    fn default() -> Self {
        Self::greedy()
    }
}

impl Sampling {
    /// Argmax, nothing applied.
    pub fn greedy() -> Self {
        Self {
            do_sample: false,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: None,
            repetition_penalty: 1.0,
        }
    }

    /// transformers' `GenerationConfig` defaults with `do_sample=True`: top-k 50, nothing else.
    pub fn sample() -> Self {
        Self {
            do_sample: true,
            top_k: 50,
            ..Self::greedy()
        }
    }

    /// These settings drawing from the warped distribution (`true`) or taking the argmax.
    pub fn with_do_sample(mut self, do_sample: bool) -> Self {
        self.do_sample = do_sample;
        self
    }

    /// These settings with `temperature` (applied when sampling and not 1).
    pub fn with_temperature(mut self, temperature: f64) -> Self {
        self.temperature = temperature;
        self
    }

    /// These settings with `top_k` (applied when sampling and not 0).
    pub fn with_top_k(mut self, top_k: usize) -> Self {
        self.top_k = top_k;
        self
    }

    /// These settings with `top_p` (applied when sampling and below 1).
    pub fn with_top_p(mut self, top_p: f64) -> Self {
        self.top_p = top_p;
        self
    }

    /// These settings with `min_p` (applied when sampling and set).
    pub fn with_min_p(mut self, min_p: Option<f64>) -> Self {
        self.min_p = min_p;
        self
    }

    /// These settings with `repetition_penalty` (applied, greedy too, when not 1).
    pub fn with_repetition_penalty(mut self, repetition_penalty: f64) -> Self {
        self.repetition_penalty = repetition_penalty;
        self
    }

    /// Whether the next token is the plain argmax of the logits (greedy, no repetition
    /// penalty): generation then takes it on the device, as before sampling existed.
    pub fn is_plain_argmax(&self) -> bool {
        !self.do_sample && self.repetition_penalty == 1.0
    }

    /// The processors `_get_logits_processor` builds for these settings, in its order, applied
    /// to `row` with `ids` the row's sequence so far: the repetition penalty, then, when
    /// sampling, temperature, top-k, top-p and min-p (`min_tokens_to_keep` 1: one beam).
    ///
    /// # Panics
    ///
    /// On a setting a processor refuses; [`GenerationConfig`](crate::GenerationConfig) and
    /// [`GenerateOptions::check`](crate::generate::GenerateOptions::check) refuse them first
    /// with a typed error.
    pub fn process(&self, row: &mut [f32], ids: &[i64]) {
        if self.repetition_penalty != 1.0 {
            repetition_penalty(row, ids, self.repetition_penalty as f32);
        }
        if !self.do_sample {
            return;
        }
        if self.temperature != 1.0 {
            temperature(row, self.temperature as f32);
        }
        if self.top_k != 0 {
            top_k(row, self.top_k, 1);
        }
        if self.top_p < 1.0 {
            top_p(row, self.top_p, 1);
        }
        if let Some(p) = self.min_p {
            min_p(row, p, 1);
        }
    }
}

/// The seeded draw: one [`ChaCha8Rng`] (portable and documented reproducible) per generation.
#[derive(Debug, Clone)]
pub struct Sampler {
    rng: ChaCha8Rng,
}

impl Sampler {
    /// A sampler whose draws follow from `seed` alone.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// A uniform number in `[0, 1)`: the top 53 bits of the next `u64`.
    pub fn uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// An index drawn with probability `probs[i]` (one uniform number, inverse of the running
    /// sum in index order); a rounding shortfall of the sum falls on the last index with a
    /// nonzero probability.
    ///
    /// # Panics
    ///
    /// If no probability is positive.
    pub fn draw(&mut self, probs: &[f64]) -> usize {
        let u = self.uniform();
        let last = probs
            .iter()
            .rposition(|&p| p > 0.0)
            .expect("draw: no token has a positive probability");
        let mut cumulative = 0.0;
        for (i, &p) in probs.iter().enumerate().take(last) {
            cumulative += p;
            if u < cumulative {
                return i;
            }
        }
        last
    }

    /// The next token of a row of `logits`: processed by `sampling` with the row's sequence
    /// `ids`, then drawn from its softmax (one uniform number), or its argmax when not
    /// sampling (none).
    pub fn next_token(&mut self, sampling: &Sampling, logits: &mut [f32], ids: &[i64]) -> i64 {
        sampling.process(logits, ids);
        if sampling.do_sample {
            self.draw(&softmax(logits)) as i64
        } else {
            argmax(logits) as i64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEG: f32 = FILTER_VALUE;

    #[test]
    fn repetition_penalty_divides_positive_multiplies_negative_once() {
        let mut row = vec![2.0, -2.0, 0.0, 4.0];
        // Id 0 twice is penalised once; id 7 past the vocabulary and -1 are skipped.
        repetition_penalty(&mut row, &[0, 0, 1, 2, 7, -1], 2.0);
        assert_eq!(row, vec![1.0, -4.0, 0.0, 4.0]);
    }

    #[test]
    fn top_k_keeps_ties_with_the_kth_and_min_tokens() {
        let mut row = vec![1.0, 3.0, 2.0, 2.0, 0.0];
        top_k(&mut row, 2, 1);
        // The 2nd largest is 2.0: both 2.0s stay.
        assert_eq!(row, vec![NEG, 3.0, 2.0, 2.0, NEG]);
        let mut row = vec![1.0, 3.0, 2.0];
        top_k(&mut row, 1, 2);
        assert_eq!(row, vec![NEG, 3.0, 2.0]);
        let mut row = vec![1.0, 3.0];
        top_k(&mut row, 9, 1);
        assert_eq!(row, vec![1.0, 3.0]);
    }

    #[test]
    fn top_p_keeps_the_smallest_set_over_p_and_the_top_token() {
        // Probabilities 0.1, 0.2, 0.3, 0.4 (as logs).
        let logs = [0.1f32, 0.2, 0.3, 0.4].map(f32::ln);
        let mut row = logs.to_vec();
        // Running sums from the smallest: 0.1, 0.3, 0.6, 1.0; removed where <= 0.5.
        top_p(&mut row, 0.5, 1);
        assert_eq!(row, vec![NEG, NEG, logs[2], logs[3]]);
        // top_p 0: only the largest survives (min_tokens_to_keep).
        let mut row = logs.to_vec();
        top_p(&mut row, 0.0, 1);
        assert_eq!(row, vec![NEG, NEG, NEG, logs[3]]);
        let mut row = logs.to_vec();
        top_p(&mut row, 0.0, 3);
        assert_eq!(row, vec![NEG, logs[1], logs[2], logs[3]]);
    }

    #[test]
    fn top_p_removes_the_lower_index_first_among_ties() {
        // Four equal scores: running sums 0.25, 0.5, 0.75, 1; top_p 0.6 removes the first
        // (index order: the stable sort) where the sum is <= 0.4.
        let mut row = vec![0.0f32; 4];
        top_p(&mut row, 0.6, 1);
        assert_eq!(row, vec![NEG, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn min_p_scales_the_cut_with_the_largest_probability() {
        // Probabilities 0.5, 0.3, 0.15, 0.05 (as logs): min_p 0.2 cuts below 0.1.
        let logs = [0.5f32, 0.3, 0.15, 0.05].map(f32::ln);
        let mut row = logs.to_vec();
        min_p(&mut row, 0.2, 1);
        assert_eq!(row, vec![logs[0], logs[1], logs[2], NEG]);
        // min_p 0.7 cuts below 0.35: only the top token; with min_tokens_to_keep 3, three.
        let mut row = logs.to_vec();
        min_p(&mut row, 0.7, 1);
        assert_eq!(row, vec![logs[0], NEG, NEG, NEG]);
        let mut row = logs.to_vec();
        min_p(&mut row, 0.7, 3);
        assert_eq!(row, vec![logs[0], logs[1], logs[2], NEG]);
        // min_p 0 removes nothing.
        let mut row = logs.to_vec();
        min_p(&mut row, 0.0, 1);
        assert_eq!(row, logs.to_vec());
    }

    #[test]
    fn softmax_gives_zero_at_minus_infinity() {
        let p = softmax(&[0.0, NEG, 0.0]);
        assert_eq!(p, vec![0.5, 0.0, 0.5]);
    }

    #[test]
    fn draw_never_picks_a_zero_probability_and_follows_the_seed() {
        let probs = [0.0, 0.5, 0.0, 0.5, 0.0];
        let mut a = Sampler::new(7);
        let mut b = Sampler::new(7);
        let drawn: Vec<usize> = (0..200).map(|_| a.draw(&probs)).collect();
        assert!(drawn.iter().all(|&i| i == 1 || i == 3));
        assert!(drawn.contains(&1) && drawn.contains(&3));
        assert_eq!(drawn, (0..200).map(|_| b.draw(&probs)).collect::<Vec<_>>());
    }

    #[test]
    fn the_stream_is_chacha8_from_the_seed() {
        // rand_chacha 0.9's ChaCha8Rng::seed_from_u64(0), first two u64s, top 53 bits: pinned,
        // since a change of generator or of the mapping changes every sampled sequence.
        let mut sampler = Sampler::new(0);
        let drawn = [sampler.uniform(), sampler.uniform()];
        assert_eq!(drawn, [0.7090754154265618, 0.46592172228961015]);
    }

    #[test]
    fn greedy_settings_process_nothing() {
        assert!(Sampling::greedy().is_plain_argmax());
        assert!(!Sampling::sample().is_plain_argmax());
        let penalised = Sampling {
            repetition_penalty: 1.3,
            ..Sampling::greedy()
        };
        assert!(!penalised.is_plain_argmax());
        // Sampling-only settings do nothing without do_sample, as in transformers.
        let mut row = vec![1.0, 2.0, 3.0];
        Sampling {
            temperature: 0.5,
            top_k: 1,
            ..Sampling::greedy()
        }
        .process(&mut row, &[]);
        assert_eq!(row, vec![1.0, 2.0, 3.0]);
    }
}
