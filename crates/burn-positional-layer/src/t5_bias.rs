//! T5's relative position bias, from [Exploring the Limits of Transfer Learning with a Unified
//! Text-to-Text Transformer](https://arxiv.org/abs/1910.10683) (Raffel et al. 2020): the
//! distance from query to key falls in one of `num_buckets` buckets (exact for small distances,
//! log-spaced up to `max_distance`, one last bucket beyond), and each head learns one scalar per
//! bucket, added to its scores. Share one [`T5Bias`] across layers (as T5 does) by computing the
//! bias once and passing it to every block.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::tensor::module::embedding;
use burn::tensor::{Device, Int, Tensor, TensorData};

/// Configuration of [`T5Bias`].
#[derive(Config, Debug, PartialEq)]
pub struct T5BiasConfig {
    /// Number of attention heads (one learned scalar per head and bucket).
    pub n_heads: usize,
    /// Buckets (T5 uses 32).
    #[config(default = 32)]
    pub num_buckets: usize,
    /// Distances at or past this share the last bucket (T5 uses 128).
    #[config(default = 128)]
    pub max_distance: usize,
    /// Encoder style (keys before and after the query get different buckets) or decoder style
    /// (only keys before the query count).
    #[config(default = true)]
    pub bidirectional: bool,
    /// Initializer of the `[num_buckets, n_heads]` table.
    #[config(default = "Initializer::Normal { mean: 0.0, std: 0.02 }")]
    pub initializer: Initializer,
}

/// T5's bucketed relative bias. Built by [`T5BiasConfig::init`].
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_layer::T5BiasConfig;
///
/// let device = Device::flex();
/// let t5 = T5BiasConfig::new(8).init(&device);
/// assert_eq!(t5.bias(0, 6, 6).dims(), [1, 8, 6, 6]); // [1, n_heads, seq_q, seq_k]
/// ```
#[derive(Module, Debug)]
pub struct T5Bias {
    /// `[num_buckets, n_heads]`, trained and saved.
    pub table: Param<Tensor<2>>,
    /// Distances at or past this share the last bucket.
    pub max_distance: usize,
    /// Encoder or decoder style.
    pub bidirectional: bool,
}

/// T5's bucket of `relative_position = key_position - query_position`, transcribed from
/// `T5Attention._relative_position_bucket` (Hugging Face transformers, after Mesh TensorFlow):
/// the log is taken in f32, as there.
pub fn t5_bucket(
    relative_position: i64,
    bidirectional: bool,
    num_buckets: usize,
    max_distance: usize,
) -> usize {
    let mut num_buckets = num_buckets as i64;
    let mut bucket = 0i64;
    let mut n = relative_position;
    if bidirectional {
        num_buckets /= 2;
        if n > 0 {
            bucket += num_buckets;
        }
        n = n.abs();
    } else {
        n = -n.min(0);
    }
    let max_exact = num_buckets / 2;
    if n < max_exact {
        return (bucket + n) as usize;
    }
    let log_ratio =
        (n as f32 / max_exact as f32).ln() / (max_distance as f32 / max_exact as f32).ln();
    let large = max_exact + (log_ratio * (num_buckets - max_exact) as f32) as i64;
    (bucket + large.min(num_buckets - 1)) as usize
}

impl T5BiasConfig {
    /// Builds the table.
    ///
    /// # Panics
    ///
    /// If `num_buckets` is below 4 (two halves of at least two buckets for the bidirectional
    /// case) or `max_distance` does not exceed the exact range.
    pub fn init(&self, device: &Device) -> T5Bias {
        assert!(
            self.num_buckets >= 4,
            "num_buckets ({}) must be at least 4",
            self.num_buckets
        );
        assert!(
            self.max_distance > self.num_buckets / 2,
            "max_distance ({}) must exceed num_buckets / 2 ({})",
            self.max_distance,
            self.num_buckets / 2
        );
        T5Bias {
            table: self
                .initializer
                .init([self.num_buckets, self.n_heads], device),
            max_distance: self.max_distance,
            bidirectional: self.bidirectional,
        }
    }
}

impl T5Bias {
    /// Bucket ids `[seq_q, seq_k]` for queries at `offset..offset + seq_q` and keys at `0..seq_k`.
    pub fn buckets(&self, offset: usize, seq_q: usize, seq_k: usize) -> Tensor<2, Int> {
        let [num_buckets, _] = self.table.shape().dims();
        let ids: Vec<i64> = (offset..offset + seq_q)
            .flat_map(|i| (0..seq_k).map(move |j| j as i64 - i as i64))
            .map(|rel| t5_bucket(rel, self.bidirectional, num_buckets, self.max_distance) as i64)
            .collect();
        Tensor::from_data(TensorData::new(ids, [seq_q, seq_k]), &self.table.device())
    }

    /// The score bias for queries at positions `offset..offset + seq_q` against keys at
    /// `0..seq_k`; gradients flow into the table. No length limit: far distances share the
    /// last bucket.
    ///
    /// # Shapes
    ///
    /// - output: `[1, n_heads, seq_q, seq_k]`
    pub fn bias(&self, offset: usize, seq_q: usize, seq_k: usize) -> Tensor<4> {
        let buckets = self.buckets(offset, seq_q, seq_k); // [seq_q, seq_k]
        // Gather one row of head scalars per (query, key): [1, seq_q * seq_k, n_heads].
        let flat = buckets.reshape([1, seq_q * seq_k]);
        let [_, n_heads] = self.table.shape().dims();
        embedding(self.table.val(), flat)
            .reshape([seq_q, seq_k, n_heads])
            .permute([2, 0, 1])
            .unsqueeze::<4>()
    }
}
