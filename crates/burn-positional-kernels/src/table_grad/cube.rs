//! The table gradient as CubeCL kernels (wgpu, CUDA): a counting sort of the tokens by row,
//! then one unit per output vector summing its row's tokens in token order.
//!
//! On NVIDIA GPUs (NVRTC for `sm_90` and `sm_80`, `docs/gpu.md`): every launch is 256 units a
//! cube with at most 32 registers a unit (the scan: 1 KiB of shared memory), 100 % theoretical
//! occupancy.
//!
//! Launches, in order (`n` tokens, `rows` table rows):
//!
//! 1. [`count_kernel`], a unit per token: `counts[row] += 1` (an integer atomic);
//! 2. [`scan_kernel`], one cube: `starts` = the exclusive prefix sum of `counts` (with the total
//!    at `starts[rows]`), and `counts` back to zero;
//! 3. [`fill_kernel`], a unit per token: a slot of its row's segment (`starts[row]` plus an
//!    atomic cursor): the segment holds the row's tokens in an order that varies between runs;
//! 4. [`order_kernel`], a unit per token: its rank among the tokens of its segment (how many
//!    are smaller) places it in `sorted`, the segment in token order. Linear in the segment per
//!    token: a row updated by `m` tokens costs `m²` comparisons in all (a batch of one repeated
//!    token, 32,768 times: about 10⁹, spread over 32,768 units);
//! 5. [`sum_kernel`], a unit per output vector `[row, columns]`: the f32 sum of its row's
//!    gradient vectors in `sorted` order, times the scale, written once in the gradient's
//!    dtype. Units of one row read one token's gradient row side by side (coalesced).
//!
//! Every launch is bounded by its unit count and reads only inside its tensors: ids and
//! positions are compared with `0..rows` in their own int type before any index is formed.

// Kernel code is CubeCL's Rust subset: one argument per launch value, and `%` rather than
// `is_multiple_of` (not a CubeCL intrinsic).
#![allow(clippy::too_many_arguments, clippy::manual_is_multiple_of)]

use burn::backend::cubecl::dtype_to_storage_type;
use burn::tensor::{DType, Shape};
use burn_cubecl::{
    kernel::into_contiguous,
    ops::numeric::{empty_device_dtype, zeros_client},
    tensor::CubeTensor,
};
use cubecl::{calculate_cube_count_elemwise, prelude::*};

use super::{GradDims, TableGradArgs, check};

/// Units of the scan's single cube.
const SCAN_UNITS: usize = 256;

/// What every token kernel knows of the launch: how many tokens, how the index is laid out,
/// the table's rows and the skipped one.
#[derive(CubeType, CubeLaunch, Clone)]
struct Tokens {
    /// `batch * seq`: the units that do something.
    count: u32,
    seq: u32,
    /// `seq` for a `[batch, seq]` index, 0 for a `[1, seq]` one shared by the batch.
    index_stride: u32,
    /// Rows of the table; also the "no row" answer of [`row_of`].
    rows: u32,
    /// The skipped row (the padding id), or `rows` for none.
    skip: u32,
}

/// The table row token `t` updates, or `rows` when it updates none (an index outside
/// `0..rows`, compared in the index's own int type, or the skipped row).
#[cube]
fn row_of<I: Int>(index: &Tensor<I>, t: usize, at: &Tokens) -> u32 {
    let seq = at.seq as usize;
    let s = t % seq;
    let b = t / seq;
    let v = index[b * (at.index_stride as usize) + s];
    let mut row = at.rows;
    if v >= I::cast_from(0u32) && v < I::cast_from(at.rows) {
        let r = u32::cast_from(v);
        if r != at.skip {
            row = r;
        }
    }
    row
}

/// Unit per token: one more token for its row.
#[cube(launch_unchecked, create_dummy_kernel)]
fn count_kernel<I: Int>(
    index: &Tensor<I>,
    counts: &mut Tensor<Atomic<u32>>,
    at: Tokens,
    #[define(I)] _dtype: ElemType,
) {
    if ABSOLUTE_POS >= at.count as usize {
        terminate!();
    }
    let row = row_of::<I>(index, ABSOLUTE_POS, &at);
    if row < at.rows {
        counts[row as usize].fetch_add(1u32);
    }
}

