//! GPT-2 (`model_type: "gpt2"`), as transformers' `modeling_gpt2.py` (`GPT2LMHeadModel`):
//! token plus learned absolute position embeddings, pre-norm blocks of fused-projection
//! attention and a two-layer MLP, a final LayerNorm and the token table as output projection.
//!
//! The positional parts are the layer's: the embedding is an [`EmbeddingWithPosition`] with a
//! learned table of `n_positions` rows, loaded by [`burn_positional::pretrained::gpt2`] and
//! read at the step's explicit positions (under left padding, transformers' `cumsum(mask) -
//! 1`); attention is [`attend`] with a causal mask measured on those positions, the key
//! padding, and GPT-2's scale (`scale_attn_weights`, `scale_attn_by_inverse_layer_idx`). The
//! rest is plain burn, loaded with burn's store.
//!
//! transformers' `Conv1D` keeps its weight `[in, out]`, so it is a module of its own here
//! ([`Conv1D`]) that burn's PyTorch adapter leaves untransposed.

use burn::module::{Module, Param};
use burn::nn::{Initializer, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use burn_positional::{
    AttendOptions, EmbeddingWithPosition, EmbeddingWithPositionConfig, KvCache, LearnedConfig,
    Positions, attend,
};
use serde::Deserialize;

use crate::ModelError;
use crate::checkpoint::{Checkpoint, Remap};
use crate::decoder::Activation;
use crate::generate::{CausalLm, Step};

/// `GPT2Config`'s fields the port reads, with transformers 5.24's defaults. The names of
/// transformers' `attribute_map` (`hidden_size`, `max_position_embeddings`,
/// `num_attention_heads`, `num_hidden_layers`) are read too and, as in transformers, win over
/// GPT-2's own names when both are present.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct Gpt2Config {
    /// `vocab_size`.
    pub vocab_size: usize,
    /// `n_positions`: rows of the position table.
    pub n_positions: usize,
    /// `n_embd`: the model width.
    pub n_embd: usize,
    /// `n_layer`.
    pub n_layer: usize,
    /// `n_head`.
    pub n_head: usize,
    /// `n_inner`: the MLP width (`4 * n_embd` when absent or null).
    pub n_inner: Option<usize>,
    /// `activation_function` (transformers' `ACT2FN` name).
    pub activation_function: String,
    /// `layer_norm_epsilon`.
    pub layer_norm_epsilon: f64,
    /// `scale_attn_weights`: scores scaled by `1 / sqrt(head_dim)`.
    pub scale_attn_weights: bool,
    /// `scale_attn_by_inverse_layer_idx`: scores of layer `i` further divided by `i + 1`.
    pub scale_attn_by_inverse_layer_idx: bool,
    /// `reorder_and_upcast_attn`: the same scores computed in another order and in f32 (the
    /// port computes in f32 throughout, so it changes nothing here).
    pub reorder_and_upcast_attn: bool,
    /// `tie_word_embeddings`: the output projection is the token table.
    pub tie_word_embeddings: bool,
    /// `hidden_size` (alias of `n_embd`).
    pub hidden_size: Option<usize>,
    /// `max_position_embeddings` (alias of `n_positions`).
    pub max_position_embeddings: Option<usize>,
    /// `num_attention_heads` (alias of `n_head`).
    pub num_attention_heads: Option<usize>,
    /// `num_hidden_layers` (alias of `n_layer`).
    pub num_hidden_layers: Option<usize>,
}

impl Default for Gpt2Config {
    fn default() -> Self {
        Self {
            vocab_size: 50257,
            n_positions: 1024,
            n_embd: 768,
            n_layer: 12,
            n_head: 12,
            n_inner: None,
            activation_function: "gelu_new".into(),
            layer_norm_epsilon: 1e-5,
            scale_attn_weights: true,
            scale_attn_by_inverse_layer_idx: false,
            reorder_and_upcast_attn: false,
            tie_word_embeddings: true,
            hidden_size: None,
            max_position_embeddings: None,
            num_attention_heads: None,
            num_hidden_layers: None,
        }
    }
}

impl Gpt2Config {
    /// The model width (`hidden_size` over `n_embd`, as transformers' `attribute_map`).
    pub fn d_model(&self) -> usize {
        self.hidden_size.unwrap_or(self.n_embd)
    }

    /// Rows of the position table.
    pub fn max_len(&self) -> usize {
        self.max_position_embeddings.unwrap_or(self.n_positions)
    }

    /// Attention heads.
    pub fn n_heads(&self) -> usize {
        self.num_attention_heads.unwrap_or(self.n_head)
    }

    /// Blocks.
    pub fn n_layers(&self) -> usize {
        self.num_hidden_layers.unwrap_or(self.n_layer)
    }

    /// The factor of `q . k` in layer `layer` (transformers' `GPT2Attention.scaling`).
    pub fn scale(&self, layer: usize) -> f64 {
        let mut scale = 1.0;
        if self.scale_attn_weights {
            scale = ((self.d_model() / self.n_heads()) as f64).powf(-0.5);
        }
        if self.scale_attn_by_inverse_layer_idx {
            scale /= (layer + 1) as f64;
        }
        scale
    }
}

