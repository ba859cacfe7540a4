//! Tokens per second of greedy generation with candle-transformers' Llama
//! (`candle_transformers::models::llama`) on the CPU: the candle twin of `generation_speed`
//! (ours, `crates/burn-positional-models/examples/generation_speed.rs`) and of
//! `tools/generation_speed.py` (transformers, PyTorch eager), on the same checkpoint folders:
//!
//! ```text
//! python3 tools/generation_speed.py write /tmp/burn-positional-speed \
//!     --models llama,llama-1b --dtypes f32,bf16
//! cargo build --release -p burn-positional-benches --example candle_generation
//! $CARGO_TARGET_DIR/release/examples/candle_generation /tmp/burn-positional-speed/llama --batch 1
//! $CARGO_TARGET_DIR/release/examples/candle_generation /tmp/burn-positional-speed/llama-bf16 --batch 8
//! RAYON_NUM_THREADS=2 $CARGO_TARGET_DIR/release/examples/candle_generation \
//!     /tmp/burn-positional-speed/llama-1b --batch 1 --dtype bf16
//! ```
//!
//! (or `cargo run --release -p burn-positional-benches --example candle_generation -- DIR ...`;
//! `CARGO_TARGET_DIR` defaults to `target`). The same measurement as ours: a batch of `--batch`
//! prompts of `--prompt` tokens with ours' ids (a linear congruential generator, seed 1, ids
//! `3 + ((state >> 33) % 997)`), `--new` greedy tokens (argmax, no eos) through `Llama::forward`
//! and its `Cache` (a key/value cache per layer). The compute dtype is the checkpoint's
//! (config.json's `dtype`) unless `--dtype f32|bf16`. Load is the time from the folder to a
//! model ready (config parsed, weights read and converted to the dtype, the rotary table built).
//! Prefill is the time to the first token (the prompt's forward, its logits on the last
//! position, the argmax read back), decode the time of the other `new - 1` tokens, each read
//! back to the host as generation must. Peak memory is the process's peak resident set
//! (`VmHWM`): the weights are memory-mapped while loading, so the mapped file's pages count in it
//! beside the tensors made from them. Threads: candle's CPU matmul (gemm) and its rayon ops use
//! `RAYON_NUM_THREADS` where set, else the physical cores (`candle_core::utils::get_num_threads`,
//! printed as `threads`, beside `std::thread::available_parallelism` as `available_parallelism`).
//! Prints one JSON line with ours' keys, those two added. `--print-tokens` writes each row's
//! generated ids to stderr (to check them against transformers').
//!
//! A batch needs no padding (every prompt has the same length): `Llama::forward(x, index_pos,
//! cache)` takes `(batch, seq)` ids and its causal mask broadcasts over the batch. Checked
//! against transformers' `generate` on the same prompts: the same 16 tokens for every row of
//! `llama` at batch 8 (and at batch 1), of `llama-bf16` at batch 1, and 8 tokens of `llama-1b`
//! (llama3 rope scaling) at batch 2.
//!
//! Where candle's Llama differs from transformers': transformers 5 writes the rotary settings as
//! `rope_parameters`, which candle's `LlamaConfig` does not read (it would silently use theta
//! 10000 and no llama3 scaling, and `llama-1b` would generate other tokens), so this program
//! copies them to candle's `rope_theta` and `rope_scaling`; candle takes `head_dim` as
//! `hidden_size / num_attention_heads` (checked against config.json here); on the CPU candle has
//! no bf16 matmul kernel (each bf16 matmul widens both operands, the weights included, to f32
//! and narrows the product back), and its attention runs in f32 whatever the dtype; its key/value
//! cache grows by concatenation (a copy of the whole cache per layer and step) and repeats the
//! key/value heads to the query heads by copying; the logits are computed for the last position
//! only.

use std::path::PathBuf;
use std::time::Instant;

use candle_core::{D, DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::llama::{Cache, Llama, LlamaConfig};
use clap::Parser;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Tokens per second of greedy generation with candle-transformers' Llama.
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
    /// The compute dtype, f32 or bf16. Default: the checkpoint's (config.json's `dtype`).
    #[arg(long)]
    dtype: Option<String>,
    /// Write each row's generated ids to stderr.
    #[arg(long)]
    print_tokens: bool,
}

