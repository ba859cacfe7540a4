//! Generation with a Hugging Face checkpoint folder (`config.json` + `model.safetensors` or
//! its shards, `generation_config.json` if it has one, and `tokenizer.json` for text):
//!
//! ```text
//! cargo run --release -p burn-positional-models --example generate -- <dir> --ids 1,2,3
//! cargo run --release -p burn-positional-models --example generate -- \
//!     --model-dir <dir> --prompt "The dog" [--device wgpu] [--dtype bf16] [--max-new-tokens 32] \
//!     [--do-sample true --temperature 0.7 --top-k 50 --top-p 0.9 --seed 1]
//! ```
//!
//! With a tokenizer the text is printed as it is decoded (decoder-only families; T5's at the
//! end). The weights are computed in `--dtype`, by default as `Checkpoint::compute_dtype`
//! chooses, with a one-line notice when that is not the files' dtype: a bf16 or f16 file in f32
//! on the CPU (flex, ndarray) where the f32 copy fits in memory (faster there: docs/porting.md), in
//! its own dtype on a GPU that has it, in f32 on wgpu for bf16 (WGSL has no bf16).
//!
//! The folder is the first argument or `--model-dir`. The family comes from `config.json`'s
//! `model_type` (gpt2, llama (Llama 3.2, SmolLM), qwen2, qwen3, phi3, bloom, mistral, gemma2,
//! gemma3_text, gpt_neox (Pythia); t5 with an encoder prompt). The settings default to the folder's
//! generation_config.json (else config.json's token ids, as transformers): greedy unless it
//! samples, stopping at its eos tokens. Prints the tokens (or text) and tokens per second of
//! the prompt and of the decoding.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use burn_positional_examples::device::{DeviceChoice, open};
use burn_positional_models::{
    AnyCausalLm, Checkpoint, GenerateOptions, Generated, GenerationConfig, load_checkpoint, t5,
    try_generate_streaming,
};
use clap::Parser;

