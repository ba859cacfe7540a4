//! What every test binary of the kernels shares: the devices the fused paths run on.

use burn::tensor::{Device, DeviceKind};

/// flex, ndarray and wgpu (lavapipe where there is no GPU; never skipped), each plain and with
/// autodiff.
pub fn devices() -> Vec<Device> {
    host_devices().into_iter().chain(wgpu_devices()).collect()
}

/// flex and ndarray, each plain and with autodiff.
#[allow(deprecated)]
pub fn host_devices() -> Vec<Device> {
    with_autodiff(vec![Device::flex(), Device::ndarray()])
}

/// wgpu (lavapipe where there is no GPU; never skipped), plain and with autodiff.
pub fn wgpu_devices() -> Vec<Device> {
    with_autodiff(vec![Device::wgpu(DeviceKind::DefaultDevice)])
}

fn with_autodiff(plain: Vec<Device>) -> Vec<Device> {
    let autodiff: Vec<Device> = plain.iter().map(|d| d.clone().autodiff()).collect();
    plain.into_iter().chain(autodiff).collect()
}
