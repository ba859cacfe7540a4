//! Builds and runs `tests/downstream`, a crate outside the workspace that depends on
//! `burn-positional` as a user's crate does, with only the `flex` feature. A feature gate that
//! leaves something out, a dev-dependency the library leans on, or a README "In a burn model"
//! snippet that no longer compiles or runs fails here.
//!
//! Its own target directory under this workspace's (`CARGO_TARGET_TMPDIR`), so the build is
//! incremental across runs and never waits on this run's lock; `--locked`, so its
//! `Cargo.lock` is the one committed.

#[path = "support/cargo.rs"]
mod support;

#[test]
fn downstream_crate_with_only_flex_builds_and_runs() {
    let output = support::nested_cargo(
        &["run", "--locked", "--quiet"],
        "tests/downstream/Cargo.toml",
        "downstream",
        |_| {},
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
