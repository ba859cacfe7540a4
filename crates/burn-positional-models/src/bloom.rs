//! BLOOM (`model_type: "bloom"`), as transformers' `modeling_bloom.py` (`BloomForCausalLM`):
//! a token table followed by a LayerNorm, pre-norm blocks of fused-projection attention with
//! ALiBi and a tanh-GELU MLP, a final LayerNorm and the token table as output projection.
//!
//! No position vectors: each head adds a linear distance penalty to its scores, the layer's
//! [`Alibi`] slopes given to [`attend`] with the step's positions. transformers adds
//! `m_h * key position` (positions counted on the attention mask, `(mask.cumsum() - 1) *
//! mask`) to `q . k / sqrt(head_dim)`; the layer adds `-m_h |key - query|`. On the keys a
//! causal query sees the two differ by `m_h * query position`, the same for the whole row of
//! scores, which the softmax ignores.

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use burn_positional::{Alibi, AlibiConfig, AttendOptions, AttentionBias, KvCache, attend};
use serde::Deserialize;

use crate::ModelError;
use crate::checkpoint::{Checkpoint, Remap};
use crate::decoder::project;
use crate::generate::{CausalLm, Step};

/// `BloomConfig`'s fields the port reads, with transformers 5.24's defaults. The names
/// transformers also takes (`n_embed`, `num_attention_heads`, `num_hidden_layers`) win over
/// BLOOM's own when both are present, as in transformers.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct BloomConfig {
    /// `vocab_size`.
    pub vocab_size: usize,
    /// `hidden_size`.
    pub hidden_size: usize,
    /// `n_layer`.
    pub n_layer: usize,
    /// `n_head`.
    pub n_head: usize,
    /// `layer_norm_epsilon`.
    pub layer_norm_epsilon: f64,
    /// `apply_residual_connection_post_layernorm`: the residual of each sub-block is its
    /// normalized input rather than its input.
    pub apply_residual_connection_post_layernorm: bool,
    /// `pretraining_tp`: tensor-parallel ranks of pretraining.
    pub pretraining_tp: usize,
    /// `slow_but_exact`: with `pretraining_tp > 1`, transformers sums the attention output and
    /// MLP output projections slice by slice, without their biases.
    pub slow_but_exact: bool,
    /// `tie_word_embeddings`: the output projection is the token table.
    pub tie_word_embeddings: bool,
    /// `n_embed` (older name of `hidden_size`).
    pub n_embed: Option<usize>,
    /// `num_attention_heads` (alias of `n_head`).
    pub num_attention_heads: Option<usize>,
    /// `num_hidden_layers` (alias of `n_layer`).
    pub num_hidden_layers: Option<usize>,
}

impl Default for BloomConfig {
    fn default() -> Self {
        Self {
            vocab_size: 250880,
            hidden_size: 64,
            n_layer: 2,
            n_head: 8,
            layer_norm_epsilon: 1e-5,
            apply_residual_connection_post_layernorm: false,
            pretraining_tp: 1,
            slow_but_exact: false,
            tie_word_embeddings: true,
            n_embed: None,
            num_attention_heads: None,
            num_hidden_layers: None,
        }
    }
}

impl BloomConfig {
    /// The model width (`n_embed` over `hidden_size`).
    pub fn d_model(&self) -> usize {
        self.n_embed.unwrap_or(self.hidden_size)
    }

    /// Attention heads.
    pub fn n_heads(&self) -> usize {
        self.num_attention_heads.unwrap_or(self.n_head)
    }

    /// Blocks.
    pub fn n_layers(&self) -> usize {
        self.num_hidden_layers.unwrap_or(self.n_layer)
    }
}

/// `BloomAttention`: one fused projection whose output holds, per head, its query, key and
/// value (`[n_head, 3, head_dim]`), [`attend`] with ALiBi, an output projection.
#[derive(Module, Debug)]
pub struct BloomAttention {
    /// `query_key_value`: `d_model -> 3 d_model`.
    pub query_key_value: Linear,
    /// `dense`: `d_model -> d_model` (without its bias under `slow_but_exact`).
    pub dense: Linear,
    /// Heads.
    pub n_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
}

/// `BloomMLP`: `dense_4h_to_h(gelu(dense_h_to_4h(x)))`.
#[derive(Module, Debug)]
pub struct BloomMlp {
    /// `dense_h_to_4h`.
    pub dense_h_to_4h: Linear,
    /// `dense_4h_to_h` (without its bias under `slow_but_exact`).
    pub dense_4h_to_h: Linear,
}

