//! Hugging Face model ports on burn-positional: eight text families and two vision families
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
//! - Unreleased: [`Sampling`](sampling::Sampling) and [`GenerateOptions`] are
//!   `#[non_exhaustive]`, with a `with_*` method per field. Adding `min_p` to `Sampling` broke
//!   every struct literal a user had written; from here on a new setting is not a break, and a
//!   struct literal outside this crate does not compile: start from `Sampling::greedy()` /
//!   `Sampling::sample()` or `GenerateOptions::greedy(..)` / `from_config(..)` and chain
//!   `with_*` (fields stay public to read and assign). Two vision ports, `vit` and `dinov2`.

#![warn(missing_docs)]

pub mod bert;
pub mod bloom;
mod checkpoint;
pub mod decoder;
pub mod dinov2;
mod error;
pub mod generate;
pub mod generation_config;
pub mod gpt2;
pub mod llama;
pub mod mistral;
pub mod phi3;
pub mod qwen2;
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
pub const SUPPORTED: [&str; 10] = [
    "gpt2", "bert", "t5", "llama", "qwen2", "phi3", "bloom", "mistral", "vit", "dinov2",
];

/// A decoder-only model of any supported family, for code that takes whatever the folder
/// holds (the `generate` example).
#[derive(Debug)]
pub enum AnyCausalLm {
    /// GPT-2.
    Gpt2(gpt2::Gpt2),
    /// Llama, Qwen 2, Phi-3, Mistral.
    Decoder(decoder::Decoder),
    /// BLOOM.
    Bloom(bloom::Bloom),
}

impl CausalLm for AnyCausalLm {
    fn n_layers(&self) -> usize {
        match self {
            Self::Gpt2(m) => m.n_layers(),
            Self::Decoder(m) => m.n_layers(),
            Self::Bloom(m) => m.n_layers(),
        }
    }

    fn vocab_size(&self) -> usize {
        match self {
            Self::Gpt2(m) => m.vocab_size(),
            Self::Decoder(m) => m.vocab_size(),
            Self::Bloom(m) => m.vocab_size(),
        }
    }

    fn recompute_cache(&self, total: usize, cached: usize) -> bool {
        match self {
            Self::Gpt2(m) => m.recompute_cache(total, cached),
            Self::Decoder(m) => m.recompute_cache(total, cached),
            Self::Bloom(m) => m.recompute_cache(total, cached),
        }
    }

    fn position_limit(&self) -> Option<usize> {
        match self {
            Self::Gpt2(m) => m.position_limit(),
            Self::Decoder(m) => m.position_limit(),
            Self::Bloom(m) => m.position_limit(),
        }
    }

    fn hidden(&self, step: &Step, caches: Option<&mut [KvCache]>) -> Tensor<3> {
        match self {
            Self::Gpt2(m) => CausalLm::hidden(m, step, caches),
            Self::Decoder(m) => CausalLm::hidden(m, step, caches),
            Self::Bloom(m) => CausalLm::hidden(m, step, caches),
        }
    }

    fn head(&self, x: Tensor<3>) -> Tensor<3> {
        match self {
            Self::Gpt2(m) => m.head(x),
            Self::Decoder(m) => m.head(x),
            Self::Bloom(m) => m.head(x),
        }
    }
}

/// Opens the checkpoint folder `dir` and loads the decoder-only model its `model_type` names,
/// in the files' dtype where `device` computes in it (see [`Checkpoint::compute_dtype`]).
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
        _ => {
            return Err(ModelError::Unsupported {
                model_type,
                path: checkpoint.config_path.display().to_string(),
                supported: "gpt2, llama, qwen2, phi3, bloom, mistral (decoder-only; t5 through \
                            t5::load and t5::generate, bert through bert::load, vit and dinov2 \
                            through vit::load and dinov2::load)"
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
