//! The rotary op on the CPU backends: each output row (one head of one token) written once,
//! on the calling thread for small tensors and on rayon workers for large ones, with SIMD
//! loops picked at run time.

use std::mem::MaybeUninit;

use burn::backend::TensorMetadata;
use burn::tensor::TensorData;
use multiversion::multiversion;
use rayon::prelude::*;

use super::{RopeArgs, RotaryLayout, check_shapes};
use crate::host_io::{HostTensors, PARALLEL_FROM, assume_init, in_dtype, output_buffer};

/// Rows handed to a rayon task at once (a head is 64 to 256 floats: one row is too little).
const ROWS_PER_TASK: usize = 64;

/// `x` rotated by `cos` and `sin`, computed in f32, returned in the dtype of `x`.
pub(crate) fn run<B: HostTensors>(
    x: &B::Primitive,
    cos: &B::Primitive,
    sin: &B::Primitive,
    args: &RopeArgs,
) -> B::Primitive
where
    B::Primitive: TensorMetadata,
{
    let ([batch, heads, seq, d_head], [cos_rows, _, pairs]) = check_shapes(
        &x.shape().dims::<4>(),
        &cos.shape().dims::<3>(),
        &sin.shape().dims::<3>(),
    );
    let dtype = x.dtype();
    let values = B::floats(x);
    let (cos, sin) = (B::floats(cos), B::floats(sin));
    let rows = batch * heads * seq;
    let len = rows * d_head;
    let mut output = output_buffer(len);
    let sign = if args.inverse { -1.0 } else { 1.0 };
    let rot = 2 * pairs;
    let write_row = |row: usize, out: &mut [MaybeUninit<f32>]| {
        let s = row % seq;
        let b = row / (seq * heads);
        let n = if cos_rows == 1 { 0 } else { b };
        let at = (n * seq + s) * pairs;
        let (c, sn) = (&cos[at..at + pairs], &sin[at..at + pairs]);
        let x = &values[row * d_head..(row + 1) * d_head];
        let (turned, passed) = out.split_at_mut(rot);
        match args.layout {
            RotaryLayout::HalfSplit => half_split(turned, &x[..rot], c, sn, sign),
            RotaryLayout::Interleaved => interleaved(turned, &x[..rot], c, sn, sign),
        }
        for (o, &v) in passed.iter_mut().zip(&x[rot..]) {
            o.write(v);
        }
    };
    if d_head > 0 {
        let block = ROWS_PER_TASK * d_head;
        let write_block = |(i, out): (usize, &mut [MaybeUninit<f32>])| {
            for (r, row) in out.chunks_mut(d_head).enumerate() {
                write_row(i * ROWS_PER_TASK + r, row);
            }
        };
        if len < PARALLEL_FROM {
            output.chunks_mut(block).enumerate().for_each(write_block);
        } else {
            output
                .par_chunks_mut(block)
                .enumerate()
                .for_each(write_block);
        }
    }
    // SAFETY: every row wrote all of its `d_head` columns (`rot` rotated, the rest copied).
    let output = unsafe { assume_init(output) };
    B::from_data(in_dtype(
        TensorData::new(output, [batch, heads, seq, d_head]),
        dtype,
    ))
}

/// Pairs `(x[j], x[j + pairs])`: `out[j] = a cos - b sin`, `out[j + pairs] = a sin + b cos`,
/// with `sin` times `sign`.
#[multiversion(targets = "simd")]
fn half_split(out: &mut [MaybeUninit<f32>], x: &[f32], cos: &[f32], sin: &[f32], sign: f32) {
    let pairs = cos.len();
    let (a, b) = x.split_at(pairs);
    let (oa, ob) = out.split_at_mut(pairs);
    for ((((oa, ob), (&a, &b)), &c), &s) in oa
        .iter_mut()
        .zip(ob.iter_mut())
        .zip(a.iter().zip(b))
        .zip(cos)
        .zip(sin)
    {
        let s = s * sign;
        oa.write(a * c - b * s);
        ob.write(a * s + b * c);
    }
}

/// Pairs `(x[2j], x[2j + 1])`, rotated as in [`half_split`].
#[multiversion(targets = "simd")]
fn interleaved(out: &mut [MaybeUninit<f32>], x: &[f32], cos: &[f32], sin: &[f32], sign: f32) {
    for (((o, x), &c), &s) in out
        .chunks_exact_mut(2)
        .zip(x.chunks_exact(2))
        .zip(cos)
        .zip(sin)
    {
        let s = s * sign;
        let (a, b) = (x[0], x[1]);
        o[0].write(a * c - b * s);
        o[1].write(a * s + b * c);
    }
}
