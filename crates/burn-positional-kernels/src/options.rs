//! The op's ordinary (non-tensor) arguments, the shape contract every implementation checks,
//! and the output metadata the `Fusion` wrapper needs before the kernel runs.

use burn::backend::TensorMetadata;
use burn::backend::fusion::custom::TensorSpec;
use burn::tensor::{DType, Shape};

/// Status bit: the token id lies outside `0..vocab`. Its token part is zero.
pub const STATUS_BAD_ID: i64 = 1;
/// Status bit: the position is negative, or (learned) at or past `max_len`. Its position part
/// is zero.
pub const STATUS_BAD_POSITION: i64 = 2;

/// How token vectors and position vectors are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FusedCombine {
    /// `token + position`: `d_position == d_token == d_out`.
    Add,
    /// `[token ‖ position]`: `d_out = d_token + d_position`.
    Concat,
}

/// Ordinary arguments shared by both methods. `Clone + Send + Sync + 'static`, as the `Fusion`
/// wrapper captures them for deferred execution.
#[derive(Clone, Debug, PartialEq)]
pub struct FusedEmbeddingOptions {
    /// Multiplier of the token vectors (1, or `sqrt(d_model)`).
    pub scale: f32,
    /// A token id whose token vector is zero and receives no gradient. Its position is still
    /// combined.
    pub padding_idx: Option<usize>,
    /// Add or concatenate.
    pub combine: FusedCombine,
    /// Added to every position (incremental decoding). Explicit positions use `0`.
    pub offset: i64,
    /// When true, the position of token `(b, s)` is `offset + s` and the `positions` argument
    /// is not read (any int tensor on the device will do; [`crate::fused_embedding`] passes the
    /// ids): no position tensor is built or uploaded. When false, positions come from the
    /// `positions` tensor.
    pub sequential_positions: bool,
}

impl Default for FusedEmbeddingOptions {
    fn default() -> Self {
        Self {
            scale: 1.0,
            padding_idx: None,
            combine: FusedCombine::Add,
            offset: 0,
            sequential_positions: false,
        }
    }
}

/// The sinusoidal scheme: `w_i = base^(-2i/d_position)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sinusoid {
    /// Wavelength base (10 000 in the paper).
    pub base: f64,
    /// Width of the position part. Must be even; equals `d_token` for `Add`.
    pub d_position: usize,
}

impl Sinusoid {
    /// The paper's base, `d_position` wide.
    pub fn new(d_position: usize) -> Self {
        Self {
            base: 10_000.0,
            d_position,
        }
    }

    /// `w_i = base^(-2i/d)` for `i in 0..d/2`, in f64 (the host paths use these directly; the
    /// reference body rounds them to f32; the CubeCL kernel recomputes them from `ln(base)`).
    pub fn frequencies(&self) -> Vec<f64> {
        let d = self.d_position as f64;
        (0..self.d_position / 2)
            .map(|i| self.base.powf(-((2 * i) as f64) / d))
            .collect()
    }
}

/// The sizes every implementation works with, checked once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub vocab: usize,
    pub d_token: usize,
    pub batch: usize,
    pub seq: usize,
    /// Rows of `positions`: 1 (shared by the batch, or sequential positions) or `batch`.
    pub position_rows: usize,
    pub d_position: usize,
    /// Learned table rows; `None` for sinusoidal.
    pub table_len: Option<usize>,
    pub d_out: usize,
}

