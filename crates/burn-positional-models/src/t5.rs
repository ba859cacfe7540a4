//! T5 (`model_type: "t5"`, `T5ForConditionalGeneration`), as transformers 5.24's
//! `modeling_t5.py`: an encoder and a decoder of pre-norm blocks (T5LayerNorm, an RMS norm
//! without bias), unscaled attention without biases, one relative position bias per stack
//! (the table of block 0, shared by every block of the stack), cross-attention without
//! positions, and `feed_forward_proj` (`relu`, `gated-gelu`, `gated-silu`, ...) for the MLP.
//!
//! One file for one reason to change, transformers' `modeling_t5.py`: the config, both stacks,
//! the remaps and generation (its own loop: an encoder, cross-attention, a decoder start token)
//! change together when that file does; hence past 700 lines.
//!
//! The layer does everything positional: [`T5Bias`] holds each stack's table and gives it in
//! compact form ([`T5Bias::by_distance`]), [`attend`] adds it inside the attention, causal and
//! offset by the cached length in the decoder, and [`KvCache`] keeps the decoder's keys.
//!
//! # Which table is the output
//!
//! `T5Config.__post_init__` (5.24) reads `tie_word_embeddings` into `scale_decoder_outputs`
//! (the decoder output is scaled by `d_model^-0.5` unless it was `false`) and then forces
//! `tie_word_embeddings = True`. `from_pretrained` ties `lm_head`, `encoder.embed_tokens` and
//! `decoder.embed_tokens` to `shared` unless the file holds them with other values: so a
//! table of the file is used where it is, the shared one where it is not, whatever
//! `config.json` says ([`Tables`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig, RmsNorm, RmsNormConfig};
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use burn_positional::pretrained::{self, T5Stack};
use burn_positional::{AttendOptions, KvCache, T5Bias, T5BiasConfig, attend};
use serde::Deserialize;

use crate::bert::file_keys;
use crate::checkpoint::{Checkpoint, Remap};
use crate::decoder::{Activation, rms_norm};
use crate::error::GenerateError;
use crate::generate::{Chooser, GenerateOptions, check_prompts, check_special};
use crate::{Generated, ModelError};

/// `T5Config`'s fields the port reads, with transformers 5.24's defaults. The derived fields
/// (`dense_act_fn`, `is_gated_act`, `scale_decoder_outputs`) win when `config.json` holds them,
/// as `PreTrainedConfig` sets them after `__post_init__`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct T5Config {
    /// `vocab_size`.
    pub vocab_size: usize,
    /// `d_model` (`hidden_size`).
    #[serde(alias = "hidden_size")]
    pub d_model: usize,
    /// `d_kv`, the width of a head (`head_dim`).
    #[serde(alias = "head_dim")]
    pub d_kv: usize,
    /// `d_ff`.
    pub d_ff: usize,
    /// `num_layers`, the encoder's blocks (`num_hidden_layers`).
    #[serde(alias = "num_hidden_layers")]
    pub num_layers: usize,
    /// `num_decoder_layers` (`num_layers` when absent).
    pub num_decoder_layers: Option<usize>,
    /// `num_heads` (`num_attention_heads`).
    #[serde(alias = "num_attention_heads")]
    pub num_heads: usize,
    /// `relative_attention_num_buckets`.
    pub relative_attention_num_buckets: usize,
    /// `relative_attention_max_distance`.
    pub relative_attention_max_distance: usize,
    /// `layer_norm_epsilon`.
    pub layer_norm_epsilon: f64,
    /// `feed_forward_proj`: `ACT` or `gated-ACT`.
    pub feed_forward_proj: String,
    /// `dense_act_fn` (from `feed_forward_proj` when absent).
    pub dense_act_fn: Option<String>,
    /// `is_gated_act` (from `feed_forward_proj` when absent).
    pub is_gated_act: Option<bool>,
    /// `tie_word_embeddings` as passed (read only into `scale_decoder_outputs`).
    pub tie_word_embeddings: Option<bool>,
    /// `scale_decoder_outputs` (`tie_word_embeddings != false` when absent).
    pub scale_decoder_outputs: Option<bool>,
    /// `pad_token_id`.
    pub pad_token_id: Option<i64>,
    /// `decoder_start_token_id`.
    pub decoder_start_token_id: Option<i64>,
    /// `bos_token_id`, generation's fallback for the start token.
    pub bos_token_id: Option<i64>,
}

