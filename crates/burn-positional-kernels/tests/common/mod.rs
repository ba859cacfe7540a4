//! What every test binary of the kernels shares: the devices the fused paths run on.

use burn::tensor::{Device, DeviceKind};

/// flex, ndarray and wgpu (lavapipe where there is no GPU; never skipped), each plain and with
/// autodiff.
#[allow(deprecated)]
pub fn devices() -> Vec<Device> {
    let plain = vec![
        Device::flex(),
        Device::ndarray(),
        Device::wgpu(DeviceKind::DefaultDevice),
    ];
    let autodiff: Vec<Device> = plain.iter().map(|d| d.clone().autodiff()).collect();
    plain.into_iter().chain(autodiff).collect()
}
