//! The user-facing calls, on `Tensor<D>` (no backend type parameter in burn 0.22): the
//! `Device` the tensors live on selects the implementation through `Dispatch`.

use core::fmt;

use burn::backend::Dispatch;
use burn::tensor::{Int, Tensor};

use crate::PositionalKernels;
use crate::options::{FusedEmbeddingOptions, STATUS_BAD_ID, STATUS_BAD_POSITION, Sinusoid};

/// Where the positions of the tokens come from.
// Moved once per call, like burn's own tensor arguments: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum FusedPositions {
    /// `offset + s` for token `s` of every sequence (incremental decoding).
    Offset(usize),
    /// One position per token, `[batch, seq]` (left-padded batches).
    Explicit(Tensor<2, Int>),
}

/// The position scheme.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum PositionSource {
    /// Computed in the kernel.
    Sinusoidal(Sinusoid),
    /// A `[max_len, d_position]` table.
    Learned(Tensor<2>),
}

/// Bad input found by the fused op's status output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FusedEmbeddingError {
    /// A token id outside `0..vocab_size`.
    TokenIdOutOfRange {
        id: i64,
        batch: usize,
        position: usize,
        vocab_size: usize,
    },
    /// A negative position, or one past a learned table.
    PositionOutOfRange {
        value: i64,
        batch: usize,
        position: usize,
        max_len: Option<usize>,
    },
}

impl fmt::Display for FusedEmbeddingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TokenIdOutOfRange {
                id,
                batch,
                position,
                vocab_size,
            } => write!(
                f,
                "token id {id} at [batch {batch}, position {position}] is outside the vocabulary \
                 0..{vocab_size}; fix the tokenizer output or enlarge vocab_size"
            ),
            Self::PositionOutOfRange {
                value,
                batch,
                position,
                max_len: Some(max_len),
            } => write!(
                f,
                "position {value} at [batch {batch}, position {position}] is outside the learned \
                 table 0..{max_len} (max_len = {max_len}); shorten the input or enlarge max_len"
            ),
            Self::PositionOutOfRange {
                value,
                batch,
                position,
                max_len: None,
            } => write!(
                f,
                "position {value} at [batch {batch}, position {position}] is negative; \
                 positions start at 0"
            ),
        }
    }
}

impl std::error::Error for FusedEmbeddingError {}

/// Runs the fused op and returns `(output [batch, seq, d_out], status [batch, seq])` without
/// reading anything back: the status can be checked later (or never).
///
/// # Panics
///
/// On inconsistent shapes, and when an explicit-positions tensor is not `[batch, seq]`.
pub fn fused_embedding(
    tokens: Tensor<2>,
    ids: Tensor<2, Int>,
    positions: FusedPositions,
    source: PositionSource,
    options: FusedEmbeddingOptions,
) -> (Tensor<3>, Tensor<2, Int>) {
    let [batch, seq] = ids.dims();
    let (positions, options) = match positions {
        // The kernels compute `offset + s`; the ids stand in for the unread positions argument.
        FusedPositions::Offset(offset) => (
            ids.clone(),
            FusedEmbeddingOptions {
                offset: offset as i64,
                sequential_positions: true,
                ..options
            },
        ),
        FusedPositions::Explicit(p) => {
            assert_eq!(
                p.dims(),
                [batch, seq],
                "explicit positions must have the ids' shape [batch, seq]"
            );
            let options = FusedEmbeddingOptions {
                offset: 0,
                sequential_positions: false,
                ..options
            };
            (p, options)
        }
    };
    let (output, status) = match source {
        PositionSource::Sinusoidal(s) => {
            <Dispatch as PositionalKernels>::fused_embedding_sinusoidal(
                tokens.into_dispatch(),
                ids.into_dispatch(),
                positions.into_dispatch(),
                options,
                s,
            )
        }
        PositionSource::Learned(table) => <Dispatch as PositionalKernels>::fused_embedding_learned(
            tokens.into_dispatch(),
            ids.into_dispatch(),
            positions.into_dispatch(),
            table.into_dispatch(),
            options,
        ),
    };
    (Tensor::from_dispatch(output), Tensor::from_dispatch(status))
}

/// [`fused_embedding`], then one read-back of the status: `Err` names the first bad token (the
/// error path also reads the ids, or the explicit positions, to name the value).
pub fn try_fused_embedding(
    tokens: Tensor<2>,
    ids: Tensor<2, Int>,
    positions: FusedPositions,
    source: PositionSource,
    options: FusedEmbeddingOptions,
) -> Result<Tensor<3>, FusedEmbeddingError> {
    let [vocab_size, _] = tokens.dims();
    let max_len = match &source {
        PositionSource::Learned(table) => Some(table.dims()[0]),
        PositionSource::Sinusoidal(_) => None,
    };
    let [_, seq] = ids.dims();
    let offset = match &positions {
        FusedPositions::Offset(o) => *o as i64,
        FusedPositions::Explicit(_) => 0,
    };
    let explicit = match &positions {
        FusedPositions::Explicit(p) => Some(p.clone()),
        FusedPositions::Offset(_) => None,
    };
    let (output, status) = fused_embedding(tokens, ids.clone(), positions, source, options);
    // One read-back: the status itself, `batch * seq` small ints. A plain buffer copy; a
    // reduction to its maximum first would add a kernel, which costs more than the bytes it
    // saves at these sizes (measured on wgpu).
    let codes = status.into_data();
    let Some((index, code)) = codes.iter::<i64>().enumerate().find(|&(_, c)| c != 0) else {
        return Ok(output);
    };
    let (batch, position) = (index / seq, index % seq);
    if code & STATUS_BAD_ID != 0 {
        let id = ids.into_data().iter::<i64>().nth(index).unwrap();
        return Err(FusedEmbeddingError::TokenIdOutOfRange {
            id,
            batch,
            position,
            vocab_size,
        });
    }
    debug_assert!(code & STATUS_BAD_POSITION != 0);
    let value = match explicit {
        Some(p) => p.into_data().iter::<i64>().nth(index).unwrap(),
        None => offset + position as i64,
    };
    Err(FusedEmbeddingError::PositionOutOfRange {
        value,
        batch,
        position,
        max_len,
    })
}
