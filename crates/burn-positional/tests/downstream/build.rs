//! Takes the README's "In a burn model" block, as a reader would copy it, and wraps it in a
//! function for `main` to run: the snippet here is the README's, never a copy that drifts.

use std::path::{Path, PathBuf};
use std::{env, fs};

fn main() {
    // Read at run time: a build script compiled for one checkout may be reused by another
    // (the target directory outlives them), and `env!` would point it at the first.
    let dir = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let readme = Path::new(&dir).join("../../../../README.md");
    println!("cargo::rerun-if-changed={}", readme.display());
    let text = fs::read_to_string(&readme)
        .unwrap_or_else(|e| panic!("reading {}: {e}", readme.display()));
    let section = text
        .split("\n## In a burn model\n")
        .nth(1)
        .expect("the README has a section headed `## In a burn model`");
    let start = section
        .find("```rust\n")
        .expect("the section has a ```rust block")
        + "```rust\n".len();
    let end = start
        + section[start..]
            .find("\n```")
            .expect("the ```rust block is closed");
    let snippet = &section[start..end];
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("readme_model.rs");
    fs::write(
        out,
        format!("/// The README's \"In a burn model\" block, verbatim.\npub fn readme_model() {{\n{snippet}\n}}\n"),
    )
    .expect("writing the snippet to OUT_DIR");
}
