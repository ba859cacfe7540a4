//! Qwen 3 (`model_type: "qwen3"`), as transformers' `modeling_qwen3.py`: the shared [`Decoder`]
//! with an RMSNorm over each query and key head (`q_norm`, `k_norm`, width `head_dim`) after
//! the projection and before the rotation, `head_dim` apart from `hidden_size / heads` (the
//! class default is 128, whatever the width), `attention_bias` on all four projections, a tied
//! or untied head, and Qwen 2's sliding-window rule (`use_sliding_window`, `max_window_layers`,
//! `layer_types`).

use burn::tensor::Device;
use burn_positional::RopeConfig;
use serde::Deserialize;

use crate::ModelError;
use crate::checkpoint::Checkpoint;
use crate::decoder::{Activation, Decoder, DecoderSpec};

/// `Qwen3Config`'s fields the port reads, with transformers 5.24's defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Qwen3Config {
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
    /// `num_key_value_heads` (`num_attention_heads` when absent or null).
    pub num_key_value_heads: Option<usize>,
    /// `head_dim`: the class default is 128, not `hidden_size / num_attention_heads`.
    pub head_dim: usize,
    /// `hidden_act`.
    pub hidden_act: String,
    /// `rms_norm_eps`.
    pub rms_norm_eps: f64,
    /// `tie_word_embeddings`.
    pub tie_word_embeddings: bool,
    /// `attention_bias`: biases on `q_proj`, `k_proj`, `v_proj` and `o_proj`.
    pub attention_bias: bool,
    /// `use_sliding_window`.
    pub use_sliding_window: bool,
    /// `sliding_window` (used only with `use_sliding_window`).
    pub sliding_window: Option<usize>,
    /// `max_window_layers`.
    pub max_window_layers: usize,
    /// `layer_types` (`"full_attention"` or `"sliding_attention"` per layer).
    pub layer_types: Option<Vec<String>>,
}

impl Default for Qwen3Config {
    fn default() -> Self {
        Self {
            vocab_size: 151936,
            hidden_size: 4096,
            intermediate_size: 22016,
            num_hidden_layers: 32,
            num_attention_heads: 32,
            num_key_value_heads: Some(32),
            head_dim: 128,
            hidden_act: "silu".into(),
            rms_norm_eps: 1e-6,
            tie_word_embeddings: false,
            attention_bias: false,
            use_sliding_window: false,
            sliding_window: Some(4096),
            max_window_layers: 28,
            layer_types: None,
        }
    }
}

/// The decoder `checkpoint`'s config.json describes.
///
/// # Errors
///
/// [`ModelError::Config`] for a field that does not fit (a `layer_types` of the wrong length, a
/// window of 0), [`ModelError::Rope`] for rotary settings the layer cannot read (a
/// `mrope_section`, which only the Qwen-VL families read).
pub fn spec(checkpoint: &Checkpoint) -> Result<DecoderSpec, ModelError> {
    let c: Qwen3Config = checkpoint.config()?;
    let path = checkpoint.config_path.display().to_string();
    let (n_heads, n_kv_heads, head_dim) = crate::decoder::check_heads(
        c.num_attention_heads,
        c.num_key_value_heads.unwrap_or(c.num_attention_heads),
        Some(c.head_dim),
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
        activation: Activation::from_hf(&c.hidden_act, &path)?,
        windows: crate::qwen2::windows(
            c.use_sliding_window,
            c.sliding_window,
            c.max_window_layers,
            c.layer_types.as_deref(),
            c.num_hidden_layers,
            &path,
        )?,
        qk_norm: true,
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