/// `BloomBlock`: attention then MLP, each after a LayerNorm, each added to a residual.
#[derive(Module, Debug)]
pub struct BloomBlock {
    /// `input_layernorm`.
    pub input_layernorm: LayerNorm,
    /// `self_attention`.
    pub self_attention: BloomAttention,
    /// `post_attention_layernorm`.
    pub post_attention_layernorm: LayerNorm,
    /// `mlp`.
    pub mlp: BloomMlp,
    /// `apply_residual_connection_post_layernorm`.
    pub residual_post_layernorm: bool,
}

/// BLOOM with its language-model head (`BloomForCausalLM`). Field names are transformers'
/// (`BloomModel` writes them without the `transformer.` prefix).
#[derive(Module, Debug)]
pub struct Bloom {
    /// `transformer.word_embeddings`.
    pub word_embeddings: Embedding,
    /// `transformer.word_embeddings_layernorm`.
    pub word_embeddings_layernorm: LayerNorm,
    /// `transformer.h`.
    pub h: Vec<BloomBlock>,
    /// `transformer.ln_f`.
    pub ln_f: LayerNorm,
    /// `lm_head` (absent when tied to the token table, transformers' default).
    pub lm_head: Option<Linear>,
    /// The ALiBi slopes, shared by the blocks (transformers' `build_alibi_tensor`).
    pub alibi: Alibi,
}

/// The remaps of a BLOOM checkpoint onto [`Bloom`] (keys without the prefix need none).
pub const REMAPS: [Remap; 5] = [
    (
        "transformer.word_embeddings_layernorm",
        "word_embeddings_layernorm",
    ),
    ("transformer.word_embeddings", "word_embeddings"),
    ("transformer.h.{}", "h.{}"),
    ("transformer.ln_f", "ln_f"),
    ("lm_head", "lm_head"),
];

impl BloomConfig {
    /// Builds the model (weights random until loaded).
    ///
    /// # Errors
    ///
    /// [`ModelError::Config`] for a width the heads do not divide.
    pub fn init(&self, path: &str, device: &Device) -> Result<Bloom, ModelError> {
        let (d_model, n_heads) = (self.d_model(), self.n_heads());
        if n_heads == 0 || d_model % n_heads != 0 {
            return Err(ModelError::Config {
                path: path.to_string(),
                detail: format!(
                    "`hidden_size` must be divisible by `n_head` (got hidden_size {d_model} and \
                     n_head {n_heads})"
                ),
            });
        }
        let norm = || {
            LayerNormConfig::new(d_model)
                .with_epsilon(self.layer_norm_epsilon)
                .init(device)
        };
        let linear = |i, o| LinearConfig::new(i, o).init(device);
        let h = (0..self.n_layers())
            .map(|_| BloomBlock {
                input_layernorm: norm(),
                self_attention: BloomAttention {
                    query_key_value: linear(d_model, 3 * d_model),
                    dense: linear(d_model, d_model),
                    n_heads,
                    head_dim: d_model / n_heads,
                },
                post_attention_layernorm: norm(),
                mlp: BloomMlp {
                    dense_h_to_4h: linear(d_model, 4 * d_model),
                    dense_4h_to_h: linear(4 * d_model, d_model),
                },
                residual_post_layernorm: self.apply_residual_connection_post_layernorm,
            })
            .collect();
        Ok(Bloom {
            word_embeddings: EmbeddingConfig::new(self.vocab_size, d_model).init(device),
            word_embeddings_layernorm: norm(),
            h,
            ln_f: norm(),
            lm_head: (!self.tie_word_embeddings).then(|| {
                LinearConfig::new(d_model, self.vocab_size)
                    .with_bias(false)
                    .init(device)
            }),
            alibi: AlibiConfig::new(n_heads).try_init(device)?,
        })
    }
}

/// `bloom_gelu_forward`: the tanh approximation with transformers' rounded constant.
pub fn bloom_gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let inner = x.clone() * (x.clone() * x.clone() * 0.044715 + 1.0) * 0.79788456;
    x * 0.5 * (inner.tanh() + 1.0)
}

