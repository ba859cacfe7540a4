//! Mistral (`model_type: "mistral"`), as transformers' `modeling_mistral.py`: the shared
//! [`Decoder`] without biases, with `sliding_window` on every layer (a query sees itself and the
//! `sliding_window - 1` tokens before it), its cache rolling to the window.

use burn::tensor::Device;
use burn_positional::RopeConfig;
use serde::Deserialize;

use crate::ModelError;
use crate::checkpoint::Checkpoint;
use crate::decoder::{Activation, Decoder, DecoderSpec, check_window};

/// `MistralConfig`'s fields the port reads, with transformers 5.24's defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct MistralConfig {
    /// `vocab_size`.
    pub vocab_size: usize,
    /// `hidden_size`.
    pub hidden_size: usize,
    /// `intermediate_size`.
    pub intermediate_size: usize,
    /// `num_hidden_layers`.
    pub num_hidden_layers: usize,
    /// `num_attention_heads`.
    pub num_attention_heads: usize,
    /// `num_key_value_heads` (`num_attention_heads` when absent).
    pub num_key_value_heads: Option<usize>,
    /// `head_dim` (`hidden_size / num_attention_heads` when absent).
    pub head_dim: Option<usize>,
    /// `hidden_act`.
    pub hidden_act: String,
    /// `rms_norm_eps`.
    pub rms_norm_eps: f64,
    /// `tie_word_embeddings`.
    pub tie_word_embeddings: bool,
    /// `sliding_window`.
    pub sliding_window: Option<usize>,
}

impl Default for MistralConfig {
    fn default() -> Self {
        Self {
            vocab_size: 32000,
            hidden_size: 4096,
            intermediate_size: 14336,
            num_hidden_layers: 32,
            num_attention_heads: 32,
            num_key_value_heads: Some(8),
            head_dim: None,
            hidden_act: "silu".into(),
            rms_norm_eps: 1e-6,
            tie_word_embeddings: false,
            sliding_window: Some(4096),
        }
    }
}

/// The decoder `checkpoint`'s config.json describes.
///
/// # Errors
///
/// [`ModelError::Config`] for a field that does not fit, [`ModelError::Rope`] for rotary
/// settings the layer cannot read.
pub fn spec(checkpoint: &Checkpoint) -> Result<DecoderSpec, ModelError> {
    let c: MistralConfig = checkpoint.config()?;
    let path = checkpoint.config_path.display().to_string();
    let (n_heads, n_kv_heads, head_dim) = crate::decoder::check_heads(
        c.num_attention_heads,
        c.num_key_value_heads.unwrap_or(c.num_attention_heads),
        c.head_dim,
        c.hidden_size,
        true,
        &path,
    )?;
    Ok(DecoderSpec {
        vocab_size: c.vocab_size,
        hidden_size: c.hidden_size,
        intermediate_size: c.intermediate_size,
        n_layers: c.num_hidden_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        rms_norm_eps: c.rms_norm_eps,
        tie_word_embeddings: c.tie_word_embeddings,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        activation: Activation::from_hf(&c.hidden_act, &path)?,
        windows: vec![check_window(c.sliding_window, &path)?; c.num_hidden_layers],
        fused: false,
        ..DecoderSpec::plain(RopeConfig::from_hf_config(&checkpoint.config_text)?)
    })
}

/// Builds the model `checkpoint` describes and loads its weights.
///
/// # Errors
///
/// As [`spec`] and [`Checkpoint::load`].
pub fn load(checkpoint: &Checkpoint, device: &Device) -> Result<Decoder, ModelError> {
    crate::decoder::load(spec(checkpoint)?, checkpoint, device)
}
