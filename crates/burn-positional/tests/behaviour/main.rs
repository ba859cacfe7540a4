//! Behaviour of the positional layer, written once and run on every device: wgpu (a GPU, or
//! Mesa's lavapipe where there is none), ndarray and flex, each with and without autodiff.
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

/// The package's folder, where the fixtures are: `CARGO_MANIFEST_DIR` as `cargo test` sets it
/// when it runs the binary (a binary built from another checkout in a shared target, or carried
/// to the GPU machine, reads the files of the checkout it runs in); the folder it was built in
/// when run by hand without it.
pub fn package_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
}

mod devices;

/// Runs `f`, which must panic, and returns its message: what a `# Panics` section promises.
pub fn panic_message(f: impl FnOnce()) -> String {
    try_panic(f).expect_err("expected a panic")
}

/// Runs `f`; its panic's message, if it panics.
pub fn try_panic(f: impl FnOnce()) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

mod attend;
mod attend_block;
mod attention_block;
mod attention_fixtures;
mod attention_schemes;
mod bad_input;
mod equivariance;
mod fused;
mod gradients;
mod hf_rope;
mod hf_rope_fuzz;
mod hostile_sizes;
mod own_blocks;
mod padding;
mod positions;
mod pretrained;
mod records;
mod shared_state;
mod sinusoidal;
mod tiled_attention;
mod vision;