impl BloomAttention {
    /// `x` `[batch, seq, d_model]` attended over the step's keys (and the cached ones) with
    /// ALiBi `slopes` `[n_heads]`; the output projection without the residual.
    pub fn forward(
        &self,
        x: Tensor<3>,
        slopes: Tensor<1>,
        step: &Step,
        cache: Option<&mut KvCache>,
    ) -> Tensor<3> {
        let [batch, seq, d_model] = x.dims();
        let (h, d) = (self.n_heads, self.head_dim);
        // transformers' `_reshape`: [batch, seq, n_head, 3, head_dim], query, key, value per head.
        let qkv = project(&self.query_key_value, x).reshape([batch, seq, h, 3 * d]);
        let part = |i: usize| {
            qkv.clone()
                .slice([0..batch, 0..seq, 0..h, i * d..(i + 1) * d])
                .swap_dims(1, 2)
        };
        let (q, k, v) = (part(0), part(1), part(2));
        let (k, v) = match cache {
            Some(cache) => cache.append(k, v),
            None => (k, v),
        };
        let (key_positions, key_padding) = step.last_keys(k.dims()[2]);
        let options = AttendOptions::new()
            .bias(AttentionBias::Alibi(slopes))
            .causal(true)
            .positions(step.positions.clone(), key_positions)
            .key_padding(key_padding)
            .scale(1.0 / (d as f64).sqrt()); // `inv_norm_factor`, on q . k only
        let out = attend(q, k, v, &options); // [batch, h, seq, d]
        project(
            &self.dense,
            out.swap_dims(1, 2).reshape([batch, seq, d_model]),
        )
    }
}

impl BloomMlp {
    /// `dense_4h_to_h(gelu(dense_h_to_4h(x)))`, without the residual.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        project(
            &self.dense_4h_to_h,
            bloom_gelu(project(&self.dense_h_to_4h, x)),
        )
    }
}

impl BloomBlock {
    /// `x` `[batch, seq, d_model]` through attention and MLP, residuals included.
    pub fn forward(
        &self,
        x: Tensor<3>,
        slopes: Tensor<1>,
        step: &Step,
        cache: Option<&mut KvCache>,
    ) -> Tensor<3> {
        let normed = self.input_layernorm.forward(x.clone());
        let residual = if self.residual_post_layernorm {
            normed.clone()
        } else {
            x
        };
        let x = self.self_attention.forward(normed, slopes, step, cache) + residual;
        let normed = self.post_attention_layernorm.forward(x.clone());
        let residual = if self.residual_post_layernorm {
            normed.clone()
        } else {
            x
        };
        self.mlp.forward(normed) + residual
    }
}

impl Bloom {
    /// Number of blocks (caches).
    pub fn n_layers(&self) -> usize {
        self.h.len()
    }

    /// Hidden states `[batch, seq, d_model]` after `ln_f`.
    pub fn hidden(&self, step: &Step, mut caches: Option<&mut [KvCache]>) -> Tensor<3> {
        let embedded = self.word_embeddings.forward(step.ids.clone());
        let mut x = self.word_embeddings_layernorm.forward(embedded);
        let slopes = self.alibi.slopes();
        for (i, block) in self.h.iter().enumerate() {
            let cache = caches.as_deref_mut().map(|c| &mut c[i]);
            x = block.forward(x, slopes.clone(), step, cache);
        }
        self.ln_f.forward(x)
    }
}

impl CausalLm for Bloom {
    fn n_layers(&self) -> usize {
        Bloom::n_layers(self)
    }

    fn vocab_size(&self) -> usize {
        self.word_embeddings.weight.lazy_shape()[0]
    }

    fn hidden(&self, step: &Step, caches: Option<&mut [KvCache]>) -> Tensor<3> {
        Bloom::hidden(self, step, caches)
    }

    fn head(&self, x: Tensor<3>) -> Tensor<3> {
        match &self.lm_head {
            Some(head) => head.forward(x),
            // Tied: logits = x . word_embeddings^T.
            None => crate::decoder::tied_logits(x, self.word_embeddings.weight.val()),
        }
    }
}

/// Builds the model `checkpoint`'s config.json describes and loads its weights with burn's
/// store. Under `pretraining_tp > 1` with `slow_but_exact`, the biases of the attention
/// output and MLP output projections are dropped after loading, as transformers' slice-by-slice
/// sum leaves them out.
///
/// # Errors
///
/// As [`BloomConfig::init`] and [`Checkpoint::load`].
pub fn load(checkpoint: &Checkpoint, device: &Device) -> Result<Bloom, ModelError> {
    let config: BloomConfig = checkpoint.config()?;
    let path = checkpoint.config_path.display().to_string();
    let mut model = config.init(&path, device)?;
    checkpoint.load(&mut model, &REMAPS, device)?;
    if config.pretraining_tp > 1 && config.slow_but_exact {
        for block in &mut model.h {
            block.self_attention.dense.bias = None;
            block.mlp.dense_4h_to_h.bias = None;
        }
    }
    Ok(model)
}
