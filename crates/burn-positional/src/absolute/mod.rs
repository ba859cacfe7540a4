//! The absolute family of position schemes: what [`EmbeddingWithPosition`](crate::EmbeddingWithPosition)
//! adds to (or concatenates with) the token vectors.
//!
//! | scheme | paper | table | past its range |
//! | --- | --- | --- | --- |
//! | [`None`](AbsolutePositionConfig::None) | — | — | nothing to run out of |
//! | [`Sinusoidal`](AbsolutePositionConfig::Sinusoidal) | Vaswani et al. 2017 | computed | up to a bounded `max_len`, f64-accurate; past it a clear error |
//! | [`Learned`](AbsolutePositionConfig::Learned) | BERT, GPT | trained `[max_len, d]` | a clear error |
//!
//! On a grid of patches (images, video), [`AbsolutePosition::on_grid`] gives each patch its
//! vector: MAE's 2D sin-cos for the sinusoidal scheme, the trained grid resized as PyTorch's
//! `interpolate` resizes it for a learned patch grid ([`PatchGridConfig`]); see `grid.rs`.
//!
//! Schemes that act on attention rather than on the embedding live in [`rotary`](crate::rotary)
//! and [`score_bias`](crate::score_bias); for them the embedding's scheme is `None`.

use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay};
use burn::tensor::{DType, Device, Int, Tensor};
use burn_positional_kernels::FusedEmbeddingError;

mod grid;
mod learned;
mod sinusoidal;

pub use grid::{GridResize, PatchGridConfig, ResizeMode, resize_weights, sincos_grid_rows};

pub use learned::{LearnedConfig, LearnedInit, LearnedPosition};
pub use sinusoidal::{SinusoidalConfig, SinusoidalPosition, sinusoid_frequencies, sinusoid_rows};

use crate::{Grid, PositionError, Positions};

/// Which absolute position scheme an embedding uses.
#[derive(Config, Debug, PartialEq)]
pub enum AbsolutePositionConfig {
    /// No absolute position: the output is the token vectors alone. The choice for models
    /// whose positions live in attention (rotary, ALiBi, T5 biases), and for showing what
    /// attention does without positions.
    None,
    /// Fixed sines and cosines (Vaswani et al. 2017).
    Sinusoidal(SinusoidalConfig),
    /// A trained table (BERT, GPT).
    Learned(LearnedConfig),
}

impl From<SinusoidalConfig> for AbsolutePositionConfig {
    fn from(config: SinusoidalConfig) -> Self {
        Self::Sinusoidal(config)
    }
}

impl From<LearnedConfig> for AbsolutePositionConfig {
    fn from(config: LearnedConfig) -> Self {
        Self::Learned(config)
    }
}

impl AbsolutePositionConfig {
    /// Checks the scheme for a position part `d_position` wide.
    pub fn validate(&self, d_position: usize) -> Result<(), PositionError> {
        match self {
            Self::None => Ok(()),
            Self::Sinusoidal(config) => config.validate(d_position),
            Self::Learned(config) => config.validate(d_position),
        }
    }

    /// Checks the scheme ([`validate`](Self::validate)) and that `device` can hold its table,
    /// then builds it with `d_position` columns.
    pub fn try_init(
        &self,
        d_position: usize,
        device: &Device,
    ) -> Result<AbsolutePosition, PositionError> {
        Ok(match self {
            Self::None => AbsolutePosition::None(NoPosition {}),
            Self::Sinusoidal(config) => {
                AbsolutePosition::Sinusoidal(config.try_init(d_position, device)?)
            }
            Self::Learned(config) => {
                AbsolutePosition::Learned(config.try_init(d_position, device)?)
            }
        })
    }

    /// Builds the scheme with `d_position` columns.
    ///
    /// # Panics
    ///
    /// If [`try_init`](Self::try_init) fails, with its message.
    pub fn init(&self, d_position: usize, device: &Device) -> AbsolutePosition {
        self.try_init(d_position, device)
            .unwrap_or_else(|err| panic!("{err}"))
    }
}

/// The `None` scheme: no vectors, no parameters.
#[derive(Module, Debug, Default)]
pub struct NoPosition {}

