//! Tokens per second of greedy generation with a port, the side `tools/generation_speed.py`
//! measures in transformers (one process per side, the same checkpoint folder):
//!
//! ```text
//! python3 tools/generation_speed.py write /tmp/burn-positional-speed
//! cargo run --release -p burn-positional-models --example generation_speed -- \
//!     /tmp/burn-positional-speed/gpt2 --batch 1
//! ```
//!
//! A batch of `--batch` random prompts of `--prompt` tokens (ids in 3..1000, seed 1), `--new`
//! greedy tokens with `burn_positional_models::generate` (a `KvCache` per layer), `--runs`
//! times in one process (default 2). Prefill is the time to the first token (the prompt's
//! forward included), decode the time of the others; each token is read back from the device,
//! as generation must. The first run is cold (on a GPU it compiles every kernel it launches);
//! `cold_*` report it apart, and the other figures are the last run's (warm). Each warm decode
//! step's time (`decode_step_ms`: first, median, last, slowest) shows whether steps slow down
//! as the keys grow (a recompile per length would show as the slowest). Load is the time from
//! the folder to a model on the device (synced). Peak memory is the process's peak resident
//! set (`VmHWM`). Prints one JSON line.

use std::path::PathBuf;

use burn::tensor::FloatDType;
use burn_positional_examples::device::{DeviceChoice, open};
use burn_positional_models::{
    Checkpoint, GenerateOptions, load_checkpoint, try_generate_streaming,
};
use clap::Parser;

/// Tokens per second of greedy generation with a checkpoint folder.
#[derive(Parser, Debug)]
struct Args {
    /// The checkpoint folder (config.json + model.safetensors).
    dir: PathBuf,
    /// Prompts in the batch.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Tokens per prompt.
    #[arg(long, default_value_t = 128)]
    prompt: usize,
    /// Tokens to generate.
    #[arg(long, default_value_t = 128)]
    new: usize,
    /// flex, ndarray, wgpu.
    #[arg(long, default_value = "flex")]
    device: DeviceChoice,
    /// The compute dtype, f32, f16 or bf16 (`Checkpoint::with_dtype`). Default:
    /// `Checkpoint::compute_dtype`'s choice (f32 on the CPU when the copy fits, else the weights
    /// files' where the device computes in it, else f32), with its notice.
    #[arg(long, value_parser = burn_positional_models::parse_dtype)]
    dtype: Option<FloatDType>,
    /// Generations in the process: the first is cold, the last is reported as warm.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
}

pub fn main() -> Result<(), String> {
    let args = Args::parse();
    let opened = open(args.device)?;
    let device = opened.device;
    let mut checkpoint = Checkpoint::open(&args.dir).map_err(|e| e.to_string())?;
    if let Some(dtype) = args.dtype {
        checkpoint = checkpoint.with_dtype(dtype);
    }
    let chosen = checkpoint
        .compute_dtype(&device)
        .map_err(|e| e.to_string())?;
    if let Some(notice) = &chosen.notice {
        eprintln!("{notice}");
    }
    let dtype = chosen.dtype;
    let started = std::time::Instant::now();
    let model = load_checkpoint(&checkpoint, &device).map_err(|e| e.to_string())?;
    device.sync().map_err(|e| format!("{e:?}"))?;
    let load = started.elapsed().as_secs_f64();
    // The same prompts on every run: a small linear congruential generator, seed 1.
    let mut state: u64 = 1;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        3 + ((state >> 33) % 997) as i64
    };
    let prompts: Vec<Vec<i64>> = (0..args.batch)
        .map(|_| (0..args.prompt).map(|_| next()).collect())
        .collect();
    let options = GenerateOptions::greedy(args.new, 0);
    let mut runs = Vec::new();
    for _ in 0..args.runs {
        // Each step's end: the callback runs once the step's tokens are read back.
        let mut stamps = Vec::with_capacity(args.new);
        let generated = try_generate_streaming(&model, &prompts, &options, &device, |_| {
            stamps.push(std::time::Instant::now())
        })
        .map_err(|e| e.to_string())?;
        assert!(generated.tokens.iter().all(|t| t.len() == args.new));
        let mut steps: Vec<f64> = stamps
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1e3)
            .collect();
        let (first, last) = (steps.first().copied(), steps.last().copied());
        steps.sort_by(f64::total_cmp);
        let step_ms = [
            first.unwrap_or(0.0),
            steps.get(steps.len() / 2).copied().unwrap_or(0.0),
            last.unwrap_or(0.0),
            steps.last().copied().unwrap_or(0.0),
        ];
        runs.push((
            generated.prefill.as_secs_f64(),
            generated.decode.as_secs_f64(),
            step_ms,
        ));
    }
    let (cold_prefill, cold_decode, _) = runs[0];
    let (prefill, decode, step_ms) = runs[runs.len() - 1];
    let decoded = (args.batch * (args.new - 1)) as f64;
    println!(
        "{{\"side\": \"burn-positional-models ({})\", \"dtype\": \"{:?}\", \"model\": {:?}, \"batch\": {}, \"prompt\": {}, \"new\": {}, \"runs\": {}, \"cpu\": {:?}, \"load_s\": {:.3}, \"cold_prefill_s\": {:.4}, \"cold_decode_tokens_per_s\": {:.1}, \"prefill_s\": {:.4}, \"prefill_tokens_per_s\": {:.1}, \"decode_s\": {:.4}, \"decode_tokens_per_s\": {:.1}, \"decode_step_ms\": {{\"first\": {:.3}, \"median\": {:.3}, \"last\": {:.3}, \"slowest\": {:.3}}}, \"peak_rss_mib\": {:.1}}}",
        opened.description,
        dtype,
        args.dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default(),
        args.batch,
        args.prompt,
        args.new,
        args.runs,
        cpu_features(),
        load,
        cold_prefill,
        decoded / cold_decode,
        prefill,
        (args.batch * args.prompt) as f64 / prefill,
        decode,
        decoded / decode,
        step_ms[0],
        step_ms[1],
        step_ms[2],
        step_ms[3],
        peak_rss_mib(),
    );
    Ok(())
}

/// The process's peak resident set in MiB (`VmHWM` of /proc/self/status; 0 where there is none).
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// The CPU's model and the vector features a CPU backend may use (from /proc/cpuinfo), printed
/// beside every speed figure: the same code runs at different speeds with and without AVX-512.
fn cpu_features() -> String {
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return "unknown".into();
    };
    let field = |name: &str| {
        info.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default()
    };
    let flags = field("flags");
    let flags: Vec<&str> = flags.split_whitespace().collect();
    let wanted = [
        "avx2",
        "fma",
        "avx512f",
        "avx512_bf16",
        "amx_bf16",
        "amx_tile",
    ];
    let have: Vec<&str> = wanted.into_iter().filter(|f| flags.contains(f)).collect();
    format!("{} [{}]", field("model name"), have.join(" "))
}