impl Default for T5Config {
    fn default() -> Self {
        Self {
            vocab_size: 32128,
            d_model: 512,
            d_kv: 64,
            d_ff: 2048,
            num_layers: 6,
            num_decoder_layers: None,
            num_heads: 8,
            relative_attention_num_buckets: 32,
            relative_attention_max_distance: 128,
            layer_norm_epsilon: 1e-6,
            feed_forward_proj: "relu".into(),
            dense_act_fn: None,
            is_gated_act: None,
            tie_word_embeddings: None,
            scale_decoder_outputs: None,
            pad_token_id: Some(0),
            decoder_start_token_id: None,
            bos_token_id: None,
        }
    }
}

impl T5Config {
    /// The MLP's activation: `dense_act_fn`, else the last part of `feed_forward_proj`
    /// (`gelu_new` for `gated-gelu`, transformers' backward compatibility).
    ///
    /// # Errors
    ///
    /// [`ModelError::Config`] for a `feed_forward_proj` that is not `ACT` or `gated-ACT`
    /// (`T5Config.validate_architecture`), or an activation without a port.
    pub fn activation(&self, path: &str) -> Result<Activation, ModelError> {
        let parts: Vec<&str> = self.feed_forward_proj.split('-').collect();
        if (parts.len() > 1 && parts[0] != "gated") || parts.len() > 2 {
            let detail = format!(
                "feed_forward_proj \"{}\" is not `gated-ACT` or `ACT` (e.g. \"gated-gelu\", \
                 \"relu\")",
                self.feed_forward_proj
            );
            return Err(ModelError::Config {
                path: path.into(),
                detail,
            });
        }
        let derived = match self.feed_forward_proj.as_str() {
            "gated-gelu" => "gelu_new",
            other => other.rsplit('-').next().unwrap_or(other),
        };
        Activation::from_hf(self.dense_act_fn.as_deref().unwrap_or(derived), path)
    }

    /// Whether the MLP is gated (`wi_0`, `wi_1`): `feed_forward_proj` starts with `gated-`.
    pub fn gated(&self) -> bool {
        self.is_gated_act
            .unwrap_or_else(|| self.feed_forward_proj.split('-').next() == Some("gated"))
    }

    /// Whether the decoder output is scaled by `d_model^-0.5` before `lm_head`.
    pub fn scales_output(&self) -> bool {
        self.scale_decoder_outputs
            .unwrap_or(self.tie_word_embeddings != Some(false))
    }
}

/// Where each token table comes from, after transformers' tying: the file's key for
/// `shared` (the first present of `shared`, `encoder.embed_tokens`, `decoder.embed_tokens`,
/// `lm_head`, as `tie_weights` swaps a missing source for a present target), and whether the
/// encoder, the decoder and the output have a table of their own in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tables {
    /// The file's prefix read into `shared`.
    pub shared: &'static str,
    /// `encoder.embed_tokens.weight` is in the file (and is not the shared table).
    pub encoder: bool,
    /// `decoder.embed_tokens.weight` is in the file (and is not the shared table).
    pub decoder: bool,
    /// `lm_head.weight` is in the file (and is not the shared table).
    pub lm_head: bool,
}

impl Tables {
    const KEYS: [&'static str; 4] = [
        "shared",
        "encoder.embed_tokens",
        "decoder.embed_tokens",
        "lm_head",
    ];

