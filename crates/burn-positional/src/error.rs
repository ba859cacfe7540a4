//! The layer's error type for input that comes from outside the program: token ids from a
//! tokenizer, position ids from a batcher, a config, a saved record. Two readers of files have
//! error types of their own, for what only they can find wrong: [`HfConfigError`](crate::HfConfigError)
//! (a `config.json`) and `pretrained::PretrainedError` (a checkpoint). The kernels crate's
//! `FusedEmbeddingError` is converted into this type before a user sees it.
//!
//! Each message names the offending value, the limit it broke and the fix. The panicking
//! entry points (`init`, `forward`, ...) panic with the same message, so a programming error
//! reads the same as a data error.
//!
//! The variants that come from one token name its place as the kernels do:
//! `at: [batch, index]`, its batch row and its index along `seq` (an `Option` where a check
//! that sees only a window or a largest value has no single token to name).

use burn_positional_kernels::{FusedEmbeddingError, GridError};
use thiserror::Error;

/// Why a config, an input or a record was refused.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum PositionError {
    /// A token id is negative or not below the vocabulary size.
    #[error(
        "token id {id} at [batch {batch}, index {index}] is out of range: the vocabulary has \
         {vocab_size} tokens, so ids must be in 0..{vocab_size}. Fix: set `vocab_size` to the \
         tokenizer's vocabulary size, or map unknown tokens to an <unk> id below {vocab_size}",
        batch = .at[0],
        index = .at[1]
    )]
    TokenIdOutOfRange {
        /// The offending id.
        id: i64,
        /// Its place: `[batch, index along seq]`.
        at: [usize; 2],
        /// The number of rows in the token table.
        vocab_size: usize,
    },

    /// A position is at or past the end of a learned position table. `position` is the first
    /// position without a row, `needed` the `max_len` that would hold the whole input (for an
    /// offset, the window `offset..offset + seq`).
    #[error(
        "position {position}{place} is past the learned position table, which has max_len = \
         {max_len} rows (positions must be in 0..{max_len}). Fix: raise `LearnedConfig::max_len` \
         to at least {needed}, split the sequence into windows of at most {max_len} tokens, or \
         use a scheme with no length limit (sinusoidal)",
        place = place(.at)
    )]
    PositionPastTable {
        /// The first position without a row.
        position: i64,
        /// Its place, `[batch, index along seq]`, when one token holds it; `None` when the
        /// check saw only a window (`offset..offset + seq`) or the largest position.
        at: Option<[usize; 2]>,
        /// The number of rows in the learned table.
        max_len: usize,
        /// The `max_len` that would hold this input.
        needed: usize,
    },

    /// An explicit position is past the sinusoidal table on the device, in a forward that reads
    /// nothing back and so cannot grow the table to it. The fix named depends on `max_len`: a
    /// position past it needs `max_len` raised too (`try_forward` refuses it as well).
    #[error(
        "position {position} at [batch {batch}, index {index}] is past the sinusoidal table on \
         the device ({table_len} rows), and `forward` does not read positions back to grow it. \
         Fix: {fix}",
        batch = .at[0],
        index = .at[1],
        fix = sinusoid_table_fix(.needed, .max_len)
    )]
    PositionPastSinusoidTable {
        /// The offending position.
        position: i64,
        /// Its place: `[batch, index along seq]`.
        at: [usize; 2],
        /// Rows of the device table.
        table_len: usize,
        /// The `cache_len` that would hold it.
        needed: usize,
        /// The most rows the table grows to ([`SinusoidalConfig::max_len`](crate::SinusoidalConfig::max_len)).
        max_len: usize,
    },

    /// A position at or past the most rows the sinusoidal table grows to.
    #[error(
        "position {position} is past the sinusoidal table's limit, max_len = {max_len} rows \
         (positions must be in 0..{max_len}; the limit keeps the device table bounded). Fix: \
         raise `SinusoidalConfig::max_len` to at least {needed} (a table of {needed} x d_position \
         values on the device), or restart positions from 0 (a window of the sequence)"
    )]
    PositionPastSinusoidLimit {
        /// The first position past the limit.
        position: i64,
        /// The limit, in rows.
        max_len: usize,
        /// The `max_len` that would hold this input.
        needed: usize,
    },

    /// A table larger than the largest buffer the device allocates in one piece.
    #[error(
        "`{field}` = {rows} sizes a table of {rows} x {cols} values ({bytes} bytes), past the \
         largest buffer this device allocates ({limit} bytes). Fix: {fix}"
    )]
    TableTooLargeForDevice {
        /// The config field that sizes the table.
        field: &'static str,
        /// Its rows.
        rows: usize,
        /// Its columns.
        cols: usize,
        /// Its size in the device's float dtype.
        bytes: u64,
        /// The device's largest buffer, in bytes.
        limit: u64,
        /// What to change.
        fix: String,
    },

    /// An offset whose positions pass the kernels' 32-bit position arithmetic.
    #[error(
        "offset {offset} with {seq} tokens passes position {limit}, the largest the kernels \
         compute with. Fix: restart positions from 0 (a window of the sequence), or use explicit \
         positions below {limit}"
    )]
    OffsetTooLarge {
        /// The offset.
        offset: usize,
        /// Tokens per row.
        seq: usize,
        /// The largest position (`i32::MAX`).
        limit: i64,
    },

    /// Forwards older than the ones kept in full detail had bad input.
    #[error(
        "{tokens} tokens with an id or position out of range in forwards older than the last \
         {kept} (their outputs were NaN); {forwards} forwards were folded into that count. Fix: \
         call `check_inputs` at least every {kept} forwards to name the offending value, or \
         validate input with `try_forward`"
    )]
    BadInputInOlderForwards {
        /// Bad tokens counted.
        tokens: usize,
        /// Forwards folded into the count.
        forwards: usize,
        /// Forwards kept with full detail.
        kept: usize,
    },

    /// An explicit position id is negative.
    #[error(
        "position id {position} at [batch {batch}, index {index}] is negative: positions count \
         from 0. Fix: build position ids from 0 (for left-padded batches, give padding slots \
         position 0)",
        batch = .at[0],
        index = .at[1]
    )]
    NegativePosition {
        /// The offending position id.
        position: i64,
        /// Its place: `[batch, index along seq]`.
        at: [usize; 2],
    },

    /// A scheme that pairs sines with cosines got an odd width.
    #[error(
        "{what} is {value}, but the sinusoidal scheme pairs a sine with a cosine per frequency, \
         so it needs an even width. Fix: use {lower} or {upper}"
    )]
    OddDimension {
        /// Which width (for example `d_model` or `d_position`).
        what: &'static str,
        /// The odd value.
        value: usize,
        /// The even value below.
        lower: usize,
        /// The even value above.
        upper: usize,
    },

    /// The two parts of a concatenation do not add up to `d_model`.
    #[error(
        "concatenation sizes do not add up: d_token ({d_token}) + d_position ({d_position}) = \
         {sum}, but d_model is {d_model}. Fix: choose d_token + d_position = {d_model}, for \
         example d_token = {suggest_token} and d_position = {d_position}"
    )]
    ConcatSizeMismatch {
        /// Width of the token part.
        d_token: usize,
        /// Width of the position part.
        d_position: usize,
        /// Their sum.
        sum: usize,
        /// The configured model width.
        d_model: usize,
        /// The token width that would fit beside `d_position`.
        suggest_token: usize,
    },

    /// Two tensors that must have one shape do not.
    #[error("{what}: expected shape {expected:?}, got {got:?}. Fix: {fix}")]
    ShapeMismatch {
        /// What was compared.
        what: &'static str,
        /// The shape required.
        expected: Vec<usize>,
        /// The shape given.
        got: Vec<usize>,
        /// What to change.
        fix: &'static str,
    },

    /// A config value is outside its valid range.
    #[error("invalid config: `{field}` = {value}, but {rule}. Fix: {fix}")]
    InvalidConfig {
        /// The config field.
        field: &'static str,
        /// Its value, printed.
        value: String,
        /// The rule it breaks.
        rule: &'static str,
        /// What to change.
        fix: String,
    },

    /// A position part of an attention block was built for another block shape.
    #[error(
        "`{part}` has {field} = {value}, but the attention block has {field} = {block}. Fix: {fix}"
    )]
    PartDoesNotFitBlock {
        /// The part's config (`RopeConfig`, `AlibiConfig`, `T5BiasConfig`).
        part: &'static str,
        /// The field that disagrees.
        field: &'static str,
        /// The part's value.
        value: usize,
        /// The block's value.
        block: usize,
        /// What to change.
        fix: &'static str,
    },

    /// A saved record could not be read (missing file, truncated or corrupt bytes).
    #[error(
        "cannot read the record {path}: {detail}. Fix: check the path, and re-save the module \
         with `save_file` if the file is truncated or was written by another program"
    )]
    RecordUnreadable {
        /// The file.
        path: String,
        /// What burn reported.
        detail: String,
    },

    /// A saved record does not fit the module built from the config.
    #[error(
        "the record {path} does not match this module: {detail}. Fix: build the module from \
         the config that was saved with the record (`EmbeddingWithPositionConfig::load`), then \
         load the record into it"
    )]
    RecordMismatch {
        /// The file.
        path: String,
        /// What burn reported (names the tensor and both shapes).
        detail: String,
    },

    /// The token table and the learned position table have two float dtypes.
    #[error(
        "{origin} has a token table `tokens` in {tokens} and a learned position table \
         `position.Learned.table` in {table}; a forward combines them in one dtype. Fix: cast \
         the whole module to one float dtype (a `ModuleMapper` over every float parameter) and \
         save it again"
    )]
    TableDTypeMismatch {
        /// Where the tables came from (a record's path, or this module).
        origin: String,
        /// The token table's dtype.
        tokens: String,
        /// The learned table's dtype.
        table: String,
    },

    /// A grid refused by its sizes: no axis or more than three, an axis of size 0 or below.
    #[error(transparent)]
    Grid(#[from] GridError),

    /// A grid whose number of tokens is not the number of tokens given.
    #[error(
        "the grid {grid} holds {tokens} tokens but {seq} were given. Fix: give the grid of the \
         patches actually there (rows = height / patch size, columns = width / patch size), and \
         leave the tokens that are not on it (a class token) out of the grid's part"
    )]
    GridLength {
        /// The grid, `rows x columns`.
        grid: String,
        /// Its number of tokens.
        tokens: usize,
        /// The tokens given.
        seq: usize,
    },

    /// Positions with more (or fewer) axes than the scheme places tokens on.
    #[error("{scheme} places tokens on {expected} axes, but the positions have {got}. Fix: {fix}")]
    GridAxes {
        /// The scheme.
        scheme: String,
        /// The axes it takes.
        expected: usize,
        /// The axes given.
        got: usize,
        /// What to change.
        fix: &'static str,
    },

    /// A grid axis larger than a table can be resized to.
    #[error(
        "grid axis {axis} has {size} patches (trained on {trained}), past {limit}, the most it \
         can have beside the other axes for the resized position table to fit the device. Fix: \
         use a smaller image, or a larger patch size"
    )]
    GridTooLarge {
        /// The axis.
        axis: usize,
        /// Its size.
        size: usize,
        /// The trained size on that axis.
        trained: usize,
        /// The most allowed.
        limit: usize,
    },
}