pub fn main() -> Result<()> {
    let args = Args::parse();
    if args.batch == 0 || args.prompt == 0 || args.new < 2 {
        return Err("--batch and --prompt must be at least 1, --new at least 2".into());
    }
    let device = Device::Cpu;

    let started = Instant::now();
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(args.dir.join("config.json"))?)?;
    let dtype = match args.dtype.as_deref() {
        Some(name) => parse_dtype(name)?,
        None => {
            let saved = config
                .get("dtype")
                .or_else(|| config.get("torch_dtype"))
                .and_then(|d| d.as_str())
                .unwrap_or("float32");
            parse_dtype(saved)?
        }
    };
    let config = llama_config(config)?.into_config(false);
    let vb = unsafe {
        VarBuilder::from_mmaped_safetensors(&[args.dir.join("model.safetensors")], dtype, &device)?
    };
    let model = Llama::load(vb, &config)?;
    let mut cache = Cache::new(true, dtype, &config, &device)?;
    let load = started.elapsed().as_secs_f64();

    // The same prompts as ours: a small linear congruential generator, seed 1.
    let mut state: u64 = 1;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        3 + ((state >> 33) % 997) as u32
    };
    let prompts: Vec<u32> = (0..args.batch * args.prompt).map(|_| next()).collect();
    let prompts = Tensor::from_vec(prompts, (args.batch, args.prompt), &device)?;

    let mut tokens: Vec<Vec<u32>> = vec![Vec::with_capacity(args.new); args.batch];
    let started = Instant::now();
    let logits = model.forward(&prompts, 0, &mut cache)?;
    let mut last = greedy(&logits)?;
    let prefill = started.elapsed().as_secs_f64();
    let started = Instant::now();
    for step in 1..args.new {
        for (row, &t) in tokens.iter_mut().zip(&last) {
            row.push(t);
        }
        let input = Tensor::from_vec(last, (args.batch, 1), &device)?;
        let logits = model.forward(&input, args.prompt + step - 1, &mut cache)?;
        last = greedy(&logits)?;
    }
    let decode = started.elapsed().as_secs_f64();
    for (row, &t) in tokens.iter_mut().zip(&last) {
        row.push(t);
    }
    assert!(tokens.iter().all(|t| t.len() == args.new));
    if args.print_tokens {
        for (i, row) in tokens.iter().enumerate() {
            eprintln!("row {i}: {row:?}");
        }
    }

    println!(
        "{{\"side\": \"candle-transformers {} (CPU)\", \"dtype\": \"{}\", \"model\": {:?}, \"batch\": {}, \"prompt\": {}, \"new\": {}, \"cpu\": {:?}, \"threads\": {}, \"available_parallelism\": {}, \"load_s\": {:.3}, \"prefill_s\": {:.4}, \"prefill_tokens_per_s\": {:.1}, \"decode_s\": {:.4}, \"decode_tokens_per_s\": {:.1}, \"peak_rss_mib\": {:.1}}}",
        candle_transformers_version(),
        dtype.as_str(),
        args.dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default(),
        args.batch,
        args.prompt,
        args.new,
        cpu_features(),
        candle_core::utils::get_num_threads(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load,
        prefill,
        (args.batch * args.prompt) as f64 / prefill,
        decode,
        (args.batch * (args.new - 1)) as f64 / decode,
        peak_rss_mib(),
    );
    Ok(())
}

/// Each row's argmax of `(batch, vocab)` logits, read back to the host.
fn greedy(logits: &Tensor) -> Result<Vec<u32>> {
    Ok(logits.argmax(D::Minus1)?.to_vec1::<u32>()?)
}

fn parse_dtype(name: &str) -> Result<DType> {
    match name {
        "f32" | "float32" => Ok(DType::F32),
        "bf16" | "bfloat16" => Ok(DType::BF16),
        other => Err(format!("dtype {other:?}: f32 (float32) or bf16 (bfloat16)").into()),
    }
}

/// candle's `LlamaConfig` from a config.json. transformers 5 writes the rotary settings as
/// `rope_parameters` (`rope_theta`, `rope_type` and llama3's factors); candle reads top-level
/// `rope_theta` (default 10000) and `rope_scaling`, so they are copied there. Any other
/// `rope_type` than default and llama3 is refused, as is a `head_dim` other than
/// `hidden_size / num_attention_heads` (candle's).
fn llama_config(mut config: serde_json::Value) -> Result<LlamaConfig> {
    let object = config
        .as_object_mut()
        .ok_or("config.json is not an object")?;
    let rope = object
        .get("rope_parameters")
        .or_else(|| object.get("rope_scaling"))
        .cloned();
    if let Some(serde_json::Value::Object(rope)) = rope {
        if let Some(theta) = rope.get("rope_theta").cloned()
            && !object.contains_key("rope_theta")
        {
            object.insert("rope_theta".into(), theta);
        }
        let kind = rope
            .get("rope_type")
            .or_else(|| rope.get("type"))
            .and_then(|t| t.as_str())
            .unwrap_or("default");
        match kind {
            "default" => {
                object.remove("rope_scaling");
            }
            "llama3" => {
                object.insert("rope_scaling".into(), serde_json::Value::Object(rope));
            }
            other => {
                return Err(
                    format!("rope_type {other:?}: candle's Llama has default and llama3").into(),
                );
            }
        }
    }
    let hidden = object.get("hidden_size").and_then(|v| v.as_u64());
    let heads = object.get("num_attention_heads").and_then(|v| v.as_u64());
    if let (Some(head_dim), Some(hidden), Some(heads)) = (
        object.get("head_dim").and_then(|v| v.as_u64()),
        hidden,
        heads,
    ) && head_dim * heads != hidden
    {
        return Err(format!(
            "head_dim {head_dim}: candle's Llama takes hidden_size / num_attention_heads = {}",
            hidden / heads
        )
        .into());
    }
    Ok(serde_json::from_value(config)?)
}

/// candle-transformers' version: the workspace's Cargo.lock, read at build time.
fn candle_transformers_version() -> &'static str {
    let lock = include_str!("../../Cargo.lock");
    lock.split("[[package]]")
        .find(|p| p.contains("name = \"candle-transformers\""))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or("unknown")
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

/// The CPU's model and the vector features a CPU backend may use (from /proc/cpuinfo), as
/// `generation_speed`'s `cpu_features`.
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
