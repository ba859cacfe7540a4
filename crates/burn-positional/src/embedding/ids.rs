//! Token ids checked on the host: the synchronous check of the reference path and of
//! [`check_token_ids`], one small read-back each.

use burn::tensor::{Int, Tensor};

use crate::PositionError;

/// `(min, max)` of each tensor, read back from the device in one transfer.
pub(crate) fn value_ranges(tensors: &[&Tensor<2, Int>]) -> Vec<(i64, i64)> {
    let stats: Vec<Tensor<1, Int>> = tensors
        .iter()
        .flat_map(|t| [(*t).clone().min(), (*t).clone().max()])
        .collect();
    let values: Vec<i64> = Tensor::cat(stats, 0).into_data().iter::<i64>().collect();
    values.chunks(2).map(|pair| (pair[0], pair[1])).collect()
}

pub(crate) fn check_ids_in(
    ids: &Tensor<2, Int>,
    (min, max): (i64, i64),
    vocab_size: usize,
) -> Result<(), PositionError> {
    if min >= 0 && max < vocab_size as i64 {
        return Ok(());
    }
    // Error path only: find the first offending id to name its place.
    let (id, at) = first_where(ids, |id| id < 0 || id >= vocab_size as i64)
        .expect("the range check saw an id outside the vocabulary");
    Err(PositionError::TokenIdOutOfRange { id, at, vocab_size })
}

/// The first value of `values` (`[batch, seq]`) for which `bad` holds, and its place
/// `[batch, index along seq]`. One read-back: for error paths, to name the offending token.
pub(crate) fn first_where(
    values: &Tensor<2, Int>,
    bad: impl Fn(i64) -> bool,
) -> Option<(i64, [usize; 2])> {
    let [_, seq] = values.dims();
    values
        .to_data()
        .iter::<i64>()
        .enumerate()
        .find(|&(_, value)| bad(value))
        .map(|(index, value)| (value, [index / seq, index % seq]))
}

/// Checks that every id lies in `0..vocab_size`, with one small read-back from the device.
///
/// [`EmbeddingWithPosition::try_forward`](crate::EmbeddingWithPosition::try_forward) checks ids (from the fused pass's status) on every
/// call; this function is for checking tokenizer output once, up front, before any model runs.
///
/// # Shapes
///
/// - ids: `[batch, seq]`
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::embedding::check_token_ids;
///
/// let device = Device::flex();
/// let ids = Tensor::<2, Int>::from_data([[1, 2], [3, 12]], &device);
/// let err = check_token_ids(&ids, 10).unwrap_err();
/// assert!(err.to_string().starts_with("token id 12 at [batch 1, index 1]"));
/// ```
pub fn check_token_ids(ids: &Tensor<2, Int>, vocab_size: usize) -> Result<(), PositionError> {
    let [batch, seq] = ids.dims();
    if batch * seq == 0 {
        return Ok(());
    }
    check_ids_in(ids, value_ranges(&[ids])[0], vocab_size)
}
