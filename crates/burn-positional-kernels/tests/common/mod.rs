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

/// Where a kernel's slow twin runs (`reference_attention`: burn's own ops tile by tile): flex,
/// with autodiff where `autodiff`. On lavapipe those ops compile a fused kernel, a matrix
/// product or a reduction for nearly every new shape, each seconds of LLVM with Mesa's cache
/// empty (issue 70: most of `flash.rs`'s 1,100 s there), and burn-ndarray's run unoptimized in
/// the test build; on flex they compile nothing and call the optimized gemm.
#[allow(dead_code)] // the rope and embedding tests check against references of their own
pub fn twin_device(autodiff: bool) -> Device {
    if autodiff {
        Device::flex().autodiff()
    } else {
        Device::flex()
    }
}