/// transformers' `Conv1D`: a linear layer whose weight is stored `[in, out]` (`x W + b`).
#[derive(Module, Debug)]
pub struct Conv1D {
    /// `[d_in, d_out]`.
    pub weight: Param<Tensor<2>>,
    /// `[d_out]`.
    pub bias: Param<Tensor<1>>,
}

impl Conv1D {
    /// Weight `N(0, 0.02)` and zero bias, as transformers initializes it.
    fn init(d_in: usize, d_out: usize, device: &Device) -> Self {
        let normal = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        Self {
            weight: normal.init([d_in, d_out], device),
            bias: Initializer::Zeros.init([d_out], device),
        }
    }

    /// `x W + b`.
    ///
    /// # Shapes
    ///
    /// - x: `[batch, seq, d_in]`
    /// - output: `[batch, seq, d_out]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        crate::decoder::affine(x, self.weight.val(), Some(self.bias.val()))
    }
}

/// `GPT2Attention`: one fused projection to queries, keys and values (`[q | k | v]`, each
/// `n_head` heads of `head_dim`), [`attend`], an output projection.
#[derive(Module, Debug)]
pub struct Gpt2Attention {
    /// `c_attn`: `[d_model, 3 d_model]`.
    pub c_attn: Conv1D,
    /// `c_proj`: `[d_model, d_model]`.
    pub c_proj: Conv1D,
    /// Heads.
    pub n_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// The factor of `q . k` ([`Gpt2Config::scale`]).
    pub scale: f64,
}

/// `GPT2MLP`: `c_proj(act(c_fc(x)))`.
#[derive(Module, Debug)]
pub struct Gpt2Mlp {
    /// `c_fc`: `[d_model, n_inner]`.
    pub c_fc: Conv1D,
    /// `c_proj`: `[n_inner, d_model]`.
    pub c_proj: Conv1D,
    /// `activation_function`.
    #[module(skip)]
    pub activation: Activation,
}

/// `GPT2Block`: `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`.
#[derive(Module, Debug)]
pub struct Gpt2Block {
    /// `ln_1`.
    pub ln_1: LayerNorm,
    /// `attn`.
    pub attn: Gpt2Attention,
    /// `ln_2`.
    pub ln_2: LayerNorm,
    /// `mlp`.
    pub mlp: Gpt2Mlp,
}

/// What burn's store loads: the blocks, the final norm and an untied head. Field names are
/// transformers' (`GPT2Model` writes them without the `transformer.` prefix).
#[derive(Module, Debug)]
pub struct Gpt2Body {
    /// `transformer.h`.
    pub h: Vec<Gpt2Block>,
    /// `transformer.ln_f`.
    pub ln_f: LayerNorm,
    /// `lm_head` (absent when tied to the token table, transformers' default).
    pub lm_head: Option<Linear>,
}

/// GPT-2 with its language-model head (`GPT2LMHeadModel`).
#[derive(Module, Debug)]
pub struct Gpt2 {
    /// `transformer.wte` + `transformer.wpe`: token and learned position tables, added.
    pub embedding: EmbeddingWithPosition,
    /// The blocks, the final norm, the head.
    pub body: Gpt2Body,
}

/// The remaps of a GPT-2 checkpoint onto [`Gpt2Body`] (keys without the prefix need none).
pub const REMAPS: [Remap; 3] = [
    ("transformer.h.{}", "h.{}"),
    ("transformer.ln_f", "ln_f"),
    ("lm_head", "lm_head"),
];

impl Gpt2Config {
    /// Builds the model (weights random until loaded).
    ///
    /// # Errors
    ///
    /// [`ModelError::Config`] for a width the heads do not divide or an activation without a
    /// port, [`ModelError::Position`] if the layer refuses the embedding's sizes.
    pub fn init(&self, path: &str, device: &Device) -> Result<Gpt2, ModelError> {
        let (d_model, n_heads) = (self.d_model(), self.n_heads());
        if n_heads == 0 || d_model % n_heads != 0 {
            return Err(ModelError::Config {
                path: path.to_string(),
                detail: format!(
                    "`n_embd` must be divisible by `n_head` (got n_embd {d_model} and n_head \
                     {n_heads})"
                ),
            });
        }
        let activation = Activation::from_hf(&self.activation_function, path)?;
        let n_inner = self.n_inner.unwrap_or(4 * d_model);
        let norm = || {
            LayerNormConfig::new(d_model)
                .with_epsilon(self.layer_norm_epsilon)
                .init(device)
        };
        let h = (0..self.n_layers())
            .map(|layer| Gpt2Block {
                ln_1: norm(),
                attn: Gpt2Attention {
                    c_attn: Conv1D::init(d_model, 3 * d_model, device),
                    c_proj: Conv1D::init(d_model, d_model, device),
                    n_heads,
                    head_dim: d_model / n_heads,
                    scale: self.scale(layer),
                },
                ln_2: norm(),
                mlp: Gpt2Mlp {
                    c_fc: Conv1D::init(d_model, n_inner, device),
                    c_proj: Conv1D::init(n_inner, d_model, device),
                    activation,
                },
            })
            .collect();
        let embedding = EmbeddingWithPositionConfig::new(self.vocab_size, d_model)
            // Zeros, not a random draw the load replaces (the layer draws its table eagerly).
            .with_token_initializer(burn::nn::Initializer::Zeros)
            .with_scheme(LearnedConfig::new(self.max_len()).into())
            .try_init(device)?;
        Ok(Gpt2 {
            embedding,
            body: Gpt2Body {
                h,
                ln_f: norm(),
                lm_head: (!self.tie_word_embeddings).then(|| {
                    LinearConfig::new(d_model, self.vocab_size)
                        .with_bias(false)
                        .init(device)
                }),
            },
        })
    }
}

