//! Multi-threaded Rust implementation for the CPU backends (flex and ndarray).
//!
//! Both backends keep their tensors in host memory; the op borrows the token table, the
//! learned table, the ids and the positions where they are contiguous (f32; i32 or i64), and
//! writes each output row once, on the calling thread for small outputs and on rayon workers
//! for large ones. The row loops are compiled for each SIMD level and picked at run time
//! (`multiversion`). Sinusoidal values are evaluated in f64 and rounded once to f32, exactly as
//! the unfused layer's `sinusoid_rows` does.

use std::borrow::Cow;
use std::mem::MaybeUninit;

use burn::backend::{
    Flex, TensorMetadata,
    flex::FlexTensor,
    tensor::{FloatTensor, IntTensor},
};
use burn::tensor::{DType, TensorData};
use multiversion::multiversion;
use rayon::prelude::*;

use crate::PositionalKernels;
use crate::options::{
    Dims, FusedCombine, FusedEmbeddingOptions, STATUS_BAD_ID, STATUS_BAD_POSITION, Sinusoid,
    check_tensors,
};

/// Outputs with fewer elements than this are written on the calling thread.
const PARALLEL_FROM: usize = 1 << 18;

/// Position source, borrowed.
pub enum HostPosition<'a> {
    /// Frequencies `w_i` in f64.
    Sinusoidal(Vec<f64>),
    /// Row-major `[max_len, d_position]`.
    Learned(&'a [f32]),
}

/// Integer values (ids, positions) as a backend stores them: borrowed i32 or i64, or a
/// converted copy.
pub enum Ints<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
    Owned(Vec<i64>),
}