impl From<FusedEmbeddingError> for PositionError {
    /// The kernels' error, in the layer's words. A position past the table is a learned table's
    /// limit here; the layer names a sinusoidal table's limit itself.
    fn from(err: FusedEmbeddingError) -> Self {
        match err {
            FusedEmbeddingError::TokenIdOutOfRange { id, at, vocab_size } => {
                Self::TokenIdOutOfRange { id, at, vocab_size }
            }
            FusedEmbeddingError::PositionPastTable {
                position,
                at,
                max_len,
            } => Self::PositionPastTable {
                position,
                at: Some(at),
                max_len,
                needed: position as usize + 1,
            },
            FusedEmbeddingError::NegativePosition { position, at } => {
                Self::NegativePosition { position, at }
            }
            FusedEmbeddingError::OffsetTooLarge { offset, seq, limit } => {
                Self::OffsetTooLarge { offset, seq, limit }
            }
            FusedEmbeddingError::PositionsShape { expected, got } => {
                Self::positions_shape(expected, got)
            }
            FusedEmbeddingError::GridLength { grid, tokens, seq } => {
                Self::GridLength { grid, tokens, seq }
            }
            FusedEmbeddingError::PositionsOnGrid { axes } => Self::GridAxes {
                scheme: "the embedding's one-axis position table".into(),
                expected: 1,
                got: axes,
                fix: "embed patches with a grid scheme (`AbsolutePosition::on_grid`: MAE's 2D \
                      sin-cos, a learned grid resized), or give one position per token",
            },
        }
    }
}

