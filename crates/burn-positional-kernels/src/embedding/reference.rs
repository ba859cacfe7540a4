//! The reference twin: the trait's default body, made of plain backend tensor ops.
//!
//! Runs on any `B: Backend`: on a backend our extension does not cover, on `Autodiff<B>` (where
//! its gradients come from the ops themselves, which makes it the oracle for the hand-written
//! backward), and on `Dispatch` itself ([`crate::reference_embedding`]). Several kernels and
//! intermediate tensors instead of one pass; the same results, no device-to-host read.

use burn::backend::{
    Backend, Scalar, TensorMetadata, get_or_init_device_settings,
    tensor::{BoolTensor, FloatTensor, IntTensor},
};
use burn::tensor::{BoolDType, DType, FloatDType, IntDType, Shape};

use crate::embedding::options::{Combine, FusedEmbeddingOptions, KernelArgs, check_tensors};

/// `0 <= ids < vocab_size`, as a bool `[batch, seq]`, compared in the ids' own dtype.
pub(crate) fn id_ok<B: Backend>(
    ids: IntTensor<B>,
    vocab_size: usize,
    bool_dtype: BoolDType,
) -> BoolTensor<B> {
    let low = B::int_greater_equal_elem(ids.clone(), Scalar::from(0i64), bool_dtype);
    let high = B::int_lower_elem(ids, Scalar::from(vocab_size as i64), bool_dtype);
    B::bool_and(low, high)
}

/// `0 <= pos < max_len`, as a bool `[rows, seq]`.
pub(crate) fn position_ok<B: Backend>(
    positions: IntTensor<B>,
    max_len: usize,
    bool_dtype: BoolDType,
) -> BoolTensor<B> {
    let low = B::int_greater_equal_elem(positions.clone(), Scalar::from(0i64), bool_dtype);
    let high = B::int_lower_elem(positions, Scalar::from(max_len as i64), bool_dtype);
    B::bool_and(low, high)
}

