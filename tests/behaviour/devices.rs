//! The devices every behaviour test runs on.

use std::sync::OnceLock;

use burn::tensor::Device;
use burn_positional_examples::device::{DeviceChoice, open};

/// The wgpu device, opened once per test binary. Panics, never skips, when wgpu has no adapter.
pub fn wgpu() -> Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            let opened = open(DeviceChoice::Wgpu).unwrap_or_else(|reason| {
                panic!(
                    "{reason}. These tests never skip a backend. Install a Vulkan driver (Debian: \
                     apt-get install mesa-vulkan-drivers libvulkan1, which gives the lavapipe CPU \
                     adapter) or run on a machine with a GPU."
                )
            });
            eprintln!("{}", opened.description);
            opened.device
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
