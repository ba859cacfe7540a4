//! The op's ordinary (non-tensor) arguments, the shape and dtype contract every implementation
//! checks, and the output metadata the `Fusion` wrapper needs before the kernel runs.

use burn::backend::TensorMetadata;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
use burn::backend::fusion::custom::TensorSpec;
use burn::config::Config;
use burn::tensor::{DType, Shape};

/// Status bit: the token id lies outside `0..vocab_size`. Its token part is NaN.
pub const STATUS_BAD_ID: i64 = 1;
/// Status bit: the position is negative, or at or past the end of the position table. Its
/// position part is NaN.
pub const STATUS_BAD_POSITION: i64 = 2;

/// How token vectors and position vectors are combined (the add-or-concatenate question):
/// one type for the layer's config and the kernels.
#[derive(Config, Debug, PartialEq, Eq, Copy)]
pub enum Combine {
    /// `token + position`, both `d_model` wide (Vaswani et al. 2017). Leaves the split of the
    /// `d_model` dimensions between meaning and position to training.
    Add,
    /// `[token ‖ position]`: a `d_token`-wide token vector followed by a `d_position`-wide
    /// position vector, with `d_token + d_position = d_model`. Fixes the split in advance.
    Concat {
        /// Width of the token part.
        d_token: usize,
        /// Width of the position part.
        d_position: usize,
    },
}

/// What the op does to each token, besides looking it up.
#[derive(Clone, Debug, PartialEq)]
pub struct FusedEmbeddingOptions {
    /// Multiplier of the token vectors (1, or `sqrt(d_model)`).
    pub scale: f32,
    /// A token id whose row of the token table receives no gradient, as PyTorch's
    /// `nn.Embedding(padding_idx=..)`: the forward returns its stored row (scaled, combined with
    /// its position as any token's), which stays what it was at init (zero, as the layer builds
    /// it) unless a checkpoint says otherwise.
    pub padding_idx: Option<usize>,
    /// Add or concatenate.
    pub combine: Combine,
}

impl Default for FusedEmbeddingOptions {
    fn default() -> Self {
        Self {
            scale: 1.0,
            padding_idx: None,
            combine: Combine::Add,
        }
    }
}

/// Where the kernel takes positions from. Internal to the extension: users say
/// [`Positions`](crate::Positions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PositionMode {
    /// Token `(b, s)` sits at `offset + s`; the positions argument is not read. No position
    /// tensor is built or uploaded per call.
    Sequential {
        /// The first position; at most `i32::MAX - seq` (checked by [`crate::api`]).
        offset: i64,
    },
    /// Positions come from the `[1 or batch, seq]` positions argument.
    Explicit,
}

/// Everything the extension method takes besides tensors. `Clone + Send + Sync + 'static`, as
/// the `Fusion` wrapper captures it for deferred execution.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelArgs {
    pub(crate) options: FusedEmbeddingOptions,
    pub(crate) mode: PositionMode,
}

impl KernelArgs {
    /// The offset of sequential positions, or 0.
    pub(crate) fn offset(&self) -> i64 {
        match self.mode {
            PositionMode::Sequential { offset } => offset,
            PositionMode::Explicit => 0,
        }
    }

    pub(crate) fn sequential(&self) -> bool {
        matches!(self.mode, PositionMode::Sequential { .. })
    }
}

/// The sizes every implementation works with, checked once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dims {
    pub vocab_size: usize,
    pub d_token: usize,
    pub batch: usize,
    pub seq: usize,
    /// Rows of `positions`: 1 (shared by the batch, or sequential positions) or `batch`.
    pub position_rows: usize,
    pub d_position: usize,
    /// Rows of the position table.
    pub max_len: usize,
    pub d_out: usize,
}

