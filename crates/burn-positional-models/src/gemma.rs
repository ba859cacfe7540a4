//! Gemma 2 (`model_type: "gemma2"`) and Gemma 3's language model (`"gemma3_text"`), as
//! transformers' `modeling_gemma2.py` and `modeling_gemma3.py`: the shared [`Decoder`] with
//!
//! - embeddings times `sqrt(hidden_size)`, the factor cast to the weights' dtype first
//!   (`Gemma2TextScaledWordEmbedding`);
//! - RMSNorms that scale by `1 + w` in f32 before casting back, four a layer: before and after
//!   attention, before and after the MLP;
//! - scores scaled by `query_pre_attn_scalar^-0.5`, not `head_dim^-0.5`;
//! - a sliding window on the layers `layer_types` marks `"sliding_attention"` (Gemma 2 by
//!   default every other layer from the first; Gemma 3 five of every six, or one in
//!   `sliding_window_pattern`), its cache rolling to the window while generating;
//! - Gemma 2: scores capped by `attn_logit_softcapping` in [`attend`](burn_positional::attend)'s
//!   kernels, logits by `final_logit_softcapping` ([`softcap`](burn_positional::softcap));
//! - Gemma 3: an RMSNorm over each query and key head before the rotation, and two rotary
//!   bases read from one `config.json`: the sliding layers rotate with
//!   `rope_parameters.sliding_attention` (older files: `rope_local_base_freq`, 10 000), the
//!   full ones with `rope_parameters.full_attention` (`rope_theta`, 1 000 000, and
//!   `rope_scaling`, Gemma 3's `linear` factor 8), each read by
//!   [`RopeConfig::from_hf_config_layer`]. `Gemma3Attention` never passes
//!   `attn_logit_softcapping` to its attention, so neither does this port; the final cap it
//!   applies when set.
//!
//! `use_bidirectional_attention` (EmbeddingGemma) is refused: these are causal language models.

use burn::tensor::Device;
use burn_positional::RopeConfig;
use serde::Deserialize;

use crate::ModelError;
use crate::checkpoint::Checkpoint;
use crate::decoder::{
    Activation, Decoder, DecoderSpec, NormStyle, check_cap, check_sliding_has_window, check_window,
    sliding_layers,
};

/// `Gemma2Config`'s fields the port reads, with transformers 5.24's defaults.
///
/// `#[non_exhaustive]`, as every port's config: start from the defaults (or
/// [`Checkpoint::config`]) and assign.
///
/// ```
/// use burn_positional_models::gemma::Gemma2Config;
///
/// let mut config = Gemma2Config::default();
/// config.final_logit_softcapping = None;
/// assert_eq!(config.attn_logit_softcapping, Some(50.0));
/// assert_eq!(config.query_pre_attn_scalar, 256.0);
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Gemma2Config {
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
    /// `num_key_value_heads`.
    pub num_key_value_heads: usize,
    /// `head_dim` (256 by default, whatever the width).
    pub head_dim: usize,
    /// `hidden_activation`.
    pub hidden_activation: String,
    /// `rms_norm_eps`.
    pub rms_norm_eps: f64,
    /// `tie_word_embeddings`.
    pub tie_word_embeddings: bool,
    /// `attention_bias`: biases on the four attention projections.
    pub attention_bias: bool,
    /// `query_pre_attn_scalar`: scores are scaled by its inverse square root.
    pub query_pre_attn_scalar: f64,
    /// `sliding_window`, on the sliding layers.
    pub sliding_window: Option<usize>,
    /// `layer_types` (default: sliding, full, sliding, ...).
    pub layer_types: Option<Vec<String>>,
    /// `final_logit_softcapping` (30; null for none).
    pub final_logit_softcapping: Option<f64>,
    /// `attn_logit_softcapping` (50; null for none).
    pub attn_logit_softcapping: Option<f64>,
    /// `use_bidirectional_attention` (refused when true).
    pub use_bidirectional_attention: Option<bool>,
}

impl Default for Gemma2Config {
    fn default() -> Self {
        Self {
            vocab_size: 256000,
            hidden_size: 2304,
            intermediate_size: 9216,
            num_hidden_layers: 26,
            num_attention_heads: 8,
            num_key_value_heads: 4,
            head_dim: 256,
            hidden_activation: "gelu_pytorch_tanh".into(),
            rms_norm_eps: 1e-6,
            tie_word_embeddings: true,
            attention_bias: false,
            query_pre_attn_scalar: 256.0,
            sliding_window: Some(4096),
            layer_types: None,
            final_logit_softcapping: Some(30.0),
            attn_logit_softcapping: Some(50.0),
            use_bidirectional_attention: None,
        }
    }
}

