//! The causal mask, built on the device and cached by shape.

use burn::tensor::{Bool, DType, Device, Tensor};

use crate::cache::{self, ShapeCache};

/// `[seq_q, seq_k]`, true where key `j` comes after query `offset + i`; cached by shape.
pub(super) fn causal_mask(
    device: &Device,
    offset: usize,
    seq_q: usize,
    seq_k: usize,
) -> Tensor<2, Bool> {
    let cache: ShapeCache<Tensor<2, Bool>> = cache::shared("causal".into());
    // Bool tensors come in the device's bool dtype; the key needs only to be constant.
    cache.get(device, DType::U8, offset, seq_q, seq_k, |n| {
        Tensor::<2, Bool>::tril_mask([n, n], 0, device)
    })
}
