//! CubeCL implementation: one `#[cube(launch_unchecked)]` kernel, one unit per output vector
//! (up to the runtime's widest well-read vector of floats).
//!
//! Implemented for `burn_cubecl::CubeBackend` (every CubeCL runtime: wgpu here, CUDA, ROCm,
//! Metal, the CubeCL CPU runtime). The `Fusion` selector of `#[backend_extension]` generates
//! `impl<B: FusionBackend + PositionalKernels> PositionalKernels for Fusion<B>`, which is what
//! `burn::backend::Cube` is when burn's `fusion` is on (wgpu's default): it registers the op
//! lazily with the output shapes from [`crate::options::meta_sinusoidal`] /
//! [`crate::options::meta_learned`] and calls this implementation when the stream executes.

// Kernel code is CubeCL's Rust subset: one argument per launch value, and `%` rather than
// `is_multiple_of` (not a CubeCL intrinsic).
#![allow(clippy::too_many_arguments, clippy::manual_is_multiple_of)]

use burn::backend::{
    cubecl::dtype_to_storage_type,
    ops::IntTensorOps,
    tensor::{FloatTensor, IntTensor},
};
use burn::tensor::{IntDType, Shape};
use burn_cubecl::{
    CubeBackend, kernel::into_contiguous, ops::numeric::empty_device_dtype, tensor::CubeTensor,
};
use cubecl::{calculate_cube_count_elemwise, prelude::*};

use crate::PositionalKernels;
use crate::options::{FusedCombine, FusedEmbeddingOptions, Sinusoid, check_tensors};