/// `Gemma3TextConfig`'s fields the port reads, with transformers 5.24's defaults (the rotary
/// ones are read by the layer's [`RopeConfig::from_hf_config_layer`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Gemma3TextConfig {
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
    /// `num_key_value_heads`.
    pub num_key_value_heads: usize,
    /// `head_dim` (256 by default).
    pub head_dim: usize,
    /// `hidden_activation`.
    pub hidden_activation: String,
    /// `rms_norm_eps`.
    pub rms_norm_eps: f64,
    /// `tie_word_embeddings`.
    pub tie_word_embeddings: bool,
    /// `attention_bias`.
    pub attention_bias: bool,
    /// `query_pre_attn_scalar`.
    pub query_pre_attn_scalar: f64,
    /// `sliding_window`, on the sliding layers.
    pub sliding_window: Option<usize>,
    /// `sliding_window_pattern`: without `layer_types`, layer `i` is full when `(i + 1)` is a
    /// multiple of it (default 6).
    pub sliding_window_pattern: usize,
    /// `layer_types`.
    pub layer_types: Option<Vec<String>>,
    /// `final_logit_softcapping` (null by default).
    pub final_logit_softcapping: Option<f64>,
    /// `attn_logit_softcapping`: read and checked, never applied (as transformers).
    pub attn_logit_softcapping: Option<f64>,
    /// `use_bidirectional_attention` (refused when true).
    pub use_bidirectional_attention: Option<bool>,
}

impl Default for Gemma3TextConfig {
    fn default() -> Self {
        Self {
            vocab_size: 262_208,
            hidden_size: 2304,
            intermediate_size: 9216,
            num_hidden_layers: 26,
            num_attention_heads: 8,
            num_key_value_heads: 4,
            head_dim: 256,
            hidden_activation: "gelu_pytorch_tanh".into(),
            rms_norm_eps: 1e-6,
            tie_word_embeddings: true,
            attention_bias: false,
            query_pre_attn_scalar: 256.0,
            sliding_window: Some(4096),
            sliding_window_pattern: 6,
            layer_types: None,
            final_logit_softcapping: None,
            attn_logit_softcapping: None,
            use_bidirectional_attention: None,
        }
    }
}

/// Refuses `use_bidirectional_attention: true` and a `query_pre_attn_scalar` that is not
/// positive, naming them.
fn check_common(
    bidirectional: Option<bool>,
    query_pre_attn_scalar: f64,
    path: &str,
) -> Result<f64, ModelError> {
    if bidirectional == Some(true) {
        return Err(ModelError::Config {
            path: path.to_string(),
            detail: "`use_bidirectional_attention` is true: an encoder (EmbeddingGemma) whose \
                     tokens see both ways; this port is the causal language model (load a \
                     causal checkpoint, or set it to false if the weights were trained causal)"
                .into(),
        });
    }
    if !(query_pre_attn_scalar.is_finite() && query_pre_attn_scalar > 0.0) {
        return Err(ModelError::Config {
            path: path.to_string(),
            detail: format!(
                "`query_pre_attn_scalar` is {query_pre_attn_scalar}; scores are scaled by its \
                 inverse square root, so it must be a positive number (Gemma: 256, or \
                 hidden_size / num_attention_heads)"
            ),
        });
    }
    Ok(query_pre_attn_scalar.powf(-0.5))
}

/// The Gemma 2 decoder `checkpoint`'s config.json describes.
///
/// # Errors
///
/// [`ModelError::Config`] naming the field for a `layer_types` of the wrong length or kind, a
/// window of 0, a softcap of 0 or below, a `query_pre_attn_scalar` of 0 or below,
/// `use_bidirectional_attention`; [`ModelError::Rope`] for rotary settings the layer cannot
/// read.
pub fn gemma2_spec(checkpoint: &Checkpoint) -> Result<DecoderSpec, ModelError> {
    let c: Gemma2Config = checkpoint.config()?;
    let path = checkpoint.config_path.display().to_string();
    let (n_heads, n_kv_heads, head_dim) = crate::decoder::check_heads(
        c.num_attention_heads,
        c.num_key_value_heads,
        Some(c.head_dim),
        c.hidden_size,
        false,
        &path,
    )?;
    let scale = check_common(
        c.use_bidirectional_attention,
        c.query_pre_attn_scalar,
        &path,
    )?;
    let window = check_window(c.sliding_window, &path)?;
    let sliding = match &c.layer_types {
        Some(types) => sliding_layers(types, c.num_hidden_layers, &path)?,
        // Gemma2Config.__post_init__: sliding iff (i + 1) % 2.
        None => (0..c.num_hidden_layers).map(|i| (i + 1) % 2 != 0).collect(),
    };
    // Gemma2Model builds the sliding mask on every forward.
    check_sliding_has_window(window, &sliding, true, None, &path)?;
    Ok(DecoderSpec {
        attention_softcap: check_cap("attn_logit_softcapping", c.attn_logit_softcapping, &path)?,
        final_softcap: check_cap("final_logit_softcapping", c.final_logit_softcapping, &path)?,
        ..gemma_spec(
            GemmaShape {
                vocab_size: c.vocab_size,
                hidden_size: c.hidden_size,
                intermediate_size: c.intermediate_size,
                n_heads,
                n_kv_heads,
                head_dim,
                rms_norm_eps: c.rms_norm_eps,
                tie_word_embeddings: c.tie_word_embeddings,
                attention_bias: c.attention_bias,
                activation: Activation::from_hf(&c.hidden_activation, &path)?,
                scale,
            },
            sliding
                .iter()
                .map(|&s| if s { window } else { None })
                .collect(),
            RopeConfig::from_hf_config(&checkpoint.config_text)?,
        )
    })
}