impl Ints<'_> {
    pub fn len(&self) -> usize {
        match self {
            Self::I32(v) => v.len(),
            Self::I64(v) => v.len(),
            Self::Owned(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn at(&self, i: usize) -> i64 {
        match self {
            Self::I32(v) => i64::from(v[i]),
            Self::I64(v) => v[i],
            Self::Owned(v) => v[i],
        }
    }
}

/// The fused op on host slices. Returns the `[batch, seq, d_out]` output and the `[batch, seq]`
/// status, both row-major.
pub fn fused_embedding_host(
    dims: Dims,
    tokens: &[f32],
    ids: &Ints<'_>,
    positions: &Ints<'_>,
    position: &HostPosition<'_>,
    options: &FusedEmbeddingOptions,
) -> (Vec<f32>, Vec<i32>) {
    let Dims {
        vocab,
        d_token,
        batch,
        seq,
        position_rows,
        d_position,
        table_len,
        d_out,
    } = dims;
    assert_eq!(tokens.len(), vocab * d_token);
    assert_eq!(ids.len(), batch * seq);
    assert!(options.sequential_positions || positions.len() == position_rows * seq);
    let output_len = batch * seq * d_out;
    // Left uninitialized: every row writes all of its columns first (below), so the output is
    // written once rather than zeroed and then written.
    let mut output: Vec<MaybeUninit<f32>> = Vec::with_capacity(output_len);
    // SAFETY: `MaybeUninit<f32>` has no validity requirement, and the capacity is reserved.
    unsafe { output.set_len(output_len) };
    let mut status = vec![0i32; batch * seq];
    let padding = options.padding_idx.map(|p| p as i64);
    let (pos_offset, tok_end) = match options.combine {
        FusedCombine::Add => (0, d_token),
        FusedCombine::Concat => (d_token, d_token),
    };

    let write_row = |row: usize, (out, flag): (&mut [MaybeUninit<f32>], &mut i32)| {
        let (b, s) = (row / seq, row % seq);
        let id = ids.at(row);
        let p = if options.sequential_positions {
            s as i64
        } else {
            let p_row = if position_rows == 1 { 0 } else { b };
            positions.at(p_row * seq + s)
        } + options.offset;
        let id_ok = id >= 0 && (id as u64) < vocab as u64;
        let pos_ok = p >= 0 && table_len.is_none_or(|len| (p as u64) < len as u64);
        *flag = (if id_ok { 0 } else { STATUS_BAD_ID }
            + if pos_ok { 0 } else { STATUS_BAD_POSITION }) as i32;

        let has_token = id_ok && Some(id) != padding;
        let token_row = || &tokens[id as usize * d_token..(id as usize + 1) * d_token];
        // The common case in one pass: a learned row added to a token row.
        if let (FusedCombine::Add, HostPosition::Learned(table), true, true) =
            (options.combine, position, has_token, pos_ok)
        {
            let pos = &table[p as usize * d_position..(p as usize + 1) * d_position];
            scaled_sum(out, token_row(), options.scale, pos);
            return;
        }
        // Every column is written here: the token part (zero for padding and bad ids), and
        // zeros for a concatenated position part.
        let (token_part, rest) = out.split_at_mut(tok_end);
        if has_token {
            scaled_copy(token_part, token_row(), options.scale);
        } else {
            token_part.fill(MaybeUninit::new(0.0));
        }
        rest.fill(MaybeUninit::new(0.0));
        // SAFETY: every element of the row was initialized just above, and `MaybeUninit<f32>`
        // has the layout of `f32`.
        let out: &mut [f32] = unsafe { &mut *(out as *mut [MaybeUninit<f32>] as *mut [f32]) };
        if !pos_ok {
            return;
        }
        let dst = &mut out[pos_offset..pos_offset + d_position];
        match position {
            HostPosition::Sinusoidal(freqs) => {
                for (pair, &w) in dst.chunks_exact_mut(2).zip(freqs) {
                    let (sin, cos) = (p as f64 * w).sin_cos();
                    pair[0] += sin as f32;
                    pair[1] += cos as f32;
                }
            }
            HostPosition::Learned(table) => {
                add_assign(
                    dst,
                    &table[p as usize * d_position..(p as usize + 1) * d_position],
                );
            }
        }
    };
    let rows = output.chunks_mut(d_out.max(1)).zip(status.iter_mut());
    if output_len < PARALLEL_FROM {
        // Small outputs: waking the thread pool costs more than the work.
        rows.enumerate()
            .for_each(|(row, pair)| write_row(row, pair));
    } else {
        output
            .par_chunks_mut(d_out.max(1))
            .zip(status.par_iter_mut())
            .enumerate()
            .for_each(|(row, pair)| write_row(row, pair));
    }
    // SAFETY: every row, and so every element, was initialized by `write_row`; the buffer is
    // reinterpreted with its own length and capacity.
    let output = unsafe {
        let mut output = std::mem::ManuallyDrop::new(output);
        Vec::from_raw_parts(
            output.as_mut_ptr().cast::<f32>(),
            output.len(),
            output.capacity(),
        )
    };
    (output, status)
}

// The per-row loops, compiled for the baseline target and for each SIMD level the CPU may
// have (AVX2, AVX-512, ...); `multiversion` picks one at run time, once. The plain loops
// vectorize to the widest registers of the selected target.

/// `out[i] = tokens[i] * scale + positions[i]`.
#[multiversion(targets = "simd")]
fn scaled_sum(out: &mut [MaybeUninit<f32>], tokens: &[f32], scale: f32, positions: &[f32]) {
    for ((o, &t), &q) in out.iter_mut().zip(tokens).zip(positions) {
        o.write(t * scale + q);
    }
}

/// `out[i] = tokens[i] * scale`.
#[multiversion(targets = "simd")]
fn scaled_copy(out: &mut [MaybeUninit<f32>], tokens: &[f32], scale: f32) {
    for (o, &t) in out.iter_mut().zip(tokens) {
        o.write(t * scale);
    }
}

/// `out[i] += positions[i]`.
#[multiversion(targets = "simd")]
fn add_assign(out: &mut [f32], positions: &[f32]) {
    for (o, &q) in out.iter_mut().zip(positions) {
        *o += q;
    }
}

/// The extension on a [`HostTensors`] backend: both ops go to [`run`].
macro_rules! host_extension {
    ($backend:ty) => {
        impl PositionalKernels for $backend {
            fn fused_embedding_sinusoidal(
                tokens: FloatTensor<Self>,
                ids: IntTensor<Self>,
                positions: IntTensor<Self>,
                options: FusedEmbeddingOptions,
                sinusoid: Sinusoid,
            ) -> (FloatTensor<Self>, IntTensor<Self>) {
                run::<Self>(&tokens, &ids, &positions, None, Some(sinusoid), &options)
            }

            fn fused_embedding_learned(
                tokens: FloatTensor<Self>,
                ids: IntTensor<Self>,
                positions: IntTensor<Self>,
                table: FloatTensor<Self>,
                options: FusedEmbeddingOptions,
            ) -> (FloatTensor<Self>, IntTensor<Self>) {
                run::<Self>(&tokens, &ids, &positions, Some(&table), None, &options)
            }
        }
    };
}

/// Reads, converts and writes primitives of one CPU backend.
pub trait HostTensors {
    /// The primitive (the same type holds floats and ints on both CPU backends).
    type Primitive;
    /// The values as f32, borrowed when possible.
    fn floats(t: &Self::Primitive) -> Cow<'_, [f32]>;
    /// The values, borrowed when they are stored contiguous as i32 or i64.
    fn ints(t: &Self::Primitive) -> Ints<'_>;
    /// A primitive holding `data`.
    fn from_data(data: TensorData) -> Self::Primitive;
}

impl HostTensors for Flex {
    type Primitive = FlexTensor;

    fn floats(t: &FlexTensor) -> Cow<'_, [f32]> {
        match t.as_slice::<f32>() {
            Some(slice) => Cow::Borrowed(slice),
            None => Cow::Owned(t.clone().into_data().try_into_vec_as::<f32>().unwrap()),
        }
    }

    fn ints(t: &FlexTensor) -> Ints<'_> {
        if let Some(slice) = t.as_slice::<i32>() {
            return Ints::I32(slice);
        }
        if let Some(slice) = t.as_slice::<i64>() {
            return Ints::I64(slice);
        }
        Ints::Owned(t.clone().into_data().iter::<i64>().collect())
    }

    fn from_data(data: TensorData) -> FlexTensor {
        FlexTensor::from_data(data)
    }
}

