//! Every port against transformers, on every device: wgpu (a GPU, or Mesa's lavapipe where
//! there is none), ndarray and flex, each with and without autodiff for the forward, without
//! autodiff for generation (inference). The expected logits and
//! tokens were written by transformers itself (`tools/model_fixtures.py`; each fixture's
//! `expected.json` names the transformers and torch versions), from the tiny random checkpoints
//! committed beside them in `tests/fixtures/<family>/`.
//!
//! No backend is ever skipped: if wgpu finds no adapter, every wgpu test fails with a message
//! saying what to install.

/// Runs each named `fn(&Device)` on all six devices, one `#[test]` per device.
macro_rules! on_every_device {
    ($($test:ident),* $(,)?) => {
        mod on_wgpu { $( #[test] fn $test() { super::$test(&crate::devices::wgpu()) } )* }
        mod on_ndarray { $( #[test] fn $test() { super::$test(&crate::devices::ndarray()) } )* }
        mod on_flex { $( #[test] fn $test() { super::$test(&crate::devices::flex()) } )* }
        mod on_wgpu_autodiff { $( #[test] fn $test() { super::$test(&crate::devices::wgpu().autodiff()) } )* }
        mod on_ndarray_autodiff { $( #[test] fn $test() { super::$test(&crate::devices::ndarray().autodiff()) } )* }
        mod on_flex_autodiff { $( #[test] fn $test() { super::$test(&crate::devices::flex().autodiff()) } )* }
    };
}

/// Runs each named `fn(&Device)` on the three devices without autodiff (generation: inference
/// only), one `#[test]` per device.
macro_rules! on_every_inference_device {
    ($($test:ident),* $(,)?) => {
        mod on_wgpu { $( #[test] fn $test() { super::$test(&crate::devices::wgpu()) } )* }
        mod on_ndarray { $( #[test] fn $test() { super::$test(&crate::devices::ndarray()) } )* }
        mod on_flex { $( #[test] fn $test() { super::$test(&crate::devices::flex()) } )* }
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

/// The layer's own device openers (wgpu fails loudly without an adapter), shared, not copied.
#[path = "../../../burn-positional/tests/behaviour/devices.rs"]
mod devices;
mod fixture;

mod bert;
mod bloom;
mod decoders;
mod dtypes;
mod generation;
mod gpt2;
mod quirks;
mod sampling;
mod sharded;
mod t5;
mod text;
mod vision;
