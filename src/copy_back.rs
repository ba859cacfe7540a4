//! "Copy the token `k` places back": at every position `i >= k`, predict the token at `i - k`.
//!
//! The task is made of position and nothing else. The answer at position `i` is whichever
//! token sits `k` places earlier, so a model must know where tokens are relative to each other.
//! Without positions every copy of a token sees the same bag of tokens and gets the same
//! prediction, so accuracy stays near chance (`1 / vocab_size`, a little more when a token
//! repeats). With learned positions the model must learn, for each position, which position is
//! `k` back; with sinusoidal positions the shift by `k` is one fixed rotation (seed 002's
//! "relative-aware").

use burn::prelude::*;

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
        // SplitMix64: a fixed stream per seed.
        let mut state = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut next = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let ids: Vec<i64> = (0..batch * seq)
            .map(|_| (next() % self.vocab_size as u64) as i64)
            .collect();
        let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [batch, seq]), device);
        let answers = ids.clone().slice([0..batch, 0..seq - self.k]);
        CopyBackBatch { ids, answers }
    }
}
