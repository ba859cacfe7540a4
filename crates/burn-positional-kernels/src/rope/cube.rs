//! The rotary CubeCL kernels (wgpu, CUDA). A contiguous `x` takes [`rope_rows_kernel`]: one
//! unit per vector of `N` half-split pairs (or per interleaved pair), and one per vector of
//! passed-through dimensions. Any other layout takes [`rope_kernel`], one unit per pair,
//! reading `x` through its strides. Both write a contiguous output.
//!
//! On NVIDIA GPUs (NVRTC for `sm_90` and `sm_80`, `docs/gpu.md`): cubes of 256 units (8 planes,
//! `CubeDim::new` for a large tensor), 20 to 32 registers a unit, no shared memory: 8 cubes per
//! multiprocessor, 100 % theoretical occupancy in every dtype and layout.

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments, clippy::manual_is_multiple_of)]

use burn::backend::{TensorMetadata, cubecl::dtype_to_storage_type};
use burn::tensor::Shape;
use burn_cubecl::{kernel::into_contiguous, ops::numeric::empty_device_dtype, tensor::CubeTensor};
use cubecl::{calculate_cube_count_elemwise, prelude::*};

use super::{RopeArgs, RotaryLayout, check_shapes};

/// Unit `u` of row `row = (b * heads + h) * seq + s` handles column `c = u % units_per_row`:
/// pair `c` when `c < pairs` (reads its two elements of `x` and one angle, writes both
/// rotated), else dimension `2 * pairs + c - pairs`, copied. `cos` and `sin` are contiguous
/// `[cos_rows, seq, pairs]`; the output is contiguous `[batch, heads, seq, d_head]`.
#[cube(launch_unchecked, create_dummy_kernel)]
fn rope_kernel<F: Float>(
    x: &Tensor<F>,
    cos: &Tensor<F>,
    sin: &Tensor<F>,
    output: &mut Tensor<F>,
    rows: u32,
    units_per_row: u32,
    heads: u32,
    seq: u32,
    pairs: u32,
    cos_rows: u32,
    #[comptime] half_split: bool,
    #[comptime] inverse: bool,
    #[define(F)] _dtype: ElemType,
) {
    let units_per_row = units_per_row as usize;
    if ABSOLUTE_POS >= (rows as usize) * units_per_row {
        terminate!();
    }
    let seq = seq as usize;
    let heads = heads as usize;
    let pairs = pairs as usize;
    let row = ABSOLUTE_POS / units_per_row;
    let c = ABSOLUTE_POS % units_per_row;
    let s = row % seq;
    let h = (row / seq) % heads;
    let b = row / (seq * heads);
    let x_base = b * x.stride(0) + h * x.stride(1) + s * x.stride(2);
    let step = x.stride(3);
    let out_base = row * output.stride(2);
    if c < pairs {
        let mut n = 0usize;
        if cos_rows > 1 {
            n = b;
        }
        let angle = (n * seq + s) * pairs + c;
        let co = cos[angle];
        let mut si = sin[angle];
        if inverse {
            si = F::new(0.0) - si;
        }
        let mut ia = 2 * c;
        let mut ib = 2 * c + 1;
        if half_split {
            ia = c;
            ib = c + pairs;
        }
        let a = x[x_base + ia * step];
        let bv = x[x_base + ib * step];
        output[out_base + ia] = a * co - bv * si;
        output[out_base + ib] = a * si + bv * co;
    } else {
        let d = pairs + c;
        output[out_base + d] = x[x_base + d * step];
    }
}

