//! Pretrained position weights from Hugging Face checkpoints: GPT-2's token and position tables
//! into an `EmbeddingWithPosition`, T5's relative attention bias into a `T5Bias`, and what they
//! give. By default the tiny checkpoints the tests use (written by transformers, see
//! `tools/hf_weight_fixtures.py`); give your own with the sizes of its `config.json`.
//!
//! ```text
//! cargo run --example load_pretrained --features pretrained
//! cargo run --example load_pretrained --features pretrained -- \
//!     --gpt2 gpt2/model.safetensors --vocab-size 50257 --d-model 768 --max-len 1024 \
//!     --t5 t5-small/model.safetensors --n-heads 8 --num-buckets 32 --max-distance 128
//! ```

use std::path::{Path, PathBuf};

use burn::prelude::*;
use burn_positional::pretrained::{self, T5Stack};
use burn_positional::{EmbeddingWithPositionConfig, LearnedConfig, T5BiasConfig};
use clap::Parser;

const FIXTURES: &str = "crates/burn-positional/tests/fixtures/hf/pretrained";

/// A committed fixture: relative to the repository root when run from there, else absolute.
fn fixture(name: &str) -> PathBuf {
    let relative = Path::new(FIXTURES).join(name);
    if relative.exists() {
        return relative;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

#[derive(Parser)]
#[command(about = "Load GPT-2's and T5's position weights from Hugging Face checkpoints")]
struct Args {
    /// A GPT-2 checkpoint (.safetensors, .bin, .pt); the tests' tiny one by default.
    #[arg(long)]
    gpt2: Option<PathBuf>,
    /// GPT-2's `vocab_size`.
    #[arg(long, default_value_t = 50)]
    vocab_size: usize,
    /// GPT-2's `n_embd`.
    #[arg(long, default_value_t = 16)]
    d_model: usize,
    /// GPT-2's `n_positions`.
    #[arg(long, default_value_t = 32)]
    max_len: usize,
    /// A T5 checkpoint; the tests' tiny one by default.
    #[arg(long)]
    t5: Option<PathBuf>,
    /// T5's `num_heads`.
    #[arg(long, default_value_t = 4)]
    n_heads: usize,
    /// T5's `relative_attention_num_buckets`.
    #[arg(long, default_value_t = 32)]
    num_buckets: usize,
    /// T5's `relative_attention_max_distance`.
    #[arg(long, default_value_t = 64)]
    max_distance: usize,
}

fn main() -> Result<(), pretrained::PretrainedError> {
    let args = Args::parse();
    let device = Device::flex();

    // GPT-2: token table + learned position table, added.
    let gpt2 = args.gpt2.unwrap_or_else(|| fixture("gpt2.safetensors"));
    let mut embed = EmbeddingWithPositionConfig::new(args.vocab_size, args.d_model)
        .with_scheme(LearnedConfig::new(args.max_len).into())
        .init(&device);
    println!("GPT-2, {}", pretrained::gpt2(&mut embed, &gpt2)?);
    let ids = Tensor::<2, Int>::from_data([[3, 17, 42]], &device);
    let out = embed.forward(ids); // [1, 3, d_model]: wte(ids) + wpe(0..3)
    let first: Vec<f32> = out.slice([0..1, 0..1, 0..4]).into_data().iter().collect();
    println!(
        "  wte([3, 17, 42]) + wpe([0, 1, 2]), first row, first 4 of {}: {first:.4?}\n",
        args.d_model
    );

    // T5: one bias table per stack; the decoder's buckets are causal.
    let t5 = args.t5.unwrap_or_else(|| fixture("t5.safetensors"));
    for stack in [T5Stack::Encoder, T5Stack::Decoder] {
        let mut bias = T5BiasConfig::new(args.n_heads)
            .with_num_buckets(args.num_buckets)
            .with_max_distance(args.max_distance)
            .init(&device);
        println!("T5 {stack:?}, {}", pretrained::t5(&mut bias, stack, &t5)?);
        let scores = bias.bias(0, 4, 4, stack.causal()); // [1, n_heads, 4, 4]
        let head0: Vec<f32> = scores
            .slice([0..1, 0..1, 0..4, 0..4])
            .into_data()
            .iter()
            .collect();
        println!("  compute_bias(4, 4), head 0 (rows: queries, columns: keys):");
        for row in head0.chunks(4) {
            println!("    {row:8.4?}");
        }
        println!();
    }
    Ok(())
}
