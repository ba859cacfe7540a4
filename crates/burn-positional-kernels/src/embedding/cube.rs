//! The embedding as one CubeCL kernel (wgpu, CUDA): one `#[cube(launch_unchecked)]` kernel, one
//! unit per output vector (up to the runtime's widest well-read vector of floats), launched for
//! `burn_cubecl::CubeBackend` by `crate::cube`.
//!
//! On NVIDIA GPUs (NVRTC for `sm_90` and `sm_80`, `docs/gpu.md`): cubes of 256 units
//! (`CubeDim::new` for a large output), 19 to 27 registers a unit, no shared memory: 100 %
//! theoretical occupancy for every table dtype, id width and combine.

// Kernel code is CubeCL's Rust subset: one argument per launch value, and `%` rather than
// `is_multiple_of` (not a CubeCL intrinsic).
#![allow(clippy::too_many_arguments, clippy::manual_is_multiple_of)]

use burn::backend::{cubecl::dtype_to_storage_type, ops::IntTensorOps};
use burn::tensor::{DType, IntDType, Shape};
use burn_cubecl::{
    CubeBackend, kernel::into_contiguous, ops::numeric::empty_device_dtype, tensor::CubeTensor,
};
use cubecl::{calculate_cube_count_elemwise, prelude::*};

use super::options::{Combine, KernelArgs, check_tensors};

/// One unit per output vector of `N` consecutive columns of one row (`row = b * seq + s`).
///
/// `N` divides `d_token` and `d_position` (the host picks it), so a vector lies wholly in the
/// token part or wholly in the position part of a concatenated row. Inputs are contiguous.
/// `positions` is unread when `sequential` is true. Ids and positions are compared in their
/// own int type `I` before any index is formed, and every read is guarded by those checks,
/// which is what makes the unchecked launch safe. A part with no valid source is `nan` (passed
/// at run time: WGSL has no NaN literal). Writes `status[row]` from the unit holding the row's
/// first vector.
#[cube(launch_unchecked, create_dummy_kernel)]
fn fused_embedding_kernel<F: Float, I: Int, N: Size>(
    tokens: &Tensor<Vector<F, N>>,
    ids: &Tensor<I>,
    positions: &Tensor<I>,
    table: &Tensor<Vector<F, N>>,
    output: &mut Tensor<Vector<F, N>>,
    status: &mut Tensor<I>,
    rows: u32,
    seq: u32,
    vocab_size: u32,
    d_token_vectors: u32,
    d_position_vectors: u32,
    d_out_vectors: u32,
    position_row_stride: u32,
    max_len: u32,
    offset: i32,
    scale: f32,
    nan: f32,
    #[comptime] concat: bool,
    #[comptime] sequential: bool,
    #[define(F, I)] _dtypes: [ElemType; 2],
) {
    let d_out_vectors = d_out_vectors as usize;
    if ABSOLUTE_POS >= (rows as usize) * d_out_vectors {
        terminate!();
    }
    let d_token_vectors = d_token_vectors as usize;
    let d_position_vectors = d_position_vectors as usize;
    let seq = seq as usize;
    let row = ABSOLUTE_POS / d_out_vectors;
    let col = ABSOLUTE_POS % d_out_vectors;
    let s = row % seq;

    let zero = I::cast_from(0u32);
    let id = ids[row];
    let mut p = I::cast_from(s) + I::cast_from(offset);
    if !sequential {
        let b = row / seq;
        p = positions[b * (position_row_stride as usize) + s];
    }
    let id_ok = id >= zero && id < I::cast_from(vocab_size);
    let pos_ok = p >= zero && p < I::cast_from(max_len);
    let nan = Vector::<F, N>::new(F::cast_from(nan));

    let mut value = Vector::<F, N>::new(F::new(0.0));
    // Token part.
    if col < d_token_vectors {
        // The padding id's row as stored (PyTorch's `padding_idx`): only its gradient differs.
        if !id_ok {
            value = nan;
        } else {
            value = tokens[usize::cast_from(id) * d_token_vectors + col]
                * Vector::<F, N>::new(F::cast_from(scale));
        }
    }
    // Position part: every column for Add, columns d_token.. for Concat.
    let mut has_position = true;
    let mut j = col;
    if concat {
        has_position = col >= d_token_vectors;
        if has_position {
            j = col - d_token_vectors;
        }
    }
    if has_position {
        if pos_ok {
            value += table[usize::cast_from(p) * d_position_vectors + j];
        } else {
            value = nan;
        }
    }
    output[ABSOLUTE_POS] = value;

    if col == 0 {
        let mut code = 0u32;
        if !id_ok {
            code += 1;
        }
        if !pos_ok {
            code += 2;
        }
        status[row] = I::cast_from(code);
    }
}

