//! Llama (`model_type: "llama"`), as transformers' `modeling_llama.py`: the shared
//! [`Decoder`] with `attention_bias` on every attention projection, `mlp_bias` in the MLP, any
//! `rope_type` (Llama 3.x: `llama3`) and `tie_word_embeddings`.

use burn::tensor::Device;
use burn_positional::RopeConfig;
use serde::Deserialize;

use crate::ModelError;
use crate::checkpoint::Checkpoint;
use crate::decoder::{Activation, Decoder, DecoderSpec};

/// `LlamaConfig`'s fields the port reads, with transformers 5.24's defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct LlamaConfig {
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
    /// `attention_bias`.
    pub attention_bias: bool,
    /// `mlp_bias`.
    pub mlp_bias: bool,
}

impl Default for LlamaConfig {
    fn default() -> Self {
        Self {
            vocab_size: 32000,
            hidden_size: 4096,
            intermediate_size: 11008,
            num_hidden_layers: 32,
            num_attention_heads: 32,
            num_key_value_heads: None,
            head_dim: None,
            hidden_act: "silu".into(),
            rms_norm_eps: 1e-6,
            tie_word_embeddings: false,
            attention_bias: false,
            mlp_bias: false,
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
    let c: LlamaConfig = checkpoint.config()?;
    let path = checkpoint.config_path.display().to_string();
    let (n_heads, n_kv_heads, head_dim) = crate::decoder::check_heads(
        c.num_attention_heads,
        c.num_key_value_heads.unwrap_or(c.num_attention_heads),
        c.head_dim,
        c.hidden_size,
        false,
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
        qkv_bias: c.attention_bias,
        o_bias: c.attention_bias,
        mlp_bias: c.mlp_bias,
        activation: Activation::from_hf(&c.hidden_act, &path)?,
        windows: vec![None; c.num_hidden_layers],
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
