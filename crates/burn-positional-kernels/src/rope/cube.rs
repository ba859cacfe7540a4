//! The rotary CubeCL kernel (wgpu, CUDA): one unit per rotated pair of a row, and one per
//! passed-through dimension, reading `x` through its strides and writing a contiguous output.

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]

use burn::backend::{TensorMetadata, cubecl::dtype_to_storage_type};
use burn::tensor::Shape;
use burn_cubecl::{kernel::into_contiguous, ops::numeric::empty_device_dtype, tensor::CubeTensor};
use cubecl::{calculate_cube_count_elemwise, prelude::*};

use super::{RopeArgs, RotaryLayout, check_shapes};

/// Unit `u` of row `row = (b * heads + h) * seq + s` handles column `c = u % units_per_row`:
/// pair `c` when `c < pairs` (reads its two elements of `x` and one angle, writes both
/// rotated), else dimension `2 * pairs + c - pairs`, copied. `cos` and `sin` are contiguous
/// `[cos_rows, seq, pairs]`; the output is contiguous `[batch, heads, seq, d_head]`.
#[cube(launch_unchecked)]
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
    // Each pair is one unit, each passed-through dimension one.
    let units_per_row = d_head - pairs;
    let units = rows * units_per_row;
    if units == 0 {
        return output;
    }
    let u32_of = |v: usize, what: &str| {
        u32::try_from(v).unwrap_or_else(|_| panic!("fused_rope: {what} = {v} exceeds u32"))
    };
    u32_of(units, "the number of units");
    let cube_dim = CubeDim::new(&client, units);
    let cube_count = calculate_cube_count_elemwise(&client, units, cube_dim);
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