/// The multiplier of each token row: `scale` for a good id, else 0; with `padding`, 0 for the
/// padding id too (what its gradient gets: the forward returns the padding row as stored, as
/// PyTorch's `padding_idx` does). `[batch, seq, 1]`, float.
pub(crate) fn token_keep<B: Backend>(
    ids: IntTensor<B>,
    ok: BoolTensor<B>,
    padding: Option<usize>,
    options: &FusedEmbeddingOptions,
    bool_dtype: BoolDType,
    float_dtype: FloatDType,
) -> FloatTensor<B> {
    let [batch, seq] = ids.shape().dims();
    let keep = match padding {
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

/// The positions of the tokens, `[1 or batch, seq]`: `offset + s` in the ids' dtype for
/// sequential positions, else the positions argument.
pub(crate) fn positions_of<B: Backend>(
    positions: IntTensor<B>,
    ids: &IntTensor<B>,
    args: &KernelArgs,
) -> IntTensor<B> {
    if !args.sequential() {
        return positions;
    }
    let [_, seq] = ids.shape().dims();
    let offset = args.offset();
    let arange = B::int_arange(
        offset..offset + seq as i64,
        &ids.device(),
        IntDType::from(ids.dtype()),
    );
    B::int_reshape(arange, Shape::new([1, seq]))
}

/// The bool dtype the device uses by default (comparisons need one at the backend level).
pub(crate) fn bool_dtype<B: Backend>(device: &B::Device) -> BoolDType {
    get_or_init_device_settings::<B>(device).bool_dtype
}

/// `[batch, seq, d]`: `rows` with the rows where `ok` is false set to NaN.
fn nan_where_not<B: Backend>(rows: FloatTensor<B>, ok: BoolTensor<B>) -> FloatTensor<B> {
    let [batch, seq, d] = rows.shape().dims();
    let [ok_rows, _] = ok.shape().dims();
    let bad = B::bool_reshape(B::bool_not(ok), Shape::new([ok_rows, seq, 1]));
    let bad = B::bool_expand(bad, Shape::new([batch, seq, d]));
    B::float_mask_fill(rows, bad, Scalar::from(f32::NAN))
}

/// The default body of the extension method, and (with `table: None`) the token-only forward
/// of an embedding without absolute positions. Returns the output and the status.
///
/// # Panics
///
/// As [`check_tensors`](crate::embedding::options::check_tensors); without a table, if `tokens` or `ids`
/// is not rank 2 or ids are not i32 or i64.
pub(crate) fn fused_embedding<B: Backend>(
    tokens: FloatTensor<B>,
    ids: IntTensor<B>,
    positions: IntTensor<B>,
    table: Option<FloatTensor<B>>,
    args: &KernelArgs,
) -> (FloatTensor<B>, IntTensor<B>) {
    let options = &args.options;
    let (vocab_size, d_token) = match &table {
        Some(table) => {
            let dims = check_tensors(&tokens, &ids, &positions, table, args);
            (dims.vocab_size, dims.d_token)
        }
        None => {
            let [vocab_size, d_token] = tokens.shape().dims();
            assert!(
                matches!(ids.dtype(), DType::I32 | DType::I64),
                "fused_embedding: ids are {:?}; token ids must be i32 or i64",
                ids.dtype()
            );
            (vocab_size, d_token)
        }
    };
    let [batch, seq] = ids.shape().dims();
    let device = tokens.device();
    let bd = bool_dtype::<B>(&device);
    let fd = FloatDType::from(tokens.dtype());
    let id_dtype = IntDType::from(ids.dtype());

    // Token part: gather with out-of-range ids redirected to row 0, scaled (the padding row as
    // stored, as PyTorch returns it), NaN where the id is bad.
    let ok = id_ok::<B>(ids.clone(), vocab_size, bd);
    let safe_ids = B::int_mask_fill(ids.clone(), B::bool_not(ok.clone()), Scalar::from(0i64));
    let token_rows = B::embedding(tokens, safe_ids); // [batch, seq, d_token]
    let expand = |keep| B::float_expand(keep, Shape::new([batch, seq, d_token]));
    // Tracked for every good id but the padding one (on `Autodiff<B>` the gradient comes from
    // these ops, so the padding row gets none)...
    let keep = token_keep::<B>(
        ids.clone(),
        ok.clone(),
        options.padding_idx,
        options,
        bd,
        fd,
    );
    let mut token_part = B::float_mul(token_rows.clone(), expand(keep));
    if let Some(pad) = options.padding_idx {
        // ... and the padding row as stored, detached.
        let is_pad = B::int_equal_elem(ids.clone(), Scalar::from(pad as i64), bd);
        let is_pad = B::float_reshape(B::bool_into_float(is_pad, fd), Shape::new([batch, seq, 1]));
        let is_pad = B::float_mul_scalar(is_pad, Scalar::from(options.scale));
        let pad_part = B::float_detach(B::float_mul(token_rows, expand(is_pad)));
        token_part = B::float_add(token_part, pad_part);
    }
    let token_part = nan_where_not::<B>(token_part, ok.clone());
    let bad_id = B::bool_into_int(B::bool_not(ok), id_dtype);

    let Some(table) = table else {
        return (token_part, bad_id);
    };
    let [max_len, d_position] = table.shape().dims();

    // Position part, [rows, seq, d_position], NaN where the position is bad.
    let positions = positions_of::<B>(positions, &ids, args);
    let [rows, _] = positions.shape().dims();
    let pos_ok = position_ok::<B>(positions.clone(), max_len, bd);
    let safe = B::int_mask_fill(positions, B::bool_not(pos_ok.clone()), Scalar::from(0i64));
    let position_part = nan_where_not::<B>(B::embedding(table, safe), pos_ok.clone());
    let position_part = B::float_expand(position_part, Shape::new([batch, seq, d_position]));

    let output = match options.combine {
        Combine::Add => B::float_add(token_part, position_part),
        Combine::Concat { .. } => B::float_cat(vec![token_part, position_part], 2),
    };

    // Status: 1 for a bad id, 2 for a bad position, 3 for both.
    let bad_pos = B::bool_into_int(B::bool_not(pos_ok), id_dtype);
    let bad_pos = B::int_mul_scalar(bad_pos, Scalar::from(2i64));
    let bad_pos = B::int_expand(bad_pos, Shape::new([rows, seq]));
    let bad_pos = B::int_expand(bad_pos, Shape::new([batch, seq]));
    let status = B::int_add(bad_id, bad_pos);
    (output, status)
}
