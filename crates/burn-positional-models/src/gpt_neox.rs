//! GPT-NeoX and Pythia (`model_type: "gpt_neox"`), as transformers' `modeling_gpt_neox.py`:
//!
//! - query, key and value in one projection (`attention.query_key_value`), laid out per head
//!   (`view(batch, seq, heads, 3 head_size)` then `chunk(3)`): [`DecoderAttention`] with
//!   [`QkvLayout::Interleaved`];
//! - partial rotary: the first `int(head_size * rotary_pct)` dims of each head rotate
//!   (`rotary_pct` 0.25 by default; base `rotary_emb_base`; both read by the layer's
//!   [`RopeConfig::from_hf_config`], also from `rope_parameters`);
//! - LayerNorms with biases, and the parallel residual `x + attn(ln1(x)) + mlp(ln2(x))`
//!   (`use_parallel_residual`, default true; false gives the sequential
//!   `h = x + attn(ln1(x)); h + mlp(ln2(h))`);
//! - a two-layer MLP with biases, an untied head (`embed_out`, which transformers 5 renames
//!   `lm_head`; either name loads).

use burn::module::Module;
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use burn_positional::{
    AbsolutePositionConfig, EmbeddingWithPosition, EmbeddingWithPositionConfig, KvCache, Rope,
    RopeConfig,
};
use serde::Deserialize;

use crate::ModelError;
use crate::checkpoint::{Checkpoint, Remap};
use crate::decoder::{
    Activation, DecoderAttention, NormStyle, Projections, QkvLayout, project, tied_logits,
};
use crate::generate::{CausalLm, Step};

/// `GPTNeoXConfig`'s fields the port reads, with transformers 5.24's defaults (the rotary ones
/// are read by the layer).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct GptNeoxConfig {
    /// `vocab_size`.
    pub vocab_size: usize,
    /// `hidden_size`.
    pub hidden_size: usize,
    /// `num_hidden_layers`.
    pub num_hidden_layers: usize,
    /// `num_attention_heads`.
    pub num_attention_heads: usize,
    /// `intermediate_size`.
    pub intermediate_size: usize,
    /// `hidden_act`.
    pub hidden_act: String,
    /// `layer_norm_eps`.
    pub layer_norm_eps: f64,
    /// `tie_word_embeddings`.
    pub tie_word_embeddings: bool,
    /// `use_parallel_residual`.
    pub use_parallel_residual: bool,
    /// `attention_bias`: biases on `query_key_value` and `dense`.
    pub attention_bias: bool,
}

impl Default for GptNeoxConfig {
    fn default() -> Self {
        Self {
            vocab_size: 50432,
            hidden_size: 6144,
            num_hidden_layers: 44,
            num_attention_heads: 64,
            intermediate_size: 24576,
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-5,
            tie_word_embeddings: false,
            use_parallel_residual: true,
            attention_bias: true,
        }
    }
}

/// One GPT-NeoX layer.
#[derive(Module, Debug)]
pub struct GptNeoxLayer {
    /// `input_layernorm`.
    pub input_norm: LayerNorm,
    /// `post_attention_layernorm` (the MLP's input norm).
    pub post_attention_norm: LayerNorm,
    /// `attention`.
    pub attention: DecoderAttention,
    /// `mlp.dense_h_to_4h`.
    pub mlp_in: Linear,
    /// `mlp.dense_4h_to_h`.
    pub mlp_out: Linear,
    /// `hidden_act`.
    #[module(skip)]
    pub activation: Activation,
    /// `use_parallel_residual`.
    #[module(skip)]
    pub parallel: bool,
}

/// GPT-NeoX (Pythia) with its language-model head.
#[derive(Module, Debug)]
pub struct GptNeox {
    /// `gpt_neox.embed_in`: the layer's embedding with no absolute position.
    pub embed: EmbeddingWithPosition,
    /// `gpt_neox.layers`.
    pub layers: Vec<GptNeoxLayer>,
    /// `gpt_neox.final_layer_norm`.
    pub final_norm: LayerNorm,
    /// `embed_out` / `lm_head` (absent when tied).
    pub lm_head: Option<Linear>,
    /// The partial rotary all layers share.
    pub rope: Rope,
}

impl GptNeoxLayer {
    fn mlp(&self, x: Tensor<3>) -> Tensor<3> {
        project(
            &self.mlp_out,
            self.activation.apply(project(&self.mlp_in, x)),
        )
    }

    /// The layer on `x` `[batch, seq, hidden]`.
    pub fn forward(
        &self,
        x: Tensor<3>,
        rope: &Rope,
        step: &Step,
        cache: Option<&mut KvCache>,
    ) -> Tensor<3> {
        let attended =
            self.attention
                .forward(self.input_norm.forward(x.clone()), rope, step, cache);
        if self.parallel {
            let mlp = self.mlp(self.post_attention_norm.forward(x.clone()));
            mlp + attended + x
        } else {
            let h = attended + x;
            self.mlp(self.post_attention_norm.forward(h.clone())) + h
        }
    }
}

