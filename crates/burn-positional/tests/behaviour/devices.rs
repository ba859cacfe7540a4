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

/// The wgpu device the autodiff tests run on. On a GPU: the same device as [`wgpu`]. On
/// lavapipe (a CPU adapter, what CI has): a second runtime on the same adapter
/// (`DeviceKind::Cpu`), so that the plain and the autodiff wgpu tests, which the harness runs
/// side by side, each have their own device thread to compile shaders on (lavapipe compiles
/// every kernel with LLVM on the thread that submits it; one runtime would compile them one at
/// a time while the machine's other core waits).
pub fn wgpu_autodiff() -> Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            let default = wgpu();
            let adapter = default.identity().map(|id| id.name).unwrap_or_default();
            if adapter.starts_with("llvmpipe") {
                eprintln!("wgpu (autodiff tests): a second runtime on {adapter}");
                Device::wgpu(DeviceKind::Cpu)
            } else {
                default
            }
        })
        .clone()
        .autodiff()
}

/// ndarray is deprecated in burn 0.22 in favour of flex; our users asked for both.
#[allow(deprecated)]
pub fn ndarray() -> Device {
    Device::ndarray()
}

pub fn flex() -> Device {
    Device::flex()
}
