//! The embedding's host twin for the CPU backends (flex and ndarray).
//!
//! Both backends keep their tensors in host memory; the op borrows the token table, the
//! position table, the ids and the positions where they are contiguous (f32; i32 or i64), and
//! writes each output row once, on the calling thread for small outputs and on rayon workers
//! for large ones (advised for huge pages first). The row loops are compiled for each SIMD
//! level and picked at run time (`multiversion`).

use std::mem::MaybeUninit;

use burn::backend::TensorMetadata;
use burn::tensor::TensorData;
use multiversion::multiversion;
use rayon::prelude::*;

use super::options::{
    Combine, Dims, KernelArgs, STATUS_BAD_ID, STATUS_BAD_POSITION, check_tensors,
};
use crate::host_io::{HostTensors, Ints, PARALLEL_FROM, in_dtype, output_buffer};

/// The fused op on host slices: returns the `[batch, seq, d_out]` output and the `[batch, seq]`
/// status, both row-major. `dims` comes from [`check_tensors`], which guarantees positive
/// widths and `d_out = d_token (+ d_position)`, so every column of every row is written.
fn fused_embedding_host(
    dims: Dims,
    tokens: &[f32],
    ids: &Ints<'_>,
    positions: &Ints<'_>,
    table: &[f32],
    args: &KernelArgs,
) -> (Vec<f32>, Vec<i32>) {
    let Dims {
        vocab_size,
        d_token,
        batch,
        seq,
        position_rows,
        d_position,
        max_len,
        d_out,
    } = dims;
    let options = &args.options;
    assert_eq!(tokens.len(), vocab_size * d_token);
    assert_eq!(table.len(), max_len * d_position);
    assert_eq!(ids.len(), batch * seq);
    assert!(args.sequential() || positions.len() == position_rows * seq);
    assert!(d_token > 0 && d_position > 0);
    assert_eq!(
        d_out,
        match options.combine {
            Combine::Add => d_token,
            Combine::Concat { .. } => d_token + d_position,
        }
    );
    let output_len = batch * seq * d_out;
    // Left uninitialized: every row writes all of its columns (below), so the output is
    // written once rather than zeroed and then written.
    let mut output = output_buffer(output_len);
    let mut status = vec![0i32; batch * seq];
    let offset = args.offset();
    let sequential = args.sequential();
    let pos_offset = match options.combine {
        Combine::Add => 0,
        Combine::Concat { .. } => d_token,
    };

    let write_row = |row: usize, (out, flag): (&mut [MaybeUninit<f32>], &mut i32)| {
        let (b, s) = (row / seq, row % seq);
        let id = ids.at(row);
        let p = if sequential {
            s as i64 + offset
        } else {
            let p_row = if position_rows == 1 { 0 } else { b };
            positions.at(p_row * seq + s)
        };
        let id_ok = id >= 0 && (id as u64) < vocab_size as u64;
        let pos_ok = p >= 0 && (p as u64) < max_len as u64;
        *flag = (if id_ok { 0 } else { STATUS_BAD_ID }
            + if pos_ok { 0 } else { STATUS_BAD_POSITION }) as i32;

        // The padding id's row as stored (PyTorch's `padding_idx`): only its gradient differs.
        let has_token = id_ok;
        let token_row = || &tokens[id as usize * d_token..(id as usize + 1) * d_token];
        let position_row = || &table[p as usize * d_position..(p as usize + 1) * d_position];
        // The common case in one pass: a table row added to a token row.
        if let (Combine::Add, true, true) = (options.combine, has_token, pos_ok) {
            scaled_sum(out, token_row(), options.scale, position_row());
            return;
        }
        // Every column is written here: the token part (NaN for a bad id),
        // then the position part (added for Add, copied for Concat, NaN for a bad position).
        let (token_part, rest) = out.split_at_mut(d_token);
        if has_token {
            scaled_copy(token_part, token_row(), options.scale);
        } else {
            token_part.fill(MaybeUninit::new(if id_ok { 0.0 } else { f32::NAN }));
        }
        rest.fill(MaybeUninit::new(0.0));
        // SAFETY: every element of the row was initialized just above, and `MaybeUninit<f32>`
        // has the layout of `f32`.
        let out: &mut [f32] = unsafe { &mut *(out as *mut [MaybeUninit<f32>] as *mut [f32]) };
        let dst = &mut out[pos_offset..pos_offset + d_position];
        if pos_ok {
            add_assign(dst, position_row());
        } else {
            dst.fill(f32::NAN);
        }
    };
    let rows = output.chunks_mut(d_out).zip(status.iter_mut());
    if output_len < PARALLEL_FROM {
        // Small outputs: waking the thread pool costs more than the work.
        rows.enumerate()
            .for_each(|(row, pair)| write_row(row, pair));
    } else {
        output
            .par_chunks_mut(d_out)
            .zip(status.par_iter_mut())
            .enumerate()
            .for_each(|(row, pair)| write_row(row, pair));
    }
    // SAFETY: every row, and so every element, was initialized by `write_row` (`d_out` is the
    // row width, positive, and each row writes `d_token` then `d_out - d_token` columns); the
    // buffer is reinterpreted with its own length and capacity.
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

/// The CPU implementation for any [`HostTensors`] backend. Floats are read as f32 (borrowed
/// when stored so, converted otherwise) and the output is converted back to the tokens' dtype.
pub(crate) fn run<B: HostTensors>(
    tokens: &B::Primitive,
    ids: &B::Primitive,
    positions: &B::Primitive,
    table: &B::Primitive,
    args: &KernelArgs,
) -> (B::Primitive, B::Primitive)
where
    B::Primitive: TensorMetadata,
{
    let dims = check_tensors(tokens, ids, positions, table, args);
    let float_dtype = tokens.dtype();
    let int_dtype = ids.dtype();
    let token_values = B::floats(tokens);
    let table_values = B::floats(table);
    let ids = B::ints(ids);
    let positions = if args.sequential() {
        Ints::I32(&[])
    } else {
        B::ints(positions)
    };
    let (output, status) =
        fused_embedding_host(dims, &token_values, &ids, &positions, &table_values, args);
    let output = in_dtype(
        TensorData::new(output, [dims.batch, dims.seq, dims.d_out]),
        float_dtype,
    );
    let status = in_dtype(TensorData::new(status, [dims.batch, dims.seq]), int_dtype);
    (B::from_data(output), B::from_data(status))
}
