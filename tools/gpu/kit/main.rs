//! The GPU kit's multi-call binary: the repository's benches and examples, unchanged, under
//! one roof. Called through a link named after the program it should be (busybox style), as
//! `tools/gpu/kit.py` does; the program then reads its own arguments as usual.
//!
//! ```text
//! bench-embedding  bench-rope  bench-attention_memory  example-dog_bites_man  example-generation_speed
//! ```

#[path = "../../../benches/benches/attention_memory.rs"]
mod attention_memory;
#[path = "../../../examples/dog_bites_man.rs"]
mod dog_bites_man;
#[path = "../../../benches/benches/embedding.rs"]
mod embedding;
#[path = "../../../crates/burn-positional-models/examples/generation_speed.rs"]
mod generation_speed;
#[path = "../../../benches/benches/rope.rs"]
mod rope;

/// The programs, by the name of the link they are called through.
const PROGRAMS: [&str; 5] = [
    "bench-embedding",
    "bench-rope",
    "bench-attention_memory",
    "example-dog_bites_man",
    "example-generation_speed",
];

fn main() {
    let arg0 = std::env::args().next().unwrap_or_default();
    let name = std::path::Path::new(&arg0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.as_str() {
        "bench-embedding" => embedding::main(),
        "bench-rope" => rope::main(),
        "bench-attention_memory" => attention_memory::main(),
        "example-dog_bites_man" => dog_bites_man::main(),
        "example-generation_speed" => {
            if let Err(e) = generation_speed::main() {
                eprintln!("Error: {e}");
                std::process::exit(1);
            }
        }
        other => {
            eprintln!(
                "gpu-kit: called as {other:?}; call it through a link named one of: {}",
                PROGRAMS.join(", ")
            );
            std::process::exit(2);
        }
    }
}
