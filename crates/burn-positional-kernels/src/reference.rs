//! The reference twin: the trait's default body, made of plain backend tensor ops.
//!
//! Runs on any `B: Backend` (on `Autodiff<B>` too, where its gradients come from the ops
//! themselves, which makes it the oracle for the hand-written backward). Several kernels and
//! intermediate tensors instead of one pass; same results up to f32 rounding.

use burn::backend::{
    Backend, Scalar, TensorMetadata, get_or_init_device_settings,
    tensor::{BoolTensor, FloatTensor, IntTensor},
};
use burn::tensor::{BoolDType, FloatDType, IntDType, Shape, TensorData};

use crate::options::{FusedCombine, FusedEmbeddingOptions, Sinusoid, check_tensors};

/// Where the position vectors come from.
pub enum Position<B: Backend> {
    /// Computed from the position and the column.
    Sinusoidal(Sinusoid),
    /// Rows of a `[max_len, d_position]` table.
    Learned(FloatTensor<B>),
}

/// `0 <= ids < vocab`, as a bool `[batch, seq]`.
pub fn id_ok<B: Backend>(ids: IntTensor<B>, vocab: usize, bool_dtype: BoolDType) -> BoolTensor<B> {
    let low = B::int_greater_equal_elem(ids.clone(), Scalar::from(0i64), bool_dtype);
    let high = B::int_lower_elem(ids, Scalar::from(vocab as i64), bool_dtype);
    B::bool_and(low, high)
}

/// `0 <= pos (< table_len)`, as a bool `[rows, seq]`.
pub fn position_ok<B: Backend>(
    positions: IntTensor<B>,
    table_len: Option<usize>,
    bool_dtype: BoolDType,
) -> BoolTensor<B> {
    let low = B::int_greater_equal_elem(positions.clone(), Scalar::from(0i64), bool_dtype);
    match table_len {
        Some(len) => B::bool_and(
            low,
            B::int_lower_elem(positions, Scalar::from(len as i64), bool_dtype),
        ),
        None => low,
    }
}

/// The multiplier of each token row: `scale` for a good, non-padding id, else 0.
/// `[batch, seq, 1]`, float.
pub fn token_keep<B: Backend>(
    ids: IntTensor<B>,
    ok: BoolTensor<B>,
    options: &FusedEmbeddingOptions,
    bool_dtype: BoolDType,
    float_dtype: FloatDType,
) -> FloatTensor<B> {
    let [batch, seq] = ids.shape().dims();
    let keep = match options.padding_idx {
        Some(pad) => B::bool_and(
            ok,
            B::int_not_equal_elem(ids, Scalar::from(pad as i64), bool_dtype),
        ),
        None => ok,
    };
    let keep = B::bool_into_float(keep, float_dtype);
    let keep = B::float_reshape(keep, Shape::new([batch, seq, 1]));
    B::float_mul_scalar(keep, Scalar::from(options.scale))
}

/// The `positions` argument as a tensor: itself, or `[1, seq]` of `0..seq` (in `like`'s int
/// dtype) when `options.sequential_positions` says it is not read.
pub fn positions_tensor<B: Backend>(
    positions: IntTensor<B>,
    seq: usize,
    options: &FusedEmbeddingOptions,
) -> IntTensor<B> {
    if !options.sequential_positions {
        return positions;
    }
    let arange = B::int_arange(
        0..seq as i64,
        &positions.device(),
        IntDType::from(positions.dtype()),
    );
    B::int_reshape(arange, Shape::new([1, seq]))
}

/// The bool dtype the device uses by default (comparisons need one at the backend level).
pub fn bool_dtype<B: Backend>(device: &B::Device) -> BoolDType {
    get_or_init_device_settings::<B>(device).bool_dtype
}

