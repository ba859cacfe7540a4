//! The published crate as a user's build compiles it, by nested cargo runs that share one
//! target directory (`CARGO_TARGET_TMPDIR/nested`: the check, doc and downstream builds reuse
//! each other's build scripts and proc-macros, and every run after the first is incremental)
//! and one `RUSTFLAGS` (`-D warnings`, so the dependencies are not rebuilt between them).
//!
//! ## Each backend feature alone
//!
//! The published crate type-checks with each backend feature alone and with none, as a user's
//! build would compile it (this workspace's own build switches every feature on, so a
//! `#[cfg(feature = ...)]` gate that leaves something out would not show up anywhere else).
//! `flex` alone is built and run by the last test.
//!
//! `cuda` is type-checked as a user builds it, its build scripts included: cubecl-cuda 0.11.3
//! builds cubecl-llvm, whose build script (tracel-llvm-bundler) would download an LLVM bundle
//! from GitHub, which this project's machines cannot reach. `tools/cuda/setup` installs LLVM 23
//! from PyPI's `mlc-llvm-static` wheels where the bundler looks first (idempotent, the wheels
//! cached outside the clone); the test runs it before the check, so `cargo test` on a fresh
//! machine still does its own set-up. No CUDA toolkit is needed: libcuda and NVRTC load at run
//! time.
//!
//! ## A user's crate
//!
//! Builds and runs `tests/downstream`, a crate outside the workspace that depends on
//! `burn-positional` as a user's crate does, with only the `flex` feature. A feature gate that
//! leaves something out, a dev-dependency the library leans on, or a README "In a burn model"
//! snippet that no longer compiles or runs fails here.
//!
//! `--locked`, so its `Cargo.lock` is the one committed.

#[path = "support/cargo.rs"]
mod support;

#[test]
fn published_crate_checks_with_each_backend_feature_alone() {
    let package = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    let setup = package.join("../../tools/cuda/setup");
    let installed = std::process::Command::new("bash")
        .arg(&setup)
        .output()
        .unwrap_or_else(|e| panic!("bash {}: {e}", setup.display()));
    assert!(
        installed.status.success(),
        "`bash tools/cuda/setup` (LLVM for the cuda feature's build scripts) failed:\n{}{}",
        String::from_utf8_lossy(&installed.stdout),
        String::from_utf8_lossy(&installed.stderr)
    );
    for features in ["", "wgpu", "cuda", "ndarray"] {
        let output = support::nested_cargo(
            &["check", "--locked", "--quiet", "-p", "burn-positional"],
            "Cargo.toml",
            "nested",
            |command| {
                command
                    .args(["--no-default-features", "--features", features])
                    // Warnings are errors: an unused import under one feature set is a gate
                    // gone wrong.
                    .env("RUSTFLAGS", "-D warnings");
            },
        );
        assert!(
            output.status.success(),
            "`cargo check -p burn-positional --no-default-features --features {features:?}` failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// `cargo doc --no-deps` of the published crates builds with no warning: every public item
/// documented (`#![warn(missing_docs)]`), every intra-doc link resolved.
#[test]
fn published_docs_build_without_warnings() {
    let output = support::nested_cargo(
        &["doc", "--locked", "--quiet", "--no-deps"],
        "Cargo.toml",
        "nested",
        |command| {
            command
                .args(["-p", "burn-positional", "-p", "burn-positional-kernels"])
                .env("RUSTDOCFLAGS", "-D warnings")
                .env("RUSTFLAGS", "-D warnings");
        },
    );
    assert!(
        output.status.success(),
        "`cargo doc --no-deps` of the published crates failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn downstream_crate_with_only_flex_builds_and_runs() {
    let output = support::nested_cargo(
        &["run", "--locked", "--quiet"],
        "tests/downstream/Cargo.toml",
        "nested",
        |command| {
            command.env("RUSTFLAGS", "-D warnings");
        },
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the downstream crate failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    for line in [
        "README \"In a burn model\": ran",
        "uncovered backend (Autodiff<Flex>): same values as the fused path",
        "uncovered backend: gradients reach the learned table",
        "uncovered backend: same errors",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
}