    /// The tables of a file holding `keys`.
    pub fn of(keys: &BTreeSet<String>) -> Self {
        let present = |i: usize| keys.contains(&format!("{}.weight", Self::KEYS[i]));
        let source = (0..4).find(|&i| present(i)).unwrap_or(0);
        let own = |i: usize| i != source && present(i);
        Self {
            shared: Self::KEYS[source],
            encoder: own(1),
            decoder: own(2),
            lm_head: own(3),
        }
    }
}

/// One T5 attention: `q`, `k`, `v`, `o` without biases, `n_heads` heads of `d_kv`.
#[derive(Module, Debug)]
pub struct T5Attention {
    /// `q`.
    pub q: Linear,
    /// `k`.
    pub k: Linear,
    /// `v`.
    pub v: Linear,
    /// `o`.
    pub o: Linear,
    /// Heads.
    pub n_heads: usize,
    /// Width of a head.
    pub d_kv: usize,
}

impl T5Attention {
    /// `x` `[batch, seq, d_model]` through `linear`, split into `[batch, n_heads, seq, d_kv]`.
    fn heads(&self, linear: &Linear, x: Tensor<3>) -> Tensor<4> {
        let [batch, seq, _] = x.dims();
        linear
            .forward(x)
            .reshape([batch, seq, self.n_heads, self.d_kv])
            .swap_dims(1, 2)
    }

    /// Keys and values of `x` `[batch, seq_k, d_model]`, each `[batch, n_heads, seq_k, d_kv]`
    /// (for cross-attention, computed once per generation).
    pub fn keys_values(&self, x: Tensor<3>) -> (Tensor<4>, Tensor<4>) {
        (self.heads(&self.k, x.clone()), self.heads(&self.v, x))
    }

    /// The queries of `x` `[batch, seq, d_model]` over `k`, `v`, then `o`.
    pub fn attend(
        &self,
        x: Tensor<3>,
        k: Tensor<4>,
        v: Tensor<4>,
        options: &AttendOptions,
    ) -> Tensor<3> {
        let [batch, seq, _] = x.dims();
        let q = self.heads(&self.q, x);
        // [batch, n_heads, seq, d_kv] -> [batch, seq, n_heads * d_kv]
        let out = attend(q, k, v, options).swap_dims(1, 2);
        self.o
            .forward(out.reshape([batch, seq, self.n_heads * self.d_kv]))
    }
}

/// `DenseReluDense`: `wo(act(wi(x)))`, or gated `wo(act(wi_0(x)) * wi_1(x))`.
#[derive(Module, Debug)]
pub struct T5FeedForward {
    /// `wi`, or `wi_0` when gated.
    pub wi: Linear,
    /// `wi_1` (gated only).
    pub wi_1: Option<Linear>,
    /// `wo`.
    pub wo: Linear,
    /// `dense_act_fn`.
    #[module(skip)]
    pub activation: Activation,
}

impl T5FeedForward {
    /// `[batch, seq, d_model]` to the same.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let mut hidden = self.activation.apply(self.wi.forward(x.clone()));
        if let Some(wi_1) = &self.wi_1 {
            hidden = hidden * wi_1.forward(x);
        }
        self.wo.forward(hidden)
    }
}

/// The decoder's cross-attention layer (`layer.1`).
#[derive(Module, Debug)]
pub struct T5Cross {
    /// `layer_norm`.
    pub norm: RmsNorm,
    /// `EncDecAttention`.
    pub attention: T5Attention,
}

/// One block: self-attention, cross-attention (decoder), MLP, each pre-norm and residual.
#[derive(Module, Debug)]
pub struct T5Block {
    /// `layer.0.layer_norm`.
    pub attention_norm: RmsNorm,
    /// `layer.0.SelfAttention`.
    pub attention: T5Attention,
    /// `layer.1` in the decoder.
    pub cross: Option<T5Cross>,
    /// The last layer's `layer_norm`.
    pub ff_norm: RmsNorm,
    /// The last layer's `DenseReluDense`.
    pub ff: T5FeedForward,
}

