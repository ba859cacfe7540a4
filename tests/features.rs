//! The published crate type-checks with each backend feature alone and with none, as a user's
//! build would compile it (this workspace's own build switches every feature on, so a
//! `#[cfg(feature = ...)]` gate that leaves something out would not show up anywhere else).
//! `flex` alone is built and run by `tests/downstream.rs`.
//!
//! `cuda` is type-checked with `DOCS_RS=1`: cubecl-cuda 0.11.3 builds cubecl-llvm, whose build
//! script (tracel-llvm-bundler) downloads an LLVM bundle from the network, which a CI machine
//! that reaches only package registries cannot; it skips the download when `DOCS_RS` is set,
//! and `cargo check` needs no LLVM. No CUDA toolkit is needed either: nothing is linked.

#[path = "support/cargo.rs"]
mod support;

#[test]
fn published_crate_checks_with_each_backend_feature_alone() {
    for features in ["", "wgpu", "cuda", "ndarray"] {
        let output = support::nested_cargo(
            &["check", "--locked", "--quiet", "-p", "burn-positional"],
            "Cargo.toml",
            "features",
            |command| {
                command
                    .args(["--no-default-features", "--features", features])
                    // Warnings are errors: an unused import under one feature set is a gate
                    // gone wrong.
                    .env("RUSTFLAGS", "-D warnings");
                if features == "cuda" {
                    command.env("DOCS_RS", "1");
                }
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
        "docs",
        |command| {
            command
                .args(["-p", "burn-positional", "-p", "burn-positional-layer"])
                .args(["-p", "burn-positional-kernels"])
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
