//! The causal mask, built on the device and cached by shape.

use burn::tensor::{Bool, DType, Device, Tensor};

use crate::cache::{DeviceKey, ShapeCache};

/// A block's causal masks by shape, shared by its clones.
#[derive(Clone, Debug, Default)]
pub(super) struct CausalMasks(ShapeCache<Tensor<2, Bool>>);

impl CausalMasks {
    /// `[seq_q, seq_k]`, true where key `j` comes after query `offset + i`.
    pub(super) fn get(
        &self,
        device: &Device,
        offset: usize,
        seq_q: usize,
        seq_k: usize,
    ) -> Tensor<2, Bool> {
        // Bool tensors come in the device's bool dtype; the key needs only to be constant.
        // The window of the cached square is copied (through ints) before use: on wgpu with
        // autodiff (lavapipe, burn 0.22.1) masking with a strided bool view of a larger square
        // read the wrong elements, so that after a forward at seq 7 one at seq 2 let each query
        // see itself alone (the equivariance property test caught it now and then).
        let key = DeviceKey::new(device, DType::U8);
        self.0
            .get(key, offset, seq_q, seq_k, |n| {
                Tensor::<2, Bool>::tril_mask([n, n], 0, device)
            })
            .int()
            .bool()
    }
}

#[cfg(test)]
impl CausalMasks {
    pub(super) fn watch(&self) -> std::sync::Weak<impl Sized + use<>> {
        self.0.watch()
    }
}
