//! Hugging Face model ports on burn-positional: thirteen text families and two vision families
//! built from a checkpoint's `config.json`, loaded from its `model.safetensors` with burn's own
//! store, the layer doing everything positional (learned tables, patch-grid tables resized to
//! the image, rotary variants read from `config.json`, ALiBi, T5's buckets, the attention entry
//! point, the key-value cache) and plain burn the rest.
//!
//! # Text
//!
//! | `model_type` | port | positions |
//! | --- | --- | --- |
//! | `gpt2` | [`gpt2`] | learned absolute, explicit positions under left padding |
//! | `bert` | [`bert`] | learned absolute + token types, key padding |
//! | `t5` | [`t5`] | relative buckets, one table per stack, unscaled scores |
//! | `llama` | [`llama`] | rotary (any `rope_type`, Llama 3's `llama3`), grouped heads |
//! | `qwen2` | [`qwen2`] | rotary (YaRN's attention factor), qkv biases |
//! | `phi3` | [`phi3`] | rotary `longrope` switching mid-generation |
//! | `bloom` | [`bloom`] | ALiBi with left padding |
//! | `mistral` | [`mistral`] | rotary with a sliding window |
//! | `qwen3` | [`qwen3`] | rotary after an RMSNorm of each query and key head, `head_dim` apart from the width |
//! | `gemma2` | [`gemma`] | rotary, sliding window every other layer, attention and final softcaps, `query_pre_attn_scalar` |
//! | `gemma3_text` | [`gemma`] | two rotary bases (sliding and full layers) from one `config.json`, `layer_types`, q/k norms |
//! | `gpt_neox` | [`gpt_neox`] | partial rotary (`rotary_pct`), per-head interleaved q/k/v, parallel residual |
//!
//! Llama 3.2 and SmolLM checkpoints are `llama` (tied head, `llama3` scaling, `head_dim`).
//!
//! # Vision
//!
//! Image classifiers: `pixel_values` `[batch, channels, height, width]` of any size of at least
//! one patch in, logits out, each loaded by its family's `load`.
//!
//! | `model_type` | port | positions |
//! | --- | --- | --- |
//! | `vit` | [`vit`] | learned patch grid resized to the image (always `interpolate_pos_encoding=True`) |
//! | `dinov2` | [`dinov2`] | learned patch grid resized to the image in f32, layer scale |
//!
//! Every port's logits (and greedy tokens, for the text families) equal transformers' on the
//! committed fixtures (`tests/families/`, fixtures from `tools/model_fixtures.py` and, for the
//! vision families, `tools/vision_fixtures.py`).
//!
//! # Changelog
//!
//! - Unreleased: four text families, `qwen3`, `gemma2`, `gemma3_text`, `gpt_neox`.
//!   [`DecoderSpec`](decoder::DecoderSpec), the ports' config structs
//!   ([`LlamaConfig`](llama::LlamaConfig), [`Qwen2Config`](qwen2::Qwen2Config),
//!   [`Qwen3Config`](qwen3::Qwen3Config), [`Phi3Config`](phi3::Phi3Config),
//!   [`MistralConfig`](mistral::MistralConfig), [`Gemma2Config`](gemma::Gemma2Config),
//!   [`Gemma3TextConfig`](gemma::Gemma3TextConfig), [`GptNeoxConfig`](gpt_neox::GptNeoxConfig))
//!   and [`AnyCausalLm`] are `#[non_exhaustive]`: a family's new setting or a new family is not
//!   a break. Build a config with `Default::default()` or read it with
//!   [`Checkpoint::config`], then assign fields; take a spec from a family's `spec` and edit
//!   it; match `AnyCausalLm` with a `_` arm. A struct literal of them outside this crate no
//!   longer compiles (it would have broken at this release's new `DecoderSpec` fields anyway).
//!   [`Sampling`](sampling::Sampling) and [`GenerateOptions`] are
//!   `#[non_exhaustive]`, with a `with_*` method per field. Adding `min_p` to `Sampling` broke
//!   every struct literal a user had written; from here on a new setting is not a break, and a
//!   struct literal outside this crate does not compile: start from `Sampling::greedy()` /
//!   `Sampling::sample()` or `GenerateOptions::greedy(..)` / `from_config(..)` and chain
//!   `with_*` (fields stay public to read and assign). Two vision ports, `vit` and `dinov2`.

#![warn(missing_docs)]

pub mod bert;
pub mod bloom;
mod checkpoint;
mod config_checks;
pub mod decoder;
pub mod dinov2;
mod error;
pub mod gemma;
pub mod generate;
pub mod generation_config;
pub mod gpt2;
pub mod gpt_neox;
pub mod llama;
pub mod mistral;
mod ops;
pub mod phi3;
pub mod qwen2;
pub mod qwen3;
pub mod sampling;
pub mod t5;
#[cfg(feature = "tokenizers")]
pub mod text;
pub mod vision;
pub mod vit;

pub use checkpoint::{Checkpoint, ComputeDtype, Remap, dtype_name, parse_dtype};
pub use error::{GenerateError, ModelError};
pub use generate::{
    Batch, CausalLm, GenerateOptions, Generated, Step, generate, try_generate,
    try_generate_streaming,
};
pub use generation_config::{GenerationConfig, TokenIds};

use burn::tensor::{Device, Tensor};
use burn_positional::KvCache;

/// The `model_type`s with a port, text and vision (each loaded by its family's `load`; the
/// decoder-only ones also by [`load_causal_lm`]).
pub const SUPPORTED: [&str; 14] = [
    "gpt2",
    "bert",
    "t5",
    "llama",
    "qwen2",
    "phi3",
    "bloom",
    "mistral",
    "qwen3",
    "gemma2",
    "gemma3_text",
    "gpt_neox",
    "vit",
    "dinov2",
];

