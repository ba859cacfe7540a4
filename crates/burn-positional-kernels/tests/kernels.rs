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