/// An encoder or decoder stack.
#[derive(Module, Debug)]
pub struct Stack {
    /// `embed_tokens`, only where the file holds a table other than `shared`.
    pub embed_tokens: Option<Embedding>,
    /// `block`.
    pub blocks: Vec<T5Block>,
    /// `final_layer_norm`.
    pub final_norm: RmsNorm,
}

/// Everything of T5 but the position tables: what [`Checkpoint::load`] reads.
#[derive(Module, Debug)]
pub struct T5Weights {
    /// `shared`: the token table of both stacks, and the output unless `lm_head` is given.
    pub shared: Embedding,
    /// `encoder`.
    pub encoder: Stack,
    /// `decoder`.
    pub decoder: Stack,
    /// `lm_head`, only where the file holds one other than `shared`.
    pub lm_head: Option<Linear>,
}

/// T5 with its language-model head. Built by [`load`].
#[derive(Module, Debug)]
pub struct T5 {
    /// Tables, blocks, norms and head.
    pub weights: T5Weights,
    /// The encoder's relative bias (`encoder.block.0...relative_attention_bias`).
    pub encoder_bias: T5Bias,
    /// The decoder's relative bias (`decoder.block.0...relative_attention_bias`).
    pub decoder_bias: T5Bias,
    /// `d_model^-0.5` when `scale_decoder_outputs`, else 1.
    pub output_scale: f64,
    /// The first decoder token of generation: `decoder_start_token_id`, else `bos_token_id`,
    /// else `pad_token_id`, else 0.
    pub decoder_start_token_id: i64,
}

/// What the decoder reads of the encoder: each block's cross-attention keys and values, and
/// the encoder's padding.
#[derive(Debug, Clone)]
pub struct Memory {
    /// Per decoder block, keys and values `[batch, n_heads, seq_enc, d_kv]`.
    pub keys_values: Vec<(Tensor<4>, Tensor<4>)>,
    /// `[batch, seq_enc]`, true at padding.
    pub padding: Tensor<2, Bool>,
}

impl T5Config {
    /// Builds the model (weights random until loaded) with the tables `tables` says.
    ///
    /// # Errors
    ///
    /// [`ModelError::Config`] for an activation without a port, [`ModelError::Position`] for
    /// bucket settings the layer refuses.
    pub fn init(&self, tables: Tables, path: &str, device: &Device) -> Result<T5, ModelError> {
        let activation = self.activation(path)?;
        // `num_decoder_layers` defaults to `num_layers` ("default = symmetry").
        let decoder_layers = self.num_decoder_layers.unwrap_or(self.num_layers);
        let inner = self.num_heads * self.d_kv;
        let linear = |i, o| LinearConfig::new(i, o).with_bias(false).init(device);
        let norm = || {
            RmsNormConfig::new(self.d_model)
                .with_epsilon(self.layer_norm_epsilon)
                .init(device)
        };
        let attention = || T5Attention {
            q: linear(self.d_model, inner),
            k: linear(self.d_model, inner),
            v: linear(self.d_model, inner),
            o: linear(inner, self.d_model),
            n_heads: self.num_heads,
            d_kv: self.d_kv,
        };
        let table = || EmbeddingConfig::new(self.vocab_size, self.d_model).init(device);
        let stack = |n_blocks: usize, decoder: bool, own_table: bool| Stack {
            embed_tokens: own_table.then(table),
            blocks: (0..n_blocks)
                .map(|_| T5Block {
                    attention_norm: norm(),
                    attention: attention(),
                    cross: decoder.then(|| T5Cross {
                        norm: norm(),
                        attention: attention(),
                    }),
                    ff_norm: norm(),
                    ff: T5FeedForward {
                        wi: linear(self.d_model, self.d_ff),
                        wi_1: self.gated().then(|| linear(self.d_model, self.d_ff)),
                        wo: linear(self.d_ff, self.d_model),
                        activation,
                    },
                })
                .collect(),
            final_norm: norm(),
        };
        let bias = T5BiasConfig::new(self.num_heads)
            .with_num_buckets(self.relative_attention_num_buckets)
            .with_max_distance(self.relative_attention_max_distance);
        Ok(T5 {
            weights: T5Weights {
                shared: table(),
                encoder: stack(self.num_layers, false, tables.encoder),
                decoder: stack(decoder_layers, true, tables.decoder),
                lm_head: tables
                    .lm_head
                    .then(|| linear(self.d_model, self.vocab_size)),
            },
            encoder_bias: bias.try_init(device)?,
            decoder_bias: bias.try_init(device)?,
            // Python's `d_model ** -0.5`.
            output_scale: if self.scales_output() {
                (self.d_model as f64).powf(-0.5)
            } else {
                1.0
            },
            // Generation's fallbacks: `bos_token_id`, then T5's convention, the pad token.
            decoder_start_token_id: (self.decoder_start_token_id)
                .or(self.bos_token_id)
                .or(self.pad_token_id)
                .unwrap_or(0),
        })
    }
}