/// A decoder-only model of any supported family, for code that takes whatever the folder
/// holds (the `generate` example). `#[non_exhaustive]`: a new family may add a variant.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyCausalLm {
    /// GPT-2.
    Gpt2(gpt2::Gpt2),
    /// Llama, Qwen 2 and 3, Phi-3, Mistral, Gemma 2 and 3.
    Decoder(decoder::Decoder),
    /// BLOOM.
    Bloom(bloom::Bloom),
    /// GPT-NeoX, Pythia.
    GptNeox(gpt_neox::GptNeox),
}

impl CausalLm for AnyCausalLm {
    fn n_layers(&self) -> usize {
        match self {
            Self::Gpt2(m) => m.n_layers(),
            Self::Decoder(m) => m.n_layers(),
            Self::Bloom(m) => m.n_layers(),
            Self::GptNeox(m) => m.n_layers(),
        }
    }

    fn vocab_size(&self) -> usize {
        match self {
            Self::Gpt2(m) => m.vocab_size(),
            Self::Decoder(m) => m.vocab_size(),
            Self::Bloom(m) => m.vocab_size(),
            Self::GptNeox(m) => m.vocab_size(),
        }
    }

    fn recompute_cache(&self, total: usize, cached: usize) -> bool {
        match self {
            Self::Gpt2(m) => m.recompute_cache(total, cached),
            Self::Decoder(m) => m.recompute_cache(total, cached),
            Self::Bloom(m) => m.recompute_cache(total, cached),
            Self::GptNeox(m) => m.recompute_cache(total, cached),
        }
    }

    fn position_limit(&self) -> Option<usize> {
        match self {
            Self::Gpt2(m) => m.position_limit(),
            Self::Decoder(m) => m.position_limit(),
            Self::Bloom(m) => m.position_limit(),
            Self::GptNeox(m) => m.position_limit(),
        }
    }

    fn hidden(&self, step: &Step, caches: Option<&mut [KvCache]>) -> Tensor<3> {
        match self {
            Self::Gpt2(m) => CausalLm::hidden(m, step, caches),
            Self::Decoder(m) => CausalLm::hidden(m, step, caches),
            Self::Bloom(m) => CausalLm::hidden(m, step, caches),
            Self::GptNeox(m) => CausalLm::hidden(m, step, caches),
        }
    }

    fn head(&self, x: Tensor<3>) -> Tensor<3> {
        match self {
            Self::Gpt2(m) => m.head(x),
            Self::Decoder(m) => m.head(x),
            Self::Bloom(m) => m.head(x),
            Self::GptNeox(m) => m.head(x),
        }
    }
}

/// Opens the checkpoint folder `dir` and loads the decoder-only model its `model_type` names,
/// in the dtype [`Checkpoint::compute_dtype`] chooses for `device` (f32 on the CPU for a bf16 or f16
/// file whose f32 copy fits in memory, else the files' dtype where `device` computes in it).
///
/// # Errors
///
/// As [`load_checkpoint`].
pub fn load_causal_lm(
    dir: impl AsRef<std::path::Path>,
    device: &Device,
) -> Result<AnyCausalLm, ModelError> {
    load_checkpoint(&Checkpoint::open(dir)?, device)
}

/// Loads the decoder-only model an opened `checkpoint`'s `model_type` names (in the dtype
/// [`Checkpoint::with_dtype`] chose, if any).
///
/// # Errors
///
/// [`ModelError::Unsupported`] for another `model_type` (T5, BERT and the vision families
/// included: see [`t5::load`], [`bert::load`], [`vit::load`], [`dinov2::load`]), and whatever
/// loading the family gives.
pub fn load_checkpoint(
    checkpoint: &Checkpoint,
    device: &Device,
) -> Result<AnyCausalLm, ModelError> {
    let model_type = checkpoint.model_type()?.to_string();
    Ok(match model_type.as_str() {
        "gpt2" => AnyCausalLm::Gpt2(gpt2::load(checkpoint, device)?),
        "llama" => AnyCausalLm::Decoder(llama::load(checkpoint, device)?),
        "qwen2" => AnyCausalLm::Decoder(qwen2::load(checkpoint, device)?),
        "phi3" => AnyCausalLm::Decoder(phi3::load(checkpoint, device)?),
        "mistral" => AnyCausalLm::Decoder(mistral::load(checkpoint, device)?),
        "bloom" => AnyCausalLm::Bloom(bloom::load(checkpoint, device)?),
        "qwen3" => AnyCausalLm::Decoder(qwen3::load(checkpoint, device)?),
        "gemma2" => AnyCausalLm::Decoder(gemma::load_gemma2(checkpoint, device)?),
        "gemma3_text" => AnyCausalLm::Decoder(gemma::load_gemma3(checkpoint, device)?),
        "gpt_neox" => AnyCausalLm::GptNeox(gpt_neox::load(checkpoint, device)?),
        _ => {
            return Err(ModelError::Unsupported {
                model_type,
                path: checkpoint.config_path.display().to_string(),
                supported: "gpt2, llama, qwen2, qwen3, phi3, bloom, mistral, gemma2, \
                            gemma3_text, gpt_neox (decoder-only; t5 through t5::load and \
                            t5::generate, bert through bert::load, vit and dinov2 through \
                            vit::load and dinov2::load; a multimodal gemma3 folder's language \
                            model is gemma3_text)"
                    .into(),
            });
        }
    })
}

/// The guide's page on porting a checkpoint (`docs/porting.md`), its Rust blocks run as
/// doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/porting.md")]
pub struct PortingDoctests;
