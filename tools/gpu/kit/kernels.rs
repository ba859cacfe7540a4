//! The kernels' three test files (`crates/burn-positional-kernels/tests/`) as one test binary
//! for the GPU kit: the same tests, unchanged, one copy of burn instead of three.

#[path = "../../../crates/burn-positional-kernels/tests/flash.rs"]
#[allow(dead_code)]
mod flash;
#[path = "../../../crates/burn-positional-kernels/tests/fused_vs_reference.rs"]
#[allow(dead_code)]
mod fused_vs_reference;
#[path = "../../../crates/burn-positional-kernels/tests/rope.rs"]
#[allow(dead_code)]
mod rope;
