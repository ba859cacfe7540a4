//! "Who bites whom?": a task that only order can solve.
//!
//! Sentences are `subject verb object` over a few nouns and verbs ("dog bites man", "man
//! bites dog", ...); the answer is the subject. Both nouns are in every sentence, so a model that
//! sees the words but not their order can do no better than pick one of the two: 50 % accuracy.
//! A model that knows positions learns "the first word bites" and reaches 100 %.

#[cfg(feature = "train")]
use burn::data::dataloader::batcher::Batcher;
use burn::prelude::*;

/// The nouns (answers are indices into this list).
pub const NOUNS: [&str; 8] = [
    "dog", "man", "cat", "child", "bird", "horse", "woman", "fox",
];
/// The verbs.
pub const VERBS: [&str; 6] = ["bites", "sees", "chases", "likes", "feeds", "follows"];

/// Words in token-id order: nouns first, then verbs.
pub fn vocabulary() -> Vec<&'static str> {
    NOUNS.iter().chain(VERBS.iter()).copied().collect()
}

/// The token id of `word`.
///
/// # Panics
///
/// If the word is not in the vocabulary.
pub fn token_id(word: &str) -> usize {
    vocabulary()
        .iter()
        .position(|w| *w == word)
        .unwrap_or_else(|| panic!("{word:?} is not in the vocabulary {:?}", vocabulary()))
}

/// One sentence: three token ids and the index of its subject noun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sentence {
    /// `[subject, verb, object]` as token ids.
    pub ids: [usize; 3],
    /// The answer: the subject's index in [`NOUNS`].
    pub subject: usize,
}

impl Sentence {
    /// The sentence as text.
    pub fn text(&self) -> String {
        let vocab = vocabulary();
        self.ids.map(|id| vocab[id]).join(" ")
    }
}

/// Every sentence with two different nouns, split into train and held-out sets.
///
/// The split keeps each sentence with its reverse ("dog bites man" with "man bites dog"): a
/// seeded shuffle of these pairs puts every `holdout_every`-th pair in the held-out set. A model
/// blind to order gives a sentence and its reverse the same answer, so on either set it can be
/// right for at most half of them: chance is 50 %.
pub fn split(seed: u64, holdout_every: usize) -> (Vec<Sentence>, Vec<Sentence>) {
    let n = NOUNS.len();
    let mut pairs = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            for v in 0..VERBS.len() {
                let verb = n + v;
                pairs.push([
                    Sentence {
                        ids: [a, verb, b],
                        subject: a,
                    },
                    Sentence {
                        ids: [b, verb, a],
                        subject: b,
                    },
                ]);
            }
        }
    }
    // Fisher-Yates with a 64-bit LCG: the same split on every machine.
    let mut state = seed;
    for i in (1..pairs.len()).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        pairs.swap(i, (state >> 33) as usize % (i + 1));
    }
    let (mut train, mut held_out) = (Vec::new(), Vec::new());
    for (i, pair) in pairs.into_iter().enumerate() {
        if i % holdout_every == 0 {
            held_out.extend(pair)
        } else {
            train.extend(pair)
        }
    }
    (train, held_out)
}

/// Token ids `[n, 3]` and answers `[n]` of a set of sentences.
pub fn batch(sentences: &[Sentence], device: &Device) -> (Tensor<2, Int>, Tensor<1, Int>) {
    let n = sentences.len();
    let ids: Vec<i64> = sentences
        .iter()
        .flat_map(|s| s.ids.map(|id| id as i64))
        .collect();
    let answers: Vec<i64> = sentences.iter().map(|s| s.subject as i64).collect();
    (
        Tensor::from_data(TensorData::new(ids, [n, 3]), device),
        Tensor::from_data(TensorData::new(answers, [n]), device),
    )
}

/// A batch of sentences for burn-train: token ids and the subjects to name.
#[derive(Debug, Clone)]
pub struct SentenceBatch {
    /// `[batch, 3]`.
    pub ids: Tensor<2, Int>,
    /// `[batch]`: each sentence's subject, an index in [`NOUNS`].
    pub answers: Tensor<1, Int>,
}

/// Stacks [`Sentence`]s into a [`SentenceBatch`] on the loader's device; with burn's
/// `InMemDataset::new(split(..).0)` it feeds burn-train's data loaders.
/// (The `train` feature: burn's data loaders come with burn-train.)
#[cfg(feature = "train")]
#[derive(Debug, Clone, Copy, Default)]
pub struct SentenceBatcher;

#[cfg(feature = "train")]
impl Batcher<Sentence, SentenceBatch> for SentenceBatcher {
    fn batch(&self, items: Vec<Sentence>, device: &Device) -> SentenceBatch {
        let (ids, answers) = batch(&items, device);
        SentenceBatch { ids, answers }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sentence_once_and_both_orders_present() {
        let (train, held_out) = split(7, 5);
        assert_eq!(train.len() + held_out.len(), 8 * 7 * 6);
        let dog_bites_man = Sentence {
            ids: [token_id("dog"), token_id("bites"), token_id("man")],
            subject: 0,
        };
        assert_eq!(dog_bites_man.text(), "dog bites man");
        let man_bites_dog = Sentence {
            ids: [token_id("man"), token_id("bites"), token_id("dog")],
            subject: 1,
        };
        // A sentence and its reverse are on the same side of the split.
        assert_eq!(
            train.contains(&dog_bites_man),
            train.contains(&man_bites_dog)
        );
        assert_eq!(
            held_out.contains(&dog_bites_man),
            held_out.contains(&man_bites_dog)
        );
    }
}