/// One unit per output vector of `N` consecutive columns of one row (`row = b * seq + s`).
///
/// `N` divides `d_token` and `d_position` (the host picks it), so a vector lies wholly in the
/// token part or wholly in the position part of a concatenated row. Inputs are contiguous.
/// `table` is the learned table, or any float tensor (unread) when `learned` is false;
/// `positions` is unread when `sequential` is true. Every read is guarded by the id and
/// position checks, which is what makes the unchecked launch safe. Writes `status[row]` from
/// the unit holding the row's first vector.
#[cube(launch_unchecked)]
fn fused_embedding_kernel<F: Float, I: Numeric, N: Size>(
    tokens: &Tensor<Vector<F, N>>,
    ids: &Tensor<I>,
    positions: &Tensor<I>,
    table: &Tensor<Vector<F, N>>,
    output: &mut Tensor<Vector<F, N>>,
    status: &mut Tensor<I>,
    rows: u32,
    seq: u32,
    vocab: u32,
    d_token_vectors: u32,
    d_position_vectors: u32,
    d_out_vectors: u32,
    d_position: u32,
    position_row_stride: u32,
    table_len: u32,
    offset: i32,
    padding_idx: i32,
    scale: f32,
    log_base: f32,
    #[comptime] learned: bool,
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

    let id = i32::cast_from(ids[row]);
    let mut p = i32::cast_from(s) + offset;
    if !sequential {
        let b = row / seq;
        p = i32::cast_from(positions[b * (position_row_stride as usize) + s]) + offset;
    }
    let id_ok = id >= 0 && id < i32::cast_from(vocab);
    let mut pos_ok = p >= 0;
    if learned {
        pos_ok = pos_ok && p < i32::cast_from(table_len);
    }

    let mut value = Vector::<F, N>::new(F::new(0.0));
    // Token part.
    if col < d_token_vectors && id_ok && id != padding_idx {
        value = tokens[usize::cast_from(id) * d_token_vectors + col]
            * Vector::<F, N>::new(F::cast_from(scale));
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
    if has_position && pos_ok {
        if learned {
            value += table[usize::cast_from(p) * d_position_vectors + j];
        } else {
            // Lane k holds column c = j * N + k: sin(p w) at even c, cos(p w) at odd c, with
            // w = base^(-2 (c / 2) / d) evaluated in f32.
            let n = N::value();
            let mut pe = Vector::<F, N>::new(F::new(0.0));
            #[unroll]
            for k in 0..n {
                let c = j * n + k;
                let exponent = f32::cast_from(2 * (c / 2)) / f32::cast_from(d_position);
                let w = (-(exponent * log_base)).exp();
                let angle = f32::cast_from(p) * w;
                let mut lane = angle.cos();
                if c % 2 == 0 {
                    lane = angle.sin();
                }
                pe.insert(k, F::cast_from(lane));
            }
            value += pe;
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

/// Host side of the launch: checks shapes, makes inputs contiguous, allocates the outputs and
/// launches [`fused_embedding_kernel`].
pub fn launch(
    tokens: CubeTensor,
    ids: CubeTensor,
    positions: CubeTensor,
    table: Option<CubeTensor>,
    sinusoid: Option<Sinusoid>,
    options: &FusedEmbeddingOptions,
) -> (CubeTensor, CubeTensor) {
    let dims = check_tensors(
        &tokens,
        &ids,
        &positions,
        table.as_ref(),
        sinusoid.as_ref(),
        options,
    );
    tokens.assert_is_on_same_device(&ids);
    tokens.assert_is_on_same_device(&positions);

    // One int type `I` in the kernel: positions take the ids' dtype.
    let positions = if positions.dtype != ids.dtype {
        CubeBackend::int_cast(positions, IntDType::from(ids.dtype))
    } else {
        positions
    };
    let tokens = into_contiguous(tokens);
    let ids = into_contiguous(ids);
    let positions = into_contiguous(positions);
    let learned = table.is_some();
    let table = match table {
        Some(table) => {
            tokens.assert_is_on_same_device(&table);
            into_contiguous(table)
        }
        // Unused by the kernel (`learned` is a comptime false); any float binding will do.
        None => tokens.clone(),
    };

    let client = tokens.client.clone();
    let device = tokens.device.clone();
    let (float_dtype, int_dtype) = (tokens.dtype, ids.dtype);
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
        return (output, status);
    }
    let cube_dim = CubeDim::new(&client, working_units);
    let cube_count = calculate_cube_count_elemwise(&client, working_units, cube_dim);
    let base = sinusoid.map_or(10_000.0, |s| s.base);
    let u32_of = |v: usize, what: &str| {
        u32::try_from(v).unwrap_or_else(|_| panic!("fused_embedding: {what} = {v} exceeds u32"))
    };
    u32_of(working_units, "the number of output vectors");
    u32_of(dims.vocab * dims.d_token, "the token table's size");

    // SAFETY: every tensor is contiguous with the shape `check_tensors` accepted; the kernel
    // bounds its units by the output's vector count, reads a token row only for an id in
    // `0..vocab` and a table row only for a position in `0..max_len`, and reads `positions` at
    // `[0 or b, s]` of a `[1 or batch, seq]` tensor (or not at all when sequential).
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
            u32_of(dims.vocab, "vocab"),
            u32_of(dims.d_token / vector_size, "d_token"),
            u32_of(dims.d_position / vector_size, "d_position"),
            u32_of(dims.d_out / vector_size, "d_out"),
            u32_of(dims.d_position, "d_position"),
            if dims.position_rows == 1 {
                0
            } else {
                u32_of(dims.seq, "seq")
            },
            u32_of(dims.table_len.unwrap_or(0), "max_len"),
            i32::try_from(options.offset).expect("fused_embedding: offset exceeds i32"),
            options
                .padding_idx
                .map_or(-1, |p| i32::try_from(p).expect("padding_idx exceeds i32")),
            options.scale,
            base.ln() as f32,
            learned,
            options.combine == FusedCombine::Concat,
            options.sequential_positions,
            [
                dtype_to_storage_type(float_dtype),
                dtype_to_storage_type(int_dtype),
            ],
        );
    }
    (output, status)
}

impl PositionalKernels for CubeBackend {
    fn fused_embedding_sinusoidal(
        tokens: FloatTensor<Self>,
        ids: IntTensor<Self>,
        positions: IntTensor<Self>,
        options: FusedEmbeddingOptions,
        sinusoid: Sinusoid,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        launch(tokens, ids, positions, None, Some(sinusoid), &options)
    }

    fn fused_embedding_learned(
        tokens: FloatTensor<Self>,
        ids: IntTensor<Self>,
        positions: IntTensor<Self>,
        table: FloatTensor<Self>,
        options: FusedEmbeddingOptions,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        launch(tokens, ids, positions, Some(table), None, &options)
    }
}
