//! The gradient of an embedding table: the rows of the output gradient that each table row was
//! read into, summed per row. One op serves the token table (indexed by the ids) and the learned
//! position table (indexed by explicit positions); the autodiff backward calls it.
//!
//! `out[r, c] = scale * Σ grad[b, s, first + c]` over the tokens `(b, s)` whose index
//! `index[b or 0, s]` is `r`, for `r` in `0..rows` other than `skip` (the padding id): an index
//! outside the table, or the padding id, contributes nothing.
//!
//! # How it is summed: ids sorted once, a segment per row (deterministic)
//!
//! burn's `embedding_backward` (a `select_assign` with `Add`) runs one unit per column of the
//! table, each walking every token in turn: at `[32, 1024, 768]` that is 768 units for 32,768
//! tokens, 19 ms on an H200 where PyTorch takes about 1 ms for the forward and backward
//! together (`docs/gpu.md`). The two ways to spread the work are float atomics (every token's
//! row added into the table where it lands) or a sort of the tokens by row followed by one sum
//! per row. We sort, for three reasons, none of which needed a GPU to settle:
//!
//! - **Determinism.** Atomic float adds land in a different order each run, so the rounding of
//!   a row's sum changes from one step to the next; PyTorch's CUDA embedding backward sorts
//!   for the same reason, and burn's own is deterministic. Training runs that repeat bit for bit
//!   are worth keeping.
//! - **Portability.** WGSL has no float atomics (only `atomic<u32>` and `atomic<i32>`): an add
//!   would be a compare-and-swap loop on the float's bits, which is slow exactly where ids repeat
//!   (a frequent token's row is hammered by every thread that holds it), and for f16 and bf16
//!   would need two halves per 32-bit word. The sort needs integer atomics only.
//! - **Traffic.** The per-row sum writes each table element exactly once, in its own dtype, with
//!   the sum kept in f32 registers: no zero-fill pass, no read-modify-write of the table, no f32
//!   staging copy for half-precision tables.
//!
//! The sort is a counting sort (rows are small integers): count the tokens per row, an
//! exclusive scan of the counts gives each row's segment, each token takes a slot in its
//! segment, and the segment is put in token order (each token's rank among the tokens of its
//! row) so that the sum runs in the same order every time. The CubeCL implementation
//! (`cube.rs`) runs these as five small launches before the sum; the host implementation
//! (`host.rs`, flex and ndarray) does the sort on one thread (it is linear in the tokens) and
//! the per-row sums on rayon workers. The default body (plain tensor ops, for any other
//! backend) is burn's scatter.

// Only the autodiff node calls the op.
#![cfg_attr(not(feature = "autodiff"), allow(dead_code))]

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) mod cube;
#[cfg(any(feature = "flex", feature = "ndarray"))]
pub(crate) mod host;

use burn::backend::{
    Backend, Scalar, Slice, TensorMetadata,
    tensor::{FloatTensor, IntTensor},
};
use burn::tensor::{DType, FloatDType, IndexingUpdateOp, Shape};

use crate::embedding::reference::bool_dtype;

/// Everything the op takes besides its two tensors.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TableGradArgs {
    /// Rows of the table (and of the result).
    pub rows: usize,
    /// The columns `first..first + width` of the output gradient belong to this table (the
    /// token part or the position part of a concatenated row; every column for `Add`).
    pub first: usize,
    /// Width of the table.
    pub width: usize,
    /// Multiplier of every row's sum (the token scale; 1 for a position table).
    pub scale: f32,
    /// A row that receives nothing (`padding_idx`).
    pub skip: Option<usize>,
}

/// Sizes of one call, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GradDims {
    pub batch: usize,
    pub seq: usize,
    /// Read by the kernels, not by the default body.
    #[cfg_attr(
        not(any(
            feature = "flex",
            feature = "ndarray",
            feature = "wgpu",
            feature = "cuda"
        )),
        allow(dead_code)
    )]
    pub d_out: usize,
    /// Rows of the index: 1 (shared by the batch) or `batch`.
    pub index_rows: usize,
}

