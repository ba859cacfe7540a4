//! "Copy the token `k` places back": at every position `i >= k`, predict the token at `i - k`.
//!
//! The task is made of position and nothing else. The answer at position `i` is whichever
//! token sits `k` places earlier, so a model must know where tokens are relative to each other.
//! Without positions every copy of a token sees the same bag of tokens and gets the same
//! prediction, so accuracy stays near chance (`1 / vocab_size`, a little more when a token
//! repeats). With learned positions the model must learn, for each position, which position is
//! `k` back; with sinusoidal positions the shift by `k` is one fixed rotation (the properties a good encoding needs:
//! "relative-aware").

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::{Dataset, DatasetError};
use burn::prelude::*;

use crate::rng::SplitMix64;

/// The task's sizes.
#[derive(Config, Debug, PartialEq)]
pub struct CopyBackConfig {
    /// Tokens are drawn uniformly from `0..vocab_size`.
    #[config(default = 16)]
    pub vocab_size: usize,
    /// Tokens per sequence.
    #[config(default = 32)]
    pub seq: usize,
    /// How far back to copy from.
    #[config(default = 3)]
    pub k: usize,
}

/// One batch: token ids `[batch, seq]` and the answers `[batch, seq - k]` for positions `k..seq`.
#[derive(Debug, Clone)]
pub struct CopyBackBatch {
    /// `[batch, seq]`.
    pub ids: Tensor<2, Int>,
    /// `[batch, seq - k]`: answer `j` is for position `k + j`, and equals `ids[j]`.
    pub answers: Tensor<2, Int>,
}

impl CopyBackConfig {
    /// A batch drawn from `seed`: the same seed gives the same batch on every device.
    ///
    /// # Panics
    ///
    /// If `k >= seq`.
    pub fn batch(&self, batch: usize, seq: usize, seed: u64, device: &Device) -> CopyBackBatch {
        assert!(self.k < seq, "k ({}) must be below seq ({seq})", self.k);
        let ids = tokens(seed, batch * seq, self.vocab_size);
        let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [batch, seq]), device);
        let answers = ids.clone().slice([0..batch, 0..seq - self.k]);
        CopyBackBatch { ids, answers }
    }
}

/// SplitMix64 from `seed`: `n` tokens in `0..vocab_size`, the same on every machine.
fn tokens(seed: u64, n: usize, vocab_size: usize) -> Vec<i64> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|_| rng.below(vocab_size as u64) as i64)
        .collect()
}

/// The task as a burn [`Dataset`], for burn-train's data loaders: item `i` is one sequence of
/// `task.seq` tokens drawn from `seed` and `i` alone, so any slice of the dataset (burn's
/// multi-device split hands each worker one) holds the same sequences on every machine.
#[derive(Debug, Clone)]
pub struct CopyBackDataset {
    /// The task.
    pub task: CopyBackConfig,
    /// Sequences.
    pub len: usize,
    /// Seed of the whole set.
    pub seed: u64,
}

impl Dataset<Vec<i64>> for CopyBackDataset {
    /// # Panics
    ///
    /// If `index >= len` (burn's `Dataset` convention).
    fn get(&self, index: usize) -> Result<Vec<i64>, DatasetError> {
        assert!(
            index < self.len,
            "index {index} is past the dataset's {} sequences",
            self.len
        );
        let seed = self
            .seed
            .wrapping_mul(0x2545_F491_4F6C_DD1D)
            .wrapping_add(index as u64);
        Ok(tokens(seed, self.task.seq, self.task.vocab_size))
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// Stacks sequences of equal length into a [`CopyBackBatch`] on the loader's device.
#[derive(Debug, Clone, Copy)]
pub struct CopyBackBatcher {
    /// How far back to copy from (the answers are the ids shifted by `k`).
    pub k: usize,
}

impl Batcher<Vec<i64>, CopyBackBatch> for CopyBackBatcher {
    /// # Panics
    ///
    /// If the sequences differ in length or are not longer than `k`.
    fn batch(&self, items: Vec<Vec<i64>>, device: &Device) -> CopyBackBatch {
        let batch = items.len();
        let seq = items.first().map_or(0, Vec::len);
        assert!(
            items.iter().all(|item| item.len() == seq),
            "every sequence of a batch must have {seq} tokens"
        );
        assert!(self.k < seq, "k ({}) must be below seq ({seq})", self.k);
        let ids =
            Tensor::<2, Int>::from_data(TensorData::new(items.concat(), [batch, seq]), device);
        let answers = ids.clone().slice([0..batch, 0..seq - self.k]);
        CopyBackBatch { ids, answers }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_items_are_fixed_by_seed_and_index_and_the_batcher_shifts_by_k() {
        let task = CopyBackConfig::new()
            .with_vocab_size(5)
            .with_seq(9)
            .with_k(3);
        let dataset = CopyBackDataset {
            task: task.clone(),
            len: 4,
            seed: 1,
        };
        assert_eq!(dataset.len(), 4);
        let items: Vec<Vec<i64>> = (0..4).map(|i| dataset.get(i).unwrap()).collect();
        assert_eq!(
            items[2],
            dataset.get(2).unwrap(),
            "an item is a function of its index"
        );
        assert_ne!(items[0], items[1]);
        assert!(items.iter().flatten().all(|&t| (0..5).contains(&t)));
        assert!(items.iter().all(|item| item.len() == 9));

        let device = Device::flex();
        let batch = CopyBackBatcher { k: 3 }.batch(items.clone(), &device);
        assert_eq!(batch.ids.dims(), [4, 9]);
        assert_eq!(batch.answers.dims(), [4, 6]);
        let answers: Vec<i64> = batch.answers.into_data().iter::<i64>().collect();
        for (row, item) in items.iter().enumerate() {
            // The answer for position 3 + j is the token at j.
            assert_eq!(&answers[row * 6..(row + 1) * 6], &item[..6]);
        }
    }
}