/// The Gemma 3 language model `checkpoint`'s config.json describes: two rotary configs, one
/// per layer type, from the same file.
///
/// # Errors
///
/// As [`gemma2_spec`]; a `sliding_window_pattern` of 0.
pub fn gemma3_spec(checkpoint: &Checkpoint) -> Result<DecoderSpec, ModelError> {
    let c: Gemma3TextConfig = checkpoint.config()?;
    let path = checkpoint.config_path.display().to_string();
    let (n_heads, n_kv_heads, head_dim) = crate::decoder::check_heads(
        c.num_attention_heads,
        c.num_key_value_heads,
        Some(c.head_dim),
        c.hidden_size,
        false,
        &path,
    )?;
    let scale = check_common(
        c.use_bidirectional_attention,
        c.query_pre_attn_scalar,
        &path,
    )?;
    let window = check_window(c.sliding_window, &path)?;
    let sliding = match &c.layer_types {
        Some(types) => sliding_layers(types, c.num_hidden_layers, &path)?,
        None if c.sliding_window_pattern == 0 => {
            return Err(ModelError::Config {
                path,
                detail: "`sliding_window_pattern` is 0: layer i is full when (i + 1) is a \
                         multiple of it, so it must be at least 1 (Gemma 3: 6), or give \
                         `layer_types`"
                    .into(),
            });
        }
        // Gemma3TextConfig.__post_init__: sliding iff (i + 1) % pattern.
        None => (0..c.num_hidden_layers)
            .map(|i| (i + 1) % c.sliding_window_pattern != 0)
            .collect(),
    };
    // Gemma3TextModel builds the sliding mask on every forward.
    check_sliding_has_window(window, &sliding, true, None, &path)?;
    // Unused by transformers' Gemma 3 attention, but a nonsense value is still named.
    check_cap("attn_logit_softcapping", c.attn_logit_softcapping, &path)?;
    let text = &checkpoint.config_text;
    let full = RopeConfig::from_hf_config_layer(text, "full_attention")?;
    let local = if sliding.iter().any(|&s| s) {
        Some(RopeConfig::from_hf_config_layer(text, "sliding_attention")?)
    } else {
        None
    };
    Ok(DecoderSpec {
        qk_norm: true,
        final_softcap: check_cap("final_logit_softcapping", c.final_logit_softcapping, &path)?,
        local_rope: local,
        local_layers: sliding.clone(),
        ..gemma_spec(
            GemmaShape {
                vocab_size: c.vocab_size,
                hidden_size: c.hidden_size,
                intermediate_size: c.intermediate_size,
                n_heads,
                n_kv_heads,
                head_dim,
                rms_norm_eps: c.rms_norm_eps,
                tie_word_embeddings: c.tie_word_embeddings,
                attention_bias: c.attention_bias,
                activation: Activation::from_hf(&c.hidden_activation, &path)?,
                scale,
            },
            sliding
                .iter()
                .map(|&s| if s { window } else { None })
                .collect(),
            full,
        )
    })
}

/// What the two Gemma configs share.
struct GemmaShape {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    rms_norm_eps: f64,
    tie_word_embeddings: bool,
    attention_bias: bool,
    activation: Activation,
    scale: f64,
}

fn gemma_spec(s: GemmaShape, windows: Vec<Option<usize>>, rope: RopeConfig) -> DecoderSpec {
    DecoderSpec {
        vocab_size: s.vocab_size,
        hidden_size: s.hidden_size,
        intermediate_size: s.intermediate_size,
        n_layers: windows.len(),
        n_heads: s.n_heads,
        n_kv_heads: s.n_kv_heads,
        head_dim: s.head_dim,
        rms_norm_eps: s.rms_norm_eps,
        tie_word_embeddings: s.tie_word_embeddings,
        qkv_bias: s.attention_bias,
        o_bias: s.attention_bias,
        activation: s.activation,
        windows,
        norm_style: NormStyle::Gemma,
        sandwich_norms: true,
        embed_scale: true,
        attention_scale: Some(s.scale),
        ..DecoderSpec::plain(rope)
    }
}

/// Builds the Gemma 2 model `checkpoint` describes and loads its weights.
///
/// # Errors
///
/// As [`gemma2_spec`] and [`Checkpoint::load`].
pub fn load_gemma2(checkpoint: &Checkpoint, device: &Device) -> Result<Decoder, ModelError> {
    crate::decoder::load(gemma2_spec(checkpoint)?, checkpoint, device)
}

/// Builds the Gemma 3 language model `checkpoint` describes and loads its weights.
///
/// # Errors
///
/// As [`gemma3_spec`] and [`Checkpoint::load`].
pub fn load_gemma3(checkpoint: &Checkpoint, device: &Device) -> Result<Decoder, ModelError> {
    crate::decoder::load(gemma3_spec(checkpoint)?, checkpoint, device)
}
