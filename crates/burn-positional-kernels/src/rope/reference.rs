//! The rotary reference twin in plain backend tensor ops (any `B: Backend`).

use burn::backend::{Backend, Slice, TensorMetadata, tensor::FloatTensor};
use burn::tensor::Shape;

use super::{RopeArgs, RotaryLayout, check_shapes};

/// `x` rotated by `cos` and `sin` (already in the dtype of `x`), op by op.
pub(crate) fn rope<B: Backend>(
    x: FloatTensor<B>,
    cos: FloatTensor<B>,
    sin: FloatTensor<B>,
    args: &RopeArgs,
) -> FloatTensor<B> {
    let ([batch, heads, seq, d_head], [n, _, pairs]) = check_shapes(
        &x.shape().dims::<4>(),
        &cos.shape().dims::<3>(),
        &sin.shape().dims::<3>(),
    );
    let rot = 2 * pairs;
    if rot == 0 {
        return x;
    }
    let cos = B::float_reshape(cos, Shape::new([n, 1, seq, pairs]));
    let sin = B::float_reshape(sin, Shape::new([n, 1, seq, pairs]));
    let sin = if args.inverse { B::float_neg(sin) } else { sin };
    let all = || Slice::from(..);
    let rotated = B::float_slice(x.clone(), &[all(), all(), all(), Slice::from(0..rot)]);
    // `ra = a cos - b sin`, `rb = a sin + b cos`.
    let turn = |a: FloatTensor<B>, b: FloatTensor<B>| {
        let ra = B::float_sub(
            B::float_mul(a.clone(), cos.clone()),
            B::float_mul(b.clone(), sin.clone()),
        );
        let rb = B::float_add(B::float_mul(a, sin.clone()), B::float_mul(b, cos.clone()));
        (ra, rb)
    };
    let out = match args.layout {
        RotaryLayout::Interleaved => {
            // [.., rot] -> [.., pairs, 2]: a = even dims, b = odd dims.
            let split = B::float_reshape(rotated, Shape::new([batch, heads, seq, pairs, 2]));
            let part = |i: usize| {
                let p = B::float_slice(
                    split.clone(),
                    &[all(), all(), all(), all(), Slice::from(i..i + 1)],
                );
                B::float_reshape(p, Shape::new([batch, heads, seq, pairs]))
            };
            let (ra, rb) = turn(part(0), part(1));
            let unsqueeze = |t| B::float_reshape(t, Shape::new([batch, heads, seq, pairs, 1]));
            let stacked = B::float_cat(vec![unsqueeze(ra), unsqueeze(rb)], 4);
            B::float_reshape(stacked, Shape::new([batch, heads, seq, rot]))
        }
        RotaryLayout::HalfSplit => {
            let a = B::float_slice(
                rotated.clone(),
                &[all(), all(), all(), Slice::from(0..pairs)],
            );
            let b = B::float_slice(rotated, &[all(), all(), all(), Slice::from(pairs..rot)]);
            let (ra, rb) = turn(a, b);
            B::float_cat(vec![ra, rb], 3)
        }
    };
    if rot == d_head {
        return out;
    }
    let pass = B::float_slice(x, &[all(), all(), all(), Slice::from(rot..d_head)]);
    B::float_cat(vec![out, pass], 3)
}