impl T5Block {
    /// `x` `[batch, seq, d_model]` through self-attention (its keys and values appended to
    /// `cache` if given), cross-attention over a decoder's `memory` keys and values, and the
    /// MLP, each pre-norm with a residual.
    pub fn forward(
        &self,
        x: Tensor<3>,
        cache: Option<&mut KvCache>,
        options: &AttendOptions,
        memory: Option<(&(Tensor<4>, Tensor<4>), &AttendOptions)>,
    ) -> Tensor<3> {
        let normed = rms_norm(&self.attention_norm, x.clone());
        let (k, v) = self.attention.keys_values(normed.clone());
        let (k, v) = match cache {
            Some(cache) => cache.append(k, v),
            None => (k, v),
        };
        let mut x = x + self.attention.attend(normed, k, v, options);
        if let (Some(cross), Some(((k, v), options))) = (&self.cross, memory) {
            let normed = rms_norm(&cross.norm, x.clone());
            x = x + cross
                .attention
                .attend(normed, k.clone(), v.clone(), options);
        }
        x.clone() + self.ff.forward(rms_norm(&self.ff_norm, x))
    }
}

impl T5 {
    /// The encoder's last hidden state (after its final norm) for `ids`, padded keys hidden.
    ///
    /// # Shapes
    ///
    /// - `ids`, `padding` (true at padding): `[batch, seq_enc]`
    /// - output: `[batch, seq_enc, d_model]`
    pub fn encode(&self, ids: Tensor<2, Int>, padding: Tensor<2, Bool>) -> Tensor<3> {
        let stack = &self.weights.encoder;
        let table = stack.embed_tokens.as_ref().unwrap_or(&self.weights.shared);
        // One gather from the table per call, shared by every block (T5 computes it in block 0).
        let options = AttendOptions::new()
            .bias(self.encoder_bias.by_distance(false))
            .scale(1.0)
            .key_padding(padding);
        let mut x = table.forward(ids);
        for block in &stack.blocks {
            x = block.forward(x, None, &options, None);
        }
        rms_norm(&stack.final_norm, x)
    }

    /// The decoder's cross-attention keys and values of `encoded` (the encoder's output for a
    /// batch with `padding`), computed once and reused at every step.
    ///
    /// # Shapes
    ///
    /// - `encoded`: `[batch, seq_enc, d_model]`; `padding`: `[batch, seq_enc]`
    pub fn memory(&self, encoded: Tensor<3>, padding: Tensor<2, Bool>) -> Memory {
        let keys_values = (self.weights.decoder.blocks.iter())
            .map(|block| block.cross.as_ref().expect("decoder blocks cross-attend"))
            .map(|cross| cross.attention.keys_values(encoded.clone()))
            .collect();
        Memory {
            keys_values,
            padding,
        }
    }

