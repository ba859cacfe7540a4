//! Behaviour of the studies (training, the properties report, length generalization), written
//! once and run on every device: wgpu (a GPU, or Mesa's lavapipe where there is none), ndarray
//! and flex, each with and without autodiff.
//!
//! No backend is ever skipped: if wgpu finds no adapter, every wgpu test fails with a message
//! saying what to install.

/// Runs each named `fn(&Device)` on all six devices, one `#[test]` per device.
macro_rules! on_every_device {
    ($($test:ident),* $(,)?) => {
        mod on_wgpu { $( #[test] fn $test() { super::$test(&crate::devices::wgpu()) } )* }
        mod on_ndarray { $( #[test] fn $test() { super::$test(&crate::devices::ndarray()) } )* }
        mod on_flex { $( #[test] fn $test() { super::$test(&crate::devices::flex()) } )* }
        on_every_autodiff_device!($($test),*);
    };
}

/// Runs each named `fn(&Device)` on the three autodiff devices.
macro_rules! on_every_autodiff_device {
    ($($test:ident),* $(,)?) => {
        mod on_wgpu_autodiff { $( #[test] fn $test() { super::$test(&crate::devices::wgpu().autodiff()) } )* }
        mod on_ndarray_autodiff { $( #[test] fn $test() { super::$test(&crate::devices::ndarray().autodiff()) } )* }
        mod on_flex_autodiff { $( #[test] fn $test() { super::$test(&crate::devices::flex().autodiff()) } )* }
    };
}

/// The devices, opened as the examples open them.
mod devices {
    use burn::tensor::Device;
    use burn_positional_examples::device::{DeviceChoice, open};

    /// The wgpu device. Panics, never skips, when wgpu has no adapter.
    pub fn wgpu() -> Device {
        let opened = open(DeviceChoice::Wgpu).unwrap_or_else(|reason| {
            panic!(
                "{reason}. These tests never skip a backend. Install a Vulkan driver (Debian: \
                 apt-get install mesa-vulkan-drivers libvulkan1) or run on a GPU."
            )
        });
        opened.device
    }

    #[allow(deprecated)]
    pub fn ndarray() -> Device {
        Device::ndarray()
    }

    pub fn flex() -> Device {
        Device::flex()
    }
}

mod length_generalization;
mod properties;
mod training;
