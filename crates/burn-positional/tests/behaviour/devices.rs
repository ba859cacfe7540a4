//! The devices every behaviour test runs on.

use std::sync::OnceLock;

use burn::tensor::{Device, DeviceKind};

/// The wgpu device, opened once per test binary. Panics, never skips, when wgpu has no adapter.
pub fn wgpu() -> Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            // Asking for the identity opens the adapter; without one, that panics.
            let identity =
                std::panic::catch_unwind(|| Device::wgpu(DeviceKind::DefaultDevice).identity())
                    .unwrap_or_else(|_| {
                        panic!(
                            "wgpu found no adapter. These tests never skip a backend. Install a \
                             Vulkan driver (Debian: apt-get install mesa-vulkan-drivers \
                             libvulkan1, which gives the lavapipe CPU adapter) or run on a \
                             machine with a GPU."
                        )
                    });
            let adapter = identity
                .map(|id| id.name)
                .unwrap_or_else(|| "unnamed adapter".into());
            eprintln!("wgpu, adapter: {adapter}");
            Device::wgpu(DeviceKind::DefaultDevice)
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