/// The same rotation for a contiguous `x`, `N` lanes per unit: unit `c` of row `row` rotates
/// the lanes `c * N..` of both halves (`c < pair_vectors`, half-split; interleaved runs with
/// `N = 1`, one pair per unit) or copies a vector of the passed-through dimensions. The
/// table row is `s = row % seq` (and the batch `row / (heads * seq)` when there is one table
/// per batch row).
#[cube(launch_unchecked, create_dummy_kernel)]
fn rope_rows_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    cos: &Tensor<Vector<F, N>>,
    sin: &Tensor<Vector<F, N>>,
    output: &mut Tensor<Vector<F, N>>,
    rows: u32,
    units_per_row: u32,
    row_vectors: u32,
    heads_seq: u32,
    seq: u32,
    pair_vectors: u32,
    #[comptime] per_batch: bool,
    #[comptime] half_split: bool,
    #[comptime] inverse: bool,
    #[define(F)] _dtype: ElemType,
) {
    let units_per_row = units_per_row as usize;
    if ABSOLUTE_POS >= (rows as usize) * units_per_row {
        terminate!();
    }
    let pair_vectors = pair_vectors as usize;
    let seq = seq as usize;
    let row = ABSOLUTE_POS / units_per_row;
    let c = ABSOLUTE_POS % units_per_row;
    let base = row * (row_vectors as usize);
    if c < pair_vectors {
        let mut table_row = row % seq;
        if per_batch {
            table_row += (row / (heads_seq as usize)) * seq;
        }
        let angle = table_row * pair_vectors + c;
        let co = cos[angle];
        let mut si = sin[angle];
        if inverse {
            si = Vector::<F, N>::new(F::new(0.0)) - si;
        }
        let mut ia = 2 * c;
        let mut ib = 2 * c + 1;
        if half_split {
            ia = c;
            ib = c + pair_vectors;
        }
        let a = x[base + ia];
        let b = x[base + ib];
        output[base + ia] = a * co - b * si;
        output[base + ib] = a * si + b * co;
    } else {
        let d = pair_vectors + c;
        output[base + d] = x[base + d];
    }
}

/// Host side of the launch: checks shapes, allocates the output and launches [`rope_kernel`].
pub(crate) fn launch(
    x: CubeTensor,
    cos: CubeTensor,
    sin: CubeTensor,
    args: &RopeArgs,
) -> CubeTensor {
    let ([batch, heads, seq, d_head], [cos_rows, _, pairs]) = check_shapes(
        &x.shape().dims::<4>(),
        &cos.shape().dims::<3>(),
        &sin.shape().dims::<3>(),
    );
    x.assert_is_on_same_device(&cos);
    x.assert_is_on_same_device(&sin);
    assert!(
        cos.dtype == x.dtype && sin.dtype == x.dtype,
        "fused_rope: the tables ({:?}, {:?}) must have the dtype of x ({:?})",
        cos.dtype,
        sin.dtype,
        x.dtype
    );
    let cos = into_contiguous(cos);
    let sin = into_contiguous(sin);
    let client = x.client.clone();
    let dtype = x.dtype;
    let output = empty_device_dtype(
        client.clone(),
        x.device.clone(),
        Shape::new([batch, heads, seq, d_head]),
        dtype,
    );
    let rows = batch * heads * seq;
    if rows * d_head == 0 {
        return output;
    }
    let u32_of = |v: usize, what: &str| {
        u32::try_from(v).unwrap_or_else(|_| panic!("fused_rope: {what} = {v} exceeds u32"))
    };
    // One unit per `units` (bounded by the kernels themselves), as an elementwise launch.
    let grid = |units: usize| {
        u32_of(units, "the number of units");
        let cube_dim = CubeDim::new(&client, units);
        (
            calculate_cube_count_elemwise(&client, units, cube_dim),
            cube_dim,
        )
    };
    if x.is_contiguous() {
        // Half-split pairs read `N` consecutive lanes of each half; interleaved ones one pair.
        let rot = 2 * pairs;
        let vector_size = match args.layout {
            RotaryLayout::HalfSplit => client
                .io_optimized_vector_sizes(dtype.size())
                .filter(|&n| pairs % n == 0 && (d_head - rot) % n == 0)
                .max()
                .unwrap_or(1),
            RotaryLayout::Interleaved => 1,
        };
        let units_per_row = (d_head - pairs) / vector_size;
        let (cube_count, cube_dim) = grid(rows * units_per_row);
        // SAFETY: `x`, `cos`, `sin` and the output are contiguous with the shapes
        // `check_shapes` accepted, and `N` divides `pairs` and `d_head - 2 * pairs` (so
        // `d_head`): every unit below `rows * units_per_row` reads and writes inside its own
        // row of `d_head / N` vectors, and reads the tables at row `s` (or `b * seq + s` when
        // there is one table per batch row, `cos_rows == batch`) of `pairs / N` vectors.
        unsafe {
            rope_rows_kernel::launch_unchecked(
                &client,
                cube_count,
                cube_dim,
                vector_size,
                x.into_tensor_arg(),
                cos.into_tensor_arg(),
                sin.into_tensor_arg(),
                output.clone().into_tensor_arg(),
                u32_of(rows, "batch * heads * seq"),
                u32_of(units_per_row, "d_head - pairs"),
                u32_of(d_head / vector_size, "d_head"),
                u32_of(heads * seq, "heads * seq"),
                u32_of(seq, "seq"),
                u32_of(pairs / vector_size, "pairs"),
                cos_rows > 1,
                args.layout == RotaryLayout::HalfSplit,
                args.inverse,
                dtype_to_storage_type(dtype),
            );
        }
        return output;
    }
    let units_per_row = d_head - pairs;
    let (cube_count, cube_dim) = grid(rows * units_per_row);
    // SAFETY: `check_shapes` accepted the shapes: every unit below `rows * units_per_row`
    // reads `x` at `(b, h, s, d)` with `d < d_head` through its own strides, `cos` and `sin`
    // (contiguous `[cos_rows, seq, pairs]`) at `(0 or b, s, c)` with `c < pairs` and
    // `cos_rows` 1 or `batch`, and writes the contiguous output at `(b, h, s, d)`.
    unsafe {
        rope_kernel::launch_unchecked(
            &client,
            cube_count,
            cube_dim,
            x.into_tensor_arg(),
            cos.into_tensor_arg(),
            sin.into_tensor_arg(),
            output.clone().into_tensor_arg(),
            u32_of(rows, "batch * heads * seq"),
            u32_of(units_per_row, "d_head - pairs"),
            u32_of(heads, "heads"),
            u32_of(seq, "seq"),
            u32_of(pairs, "pairs"),
            u32_of(cos_rows, "the table's rows"),
            args.layout == RotaryLayout::HalfSplit,
            args.inverse,
            dtype_to_storage_type(dtype),
        );
    }
    output
}

