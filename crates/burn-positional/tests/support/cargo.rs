//! A cargo run by a test, as a user would run it: the cargo that runs the tests, a manifest of
//! this repository, and a target directory under this workspace's
//! (`CARGO_TARGET_TMPDIR/<name>`), so repeated runs are incremental and never wait on the
//! outer run's lock.

use std::path::Path;
use std::process::{Command, Output};

/// `cargo <args> --manifest-path <repo>/<manifest>` with `CARGO_TARGET_DIR` set to
/// `CARGO_TARGET_TMPDIR/<target>`; `configure` adds flags and environment.
///
/// # Panics
///
/// If cargo cannot be started.
pub fn nested_cargo(
    args: &[&str],
    manifest: &str,
    target: &str,
    configure: impl FnOnce(&mut Command),
) -> Output {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(&cargo);
    command
        .args(args)
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(manifest))
        .env(
            "CARGO_TARGET_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(target),
        )
        // No debug info in what the nested builds compile (the downstream crate is outside the
        // workspace, so the workspace's profile does not reach it): it would only slow CI down.
        .env("CARGO_PROFILE_DEV_DEBUG", "false");
    configure(&mut command);
    command
        .output()
        .unwrap_or_else(|e| panic!("running {cargo}: {e}"))
}
