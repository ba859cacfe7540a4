//! Writes every CubeCL kernel of this crate as the CUDA C++ `cubecl-cuda` hands NVRTC, for an
//! H100/H200 (`sm_90`) and an A100 (`sm_80`), with a `manifest.json` that
//! `tools/cuda/kernels.py` compiles with NVRTC: registers, spills, shared memory, occupancy,
//! and `HMMA` in the tensor-core kernels' machine code. No GPU, no CUDA driver:
//!
//! ```sh
//! cargo run -p burn-positional-kernels --example cuda_kernels -- target/cuda-kernels
//! bash tools/cuda/nvrtc-setup && python3 tools/cuda/kernels.py target/cuda-kernels
//! ```
//!
//! `.ci/checks` runs both (step `cuda-kernels`) on the check's part of the attention's matrix;
//! `--full` writes every dtype, head width and group (the table in `docs/gpu.md`).

use std::path::PathBuf;

use burn_positional_kernels::cuda_check::{A100, H100, KernelSource, kernel_sources};
use clap::Parser;
use serde_json::json;

#[derive(Parser)]
#[command(about = "Every CubeCL kernel of this crate as CUDA C++, for NVRTC (no GPU needed)")]
struct Args {
    /// The folder to write (cleared first): one `.cu` per distinct source and `manifest.json`.
    #[arg(default_value = "target/cuda-kernels")]
    out: PathBuf,
    /// Every dtype, head width and group of the attention kernels, not the check's part.
    #[arg(long)]
    full: bool,
}

fn main() {
    let args = Args::parse();
    let out = &args.out;
    if out.exists() {
        std::fs::remove_dir_all(out).expect("cuda_kernels: cannot clear the output folder");
    }
    std::fs::create_dir_all(out).expect("cuda_kernels: cannot create the output folder");
    let start = std::time::Instant::now();
    let mut manifest = Vec::new();
    // One file per distinct source: the two GPUs' plans mostly agree, and a group that is a
    // run-time value gives the same source.
    let mut files: Vec<String> = Vec::new();
    for gpu in [H100, A100] {
        let sources = kernel_sources(gpu, args.full).unwrap_or_else(|e| {
            eprintln!("cuda_kernels: {e}");
            std::process::exit(1)
        });
        for KernelSource {
            kernel,
            spec,
            arch,
            entrypoint,
            cube_dim,
            dynamic_shared_bytes,
            tensor_cores,
            source,
        } in sources
        {
            let index = files.iter().position(|s| *s == source).unwrap_or_else(|| {
                files.push(source);
                files.len() - 1
            });
            manifest.push(json!({
                "kernel": kernel,
                "spec": spec,
                "arch": arch,
                "file": format!("{index:04}.cu"),
                "entrypoint": entrypoint,
                "cube_dim": cube_dim,
                "dynamic_shared_bytes": dynamic_shared_bytes,
                "tensor_cores": tensor_cores,
            }));
        }
    }
    for (index, source) in files.iter().enumerate() {
        std::fs::write(out.join(format!("{index:04}.cu")), source)
            .expect("cuda_kernels: cannot write a source");
    }
    std::fs::write(
        out.join("manifest.json"),
        serde_json::to_string_pretty(&manifest).expect("the manifest is JSON"),
    )
    .expect("cuda_kernels: cannot write the manifest");
    println!(
        "cuda_kernels: {} kernel specializations ({} distinct sources) in {} ({:.1} s)",
        manifest.len(),
        files.len(),
        out.display(),
        start.elapsed().as_secs_f64()
    );
}