/// Generation with a Hugging Face checkpoint folder; unset flags take its
/// generation_config.json.
#[derive(Parser, Debug)]
struct Args {
    /// The checkpoint folder: config.json, model.safetensors (and tokenizer.json for --prompt).
    #[arg(required_unless_present = "model_dir", conflicts_with = "model_dir")]
    dir: Option<PathBuf>,
    /// The checkpoint folder, as a flag (the same as the first argument).
    #[arg(long)]
    model_dir: Option<PathBuf>,
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
    /// Drop the tokens less likely than this fraction of the most likely one when sampling
    /// (min-p; default: the folder's, else off).
    #[arg(long)]
    min_p: Option<f64>,
    /// Penalise tokens already in the sequence (1: off).
    #[arg(long)]
    repetition_penalty: Option<f64>,
    /// The compute dtype: f32, f16 or bf16 (default: `Checkpoint::compute_dtype`'s choice, f32
    /// on the CPU for a bf16 or f16 file whose f32 copy fits, with a notice).
    #[arg(long, value_parser = burn_positional_models::parse_dtype)]
    dtype: Option<burn::tensor::FloatDType>,
    /// The tokenizer for --prompt (default: tokenizer.json in the checkpoint folder).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
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
        s.min_p = self.min_p.or(s.min_p);
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
    let dir = args
        .model_dir
        .clone()
        .or_else(|| args.dir.clone())
        .ok_or("give the checkpoint folder: <dir> or --model-dir <dir>")?;
    let checkpoint = Checkpoint::open(&dir).map_err(|e| e.to_string())?;
    let model_type = checkpoint
        .model_type()
        .map_err(|e| e.to_string())?
        .to_string();
    let text = match &args.prompt {
        Some(_) => Some(tokenizer(
            &args
                .tokenizer
                .clone()
                .unwrap_or_else(|| dir.join("tokenizer.json")),
        )?),
        None => None,
    };
    let prompt = match (&args.ids, &args.prompt, &text) {
        (Some(ids), ..) => ids.clone(),
        (None, Some(prompt), Some(text)) => text.encode(prompt).map_err(|e| e.to_string())?,
        _ => {
            return Err(
                "give a prompt: --ids 1,2,3 (or --prompt \"text\" with the checkpoint's tokenizer.json)"
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
                "sampling: temperature {}, top_k {}, top_p {}, min_p {}, repetition_penalty {}",
                options.sampling.temperature,
                options.sampling.top_k,
                options.sampling.top_p,
                options
                    .sampling
                    .min_p
                    .map_or_else(|| "off".to_string(), |p| p.to_string()),
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
    let checkpoint = match args.dtype {
        Some(dtype) => checkpoint.with_dtype(dtype),
        None => checkpoint,
    };
    let dtype = checkpoint
        .compute_dtype(&device)
        .map_err(|e| e.to_string())?;
    if let Some(notice) = &dtype.notice {
        eprintln!("{notice}");
    }
    let started = Instant::now();
    eprint!(
        "loading {model_type} from {} in {} ...",
        dir.display(),
        burn_positional_models::dtype_name(dtype.dtype)
    );
    // Errors (a prompt id outside the vocabulary, too many positions) name the fix.
    let (generated, streamed): (Generated, bool) = if model_type == "t5" {
        let model = t5::load(&checkpoint, &device).map_err(|e| e.to_string())?;
        eprintln!(" {:.1} s", started.elapsed().as_secs_f64());
        let out = t5::try_generate(&model, std::slice::from_ref(&prompt), &options, &device);
        (out.map_err(|e| e.to_string())?, false)
    } else {
        let model = load_checkpoint(&checkpoint, &device).map_err(|e| e.to_string())?;
        eprintln!(" {:.1} s", started.elapsed().as_secs_f64());
        let out = stream_generate(&model, &prompt, &options, &device, text.as_ref())?;
        (out, text.is_some())
    };
    let tokens = &generated.tokens[0];
    match (&text, streamed) {
        (Some(_), true) => println!(),
        #[cfg(feature = "tokenizers")]
        (Some(text), false) => println!("{}", text.decode(tokens).map_err(|e| e.to_string())?),
        _ => println!(
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
type Tokenizer = burn_positional_models::text::Text;

#[cfg(feature = "tokenizers")]
fn tokenizer(path: &std::path::Path) -> Result<Tokenizer, String> {
    Tokenizer::from_file(path).map_err(|e| e.to_string())
}

/// Stands in for the tokenizer without the `tokenizers` feature: ids in, ids out.
#[cfg(not(feature = "tokenizers"))]
struct Tokenizer;

#[cfg(not(feature = "tokenizers"))]
fn tokenizer(_path: &std::path::Path) -> Result<Tokenizer, String> {
    Err("--prompt needs the tokenizers feature (on by default; it was built without): cargo run --release -p burn-positional-models --features tokenizers --example generate -- <dir> --prompt \"...\" (or pass --ids 1,2,3)".into())
}

#[cfg(not(feature = "tokenizers"))]
impl Tokenizer {
    fn encode(&self, _text: &str) -> Result<Vec<i64>, String> {
        unreachable!("tokenizer() refuses without the feature")
    }
}

/// Generation, the text printed as each token is decoded (with a tokenizer).
fn stream_generate(
    model: &AnyCausalLm,
    prompt: &[i64],
    options: &GenerateOptions,
    device: &burn::tensor::Device,
    text: Option<&Tokenizer>,
) -> Result<Generated, String> {
    #[cfg(feature = "tokenizers")]
    if let Some(text) = text {
        use std::io::Write;
        let mut stream = text.stream();
        let eos = &options.eos_token_ids;
        let mut done = false;
        let mut failed = None;
        print!("{}", text.decode(prompt).map_err(|e| e.to_string())?);
        let out = try_generate_streaming(model, &[prompt.to_vec()], options, device, |tokens| {
            if done || failed.is_some() {
                return;
            }
            match stream.step(tokens[0]) {
                Ok(piece) => print!("{}", piece.unwrap_or_default()),
                Err(e) => failed = Some(e.to_string()),
            }
            let _ = std::io::stdout().flush();
            done = eos.contains(&tokens[0]);
        });
        if let Some(e) = failed {
            return Err(e);
        }
        return out.map_err(|e| e.to_string());
    }
    let _ = text;
    try_generate_streaming(model, &[prompt.to_vec()], options, device, |_| {})
        .map_err(|e| e.to_string())
}