/// Checks the shape contract and returns the sizes.
///
/// # Panics
///
/// With the offending sizes, if: a tensor has the wrong rank; `positions` (when read) has
/// neither 1 nor `batch` rows or another `seq`; `Add` with `d_position != d_token`; a
/// sinusoidal width is odd or zero.
pub fn check_shapes(
    tokens: &Shape,
    ids: &Shape,
    positions: &Shape,
    table: Option<&Shape>,
    sinusoid: Option<&Sinusoid>,
    options: &FusedEmbeddingOptions,
) -> Dims {
    assert_eq!(
        tokens.num_dims(),
        2,
        "fused_embedding: tokens must be [vocab, d_token], got {tokens:?}"
    );
    assert_eq!(
        ids.num_dims(),
        2,
        "fused_embedding: ids must be [batch, seq], got {ids:?}"
    );
    let (vocab, d_token) = (tokens[0], tokens[1]);
    let (batch, seq) = (ids[0], ids[1]);
    let position_rows = if options.sequential_positions {
        1
    } else {
        assert_eq!(
            positions.num_dims(),
            2,
            "fused_embedding: positions must be [1 or batch, seq], got {positions:?}"
        );
        assert!(
            positions[1] == seq && (positions[0] == 1 || positions[0] == batch),
            "fused_embedding: positions {positions:?} must be [1, {seq}] or [{batch}, {seq}] for ids {ids:?}"
        );
        positions[0]
    };
    let (d_position, table_len) = match (table, sinusoid) {
        (Some(table), _) => {
            assert_eq!(
                table.num_dims(),
                2,
                "fused_embedding: table must be [max_len, d_position], got {table:?}"
            );
            (table[1], Some(table[0]))
        }
        (None, Some(s)) => {
            assert!(
                s.d_position > 0 && s.d_position % 2 == 0,
                "fused_embedding: the sinusoidal width must be even and positive, got {}",
                s.d_position
            );
            (s.d_position, None)
        }
        (None, None) => unreachable!("a position source is always given"),
    };
    let d_out = match options.combine {
        FusedCombine::Add => {
            assert_eq!(
                d_position, d_token,
                "fused_embedding: Add needs d_position == d_token, got {d_position} and {d_token}"
            );
            d_token
        }
        FusedCombine::Concat => d_token + d_position,
    };
    Dims {
        vocab,
        d_token,
        batch,
        seq,
        position_rows,
        d_position,
        table_len,
        d_out,
    }
}

/// [`check_shapes`] on backend tensors: the entry check of every implementation.
///
/// # Panics
///
/// As [`check_shapes`].
pub fn check_tensors<F: TensorMetadata, I: TensorMetadata>(
    tokens: &F,
    ids: &I,
    positions: &I,
    table: Option<&F>,
    sinusoid: Option<&Sinusoid>,
    options: &FusedEmbeddingOptions,
) -> Dims {
    check_shapes(
        &tokens.shape(),
        &ids.shape(),
        &positions.shape(),
        table.map(|t| t.shape()).as_ref(),
        sinusoid,
        options,
    )
}

fn specs(dims: Dims, float: DType, int: DType) -> (TensorSpec, TensorSpec) {
    (
        TensorSpec::new(Shape::new([dims.batch, dims.seq, dims.d_out]), float),
        TensorSpec::new(Shape::new([dims.batch, dims.seq]), int),
    )
}

/// Output metadata of [`fused_embedding_sinusoidal`](crate::PositionalKernels::fused_embedding_sinusoidal)
/// for the `Fusion` wrapper: computed now, on the calling thread; the kernel runs later.
pub fn meta_sinusoidal(
    tokens: &TensorSpec,
    ids: &TensorSpec,
    positions: &TensorSpec,
    options: &FusedEmbeddingOptions,
    sinusoid: &Sinusoid,
) -> (TensorSpec, TensorSpec) {
    let dims = check_shapes(
        &tokens.shape,
        &ids.shape,
        &positions.shape,
        None,
        Some(sinusoid),
        options,
    );
    specs(dims, tokens.dtype, ids.dtype)
}

/// Output metadata of [`fused_embedding_learned`](crate::PositionalKernels::fused_embedding_learned).
pub fn meta_learned(
    tokens: &TensorSpec,
    ids: &TensorSpec,
    positions: &TensorSpec,
    table: &TensorSpec,
    options: &FusedEmbeddingOptions,
) -> (TensorSpec, TensorSpec) {
    let dims = check_shapes(
        &tokens.shape,
        &ids.shape,
        &positions.shape,
        Some(&table.shape),
        None,
        options,
    );
    specs(dims, tokens.dtype, ids.dtype)
}