/// One cube of `units`: unit `u` sums a run of consecutive counts, the cube scans the sums in
/// shared memory (Hillis and Steele), and each unit writes its run's exclusive prefix sums to
/// `starts` (the total at `starts[rows]`) and zeros its counts for the fill's cursors.
#[cube(launch_unchecked, create_dummy_kernel)]
fn scan_kernel(
    counts: &mut Tensor<u32>,
    starts: &mut Tensor<u32>,
    rows: u32,
    #[comptime] units: usize,
) {
    let unit = UNIT_POS_X as usize;
    let rows = rows as usize;
    let run = (rows + units - 1) / units;
    let mut begin = unit * run;
    if begin > rows {
        begin = rows;
    }
    let mut end = begin + run;
    if end > rows {
        end = rows;
    }
    let mut own = 0u32;
    for i in begin..end {
        own += counts[i];
    }
    let mut sums = Shared::<[u32]>::new_slice(units);
    sums[unit] = own;
    sync_cube();
    let mut step = 1usize;
    while step < units {
        let mut add = 0u32;
        if unit >= step {
            add = sums[unit - step];
        }
        sync_cube();
        sums[unit] += add;
        sync_cube();
        step *= 2;
    }
    let mut running = sums[unit] - own;
    for i in begin..end {
        let c = counts[i];
        starts[i] = running;
        running += c;
        counts[i] = 0u32;
    }
    if unit == units - 1 {
        starts[rows] = sums[unit];
    }
}

/// Unit per token: a slot in its row's segment.
#[cube(launch_unchecked, create_dummy_kernel)]
fn fill_kernel<I: Int>(
    index: &Tensor<I>,
    starts: &Tensor<u32>,
    cursors: &mut Tensor<Atomic<u32>>,
    segments: &mut Tensor<u32>,
    at: Tokens,
    #[define(I)] _dtype: ElemType,
) {
    if ABSOLUTE_POS >= at.count as usize {
        terminate!();
    }
    let row = row_of::<I>(index, ABSOLUTE_POS, &at);
    if row < at.rows {
        let slot = starts[row as usize] + cursors[row as usize].fetch_add(1u32);
        segments[slot as usize] = ABSOLUTE_POS as u32;
    }
}

/// Unit per token: its place in its row's segment in token order (its rank among the tokens
/// of the segment).
#[cube(launch_unchecked, create_dummy_kernel)]
fn order_kernel<I: Int>(
    index: &Tensor<I>,
    starts: &Tensor<u32>,
    segments: &Tensor<u32>,
    sorted: &mut Tensor<u32>,
    at: Tokens,
    #[define(I)] _dtype: ElemType,
) {
    if ABSOLUTE_POS >= at.count as usize {
        terminate!();
    }
    let row = row_of::<I>(index, ABSOLUTE_POS, &at);
    if row < at.rows {
        let t = ABSOLUTE_POS as u32;
        let begin = starts[row as usize];
        let end = starts[row as usize + 1];
        let mut rank = 0u32;
        for e in begin..end {
            if segments[e as usize] < t {
                rank += 1;
            }
        }
        sorted[(begin + rank) as usize] = t;
    }
}

/// Unit per output vector: `scale` times the f32 sum of the row's gradient vectors, in token
/// order, written in `F`.
#[cube(launch_unchecked, create_dummy_kernel)]
fn sum_kernel<F: Float, N: Size>(
    grad: &Tensor<Vector<F, N>>,
    starts: &Tensor<u32>,
    sorted: &Tensor<u32>,
    output: &mut Tensor<Vector<F, N>>,
    rows: u32,
    width_vectors: u32,
    d_out_vectors: u32,
    first_vector: u32,
    scale: f32,
    #[define(F)] _dtype: ElemType,
) {
    let width_vectors = width_vectors as usize;
    if ABSOLUTE_POS >= (rows as usize) * width_vectors {
        terminate!();
    }
    let row = ABSOLUTE_POS / width_vectors;
    let column = (first_vector as usize) + ABSOLUTE_POS % width_vectors;
    let d_out_vectors = d_out_vectors as usize;
    let mut sum = Vector::<f32, N>::new(0.0);
    for e in starts[row]..starts[row + 1] {
        let t = sorted[e as usize] as usize;
        sum += Vector::<f32, N>::cast_from(grad[t * d_out_vectors + column]);
    }
    output[ABSOLUTE_POS] = Vector::<F, N>::cast_from(sum * Vector::<f32, N>::new(scale));
}