/// RoPE's specializations for the CUDA compile check ([`crate::cuda_check`]): every dtype,
/// both layouts, forward and inverse, the row kernel (vectors of 16 bytes, one or a batch of
/// tables) and the strided one.
#[cfg(feature = "cuda-check")]
pub(crate) fn cuda_cases(target: &crate::cuda_check::Target) -> Vec<crate::cuda_check::Case> {
    use crate::cuda_check::{Case, elementwise_dim, tensor, widest_vector};
    use burn::tensor::DType;
    let mut cases = Vec::new();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for half_split in [true, false] {
            for inverse in [false, true] {
                let spec = format!(
                    "{dtype:?} {}{}",
                    if half_split {
                        "half split"
                    } else {
                        "interleaved"
                    },
                    if inverse { ", inverse" } else { "" }
                );
                for per_batch in [false, true] {
                    cases.push(Case::new(
                        "rope: rows",
                        format!(
                            "{spec}{}",
                            if per_batch {
                                ", a table per sequence"
                            } else {
                                ""
                            }
                        ),
                        false,
                        rope_rows_kernel::create_dummy_kernel(
                            target.properties.clone(),
                            target.target.clone(),
                            CubeCount::Static(1, 1, 1),
                            elementwise_dim(),
                            widest_vector(dtype),
                            tensor(4),
                            tensor(2),
                            tensor(2),
                            tensor(4),
                            1,
                            1,
                            1,
                            1,
                            1,
                            1,
                            per_batch,
                            half_split,
                            inverse,
                            dtype_to_storage_type(dtype),
                        ),
                    ));
                }
                cases.push(Case::new(
                    "rope: strided",
                    spec,
                    false,
                    rope_kernel::create_dummy_kernel(
                        target.properties.clone(),
                        target.target.clone(),
                        CubeCount::Static(1, 1, 1),
                        elementwise_dim(),
                        tensor(4),
                        tensor(2),
                        tensor(2),
                        tensor(4),
                        1,
                        1,
                        1,
                        1,
                        1,
                        1,
                        half_split,
                        inverse,
                        dtype_to_storage_type(dtype),
                    ),
                ));
            }
        }
    }
    cases
}