/// An initialized absolute scheme, one signature for all of them: rows by offset, or rows at
/// explicit positions.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::{LearnedConfig, AbsolutePositionConfig, SinusoidalConfig};
///
/// let device = Device::flex();
/// for scheme in [SinusoidalConfig::new().into(), LearnedConfig::new(64).into()] {
///     let position = AbsolutePositionConfig::init(&scheme, 16, &device);
///     assert_eq!(position.vectors(8..12).unwrap().unwrap().dims(), [4, 16]);
/// }
/// assert!(AbsolutePositionConfig::None.init(16, &device).vectors(0..4).unwrap().is_none());
/// ```
// One per model, matched on every forward: boxing the large variant buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
#[module(custom_display)]
pub enum AbsolutePosition {
    /// No position vectors.
    None(NoPosition),
    /// See [`SinusoidalPosition`].
    Sinusoidal(SinusoidalPosition),
    /// See [`LearnedPosition`].
    Learned(LearnedPosition),
}

impl ModuleDisplay for AbsolutePosition {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new()
            .with_new_line_after_attribute(false)
            .optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        // The scheme's own module says the rest.
        match self {
            Self::None(_) => content.set_top_level_type("None").optional(),
            Self::Sinusoidal(table) => {
                table.custom_content(content.set_top_level_type("SinusoidalPosition"))
            }
            Self::Learned(table) => {
                table.custom_content(content.set_top_level_type("LearnedPosition"))
            }
        }
    }
}

/// What the embedding asks of its scheme: the one place a new absolute scheme answers it.
impl AbsolutePosition {
    /// The table the fused pass reads, in `dtype` (a learned table in its own), or `None` for
    /// `None`. Explicit positions see `explicit_rows` rows where the scheme grows (`None`: as
    /// many as a forward that does not read them sees; see
    /// [`SinusoidalPosition::unread_rows`]). No read.
    pub(crate) fn fused_table(
        &self,
        positions: &Positions,
        seq: usize,
        dtype: DType,
        explicit_rows: Option<usize>,
    ) -> Option<Tensor<2>> {
        match self {
            Self::None(_) => None,
            Self::Learned(table) => Some(table.table.val()),
            Self::Sinusoidal(table) => {
                Some(table.fused_table(positions, seq, dtype, explicit_rows))
            }
        }
    }

    /// For explicit positions up to `max_position` that passed the fused pass's table: the rows
    /// to run again with, where the scheme can grow to them (`Ok(None)` where it cannot, a
    /// learned table), or the error past its limit.
    pub(crate) fn grow_to(&self, max_position: i64) -> Result<Option<usize>, PositionError> {
        match self {
            Self::Sinusoidal(table) => {
                table.check(max_position)?;
                Ok(Some(max_position as usize + 1))
            }
            Self::None(_) | Self::Learned(_) => Ok(None),
        }
    }

    /// The kernels' error in the scheme's words (a table's limit and its fix depend on it).
    pub(crate) fn name_error(&self, err: FusedEmbeddingError) -> PositionError {
        match (err, self) {
            (
                FusedEmbeddingError::PositionPastTable {
                    position,
                    at,
                    max_len,
                },
                Self::Sinusoidal(table),
            ) => PositionError::PositionPastSinusoidTable {
                position,
                at,
                table_len: max_len,
                needed: position as usize + 1,
                max_len: table.max_len(),
            },
            (err, _) => err.into(),
        }
    }

    /// The dtype of a trained table, which must be the token table's (`None`: no trained table).
    pub(crate) fn trained_dtype(&self) -> Option<DType> {
        match self {
            Self::Learned(table) => Some(table.table.val().dtype()),
            Self::None(_) | Self::Sinusoidal(_) => None,
        }
    }

    /// The position vectors at `positions` (`None` for the `None` scheme), or the error for a
    /// range the scheme has no vectors for (past a learned table's `max_len`, past the
    /// sinusoidal limit), before anything is allocated.
    ///
    /// # Shapes
    ///
    /// - output: `[positions.len(), d_position]`
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{LearnedConfig, PositionError, AbsolutePositionConfig};
    ///
    /// let device = Device::flex();
    /// let learned = AbsolutePositionConfig::from(LearnedConfig::new(32)).init(8, &device);
    /// assert_eq!(learned.vectors(24..32).unwrap().unwrap().dims(), [8, 8]);
    /// let err = learned.vectors(30..38).unwrap_err();
    /// assert_eq!(
    ///     err,
    ///     PositionError::PositionPastTable { position: 32, at: None, max_len: 32, needed: 38 }
    /// );
    /// ```
    pub fn vectors(
        &self,
        positions: std::ops::Range<usize>,
    ) -> Result<Option<Tensor<2>>, PositionError> {
        let seq = positions.len();
        self.check_window(positions.start, seq)?;
        Ok(self.rows(positions.start, seq))
    }

