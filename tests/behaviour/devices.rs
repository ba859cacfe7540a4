//! The devices every behaviour test runs on.

use std::sync::OnceLock;

use burn::tensor::Device;

/// The wgpu device, initialized once per test binary. Panics, never skips, when wgpu has no
/// adapter.
pub fn wgpu() -> Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            let device = Device::wgpu_options().init().unwrap_or_else(|err| {
                panic!(
                    "wgpu found no adapter: {err}. These tests never skip a backend. Install a \
                     Vulkan driver (Debian: apt-get install mesa-vulkan-drivers libvulkan1, \
                     which gives the lavapipe CPU adapter) or run on a machine with a GPU."
                )
            });
            let name = device.identity().map(|id| id.name).unwrap_or_default();
            eprintln!("wgpu adapter: {name}");
            device
        })
        .clone()
}

/// ndarray is deprecated in burn 0.22 in favour of flex; our users asked for both.
#[allow(deprecated)]
pub fn ndarray() -> Device {
    Device::ndarray()
}

pub fn flex() -> Device {
    Device::flex()
}
