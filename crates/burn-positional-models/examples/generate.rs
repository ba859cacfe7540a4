//! Generation with a Hugging Face checkpoint folder (`config.json` + `model.safetensors`,
//! `generation_config.json` if it has one, and `tokenizer.json` for text with
//! `--features tokenizers`):
//!
//! ```text
//! cargo run --release -p burn-positional-models --example generate -- <dir> --ids 1,2,3
//! cargo run --release -p burn-positional-models --features tokenizers --example generate -- \
//!     <dir> --prompt "The dog" [--device wgpu] [--max-new-tokens 32] \
//!     [--do-sample true --temperature 0.7 --top-k 50 --top-p 0.9 --seed 1]
//! ```
//!
//! The family comes from `config.json`'s `model_type` (gpt2, llama, qwen2, phi3, bloom,
//! mistral; t5 with an encoder prompt). The settings default to the folder's
//! generation_config.json (else config.json's token ids, as transformers): greedy unless it
//! samples, stopping at its eos tokens. Prints the tokens (or text) and tokens per second of
//! the prompt and of the decoding.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use burn_positional_examples::device::{DeviceChoice, open};
use burn_positional_models::{
    Checkpoint, GenerateOptions, Generated, GenerationConfig, load_causal_lm, t5, try_generate,
};
use clap::Parser;

