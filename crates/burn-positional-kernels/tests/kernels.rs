//! The kernels' integration tests as one test binary, so that burn, wgpu and cubecl are linked
//! once instead of once per file: the fused embedding against its reference twin
//! (`fused_vs_reference`), the rotary op (`rope`), the flash attention kernels (`flash`). Run
//! one file's tests with its module as the filter, e.g.
//! `cargo test -p burn-positional-kernels --test kernels flash::`.
//!
//! Each file keeps its own `common` module (the devices): they are the files they were.

#[path = "flash.rs"]
mod flash;
#[path = "flash_sweep.rs"]
mod flash_sweep;
#[path = "fused_vs_reference.rs"]
mod fused_vs_reference;
#[path = "rope.rs"]
mod rope;

use std::sync::{Mutex, MutexGuard};

use burn_positional_kernels::FlashVariant;

/// Held by a test that forces a flash variant and counts its launches (`flash.rs`'s
/// `check_variant`, `flash_sweep.rs`'s sweeps and `issue_rows`): the counts are the process's,
/// so two tests forcing one variant at once would each count the other's launches. One lock per
/// variant: tests of different variants still run side by side.
fn forcing(variant: FlashVariant) -> MutexGuard<'static, ()> {
    static LOCKS: [Mutex<()>; 4] = [const { Mutex::new(()) }; 4];
    let at = match variant {
        FlashVariant::Registers => 0,
        FlashVariant::Shared => 1,
        FlashVariant::TensorCores => 2,
        FlashVariant::Blocked => 3,
        other => panic!("forcing: {other:?} is not a kernel"),
    };
    // A test that failed while holding it leaves the counts as they are: the next one still
    // counts from its own start.
    LOCKS[at]
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