    /// The position vectors of a grid's tokens, row-major (`None` for the `None` scheme):
    /// MAE's 2D sin-cos for the sinusoidal scheme
    /// ([`SinusoidalPosition::on_grid`]), the trained grid resized to `grid` for a learned
    /// patch grid ([`LearnedPosition::on_grid`]).
    ///
    /// # Shapes
    ///
    /// - output: `[grid.len(), d_position]`
    ///
    /// # Errors
    ///
    /// What the scheme refuses: a learned table without a patch-grid layout, a grid with
    /// another number of axes, a width MAE's table cannot split.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{AbsolutePositionConfig, Grid, SinusoidalConfig};
    ///
    /// let device = Device::flex();
    /// let scheme = AbsolutePositionConfig::from(SinusoidalConfig::new()).init(32, &device);
    /// let patches = scheme.on_grid(&Grid::new([7, 7])).unwrap().unwrap();
    /// assert_eq!(patches.dims(), [49, 32]);
    /// ```
    pub fn on_grid(&self, grid: &Grid) -> Result<Option<Tensor<2>>, PositionError> {
        Ok(match self {
            Self::None(_) => None,
            Self::Sinusoidal(table) => Some(table.on_grid(grid)?),
            Self::Learned(table) => Some(table.on_grid(grid)?),
        })
    }

    /// Refuses positions the scheme has no vector for. `max_position` is the largest one asked.
    pub(crate) fn check(&self, max_position: i64) -> Result<(), PositionError> {
        match self {
            Self::Learned(table) => table.check(max_position),
            Self::Sinusoidal(table) => table.check(max_position),
            Self::None(_) => Ok(()),
        }
    }

    /// Refuses the window `offset..offset + seq` if the scheme has no vector for part of it,
    /// with no read and no allocation: the error names the first position without a vector and
    /// the limit that would hold the whole window (`offset + seq`).
    pub(crate) fn check_window(&self, offset: usize, seq: usize) -> Result<(), PositionError> {
        let limit = match self {
            Self::None(_) => return Ok(()),
            Self::Learned(table) => table.max_len(),
            Self::Sinusoidal(table) => table.max_len(),
        };
        let needed = offset.saturating_add(seq);
        if seq == 0 || needed <= limit {
            return Ok(());
        }
        let position = i64::try_from(offset.max(limit)).unwrap_or(i64::MAX);
        Err(match self {
            Self::Learned(_) => PositionError::PositionPastTable {
                position,
                at: None,
                max_len: limit,
                needed,
            },
            _ => PositionError::PositionPastSinusoidLimit {
                position,
                max_len: limit,
                needed,
            },
        })
    }

    /// Position vectors for `offset..offset + seq`, or `None` for the `None` scheme.
    ///
    /// # Shapes
    ///
    /// - output: `[seq, d_position]`
    pub(crate) fn rows(&self, offset: usize, seq: usize) -> Option<Tensor<2>> {
        match self {
            Self::None(_) => None,
            Self::Sinusoidal(table) => Some(table.rows(offset, seq)),
            Self::Learned(table) => Some(table.rows(offset, seq)),
        }
    }

    /// Position vectors at explicit positions (already checked), or `None` for `None`.
    ///
    /// # Shapes
    ///
    /// - positions: `[batch, seq]`
    /// - output: `[batch, seq, d_position]`
    pub(crate) fn gather(
        &self,
        positions: Tensor<2, Int>,
        max_position: usize,
    ) -> Option<Tensor<3>> {
        match self {
            Self::None(_) => None,
            Self::Sinusoidal(table) => Some(table.gather(positions, max_position)),
            Self::Learned(table) => Some(table.gather(positions)),
        }
    }
}
