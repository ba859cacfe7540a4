//! Learned absolute positions: a trainable `[max_len, d_position]` table, one row per
//! position, as in BERT ([Devlin et al. 2019](https://arxiv.org/abs/1810.04805)) and GPT
//! ([Radford et al. 2018](https://cdn.openai.com/research-covers/language-unsupervised/language_understanding_paper.pdf)).
//!
//! The table has no row past `max_len - 1`; asking for one is an error, never a silent read.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::tensor::module::embedding;
use burn::tensor::{Device, Int, Tensor};

use crate::PositionError;

/// Configuration of a learned position table. Its width comes from the embedding it belongs to.
#[derive(Config, Debug, PartialEq)]
pub struct LearnedConfig {
    /// Rows in the table: the longest sequence (or largest position + 1) it can embed.
    pub max_len: usize,
    /// How the table starts. `N(0, 0.02)` by default, the initialization of BERT and GPT-2.
    #[config(default = "Initializer::Normal { mean: 0.0, std: 0.02 }")]
    pub initializer: Initializer,
}

/// A trainable table of position vectors. Built by [`LearnedConfig::init`].
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_layer::LearnedConfig;
///
/// let device = Device::flex();
/// let table = LearnedConfig::new(128).init(32, &device);
/// assert_eq!(table.rows(10, 20).dims(), [20, 32]);
/// assert!(table.check(127).is_ok());
/// assert!(table.check(128).is_err()); // no row 128: a clear error, never a stray read
/// ```
#[derive(Module, Debug)]
pub struct LearnedPosition {
    /// `[max_len, d_position]`, trained and saved.
    pub table: Param<Tensor<2>>,
}

impl LearnedConfig {
    /// Checks the config.
    pub fn validate(&self) -> Result<(), PositionError> {
        if self.max_len == 0 {
            return Err(PositionError::InvalidConfig {
                field: "LearnedConfig::max_len",
                value: "0".into(),
                rule: "a learned table needs at least one row",
                fix: "set max_len to the longest sequence the model will see".into(),
            });
        }
        Ok(())
    }

    /// Builds the table with `d_position` columns.
    ///
    /// # Panics
    ///
    /// If `max_len` is 0.
    pub fn init(&self, d_position: usize, device: &Device) -> LearnedPosition {
        if let Err(err) = self.validate() {
            panic!("{err}");
        }
        LearnedPosition {
            table: self.initializer.init([self.max_len, d_position], device),
        }
    }
}

impl LearnedPosition {
    /// The number of rows.
    pub fn max_len(&self) -> usize {
        self.table.shape().dims::<2>()[0]
    }

    /// Refuses a largest position that has no row.
    pub fn check(&self, max_position: i64) -> Result<(), PositionError> {
        let max_len = self.max_len();
        if max_position >= max_len as i64 {
            return Err(PositionError::PositionPastTable {
                position: max_position,
                max_len,
                needed: max_position as usize + 1,
            });
        }
        Ok(())
    }

    /// Rows `offset..offset + seq`, already checked to exist.
    ///
    /// # Panics
    ///
    /// If `offset + seq > max_len` (call [`check`](Self::check) first).
    ///
    /// # Shapes
    ///
    /// - output: `[seq, d_position]`
    pub fn rows(&self, offset: usize, seq: usize) -> Tensor<2> {
        let [_, d_position] = self.table.shape().dims();
        self.table
            .val()
            .slice([offset..offset + seq, 0..d_position])
    }

    /// The rows at explicit positions, already checked to exist. Unchecked here: on wgpu a
    /// position past the table would read stray data, so call [`check`](Self::check) first.
    ///
    /// # Shapes
    ///
    /// - positions: `[batch, seq]`
    /// - output: `[batch, seq, d_position]`
    pub fn gather(&self, positions: Tensor<2, Int>) -> Tensor<3> {
        embedding(self.table.val(), positions)
    }
}
