//! Qwen 2 (`model_type: "qwen2"`), as transformers' `modeling_qwen2.py`: the shared
//! [`Decoder`] with biases on the query, key and value projections (none on the output nor the
//! MLP), any `rope_type` (YaRN included, its attention factor on cos and sin), and a sliding
//! window on the layers `layer_types` marks `"sliding_attention"` (by default, with
//! `use_sliding_window`, the layers from `max_window_layers` on).

use burn::tensor::Device;
use burn_positional::RopeConfig;
use serde::Deserialize;

use crate::ModelError;
use crate::checkpoint::Checkpoint;
use crate::decoder::{
    Activation, Decoder, DecoderSpec, check_sliding_has_window, check_window, sliding_layers,
};

/// `Qwen2Config`'s fields the port reads, with transformers 5.24's defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Qwen2Config {
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
    /// `use_sliding_window`.
    pub use_sliding_window: bool,
    /// `sliding_window` (used only with `use_sliding_window`).
    pub sliding_window: Option<usize>,
    /// `max_window_layers`.
    pub max_window_layers: usize,
    /// `layer_types` (`"full_attention"` or `"sliding_attention"` per layer).
    pub layer_types: Option<Vec<String>>,
}

impl Default for Qwen2Config {
    fn default() -> Self {
        Self {
            vocab_size: 151936,
            hidden_size: 4096,
            intermediate_size: 22016,
            num_hidden_layers: 32,
            num_attention_heads: 32,
            num_key_value_heads: Some(32),
            head_dim: None,
            hidden_act: "silu".into(),
            rms_norm_eps: 1e-6,
            tie_word_embeddings: false,
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
/// [`ModelError::Config`] for a field that does not fit, [`ModelError::Rope`] for rotary
/// settings the layer cannot read.
pub fn spec(checkpoint: &Checkpoint) -> Result<DecoderSpec, ModelError> {
    let c: Qwen2Config = checkpoint.config()?;
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
        qkv_bias: true,
        o_bias: false,
        mlp_bias: false,
        activation: Activation::from_hf(&c.hidden_act, &path)?,
        windows: windows(
            c.use_sliding_window,
            c.sliding_window,
            c.max_window_layers,
            c.layer_types.as_deref(),
            c.num_hidden_layers,
            &path,
        )?,
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

/// The window of each layer, as `Qwen2Config.__post_init__` and `Qwen2Attention` decide it
/// (Qwen 3's config class decides it the same way).
///
/// # Errors
///
/// [`ModelError::Config`] for a `layer_types` of the wrong length or kind, a window of 0.
pub(crate) fn windows(
    use_sliding_window: bool,
    sliding_window: Option<usize>,
    max_window_layers: usize,
    layer_types: Option<&[String]>,
    n_layers: usize,
    path: &str,
) -> Result<Vec<Option<usize>>, ModelError> {
    let window = if use_sliding_window {
        check_window(sliding_window, path)?
    } else {
        None
    };
    let sliding = match layer_types {
        Some(types) => sliding_layers(types, n_layers, path)?,
        None => (0..n_layers)
            .map(|i| window.is_some() && i >= max_window_layers)
            .collect(),
    };
    check_sliding_has_window(window, &sliding, false, Some("use_sliding_window"), path)?;
    Ok(sliding
        .into_iter()
        .map(|s| if s { window } else { None })
        .collect())
}