/// Checks the shapes and dtypes of one call and returns its sizes.
///
/// # Panics
///
/// If `grad` is not `[batch, seq, d_out]` float, the index not `[1 or batch, seq]` i32 or i64,
/// or the columns `first..first + width` do not lie inside `d_out`.
pub(crate) fn check(
    grad: (&Shape, DType),
    index: (&Shape, DType),
    args: &TableGradArgs,
) -> GradDims {
    let ((grad, grad_dtype), (index, index_dtype)) = (grad, index);
    assert!(
        grad.num_dims() == 3
            && matches!(
                grad_dtype,
                DType::F64 | DType::F32 | DType::F16 | DType::BF16
            ),
        "table_grad: the output gradient must be [batch, seq, d_out] float, got {grad:?} {grad_dtype:?}"
    );
    let (batch, seq, d_out) = (grad[0], grad[1], grad[2]);
    assert!(
        index.num_dims() == 2 && (index[0] == 1 || index[0] == batch) && index[1] == seq,
        "table_grad: the index must be [1 or {batch}, {seq}] to match the gradient {grad:?}, got {index:?}"
    );
    assert!(
        matches!(index_dtype, DType::I32 | DType::I64),
        "table_grad: the index is {index_dtype:?}; it must be i32 or i64"
    );
    assert!(
        args.first + args.width <= d_out,
        "table_grad: columns {}..{} lie outside the gradient's {d_out}",
        args.first,
        args.first + args.width
    );
    GradDims {
        batch,
        seq,
        d_out,
        index_rows: index[0],
    }
}

/// Output metadata for the `Fusion` wrapper: checked now, on the calling thread.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn meta(
    grad: &burn::backend::fusion::custom::TensorSpec,
    index: &burn::backend::fusion::custom::TensorSpec,
    args: &TableGradArgs,
) -> burn::backend::fusion::custom::TensorSpec {
    check((&grad.shape, grad.dtype), (&index.shape, index.dtype), args);
    burn::backend::fusion::custom::TensorSpec::new(Shape::new([args.rows, args.width]), grad.dtype)
}

/// The extension's default body: burn's scatter (`float_select_assign` with `Add`, what
/// `embedding_backward` does) of the masked, scaled gradient rows. When the index is shared by
/// the batch, the gradient is summed over the batch first and `seq` rows are scattered.
pub(crate) fn default_body<B: Backend>(
    grad: FloatTensor<B>,
    index: IntTensor<B>,
    args: &TableGradArgs,
) -> FloatTensor<B> {
    let dims = check(
        (&grad.shape(), grad.dtype()),
        (&index.shape(), index.dtype()),
        args,
    );
    let GradDims {
        batch,
        seq,
        index_rows,
        ..
    } = dims;
    let width = args.width;
    let device = grad.device();
    let fd = FloatDType::from(grad.dtype());
    let grad = B::float_slice(
        grad,
        &[
            Slice::from(..),
            Slice::from(..),
            Slice::from(args.first..args.first + width),
        ],
    );
    let grad = if index_rows == 1 && batch > 1 {
        B::float_sum_dim(grad, 0)
    } else {
        grad
    };
    let bd = bool_dtype::<B>(&device);
    let low = B::int_greater_equal_elem(index.clone(), Scalar::from(0i64), bd);
    let high = B::int_lower_elem(index.clone(), Scalar::from(args.rows as i64), bd);
    let mut keep = B::bool_and(low, high);
    if let Some(skip) = args.skip {
        keep = B::bool_and(
            keep,
            B::int_not_equal_elem(index.clone(), Scalar::from(skip as i64), bd),
        );
    }
    let safe = B::int_mask_fill(index, B::bool_not(keep.clone()), Scalar::from(0i64));
    let keep = B::float_reshape(
        B::bool_into_float(keep, fd),
        Shape::new([index_rows, seq, 1]),
    );
    let keep = B::float_mul_scalar(keep, Scalar::from(args.scale));
    let keep = B::float_expand(keep, Shape::new([index_rows, seq, width]));
    let values = B::float_reshape(
        B::float_mul(grad, keep),
        Shape::new([index_rows * seq, width]),
    );
    let safe = B::int_reshape(safe, Shape::new([index_rows * seq]));
    let zeros = B::float_zeros(Shape::new([args.rows, width]), &device, fd);
    B::float_select_assign(zeros, 0, safe, values, IndexingUpdateOp::Add)
}