    /// Logits of decoder tokens `ids` over `memory`. With `caches` (one per decoder block),
    /// `ids` follow the cached tokens: their keys and values are appended and their queries sit
    /// at the cached length; without, `ids` are the whole decoder sequence.
    ///
    /// # Shapes
    ///
    /// - `ids`: `[batch, seq]`
    /// - output: `[batch, seq, vocab_size]`
    ///
    /// # Panics
    ///
    /// If `caches` does not hold one cache per decoder block.
    pub fn decode_step(
        &self,
        ids: Tensor<2, Int>,
        memory: &Memory,
        mut caches: Option<&mut [KvCache]>,
    ) -> Tensor<3> {
        let stack = &self.weights.decoder;
        let past = match caches.as_deref() {
            Some(caches) => {
                let n_blocks = stack.blocks.len();
                assert_eq!(
                    caches.len(),
                    n_blocks,
                    "T5::decode_step: one KvCache per decoder block"
                );
                caches.first().map_or(0, KvCache::len)
            }
            None => 0,
        };
        let self_options = AttendOptions::new()
            .bias(self.decoder_bias.by_distance(true))
            .scale(1.0)
            .causal(true)
            .offset(past);
        let cross_options = AttendOptions::new()
            .scale(1.0)
            .key_padding(memory.padding.clone());
        let table = stack.embed_tokens.as_ref().unwrap_or(&self.weights.shared);
        let mut x = table.forward(ids);
        for (i, block) in stack.blocks.iter().enumerate() {
            let cache = caches.as_deref_mut().map(|c| &mut c[i]);
            let cross = (&memory.keys_values[i], &cross_options);
            x = block.forward(x, cache, &self_options, Some(cross));
        }
        self.logits(rms_norm(&stack.final_norm, x))
    }

    /// Teacher-forced logits of the decoder sequence `ids` (starting with the start token)
    /// over the encoder's output `encoded` for a batch with `padding`.
    ///
    /// # Shapes
    ///
    /// - `ids`: `[batch, seq]`; `encoded`: `[batch, seq_enc, d_model]`; `padding`:
    ///   `[batch, seq_enc]`, true at padding
    /// - output: `[batch, seq, vocab_size]`
    pub fn decode(
        &self,
        ids: Tensor<2, Int>,
        encoded: Tensor<3>,
        padding: Tensor<2, Bool>,
    ) -> Tensor<3> {
        self.decode_step(ids, &self.memory(encoded, padding), None)
    }

    /// Rows of the shared token table: encoder prompt ids must be below it. Read from its
    /// shape, without touching the device.
    pub fn vocab_size(&self) -> usize {
        self.weights.shared.weight.lazy_shape()[0]
    }

    /// The decoder's final hidden state to logits: scaled by `output_scale`, then `lm_head` or
    /// the shared table.
    fn logits(&self, x: Tensor<3>) -> Tensor<3> {
        // Times 1 (no scaling) is exact.
        let x = x * self.output_scale;
        match &self.weights.lm_head {
            Some(head) => head.forward(x),
            // Tied: logits = x . shared^T.
            None => crate::decoder::tied_logits(x, self.weights.shared.weight.val()),
        }
    }
}

/// `prompts` padded on the right with `pad` to the longest (T5's tokenizers pad on the right):
/// ids `[batch, seq]` and padding `[batch, seq]` (true at padding) on `device`.
///
/// # Panics
///
/// If `prompts` is empty or holds an empty prompt.
pub fn inputs(
    prompts: &[Vec<i64>],
    pad: i64,
    device: &Device,
) -> (Tensor<2, Int>, Tensor<2, Bool>) {
    assert!(
        !prompts.is_empty() && prompts.iter().all(|p| !p.is_empty()),
        "t5: every prompt needs at least one token, got lengths {:?}. Fix: drop empty prompts",
        prompts.iter().map(Vec::len).collect::<Vec<_>>()
    );
    let batch = prompts.len();
    let seq = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let ids: Vec<i64> = prompts
        .iter()
        .flat_map(|p| {
            p.iter()
                .copied()
                .chain(std::iter::repeat_n(pad, seq - p.len()))
        })
        .collect();
    let padding: Vec<bool> = prompts
        .iter()
        .flat_map(|p| (0..seq).map(|i| i >= p.len()))
        .collect();
    (
        Tensor::from_data(TensorData::new(ids, [batch, seq]), device),
        Tensor::from_data(TensorData::new(padding, [batch, seq]), device),
    )
}