/// Generation with a Hugging Face checkpoint folder; unset flags take its
/// generation_config.json.
#[derive(Parser, Debug)]
struct Args {
    /// The checkpoint folder: config.json, model.safetensors (and tokenizer.json for --prompt).
    dir: PathBuf,
    /// Text to continue (needs tokenizer.json and the `tokenizers` feature).
    #[arg(long, conflicts_with = "ids")]
    prompt: Option<String>,
    /// Token ids to continue, comma-separated.
    #[arg(long, value_delimiter = ',')]
    ids: Option<Vec<i64>>,
    /// wgpu, flex, ndarray (or cuda with the cuda feature).
    #[arg(long, default_value = "flex")]
    device: DeviceChoice,
    /// Tokens to generate at most (default: generation_config.json's, else 20).
    #[arg(long)]
    max_new_tokens: Option<usize>,
    /// Sample (true) or take the argmax (false).
    #[arg(long)]
    do_sample: Option<bool>,
    /// Sampling temperature (above 0).
    #[arg(long)]
    temperature: Option<f64>,
    /// Keep the k most likely tokens when sampling (0: all).
    #[arg(long)]
    top_k: Option<usize>,
    /// Keep the most likely tokens up to this probability mass when sampling (1: all).
    #[arg(long)]
    top_p: Option<f64>,
    /// Penalise tokens already in the sequence (1: off).
    #[arg(long)]
    repetition_penalty: Option<f64>,
    /// Seed of the draw: the same seed, the same tokens.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl Args {
    /// The folder's settings with the flags given over them.
    fn options(&self, checkpoint: &Checkpoint) -> Result<GenerateOptions, String> {
        let config = GenerationConfig::for_checkpoint(checkpoint).map_err(|e| e.to_string())?;
        let mut options = GenerateOptions::from_config(&config).with_seed(self.seed);
        let s = &mut options.sampling;
        s.do_sample = self.do_sample.unwrap_or(s.do_sample);
        s.temperature = self.temperature.unwrap_or(s.temperature);
        s.top_k = self.top_k.unwrap_or(s.top_k);
        s.top_p = self.top_p.unwrap_or(s.top_p);
        s.repetition_penalty = self.repetition_penalty.unwrap_or(s.repetition_penalty);
        if let Some(n) = self.max_new_tokens {
            options = options.with_max_new_tokens(n);
        }
        options.check().map_err(|e| e.to_string())?;
        Ok(options)
    }
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let opened = open(args.device)?;
    let device = opened.device;
    eprintln!("device: {}", opened.description);
    let checkpoint = Checkpoint::open(&args.dir).map_err(|e| e.to_string())?;
    let model_type = checkpoint
        .model_type()
        .map_err(|e| e.to_string())?
        .to_string();
    let prompt = match (&args.ids, &args.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) => encode(&args.dir, text)?,
        (None, None) => {
            return Err(
                "give a prompt: --ids 1,2,3 (or --prompt \"text\" with the tokenizers feature)"
                    .into(),
            );
        }
    };
    if model_type == "bert" {
        return Err(format!(
            "{}: bert is an encoder (BertForMaskedLM), it does not generate. Fix: pick a \
             decoder checkpoint (gpt2, llama, qwen2, phi3, bloom, mistral) or t5; \
             burn_positional_models::bert::load gives BERT's logits",
            checkpoint.config_path.display()
        ));
    }
    let options = args.options(&checkpoint)?;
    eprintln!(
        "{} (seed {}), eos {:?}",
        if options.sampling.do_sample {
            format!(
                "sampling: temperature {}, top_k {}, top_p {}, repetition_penalty {}",
                options.sampling.temperature,
                options.sampling.top_k,
                options.sampling.top_p,
                options.sampling.repetition_penalty
            )
        } else {
            format!(
                "greedy, repetition_penalty {}",
                options.sampling.repetition_penalty
            )
        },
        options.seed,
        options.eos_token_ids
    );
    let started = Instant::now();
    eprint!("loading {model_type} from {} ...", args.dir.display());
    // Errors (a prompt id outside the vocabulary, too many positions) name the fix.
    let generated: Generated = if model_type == "t5" {
        let model = t5::load(&checkpoint, &device).map_err(|e| e.to_string())?;
        eprintln!(" {:.1} s", started.elapsed().as_secs_f64());
        t5::try_generate(&model, std::slice::from_ref(&prompt), &options, &device)
    } else {
        let model = load_causal_lm(&args.dir, &device).map_err(|e| e.to_string())?;
        eprintln!(" {:.1} s", started.elapsed().as_secs_f64());
        try_generate(&model, std::slice::from_ref(&prompt), &options, &device)
    }
    .map_err(|e| e.to_string())?;
    let tokens = &generated.tokens[0];
    match &args.prompt {
        Some(_) => println!("{}", decode(&args.dir, &prompt, tokens)?),
        None => println!(
            "{}",
            tokens
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
    let decode_tokens = tokens.len().saturating_sub(1);
    eprintln!(
        "prompt: {} tokens in {:.3} s ({:.1} tokens/s, first token included); decoding: {} tokens in {:.3} s ({:.1} tokens/s)",
        prompt.len(),
        generated.prefill.as_secs_f64(),
        prompt.len() as f64 / generated.prefill.as_secs_f64(),
        decode_tokens,
        generated.decode.as_secs_f64(),
        decode_tokens as f64 / generated.decode.as_secs_f64().max(f64::MIN_POSITIVE),
    );
    Ok(())
}

#[cfg(feature = "tokenizers")]
fn tokenizer(dir: &std::path::Path) -> Result<tokenizers::Tokenizer, String> {
    let path = dir.join("tokenizer.json");
    tokenizers::Tokenizer::from_file(&path).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(feature = "tokenizers")]
fn encode(dir: &std::path::Path, text: &str) -> Result<Vec<i64>, String> {
    let encoding = tokenizer(dir)?
        .encode(text, true)
        .map_err(|e| e.to_string())?;
    Ok(encoding.get_ids().iter().map(|&id| id as i64).collect())
}

#[cfg(feature = "tokenizers")]
fn decode(dir: &std::path::Path, prompt: &[i64], tokens: &[i64]) -> Result<String, String> {
    let ids: Vec<u32> = prompt.iter().chain(tokens).map(|&id| id as u32).collect();
    tokenizer(dir)?
        .decode(&ids, true)
        .map_err(|e| e.to_string())
}

#[cfg(not(feature = "tokenizers"))]
fn encode(_dir: &std::path::Path, _text: &str) -> Result<Vec<i64>, String> {
    Err("--prompt needs the tokenizers feature: cargo run --release -p burn-positional-models --features tokenizers --example generate -- <dir> --prompt \"...\" (or pass --ids 1,2,3)".into())
}

#[cfg(not(feature = "tokenizers"))]
fn decode(_dir: &std::path::Path, _prompt: &[i64], _tokens: &[i64]) -> Result<String, String> {
    unreachable!("encode refuses a text prompt without the tokenizers feature")
}