/// Host side: checks, buffers, the five launches. Returns `[rows, width]` in the gradient's
/// dtype.
pub(crate) fn launch(grad: CubeTensor, index: CubeTensor, args: &TableGradArgs) -> CubeTensor {
    let GradDims {
        batch,
        seq,
        d_out,
        index_rows,
    } = check(
        (&grad.meta.shape().clone(), grad.dtype),
        (&index.meta.shape().clone(), index.dtype),
        args,
    );
    grad.assert_is_on_same_device(&index);
    let client = grad.client.clone();
    let device = grad.device.clone();
    let float_dtype = grad.dtype;
    let TableGradArgs {
        rows, first, width, ..
    } = *args;
    let output = empty_device_dtype(
        client.clone(),
        device.clone(),
        Shape::new([rows, width]),
        float_dtype,
    );
    let n = batch * seq;
    let u32_of = |v: usize, what: &str| {
        u32::try_from(v).unwrap_or_else(|_| panic!("table_grad: {what} = {v} exceeds u32"))
    };
    u32_of(n * d_out, "the gradient's size");
    u32_of(rows * width, "the table's size");
    assert!(
        rows < i32::MAX as usize,
        "table_grad: tables of i32::MAX rows or more are not supported"
    );
    if rows * width == 0 {
        return output;
    }
    if n == 0 {
        return zeros_client(client, device, Shape::new([rows, width]), float_dtype);
    }
    let grad = into_contiguous(grad);
    let index = into_contiguous(index);
    let int_dtype = dtype_to_storage_type(index.dtype);
    let buffer = |len: usize| {
        empty_device_dtype(
            client.clone(),
            device.clone(),
            Shape::new([len]),
            DType::U32,
        )
    };
    let counts = zeros_client(
        client.clone(),
        device.clone(),
        Shape::new([rows]),
        DType::U32,
    );
    let starts = buffer(rows + 1);
    let segments = buffer(n);
    let sorted = buffer(n);

    let seq_u32 = u32_of(seq, "seq");
    let rows_u32 = u32_of(rows, "rows");
    let tokens = || {
        TokensLaunch::new(
            u32_of(n, "batch * seq"),
            seq_u32,
            if index_rows == 1 { 0 } else { seq_u32 },
            rows_u32,
            // A skipped row outside the table is no skip: `rows` is the kernels' "no row".
            args.skip
                .filter(|&s| s < rows)
                .map_or(rows_u32, |s| s as u32),
        )
    };
    let token_dim = CubeDim::new(&client, n);
    let token_count = calculate_cube_count_elemwise(&client, n, token_dim);

    // SAFETY: every tensor is contiguous; the token kernels stop at `count = batch * seq` units
    // and read the index at `[0 or b, s]` of a `[1 or batch, seq]` tensor; a row is formed only
    // from an index in `0..rows` (compared in the index's int type), so `counts`, `cursors` and
    // `starts` (`rows + 1` long) are read in range; a segment slot is `starts[row]` plus fewer
    // than `counts[row]` (the tokens of that row), so below `starts[rows] <= tokens`; the scan's
    // one cube of `SCAN_UNITS` units reads and writes `counts[0..rows]` and `starts[0..=rows]`.
    unsafe {
        count_kernel::launch_unchecked(
            &client,
            token_count.clone(),
            token_dim,
            index.clone().into_tensor_arg(),
            counts.clone().into_tensor_arg(),
            tokens(),
            int_dtype,
        );
        scan_kernel::launch_unchecked(
            &client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(SCAN_UNITS as u32),
            counts.clone().into_tensor_arg(),
            starts.clone().into_tensor_arg(),
            rows_u32,
            SCAN_UNITS,
        );
        fill_kernel::launch_unchecked(
            &client,
            token_count.clone(),
            token_dim,
            index.clone().into_tensor_arg(),
            starts.clone().into_tensor_arg(),
            counts.clone().into_tensor_arg(),
            segments.clone().into_tensor_arg(),
            tokens(),
            int_dtype,
        );
        order_kernel::launch_unchecked(
            &client,
            token_count,
            token_dim,
            index.into_tensor_arg(),
            starts.clone().into_tensor_arg(),
            segments.into_tensor_arg(),
            sorted.clone().into_tensor_arg(),
            tokens(),
            int_dtype,
        );
    }

    // The widest vector the runtime reads well that divides the table's columns and the
    // gradient's row (so a vector never straddles two tables of a concatenated row).
    let vector_size = client
        .io_optimized_vector_sizes(float_dtype.size())
        .filter(|&v| width % v == 0 && first % v == 0 && d_out % v == 0)
        .max()
        .unwrap_or(1);
    let units = rows * width / vector_size;
    let sum_dim = CubeDim::new(&client, units);
    let sum_count = calculate_cube_count_elemwise(&client, units, sum_dim);
    // SAFETY: units stop at `rows * width / vector_size` output vectors; `starts` has `rows + 1`
    // entries and `sorted[starts[r]..starts[r + 1]]` holds tokens `< batch * seq` (written by
    // the order kernel for every slot below `starts[rows]`); a token's vector column
    // `first / v + c < d_out / v` lies inside its gradient row.
    unsafe {
        sum_kernel::launch_unchecked(
            &client,
            sum_count,
            sum_dim,
            vector_size,
            grad.into_tensor_arg(),
            starts.into_tensor_arg(),
            sorted.into_tensor_arg(),
            output.clone().into_tensor_arg(),
            rows_u32,
            u32_of(width / vector_size, "width"),
            u32_of(d_out / vector_size, "d_out"),
            u32_of(first / vector_size, "first"),
            args.scale,
            dtype_to_storage_type(float_dtype),
        );
    }
    output
}