/// Greedy generation as transformers' `generate(do_sample=False)` with `eos_token_id=None`:
/// the prompts right-padded with `pad` and encoded once, the cross-attention keys and values
/// computed once, then `max_new_tokens` decoder steps from `decoder_start_token_id`, one
/// [`KvCache`] per decoder block, each token the argmax of its step's logits. The start token
/// is not in [`Generated::tokens`]. [`try_generate`] with [`GenerateOptions::greedy`].
///
/// # Panics
///
/// With [`try_generate`]'s error message: an empty prompt, or a prompt id, `pad` or the
/// decoder's start token outside the vocabulary.
pub fn generate(
    model: &T5,
    prompts: &[Vec<i64>],
    pad: i64,
    max_new_tokens: usize,
    device: &Device,
) -> Generated {
    try_generate(
        model,
        prompts,
        &GenerateOptions::greedy(max_new_tokens, pad),
        device,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Generation as transformers' `generate` runs an encoder-decoder for one beam: the prompts
/// right-padded with `options.pad_token_id` and encoded once, the cross-attention keys and
/// values computed once, then decoder steps from the start token (`options`', else the
/// model's), one [`KvCache`] per decoder block, each token the argmax or a seeded draw of its
/// step's processed logits (the repetition penalty sees the decoder's tokens, the start token
/// included, as transformers'), until the length or until every row has met an eos token,
/// pad tokens after it. The start token is not in [`Generated::tokens`]. Everything is
/// checked on the host before the model runs.
///
/// # Errors
///
/// [`GenerateError::Setting`] for a sampling setting out of range or a `max_length` of 1,
/// [`GenerateError::EmptyPrompt`], [`GenerateError::PromptToken`] for an encoder prompt id
/// outside the vocabulary, [`GenerateError::SpecialToken`] for such a pad or start token.
pub fn try_generate(
    model: &T5,
    prompts: &[Vec<i64>],
    options: &GenerateOptions,
    device: &Device,
) -> Result<Generated, GenerateError> {
    options.check()?;
    let vocab_size = model.vocab_size();
    check_prompts(prompts, vocab_size)?;
    check_special("pad_token_id", options.pad_token_id, vocab_size)?;
    let start_token = options
        .decoder_start_token_id
        .unwrap_or(model.decoder_start_token_id);
    check_special("decoder_start_token_id", start_token, vocab_size)?;
    // The decoder's input is the start token alone (what `max_length` counts from).
    let max_new_tokens = options.new_tokens(1)?;
    let (ids, padding) = inputs(prompts, options.pad_token_id, device);
    let batch = prompts.len();
    let start = Instant::now();
    let memory = model.memory(model.encode(ids, padding.clone()), padding);
    let mut caches = vec![KvCache::new(); model.weights.decoder.blocks.len()];
    let mut decoded = vec![vec![start_token]; batch];
    let mut tokens = vec![Vec::with_capacity(max_new_tokens); batch];
    let mut step_logits = Vec::with_capacity(max_new_tokens);
    let mut chooser = Chooser::new(options, batch);
    let mut prefill = Duration::ZERO;
    for step in 0..max_new_tokens {
        let last: Vec<i64> = decoded.iter().map(|row| row[row.len() - 1]).collect();
        let ids = Tensor::<2, Int>::from_data(TensorData::new(last, [batch, 1]), device);
        let logits = model.decode_step(ids, &memory, Some(&mut caches));
        let [_, _, vocab] = logits.dims();
        let logits = logits.reshape([batch, vocab]);
        let next = chooser.next(logits.clone(), |row| &decoded[row]);
        step_logits.push(logits);
        for (row, &token) in next.iter().enumerate() {
            tokens[row].push(token);
            decoded[row].push(token);
        }
        if step == 0 {
            prefill = start.elapsed();
        }
        if chooser.all_finished() {
            break;
        }
    }
    Ok(Generated {
        tokens,
        step_logits,
        prefill,
        decode: start.elapsed() - prefill,
    })
}

/// transformers' key prefixes and the fields of [`T5Weights`]: gated `wi_0` is `wi`; `wi`,
/// `wi_1` and `wo` keep their names (the decoder's MLP is `layer.2`, after cross-attention).
#[rustfmt::skip]
const REMAPS: [Remap; 14] = [
    ("encoder.block.{}.layer.0.layer_norm", "encoder.blocks.{}.attention_norm"),
    ("encoder.block.{}.layer.0.SelfAttention", "encoder.blocks.{}.attention"),
    ("encoder.block.{}.layer.1.layer_norm", "encoder.blocks.{}.ff_norm"),
    ("encoder.block.{}.layer.1.DenseReluDense.wi_0", "encoder.blocks.{}.ff.wi"),
    ("encoder.block.{}.layer.1.DenseReluDense", "encoder.blocks.{}.ff"),
    ("encoder.final_layer_norm", "encoder.final_norm"),
    ("decoder.block.{}.layer.0.layer_norm", "decoder.blocks.{}.attention_norm"),
    ("decoder.block.{}.layer.0.SelfAttention", "decoder.blocks.{}.attention"),
    ("decoder.block.{}.layer.1.layer_norm", "decoder.blocks.{}.cross.norm"),
    ("decoder.block.{}.layer.1.EncDecAttention", "decoder.blocks.{}.cross.attention"),
    ("decoder.block.{}.layer.2.layer_norm", "decoder.blocks.{}.ff_norm"),
    ("decoder.block.{}.layer.2.DenseReluDense.wi_0", "decoder.blocks.{}.ff.wi"),
    ("decoder.block.{}.layer.2.DenseReluDense", "decoder.blocks.{}.ff"),
    ("decoder.final_layer_norm", "decoder.final_norm"),
];

/// The remaps of a T5 checkpoint into [`T5Weights`] (the position tables are loaded by the
/// layer's `pretrained::t5`), the shared table read from `tables.shared`. Each applies to the
/// key the ones before it left, so `wi_0` comes before its layer.
pub fn remaps(tables: Tables) -> Vec<Remap> {
    let mut remaps = REMAPS.to_vec();
    if tables.shared != "shared" {
        remaps.push((tables.shared, "shared"));
    }
    remaps
}

/// Builds the model `checkpoint` describes and loads its weights: [`T5Weights`] with
/// [`Checkpoint::load`], each stack's relative bias with the layer's `pretrained::t5`.
///
/// # Errors
///
/// [`ModelError::Config`] for a field that does not fit or an activation without a port,
/// [`ModelError::Position`] for bucket settings the layer refuses, and what
/// [`Checkpoint::load`] and `pretrained::t5` give ([`ModelError::Pretrained`]).
pub fn load(checkpoint: &Checkpoint, device: &Device) -> Result<T5, ModelError> {
    let config: T5Config = checkpoint.config()?;
    let path = checkpoint.config_path.display().to_string();
    let tables = Tables::of(&file_keys(checkpoint)?);
    let mut model = config.init(tables, &path, device)?;
    checkpoint.load(&mut model.weights, &remaps(tables), device)?;
    // A stack without blocks has no table in the file (and never reads one).
    // The file, or a sharded checkpoint's index: the layer reads each table from its shard.
    let file = &checkpoint.weights_path;
    if !model.weights.encoder.blocks.is_empty() {
        pretrained::t5(&mut model.encoder_bias, T5Stack::Encoder, file)?;
    }
    if !model.weights.decoder.blocks.is_empty() {
        pretrained::t5(&mut model.decoder_bias, T5Stack::Decoder, file)?;
    }
    // The layer's loader converted the file's floats to the module's dtype; now the compute
    // dtype.
    model.encoder_bias = checkpoint.cast(model.encoder_bias, device)?;
    model.decoder_bias = checkpoint.cast(model.decoder_bias, device)?;
    Ok(model)
}