impl CausalLm for GptNeox {
    fn n_layers(&self) -> usize {
        self.layers.len()
    }

    fn vocab_size(&self) -> usize {
        self.embed.vocab_size()
    }

    fn hidden(&self, step: &Step, mut caches: Option<&mut [KvCache]>) -> Tensor<3> {
        let mut x = self.embed.forward(step.ids.clone());
        for (i, layer) in self.layers.iter().enumerate() {
            let cache = caches.as_deref_mut().map(|c| &mut c[i]);
            x = layer.forward(x, &self.rope, step, cache);
        }
        self.final_norm.forward(x)
    }

    fn head(&self, x: Tensor<3>) -> Tensor<3> {
        match &self.lm_head {
            Some(head) => head.forward(x),
            None => tied_logits(x, self.embed.tokens.val()),
        }
    }
}

/// The keys of a GPT-NeoX checkpoint.
pub fn remaps() -> Vec<Remap> {
    vec![
        ("gpt_neox.embed_in.weight", "embed.tokens"),
        ("gpt_neox.final_layer_norm", "final_norm"),
        ("embed_out", "lm_head"),
        ("lm_head", "lm_head"),
        ("gpt_neox.layers.{}.input_layernorm", "layers.{}.input_norm"),
        (
            "gpt_neox.layers.{}.post_attention_layernorm",
            "layers.{}.post_attention_norm",
        ),
        (
            "gpt_neox.layers.{}.attention.query_key_value",
            "layers.{}.attention.qkv.query",
        ),
        (
            "gpt_neox.layers.{}.attention.dense",
            "layers.{}.attention.output",
        ),
        ("gpt_neox.layers.{}.mlp.dense_h_to_4h", "layers.{}.mlp_in"),
        ("gpt_neox.layers.{}.mlp.dense_4h_to_h", "layers.{}.mlp_out"),
    ]
}

/// Builds the model `checkpoint` describes (weights random until loaded).
///
/// # Errors
///
/// [`ModelError::Config`] for a width that the heads do not divide, an unknown activation;
/// [`ModelError::Rope`] for rotary settings the layer cannot read; [`ModelError::Position`] if
/// the layer refuses the sizes.
pub fn init(checkpoint: &Checkpoint, device: &Device) -> Result<GptNeox, ModelError> {
    let c: GptNeoxConfig = checkpoint.config()?;
    let path = checkpoint.config_path.display().to_string();
    let (hidden, heads) = (c.hidden_size, c.num_attention_heads);
    if heads == 0 || hidden % heads != 0 {
        return Err(ModelError::Config {
            path,
            detail: format!(
                "`hidden_size` {hidden} is not a multiple of `num_attention_heads` {heads}: \
                 GPT-NeoX's head size is their quotient, so the heads must divide the width"
            ),
        });
    }
    let d = hidden / heads;
    let activation = Activation::from_hf(&c.hidden_act, &path)?;
    let rope = RopeConfig::from_hf_config(&checkpoint.config_text)?;
    let linear = |i, o, bias| LinearConfig::new(i, o).with_bias(bias).init(device);
    let norm = || {
        LayerNormConfig::new(hidden)
            .with_epsilon(c.layer_norm_eps)
            .init(device)
    };
    let layers = (0..c.num_hidden_layers)
        .map(|_| GptNeoxLayer {
            input_norm: norm(),
            post_attention_norm: norm(),
            attention: DecoderAttention {
                qkv: Projections {
                    query: linear(hidden, 3 * hidden, c.attention_bias),
                    key: None,
                    value: None,
                },
                output: linear(hidden, hidden, c.attention_bias),
                n_heads: heads,
                n_kv_heads: heads,
                head_dim: d,
                window: None,
                q_norm: None,
                k_norm: None,
                norm_style: NormStyle::Llama,
                qkv_layout: QkvLayout::Interleaved,
                scale: None,
                softcap: None,
                local_rope: false,
            },
            mlp_in: linear(hidden, c.intermediate_size, true),
            mlp_out: linear(c.intermediate_size, hidden, true),
            activation,
            parallel: c.use_parallel_residual,
        })
        .collect();
    Ok(GptNeox {
        embed: EmbeddingWithPositionConfig::new(c.vocab_size, hidden)
            .with_token_initializer(burn::nn::Initializer::Zeros)
            .with_scheme(AbsolutePositionConfig::None)
            .try_init(device)?,
        layers,
        final_norm: norm(),
        lm_head: (!c.tie_word_embeddings).then(|| linear(hidden, c.vocab_size, false)),
        rope: rope.try_init(device)?,
    })
}

/// Builds the model `checkpoint` describes and loads its weights.
///
/// # Errors
///
/// As [`init`] and [`Checkpoint::load`].
pub fn load(checkpoint: &Checkpoint, device: &Device) -> Result<GptNeox, ModelError> {
    let mut model = init(checkpoint, device)?;
    checkpoint.load(&mut model, &remaps(), device)?;
    Ok(model)
}
