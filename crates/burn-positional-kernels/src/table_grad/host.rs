//! The table gradient on the CPU backends (flex, ndarray): a counting sort of the tokens by
//! row on the calling thread (linear in the tokens, stable, so each row's tokens stay in token
//! order), then each row's sum on rayon workers, every output row written once.

use std::mem::MaybeUninit;

use burn::backend::TensorMetadata;
use burn::tensor::TensorData;
use multiversion::multiversion;
use rayon::prelude::*;

use super::{GradDims, TableGradArgs, check};
use crate::host_io::{HostTensors, Ints, PARALLEL_FROM, assume_init, in_dtype, output_buffer};

/// Tokens grouped by the row they update, in token order within each row: the tokens of row
/// `r` are `tokens[starts[r]..starts[r + 1]]`.
pub(crate) struct Segments {
    pub starts: Vec<usize>,
    pub tokens: Vec<u32>,
}

/// The row token `t` (of `batch * seq`) updates, if any.
fn row_of(index: &Ints<'_>, dims: &GradDims, args: &TableGradArgs, t: usize) -> Option<usize> {
    let at = if dims.index_rows == 1 {
        t % dims.seq
    } else {
        t
    };
    let v = index.at(at);
    let r = usize::try_from(v).ok().filter(|&r| r < args.rows)?;
    (Some(r) != args.skip).then_some(r)
}

/// A stable counting sort of the tokens by row.
pub(crate) fn segments(index: &Ints<'_>, dims: &GradDims, args: &TableGradArgs) -> Segments {
    let n = dims.batch * dims.seq;
    assert!(
        u32::try_from(n).is_ok(),
        "table_grad: {n} tokens exceed u32 (split the batch)"
    );
    let rows: Vec<Option<usize>> = (0..n).map(|t| row_of(index, dims, args, t)).collect();
    let mut starts = vec![0usize; args.rows + 1];
    for r in rows.iter().flatten() {
        starts[r + 1] += 1;
    }
    for r in 0..args.rows {
        starts[r + 1] += starts[r];
    }
    let mut cursor = starts.clone();
    let mut tokens = vec![0u32; starts[args.rows]];
    for (t, r) in rows.iter().enumerate() {
        if let Some(r) = *r {
            tokens[cursor[r]] = t as u32;
            cursor[r] += 1;
        }
    }
    Segments { starts, tokens }
}

/// `out += Σ grad rows` (`out` starts at zero), then times `scale`.
#[multiversion(targets = "simd")]
fn sum_rows(out: &mut [f32], grad: &[f32], tokens: &[u32], d_out: usize, first: usize, scale: f32) {
    let width = out.len();
    for &t in tokens {
        let start = t as usize * d_out + first;
        for (o, &g) in out.iter_mut().zip(&grad[start..start + width]) {
            *o += g;
        }
    }
    if scale != 1.0 {
        for o in out.iter_mut() {
            *o *= scale;
        }
    }
}

/// The `[rows, width]` gradient, row-major, from host slices.
pub(crate) fn table_grad_host(
    grad: &[f32],
    index: &Ints<'_>,
    dims: GradDims,
    args: &TableGradArgs,
) -> Vec<f32> {
    let width = args.width;
    let segments = segments(index, &dims, args);
    let mut output = output_buffer(args.rows * width);
    let row = |r: usize, out: &mut [MaybeUninit<f32>]| {
        for o in out.iter_mut() {
            o.write(0.0);
        }
        // SAFETY: every element was just written.
        let out = unsafe { &mut *(out as *mut [MaybeUninit<f32>] as *mut [f32]) };
        let tokens = &segments.tokens[segments.starts[r]..segments.starts[r + 1]];
        sum_rows(out, grad, tokens, dims.d_out, args.first, args.scale);
    };
    if width == 0 {
        return Vec::new();
    }
    if output.len() < PARALLEL_FROM {
        output
            .chunks_mut(width)
            .enumerate()
            .for_each(|(r, out)| row(r, out));
    } else {
        output
            .par_chunks_mut(width)
            .with_min_len(64)
            .enumerate()
            .for_each(|(r, out)| row(r, out));
    }
    // SAFETY: every row of `output` was written (zeros, then the sums).
    unsafe { assume_init(output) }
}

/// The op on a [`HostTensors`] backend: reads the gradient as f32 and the index as it is
/// stored, writes the result in the gradient's dtype.
pub(crate) fn run<B: HostTensors>(
    grad: &B::Primitive,
    index: &B::Primitive,
    args: &TableGradArgs,
) -> B::Primitive
where
    B::Primitive: TensorMetadata,
{
    let dims = check(
        (&grad.shape(), grad.dtype()),
        (&index.shape(), index.dtype()),
        args,
    );
    let dtype = grad.dtype();
    let values = B::floats(grad);
    let index = B::ints(index);
    let output = table_grad_host(&values, &index, dims, args);
    B::from_data(in_dtype(
        TensorData::new(output, [args.rows, args.width]),
        dtype,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(batch: usize, seq: usize, index_rows: usize) -> GradDims {
        GradDims {
            batch,
            seq,
            d_out: 2,
            index_rows,
        }
    }

    fn args(rows: usize, skip: Option<usize>) -> TableGradArgs {
        TableGradArgs {
            rows,
            first: 0,
            width: 2,
            scale: 1.0,
            skip,
        }
    }

    /// Each row's tokens in token order; bad indices and the skipped row get none.
    #[test]
    fn segments_are_stable_and_skip_bad_rows() {
        let index = Ints::Owned(vec![2, 0, 2, -1, 5, 1, 2, 0]);
        let s = segments(&index, &dims(2, 4, 2), &args(4, Some(1)));
        assert_eq!(s.starts, vec![0, 2, 2, 5, 5]);
        assert_eq!(s.tokens, vec![1, 7, 0, 2, 6]);
    }

    /// A shared index (one row for the batch) maps every sequence's token `s` to `index[s]`.
    #[test]
    fn shared_index_repeats_over_the_batch() {
        let index = Ints::Owned(vec![1, 0]);
        let s = segments(&index, &dims(3, 2, 1), &args(2, None));
        assert_eq!(s.starts, vec![0, 3, 6]);
        assert_eq!(s.tokens, vec![1, 3, 5, 0, 2, 4]);
    }

    /// Sums by hand: row 0 gets tokens 1 and 3, row 1 token 0, scaled by 2.
    #[test]
    fn sums_by_hand() {
        let grad = [1.0, 2.0, 10.0, 20.0, 100.0, 200.0, 1000.0, 2000.0];
        let index = Ints::Owned(vec![1, 0, 5, 0]);
        let a = TableGradArgs {
            scale: 2.0,
            ..args(2, None)
        };
        let out = table_grad_host(&grad, &index, dims(1, 4, 1), &a);
        assert_eq!(out, vec![2020.0, 4040.0, 2.0, 4.0]);
    }
}