/// The table gradient's specializations for the CUDA compile check ([`crate::cuda_check`]):
/// the four token kernels for both int widths, the scan, and the sum for every dtype at
/// vectors of 16 bytes.
#[cfg(feature = "cuda-check")]
pub(crate) fn cuda_cases(target: &crate::cuda_check::Target) -> Vec<crate::cuda_check::Case> {
    use crate::cuda_check::{Case, elementwise_dim, tensor, widest_vector};
    let (properties, target_properties) = (&target.properties, &target.target);
    let tokens = || TokensLaunch::new(1, 1, 1, 1, 1);
    let one = || CubeCount::Static(1, 1, 1);
    let mut cases = Vec::new();
    for int in [DType::I32, DType::I64] {
        let int_type = dtype_to_storage_type(int);
        let spec = format!("index {int:?}");
        cases.push(Case::new(
            "table gradient: count",
            spec.clone(),
            false,
            count_kernel::create_dummy_kernel(
                properties.clone(),
                target_properties.clone(),
                one(),
                elementwise_dim(),
                tensor(2),
                tensor(1),
                tokens(),
                int_type,
            ),
        ));
        cases.push(Case::new(
            "table gradient: fill",
            spec.clone(),
            false,
            fill_kernel::create_dummy_kernel(
                properties.clone(),
                target_properties.clone(),
                one(),
                elementwise_dim(),
                tensor(2),
                tensor(1),
                tensor(1),
                tensor(1),
                tokens(),
                int_type,
            ),
        ));
        cases.push(Case::new(
            "table gradient: order",
            spec,
            false,
            order_kernel::create_dummy_kernel(
                properties.clone(),
                target_properties.clone(),
                one(),
                elementwise_dim(),
                tensor(2),
                tensor(1),
                tensor(1),
                tensor(1),
                tokens(),
                int_type,
            ),
        ));
    }
    cases.push(Case::new(
        "table gradient: scan",
        format!("{SCAN_UNITS} units"),
        false,
        scan_kernel::create_dummy_kernel(
            properties.clone(),
            target_properties.clone(),
            one(),
            CubeDim::new_1d(SCAN_UNITS as u32),
            tensor(1),
            tensor(1),
            1,
            SCAN_UNITS,
        ),
    ));
    for float in [DType::F32, DType::F16, DType::BF16] {
        cases.push(Case::new(
            "table gradient: sum",
            format!("{float:?}"),
            false,
            sum_kernel::create_dummy_kernel(
                properties.clone(),
                target_properties.clone(),
                one(),
                elementwise_dim(),
                widest_vector(float),
                tensor(3),
                tensor(1),
                tensor(1),
                tensor(2),
                1,
                1,
                1,
                0,
                1.0,
                dtype_to_storage_type(float),
            ),
        ));
    }
    cases
}