/// `" at [batch b, index i]"` for a known place, nothing otherwise.
/// The fix for a position past the sinusoidal table in a forward that does not read: one that
/// `validate` accepts (`cache_len` may not pass `max_len`).
fn sinusoid_table_fix(needed: &usize, max_len: &usize) -> String {
    if needed <= max_len {
        return format!(
            "raise `SinusoidalConfig::cache_len` to at least {needed}, or embed through \
             `try_forward`, which grows the table to the largest position it is given"
        );
    }
    format!(
        "the position is also past the table's limit, max_len = {max_len} rows, which \
         `try_forward` refuses too: raise `SinusoidalConfig::max_len` to at least {needed} (and \
         `cache_len` with it, or embed through `try_forward`), or restart positions from 0 (a \
         window of the sequence)"
    )
}

fn place(at: &Option<[usize; 2]>) -> String {
    at.map(|[batch, index]| format!(" at [batch {batch}, index {index}]"))
        .unwrap_or_default()
}

impl PositionError {
    /// Explicit positions that are neither `[batch, seq]` nor `[1, seq]`: decided here, for the
    /// fused path and the reference twin alike.
    pub(crate) fn positions_shape(expected: [usize; 2], got: [usize; 2]) -> Self {
        Self::ShapeMismatch {
            what: "explicit position ids must have the token ids' shape [batch, seq], or [1, seq] \
                   (shared by the batch)",
            expected: expected.to_vec(),
            got: got.to_vec(),
            fix: "give one position per token, or one row of positions for the whole batch",
        }
    }

