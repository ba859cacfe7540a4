//! RoPE as a Hugging Face checkpoint configures it: read the rotary settings of a `config.json`
//! (Llama 3.1 8B and Qwen 2.5 7B Instruct with YaRN by default, both in `examples/configs/`),
//! build the layer's rope from them, and show what changes past the pretraining context. The
//! values are transformers' (same formulas, same f32 rounding; the tests compare them with
//! transformers itself, see docs/hf-rope.md).
//!
//! ```text
//! cargo run --example hf_rope
//! cargo run --example hf_rope -- path/to/config.json [--layer-type full_attention]
//! ```

use std::path::PathBuf;

use burn::prelude::*;
use burn_positional::{RopeConfig, RopeScaling, SelfAttentionConfig};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Read a Hugging Face config.json's RoPE settings into burn-positional")]
struct Args {
    /// config.json files; the two in examples/configs/ when none is given.
    configs: Vec<PathBuf>,
    /// For configs whose rope_parameters are nested per layer type (Gemma 3/4).
    #[arg(long)]
    layer_type: Option<String>,
}

fn main() {
    let args = Args::parse();
    let configs = if args.configs.is_empty() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/configs");
        vec![
            dir.join("llama-3.1-8b.json"),
            dir.join("qwen2.5-7b-instruct-yarn.json"),
        ]
    } else {
        args.configs
    };
    let device = Device::flex();
    for path in configs {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let json = std::fs::read_to_string(&path).unwrap_or_else(|err| {
            eprintln!("{}: {err}", path.display());
            std::process::exit(1);
        });
        let read = match &args.layer_type {
            None => RopeConfig::from_hf_config(&json),
            Some(layer) => RopeConfig::from_hf_config_layer(&json, layer),
        };
        let config = read.unwrap_or_else(|err| {
            eprintln!("{name}: {err}");
            std::process::exit(1);
        });
        let rope = config.init(&device);
        let inv = rope.inv_freq();
        println!("{name}");
        println!(
            "  rope_type {}, head width {}, rotated {}, base {}, layout {:?}",
            config.scaling.rope_type(),
            config.d_head,
            rope.rotary_dims(),
            config.base,
            config.layout
        );
        let original = match &config.scaling {
            RopeScaling::Llama3(c) => Some(c.original_max_position_embeddings),
            RopeScaling::Yarn(c) => Some(c.original_max_position_embeddings),
            RopeScaling::LongRope(c) => Some(c.original_max_position_embeddings),
            _ => None,
        };
        if let Some(original) = original {
            println!(
                "  factor {}, pretraining context {original}, attention factor on cos and sin {:.6}",
                config.scaling.factor(),
                rope.attention_factor()
            );
        }
        // How much slower each pair turns than plain RoPE with the same base.
        let plain = RopeScaling::None
            .frequencies(config.base, rope.rotary_dims(), 0, config.arithmetic)
            .0;
        let slowed: Vec<String> = [
            0,
            inv.len() / 4,
            inv.len() / 2,
            3 * inv.len() / 4,
            inv.len() - 1,
        ]
        .iter()
        .map(|&j| format!("pair {j}: {:.3}x", plain[j] / inv[j]))
        .collect();
        println!("  slowed against plain RoPE: {}", slowed.join(", "));
        println!(
            "  wavelength of the slowest pair: {:.0} positions (plain RoPE: {:.0})",
            2.0 * std::f64::consts::PI / inv[inv.len() - 1],
            2.0 * std::f64::consts::PI / plain[plain.len() - 1]
        );
        // The rope drops into an attention block of the checkpoint's width.
        let (n_heads, d_model) = (2, 2 * config.d_head);
        let block = SelfAttentionConfig::new(d_model, n_heads)
            .with_causal(true)
            .with_rope(Some(config))
            .init(&device);
        let x = Tensor::<3>::ones(
            [1, 4, n_heads * block.rope.as_ref().unwrap().d_head()],
            &device,
        );
        println!(
            "  a 2-head causal block with it: {:?} -> {:?}",
            x.dims(),
            block.forward(x.clone()).dims()
        );
    }
}
