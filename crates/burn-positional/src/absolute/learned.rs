//! Learned absolute positions: a trainable `[max_len, d_position]` table, one row per
//! position, as in BERT ([Devlin et al. 2019](https://arxiv.org/abs/1810.04805)) and GPT
//! ([Radford et al. 2018](https://cdn.openai.com/research-covers/language-unsupervised/language_understanding_paper.pdf)).
//!
//! The table has no row past `max_len - 1`; asking for one is an error, never a silent read.

use crate::training::materialize;
use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay, Param};
use burn::nn::Initializer;
use burn::tensor::module::embedding;
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::{SinusoidalConfig, sinusoid_rows};
use crate::PositionError;
use crate::limits::table_fits;

/// How a learned table starts.
#[derive(Config, Debug, PartialEq)]
pub enum LearnedInit {
    /// Drawn from an initializer (BERT and GPT-2 use `N(0, 0.02)`).
    Random(Initializer),
    /// The sinusoidal table with this base (10 000 in the paper), then trained: a learned
    /// table that starts smooth and relative-aware.
    Sinusoidal {
        /// The wavelength base.
        base: f64,
    },
}

/// Configuration of a learned position table. Its width comes from the embedding it belongs to.
#[derive(Config, Debug, PartialEq)]
pub struct LearnedConfig {
    /// Rows in the table: the longest sequence (or largest position + 1) it can embed.
    pub max_len: usize,
    /// How the table starts. `N(0, 0.02)` by default, the initialization of BERT and GPT-2.
    #[config(default = "LearnedInit::Random(Initializer::Normal { mean: 0.0, std: 0.02 })")]
    pub init: LearnedInit,
}

/// A trainable table of position vectors. Built by [`LearnedConfig::init`].
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::LearnedConfig;
///
/// let device = Device::flex();
/// let table = LearnedConfig::new(128).init(32, &device);
/// assert_eq!(table.rows(10, 20).dims(), [20, 32]);
/// assert!(table.check(127).is_ok());
/// assert!(table.check(128).is_err()); // no row 128: a clear error, never a stray read
/// ```
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct LearnedPosition {
    /// `[max_len, d_position]`, trained and saved.
    pub table: Param<Tensor<2>>,
}

impl ModuleDisplay for LearnedPosition {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new()
            .with_new_line_after_attribute(false)
            .optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        let [max_len, d_position] = self.table.shape().dims();
        content
            .add("max_len", &max_len)
            .add("d_position", &d_position)
            .optional()
    }
}

impl LearnedConfig {
    /// Checks the config for a table `d_position` wide.
    pub fn validate(&self, d_position: usize) -> Result<(), PositionError> {
        if self.max_len == 0 {
            return Err(PositionError::InvalidConfig {
                field: "LearnedConfig::max_len",
                value: "0".into(),
                rule: "a learned table needs at least one row",
                fix: "set max_len to the longest sequence the model will see".into(),
            });
        }
        table_fits("LearnedConfig::max_len", self.max_len, d_position, || {
            "set max_len to the longest sequence the model will see".into()
        })?;
        if let LearnedInit::Sinusoidal { base } = self.init {
            SinusoidalConfig::new()
                .with_base(base)
                .validate(d_position)?;
        }
        Ok(())
    }

    /// Builds the table with `d_position` columns.
    ///
    /// # Panics
    ///
    /// If `max_len` is 0, or the table starts sinusoidal and `d_position` is odd.
    pub fn init(&self, d_position: usize, device: &Device) -> LearnedPosition {
        if let Err(err) = self.validate(d_position) {
            panic!("{err}");
        }
        let table = match &self.init {
            LearnedInit::Random(initializer) => {
                initializer.init([self.max_len, d_position], device)
            }
            LearnedInit::Sinusoidal { base } => {
                let rows = sinusoid_rows(0..self.max_len as u64, d_position, *base);
                Param::from_data(TensorData::new(rows, [self.max_len, d_position]), device)
            }
        };
        materialize(LearnedPosition { table })
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
                at: None,
                max_len,
                needed: (max_position as usize).saturating_add(1),
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