/// Shapes and dtypes of the op's four tensors.
pub(crate) struct Inputs<'a> {
    pub tokens: (&'a Shape, DType),
    pub ids: (&'a Shape, DType),
    pub positions: (&'a Shape, DType),
    pub table: (&'a Shape, DType),
}

fn is_float(dtype: DType) -> bool {
    matches!(dtype, DType::F64 | DType::F32 | DType::F16 | DType::BF16)
}

/// Checks the shape and dtype contract and returns the sizes.
///
/// # Panics
///
/// With the offending sizes or dtypes, if: a tensor has the wrong rank; a width is zero;
/// `positions` (when read) has neither 1 nor `batch` rows or another `seq`; `Add` with
/// `d_position != d_token`; the tables are not one float dtype; ids or positions are not i32 or
/// i64.
pub(crate) fn check(inputs: Inputs<'_>, args: &KernelArgs) -> Dims {
    let Inputs {
        tokens: (tokens, token_dtype),
        ids: (ids, id_dtype),
        positions: (positions, position_dtype),
        table: (table, table_dtype),
    } = inputs;
    assert_eq!(
        tokens.num_dims(),
        2,
        "fused_embedding: tokens must be [vocab_size, d_token], got {tokens:?}"
    );
    assert_eq!(
        ids.num_dims(),
        2,
        "fused_embedding: ids must be [batch, seq], got {ids:?}"
    );
    assert_eq!(
        table.num_dims(),
        2,
        "fused_embedding: the position table must be [max_len, d_position], got {table:?}"
    );
    let (vocab_size, d_token) = (tokens[0], tokens[1]);
    let (batch, seq) = (ids[0], ids[1]);
    let (max_len, d_position) = (table[0], table[1]);
    assert!(
        d_token > 0 && d_position > 0,
        "fused_embedding: widths must be positive, got d_token = {d_token} and d_position = \
         {d_position}; leave the position table out for token vectors alone"
    );
    assert!(
        is_float(token_dtype) && token_dtype == table_dtype,
        "fused_embedding: the token table is {token_dtype:?} and the position table \
         {table_dtype:?}; both must be one float dtype (f32, f16, bf16 or f64): cast the \
         position table to the token table's dtype"
    );
    for (what, dtype) in [("ids", id_dtype), ("positions", position_dtype)] {
        assert!(
            matches!(dtype, DType::I32 | DType::I64),
            "fused_embedding: {what} are {dtype:?}; token ids and positions must be i32 or i64"
        );
    }
    let position_rows = if args.sequential() {
        1
    } else {
        assert_eq!(
            positions.num_dims(),
            2,
            "fused_embedding: positions must be [1 or batch, seq], got {positions:?}"
        );
        assert!(
            positions[1] == seq && (positions[0] == 1 || positions[0] == batch),
            "fused_embedding: positions {positions:?} must be [1, {seq}] or [{batch}, {seq}] for \
             ids {ids:?}"
        );
        positions[0]
    };
    let d_out = match args.options.combine {
        Combine::Add => {
            assert_eq!(
                d_position, d_token,
                "fused_embedding: Add needs d_position == d_token, got {d_position} and {d_token}"
            );
            d_token
        }
        Combine::Concat {
            d_token: token_width,
            d_position: position_width,
        } => {
            assert!(
                (token_width, position_width) == (d_token, d_position),
                "fused_embedding: Concat {{ d_token: {token_width}, d_position: {position_width} }} \
                 but the tables are {d_token} and {d_position} wide"
            );
            d_token + d_position
        }
    };
    Dims {
        vocab_size,
        d_token,
        batch,
        seq,
        position_rows,
        d_position,
        max_len,
        d_out,
    }
}

/// [`check`] on backend tensors: the entry check of every implementation.
///
/// # Panics
///
/// As [`check`].
pub(crate) fn check_tensors<F: TensorMetadata, I: TensorMetadata>(
    tokens: &F,
    ids: &I,
    positions: &I,
    table: &F,
    args: &KernelArgs,
) -> Dims {
    let shapes = [
        tokens.shape(),
        ids.shape(),
        positions.shape(),
        table.shape(),
    ];
    check(
        Inputs {
            tokens: (&shapes[0], tokens.dtype()),
            ids: (&shapes[1], ids.dtype()),
            positions: (&shapes[2], positions.dtype()),
            table: (&shapes[3], table.dtype()),
        },
        args,
    )
}

/// Output metadata of the extension method for the `Fusion` wrapper: computed now, on the
/// calling thread (so bad shapes and dtypes panic here, at the call); the kernel runs later.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn meta(
    tokens: &TensorSpec,
    ids: &TensorSpec,
    positions: &TensorSpec,
    table: &TensorSpec,
    args: &KernelArgs,
) -> (TensorSpec, TensorSpec) {
    let dims = check(
        Inputs {
            tokens: (&tokens.shape, tokens.dtype),
            ids: (&ids.shape, ids.dtype),
            positions: (&positions.shape, positions.dtype),
            table: (&table.shape, table.dtype),
        },
        args,
    );
    (
        TensorSpec::new(Shape::new([dims.batch, dims.seq, dims.d_out]), tokens.dtype),
        TensorSpec::new(Shape::new([dims.batch, dims.seq]), ids.dtype),
    )
}