    pub(crate) fn odd(what: &'static str, value: usize) -> Self {
        Self::OddDimension {
            what,
            value,
            lower: value.saturating_sub(1),
            upper: value + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::prelude::*;
    use burn_positional_kernels::{FusedEmbeddingOptions, Positions, try_fused_embedding};

    use super::*;
    use crate::{EmbeddingWithPositionConfig, LearnedConfig};

    /// Explicit positions `[[0, 1, 2], [0, 1, bad]]`: the bad one sits at [batch 1, index 2].
    fn positions(bad: i64, device: &Device) -> Positions {
        Positions::Explicit(Tensor::from_data([[0, 1, 2], [0, 1, bad]], device))
    }

    /// The kernels name a bad token's place; the conversion keeps it, in the value and in the
    /// message.
    #[test]
    fn the_place_survives_the_conversion() {
        let device = Device::flex();
        let tokens = Tensor::<2>::ones([10, 4], &device);
        let table = Tensor::<2>::zeros([8, 4], &device);
        let ids = Tensor::<2, Int>::ones([2, 3], &device);
        let embed = |bad| {
            try_fused_embedding(
                tokens.clone(),
                ids.clone(),
                positions(bad, &device),
                Some(table.clone()),
                &FusedEmbeddingOptions::default(),
            )
            .unwrap_err()
        };

        let err = PositionError::from(embed(12));
        assert_eq!(
            err,
            PositionError::PositionPastTable {
                position: 12,
                at: Some([1, 2]),
                max_len: 8,
                needed: 13,
            }
        );
        assert!(
            err.to_string()
                .starts_with("position 12 at [batch 1, index 2] is past"),
            "{err}"
        );

        let err = PositionError::from(embed(-3));
        assert_eq!(
            err,
            PositionError::NegativePosition {
                position: -3,
                at: [1, 2],
            }
        );
        assert!(
            err.to_string()
                .starts_with("position id -3 at [batch 1, index 2] is negative"),
            "{err}"
        );
    }

    /// The layer's fused path and its reference twin name the same place.
    #[test]
    fn the_layer_names_the_place() {
        let device = Device::flex();
        let embed = EmbeddingWithPositionConfig::new(10, 4)
            .with_scheme(LearnedConfig::new(8).into())
            .init(&device);
        let ids = Tensor::<2, Int>::ones([2, 3], &device);
        let err = embed
            .try_forward_at(ids.clone(), positions(12, &device))
            .unwrap_err();
        assert!(
            matches!(
                err,
                PositionError::PositionPastTable {
                    position: 12,
                    at: Some([1, 2]),
                    ..
                }
            ),
            "{err:?}"
        );
        let negative = PositionError::NegativePosition {
            position: -3,
            at: [1, 2],
        };
        let fused = embed.try_forward_at(ids.clone(), positions(-3, &device));
        let reference = embed.try_forward_reference(ids, positions(-3, &device));
        assert_eq!(fused.unwrap_err(), negative);
        assert_eq!(reference.unwrap_err(), negative);
    }

    /// A window decided on the host has no single token: no place is named.
    #[test]
    fn a_window_names_no_place() {
        let err = PositionError::PositionPastTable {
            position: 32,
            at: None,
            max_len: 32,
            needed: 38,
        };
        assert!(err.to_string().starts_with("position 32 is past"), "{err}");
    }
}