impl Gpt2Attention {
    /// `x` `[batch, seq, d_model]` attended over the step's keys (and the cached ones).
    pub fn forward(&self, x: Tensor<3>, step: &Step, cache: Option<&mut KvCache>) -> Tensor<3> {
        let [batch, seq, d_model] = x.dims();
        let (h, d) = (self.n_heads, self.head_dim);
        let qkv = self.c_attn.forward(x);
        // `[q | k | v]` along the last axis, each split into heads.
        let part = |i: usize| {
            qkv.clone()
                .slice([0..batch, 0..seq, i * d_model..(i + 1) * d_model])
                .reshape([batch, seq, h, d])
                .swap_dims(1, 2)
        };
        let (q, k, v) = (part(0), part(1), part(2));
        let (k, v) = match cache {
            Some(cache) => cache.append(k, v),
            None => (k, v),
        };
        let keys = k.dims()[2];
        let options = AttendOptions::new().causal(true).scale(self.scale);
        let options = if step.sequential && keys == step.past + seq {
            // Positions 0, 1, .. and no padding: the queries sit after the cached keys.
            options.offset(step.past)
        } else {
            let (key_positions, key_padding) = step.last_keys(keys);
            options
                .positions(step.positions.clone(), key_positions)
                .key_padding(key_padding)
        };
        let out = attend(q, k, v, &options); // [batch, h, seq, d]
        self.c_proj
            .forward(out.swap_dims(1, 2).reshape([batch, seq, d_model]))
    }
}

impl Gpt2Mlp {
    /// `c_proj(act(c_fc(x)))`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        self.c_proj
            .forward(self.activation.apply(self.c_fc.forward(x)))
    }
}

impl Gpt2 {
    /// Number of blocks (caches).
    pub fn n_layers(&self) -> usize {
        self.body.h.len()
    }

    /// Hidden states `[batch, seq, d_model]` after `ln_f`.
    pub fn hidden(&self, step: &Step, mut caches: Option<&mut [KvCache]>) -> Tensor<3> {
        let mut x = self.embedding.forward_at(
            step.ids.clone(),
            Positions::Explicit(step.positions.clone()),
        );
        for (i, block) in self.body.h.iter().enumerate() {
            let cache = caches.as_deref_mut().map(|c| &mut c[i]);
            x = x.clone() + block.attn.forward(block.ln_1.forward(x), step, cache);
            x = x.clone() + block.mlp.forward(block.ln_2.forward(x));
        }
        self.body.ln_f.forward(x)
    }
}

impl CausalLm for Gpt2 {
    fn n_layers(&self) -> usize {
        Gpt2::n_layers(self)
    }

    fn vocab_size(&self) -> usize {
        self.embedding.vocab_size()
    }

    fn position_limit(&self) -> Option<usize> {
        match &self.embedding.position {
            burn_positional::AbsolutePosition::Learned(table) => Some(table.max_len()),
            _ => None,
        }
    }

    fn hidden(&self, step: &Step, caches: Option<&mut [KvCache]>) -> Tensor<3> {
        Gpt2::hidden(self, step, caches)
    }

    fn head(&self, x: Tensor<3>) -> Tensor<3> {
        match &self.body.lm_head {
            Some(head) => head.forward(x),
            // Tied: logits = x . wte^T.
            None => crate::decoder::tied_logits(x, self.embedding.tokens.val()),
        }
    }
}

/// Builds the model `checkpoint`'s config.json describes and loads its weights: the token and
/// position tables with the layer's [`pretrained::gpt2`](burn_positional::pretrained::gpt2),
/// the rest with burn's store.
///
/// # Errors
///
/// As [`Gpt2Config::init`], [`Checkpoint::load`] and the layer's loader
/// ([`ModelError::Pretrained`]).
pub fn load(checkpoint: &Checkpoint, device: &Device) -> Result<Gpt2, ModelError> {
    let config: Gpt2Config = checkpoint.config()?;
    let path = checkpoint.config_path.display().to_string();
    let mut model = config.init(&path, device)?;
    checkpoint.load(&mut model.body, &REMAPS, device)?;
    // The layer's loader converts the file's floats to the module's dtype on the host; then
    // the compute dtype.
    burn_positional::pretrained::gpt2(&mut model.embedding, &checkpoint.weights_path)?;
    model.embedding = checkpoint.cast(model.embedding, device)?;
    Ok(model)
}