/// Host side of the launch: checks shapes and dtypes, makes inputs contiguous, allocates the
/// outputs and launches [`fused_embedding_kernel`].
pub(crate) fn launch(
    tokens: CubeTensor,
    ids: CubeTensor,
    positions: CubeTensor,
    table: CubeTensor,
    args: &KernelArgs,
) -> (CubeTensor, CubeTensor) {
    let dims = check_tensors(&tokens, &ids, &positions, &table, args);
    tokens.assert_is_on_same_device(&ids);
    tokens.assert_is_on_same_device(&positions);
    tokens.assert_is_on_same_device(&table);

    // One int type `I` in the kernel, the wider of the two: widening never changes a value, so
    // ids and positions are still compared in (at least) their own width.
    let int_dtype =
        if ids.dtype == DType::I64 || (!args.sequential() && positions.dtype == DType::I64) {
            DType::I64
        } else {
            DType::I32
        };
    let widen = |t: CubeTensor| {
        if t.dtype == int_dtype {
            t
        } else {
            CubeBackend::int_cast(t, IntDType::from(int_dtype))
        }
    };
    let status_dtype = ids.dtype;
    let tokens = into_contiguous(tokens);
    let ids = into_contiguous(widen(ids));
    let positions = if args.sequential() {
        // Unread: the ids stand in, with the kernel's int type.
        ids.clone()
    } else {
        into_contiguous(widen(positions))
    };
    let table = into_contiguous(table);

    let client = tokens.client.clone();
    let device = tokens.device.clone();
    let float_dtype = tokens.dtype;
    let output = empty_device_dtype(
        client.clone(),
        device.clone(),
        Shape::new([dims.batch, dims.seq, dims.d_out]),
        float_dtype,
    );
    let status = empty_device_dtype(
        client.clone(),
        device,
        Shape::new([dims.batch, dims.seq]),
        int_dtype,
    );

    // The widest vector the runtime reads well that divides both parts of a row.
    let vector_size = client
        .io_optimized_vector_sizes(float_dtype.size())
        .filter(|&n| dims.d_token % n == 0 && dims.d_position % n == 0)
        .max()
        .unwrap_or(1);
    let rows = dims.batch * dims.seq;
    let working_units = rows * dims.d_out / vector_size;
    if working_units == 0 {
        return (output, narrow(status, status_dtype));
    }
    let cube_dim = CubeDim::new(&client, working_units);
    let cube_count = calculate_cube_count_elemwise(&client, working_units, cube_dim);
    let u32_of = |v: usize, what: &str| {
        u32::try_from(v).unwrap_or_else(|_| panic!("fused_embedding: {what} = {v} exceeds u32"))
    };
    u32_of(working_units, "the number of output vectors");
    u32_of(dims.vocab_size * dims.d_token, "the token table's size");
    u32_of(dims.max_len * dims.d_position, "the position table's size");
    assert!(
        dims.vocab_size <= i32::MAX as usize && dims.max_len <= i32::MAX as usize,
        "fused_embedding: tables of more than i32::MAX rows are not supported"
    );

    // SAFETY: every tensor is contiguous with the shape `check_tensors` accepted; the kernel
    // bounds its units by the output's vector count, reads a token row only for an id in
    // `0..vocab_size` and a table row only for a position in `0..max_len` (both compared in the
    // kernel's int type, at least as wide as the input's), and reads `positions` at
    // `[0 or b, s]` of a `[1 or batch, seq]` tensor (or not at all when sequential). The offset
    // fits i32 with `offset + seq` (checked by `api::kernel_args`).
    unsafe {
        fused_embedding_kernel::launch_unchecked(
            &client,
            cube_count,
            cube_dim,
            vector_size,
            tokens.into_tensor_arg(),
            ids.into_tensor_arg(),
            positions.into_tensor_arg(),
            table.into_tensor_arg(),
            output.clone().into_tensor_arg(),
            status.clone().into_tensor_arg(),
            u32_of(rows, "batch * seq"),
            u32_of(dims.seq, "seq"),
            u32_of(dims.vocab_size, "vocab_size"),
            u32_of(dims.d_token / vector_size, "d_token"),
            u32_of(dims.d_position / vector_size, "d_position"),
            u32_of(dims.d_out / vector_size, "d_out"),
            if dims.position_rows == 1 {
                0
            } else {
                u32_of(dims.seq, "seq")
            },
            u32_of(dims.max_len, "max_len"),
            i32::try_from(args.offset()).expect("fused_embedding: offset exceeds i32"),
            args.options.scale,
            f32::NAN,
            matches!(args.options.combine, Combine::Concat { .. }),
            args.sequential(),
            [
                dtype_to_storage_type(float_dtype),
                dtype_to_storage_type(int_dtype),
            ],
        );
    }
    (output, narrow(status, status_dtype))
}

/// The status in the ids' dtype (the kernel wrote it in its int type).
fn narrow(status: CubeTensor, dtype: DType) -> CubeTensor {
    if status.dtype == dtype {
        status
    } else {
        CubeBackend::int_cast(status, IntDType::from(dtype))
    }
}

/// The embedding's specializations for the CUDA compile check ([`crate::cuda_check`]): every
/// table dtype, both int widths, add and concatenate, sequential and explicit positions, at
/// the widest vector an NVIDIA GPU reads well (16 bytes).
#[cfg(feature = "cuda-check")]
pub(crate) fn cuda_cases(target: &crate::cuda_check::Target) -> Vec<crate::cuda_check::Case> {
    use crate::cuda_check::{Case, elementwise_dim, tensor, widest_vector};
    let mut cases = Vec::new();
    for float in [DType::F32, DType::F16, DType::BF16] {
        for int in [DType::I32, DType::I64] {
            for (concat, sequential) in [(false, true), (false, false), (true, true)] {
                cases.push(Case::new(
                    "embedding forward",
                    format!(
                        "{float:?} ids {int:?}, {}, {} positions",
                        if concat { "concatenate" } else { "add" },
                        if sequential { "sequential" } else { "explicit" }
                    ),
                    false,
                    fused_embedding_kernel::create_dummy_kernel(
                        target.properties.clone(),
                        target.target.clone(),
                        CubeCount::Static(1, 1, 1),
                        elementwise_dim(),
                        widest_vector(float),
                        tensor(2),
                        tensor(2),
                        tensor(2),
                        tensor(2),
                        tensor(3),
                        tensor(2),
                        1,
                        1,
                        1,
                        1,
                        1,
                        1,
                        0,
                        1,
                        0,
                        1.0,
                        f32::NAN,
                        concat,
                        sequential,
                        [dtype_to_storage_type(float), dtype_to_storage_type(int)],
                    ),
                ));
            }
        }
    }
    cases
}