/// The default body of both extension methods.
pub fn fused_embedding<B: Backend>(
    tokens: FloatTensor<B>,
    ids: IntTensor<B>,
    positions: IntTensor<B>,
    position: Position<B>,
    options: &FusedEmbeddingOptions,
) -> (FloatTensor<B>, IntTensor<B>) {
    let (table, sinusoid) = match &position {
        Position::Learned(table) => (Some(table), None),
        Position::Sinusoidal(s) => (None, Some(s)),
    };
    let dims = check_tensors(&tokens, &ids, &positions, table, sinusoid, options);
    let device = tokens.device();
    let bd = bool_dtype::<B>(&device);
    let fd = FloatDType::from(tokens.dtype());
    let id_dtype = IntDType::from(ids.dtype());
    let (batch, seq, rows) = (dims.batch, dims.seq, dims.position_rows);

    // Token part: gather with out-of-range ids redirected to row 0, then masked.
    let ok = id_ok::<B>(ids.clone(), dims.vocab, bd);
    let safe_ids = B::int_mask_fill(ids.clone(), B::bool_not(ok.clone()), Scalar::from(0i64));
    let token_rows = B::embedding(tokens, safe_ids); // [batch, seq, d_token]
    let keep = token_keep::<B>(ids, ok.clone(), options, bd, fd);
    let keep = B::float_expand(keep, Shape::new([batch, seq, dims.d_token]));
    let token_part = B::float_mul(token_rows, keep);

    // Position part, [rows, seq, d_position], zero where the position is bad.
    let positions = positions_tensor::<B>(positions, seq, options);
    let positions = B::int_add_scalar(positions, Scalar::from(options.offset));
    let pos_ok = position_ok::<B>(positions.clone(), dims.table_len, bd);
    let position_part = match position {
        Position::Sinusoidal(s) => {
            let half = s.d_position / 2;
            let freqs: Vec<f32> = s.frequencies().into_iter().map(|w| w as f32).collect();
            let freqs = B::float_from_data(TensorData::new(freqs, [1, 1, half]), &device);
            let freqs = B::float_cast(freqs, fd);
            let freqs = B::float_expand(freqs, Shape::new([rows, seq, half]));
            let p = B::int_into_float(positions, fd);
            let p = B::float_reshape(p, Shape::new([rows, seq, 1]));
            let p = B::float_expand(p, Shape::new([rows, seq, half]));
            let angle = B::float_mul(p, freqs);
            let sin = B::float_reshape(
                B::float_sin(angle.clone()),
                Shape::new([rows, seq, half, 1]),
            );
            let cos = B::float_reshape(B::float_cos(angle), Shape::new([rows, seq, half, 1]));
            // Interleaved: sin at 2i, cos at 2i + 1.
            let pairs = B::float_cat(vec![sin, cos], 3);
            B::float_reshape(pairs, Shape::new([rows, seq, s.d_position]))
        }
        Position::Learned(table) => {
            let safe = B::int_mask_fill(positions, B::bool_not(pos_ok.clone()), Scalar::from(0i64));
            B::embedding(table, safe)
        }
    };
    let pos_keep = B::bool_into_float(pos_ok.clone(), fd);
    let pos_keep = B::float_reshape(pos_keep, Shape::new([rows, seq, 1]));
    let pos_keep = B::float_expand(pos_keep, Shape::new([rows, seq, dims.d_position]));
    let position_part = B::float_mul(position_part, pos_keep);
    let position_part = B::float_expand(position_part, Shape::new([batch, seq, dims.d_position]));

    let output = match options.combine {
        FusedCombine::Add => B::float_add(token_part, position_part),
        FusedCombine::Concat => B::float_cat(vec![token_part, position_part], 2),
    };

    // Status: 1 for a bad id, 2 for a bad position, 3 for both.
    let bad_id = B::bool_into_int(B::bool_not(ok), id_dtype);
    let bad_pos = B::bool_into_int(B::bool_not(pos_ok), id_dtype);
    let bad_pos = B::int_mul_scalar(bad_pos, Scalar::from(2i64));
    let bad_pos = B::int_expand(bad_pos, Shape::new([batch, seq]));
    let status = B::int_add(bad_id, bad_pos);
    (output, status)
}