#[allow(deprecated)]
mod ndarray_io {
    use super::*;
    use burn::backend::{NdArray, ndarray::NdArrayTensor};

    impl HostTensors for NdArray {
        type Primitive = NdArrayTensor;

        fn floats(t: &NdArrayTensor) -> Cow<'_, [f32]> {
            if let NdArrayTensor::F32(storage) = t {
                let view = storage.view();
                // `ArrayView::to_slice` borrows from the storage (lifetime of `t`), not from the
                // view: zero-copy for a standard-layout array.
                if let Some(slice) = view.to_slice() {
                    return Cow::Borrowed(slice);
                }
                return Cow::Owned(view.iter().copied().collect());
            }
            Cow::Owned(data_of(t).try_into_vec_as::<f32>().unwrap())
        }

        fn ints(t: &NdArrayTensor) -> Ints<'_> {
            use burn::backend::ops::IntTensorOps;
            match t {
                NdArrayTensor::I64(storage) => {
                    if let Some(slice) = storage.view().to_slice() {
                        return Ints::I64(slice);
                    }
                }
                NdArrayTensor::I32(storage) => {
                    if let Some(slice) = storage.view().to_slice() {
                        return Ints::I32(slice);
                    }
                }
                _ => {}
            }
            // CPU: the future is ready at once.
            let data = burn::tensor::read_sync(NdArray::int_into_data(t.clone())).unwrap();
            Ints::Owned(data.iter::<i64>().collect())
        }

        fn from_data(data: TensorData) -> NdArrayTensor {
            NdArrayTensor::from_data(data)
        }
    }

    fn data_of(t: &NdArrayTensor) -> TensorData {
        use burn::backend::ops::FloatTensorOps;
        // CPU: the future is ready at once.
        burn::tensor::read_sync(NdArray::float_into_data(t.clone())).unwrap()
    }

    host_extension!(NdArray);
}

/// The CPU implementation for any [`HostTensors`] backend.
pub fn run<B: HostTensors>(
    tokens: &B::Primitive,
    ids: &B::Primitive,
    positions: &B::Primitive,
    table: Option<&B::Primitive>,
    sinusoid: Option<Sinusoid>,
    options: &FusedEmbeddingOptions,
) -> (B::Primitive, B::Primitive)
where
    B::Primitive: TensorMetadata,
{
    let dims = check_tensors(tokens, ids, positions, table, sinusoid.as_ref(), options);
    let float_dtype = tokens.dtype();
    let int_dtype = ids.dtype();
    let token_values = B::floats(tokens);
    let table_values = table.map(|t| B::floats(t));
    let position = match (&table_values, sinusoid) {
        (Some(values), _) => HostPosition::Learned(values),
        (None, Some(s)) => HostPosition::Sinusoidal(s.frequencies()),
        (None, None) => unreachable!(),
    };
    let (output, status) = fused_embedding_host(
        dims,
        &token_values,
        &B::ints(ids),
        &B::ints(positions),
        &position,
        options,
    );
    let output = TensorData::new(output, [dims.batch, dims.seq, dims.d_out]);
    let output = if float_dtype == DType::F32 {
        output
    } else {
        output.convert_dtype(float_dtype)
    };
    let status = TensorData::new(status, [dims.batch, dims.seq]);
    let status = if int_dtype == DType::I32 {
        status
    } else {
        status.convert_dtype(int_dtype)
    };
    (B::from_data(output), B::from_data(status))
}

host_extension!(Flex);
