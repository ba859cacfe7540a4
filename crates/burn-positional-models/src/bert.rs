//! BERT (`model_type: "bert"`, `BertForMaskedLM`), as transformers 5.24's `modeling_bert.py`:
//! word, position and token-type embeddings summed and normalized, post-norm encoder layers
//! (bidirectional attention with key padding, an MLP with `hidden_act`), and the masked-LM head
//! (`transform.dense`, the activation, `transform.LayerNorm`, then the word table and a bias).
//!
//! The layer does everything positional: the word and position tables are one
//! [`EmbeddingWithPosition`] (learned positions `0..seq` for every row, PyTorch's `padding_idx`
//! behaviour: the stored row is returned), loaded with the layer's `pretrained::bert`; the
//! attention is [`attend`] with the padding mask. Token types are a plain burn `Embedding`.
//!
//! # Which table is the output
//!
//! With `tie_word_embeddings` (the default) `from_pretrained` ties `cls.predictions.decoder`'s
//! weight to the word table and its bias to `cls.predictions.bias`, unless the file holds them
//! with other values: so the decoder's own weight and bias are used where the file has them,
//! the tied ones where it does not. Without tying, the file must hold both.

use std::collections::BTreeSet;

use burn::module::{Module, Param};
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::store::{ModuleStore, SafetensorsStore};
use burn::tensor::{Bool, Device, Int, Tensor};
use burn_positional::{
    AttendOptions, EmbeddingWithPosition, EmbeddingWithPositionConfig, LearnedConfig, attend,
};
use serde::Deserialize;

use crate::ModelError;
use crate::checkpoint::{Checkpoint, Remap};
use crate::decoder::Activation;

/// `BertConfig`'s fields the port reads, with transformers 5.24's defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct BertConfig {
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
    /// `hidden_act`, in the layers and the head's transform.
    pub hidden_act: String,
    /// `max_position_embeddings`.
    pub max_position_embeddings: usize,
    /// `type_vocab_size`.
    pub type_vocab_size: usize,
    /// `layer_norm_eps`.
    pub layer_norm_eps: f64,
    /// `pad_token_id`, the word table's `padding_idx`.
    pub pad_token_id: Option<i64>,
    /// `tie_word_embeddings`.
    pub tie_word_embeddings: bool,
    /// `is_decoder`: causal self-attention (transformers warns, and masks causally).
    pub is_decoder: bool,
}

impl Default for BertConfig {
    fn default() -> Self {
        Self {
            vocab_size: 30522,
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: "gelu".into(),
            max_position_embeddings: 512,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            pad_token_id: Some(0),
            tie_word_embeddings: true,
            is_decoder: false,
        }
    }
}

/// Where the MLM decoder's weight and bias come from (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadSource {
    /// The decoder has a weight of its own (`cls.predictions.decoder.weight`); else the word
    /// table.
    pub own_weight: bool,
    /// The bias is `cls.predictions.decoder.bias`; else `cls.predictions.bias`.
    pub own_bias: bool,
}

impl HeadSource {
    /// The sources for a file holding `keys`, under `tie_word_embeddings = tie`.
    pub fn of(keys: &BTreeSet<String>, tie: bool) -> Self {
        Self {
            own_weight: !tie || keys.contains("cls.predictions.decoder.weight"),
            own_bias: !tie || keys.contains("cls.predictions.decoder.bias"),
        }
    }
}

/// One post-norm encoder layer.
#[derive(Module, Debug)]
pub struct BertLayer {
    /// `attention.self.query`.
    pub query: Linear,
    /// `attention.self.key`.
    pub key: Linear,
    /// `attention.self.value`.
    pub value: Linear,
    /// `attention.output.dense`.
    pub attention_output: Linear,
    /// `attention.output.LayerNorm`.
    pub attention_norm: LayerNorm,
    /// `intermediate.dense`.
    pub intermediate: Linear,
    /// `output.dense`.
    pub output: Linear,
    /// `output.LayerNorm`.
    pub output_norm: LayerNorm,
    /// Heads.
    pub n_heads: usize,
    /// `hidden_act`.
    #[module(skip)]
    pub activation: Activation,
}

/// The masked-LM head (`cls.predictions`).
#[derive(Module, Debug)]
pub struct MlmHead {
    /// `transform.dense`.
    pub dense: Linear,
    /// `transform.LayerNorm`.
    pub norm: LayerNorm,
    /// `decoder.weight` `[vocab_size, hidden_size]`, only where it is not the word table.
    pub weight: Option<Param<Tensor<2>>>,
    /// `decoder.bias`, or `bias` it is tied to: `[vocab_size]`.
    pub bias: Param<Tensor<1>>,
    /// `hidden_act`.
    #[module(skip)]
    pub activation: Activation,
}

/// Everything of BERT but the word and position tables: what [`Checkpoint::load`] reads.
#[derive(Module, Debug)]
pub struct BertWeights {
    /// `bert.embeddings.token_type_embeddings`.
    pub token_types: Embedding,
    /// `bert.embeddings.LayerNorm`.
    pub embedding_norm: LayerNorm,
    /// `bert.encoder.layer`.
    pub layers: Vec<BertLayer>,
    /// `cls.predictions`.
    pub head: MlmHead,
    /// Causal self-attention (`is_decoder`).
    pub causal: bool,
}

/// BERT with its masked-LM head. Built by [`load`].
#[derive(Module, Debug)]
pub struct Bert {
    /// Word and position tables (`bert.embeddings.word_embeddings`, `position_embeddings`).
    pub embedding: EmbeddingWithPosition,
    /// Token types, layers and head.
    pub weights: BertWeights,
}

impl BertConfig {
    /// Builds the model (weights random until loaded) with the head's sources `head`.
    ///
    /// # Errors
    ///
    /// [`ModelError::Config`] for an activation without a port or a `pad_token_id` outside
    /// the vocabulary, [`ModelError::Position`] for a table the layer refuses.
    pub fn init(&self, head: HeadSource, path: &str, device: &Device) -> Result<Bert, ModelError> {
        let activation = Activation::from_hf(&self.hidden_act, path)?;
        let d = self.hidden_size;
        let linear = |i, o| LinearConfig::new(i, o).init(device);
        let norm = || {
            LayerNormConfig::new(d)
                .with_epsilon(self.layer_norm_eps)
                .init(device)
        };
        // PyTorch's `padding_idx`: a negative one counts from the end.
        let vocab = self.vocab_size as i64;
        let padding_idx = match self.pad_token_id {
            Some(id) if (-vocab..vocab).contains(&id) => Some(id.rem_euclid(vocab) as usize),
            Some(id) => {
                return Err(ModelError::Config {
                    path: path.into(),
                    detail: format!("pad_token_id {id} is outside the vocabulary of {vocab}"),
                });
            }
            None => None,
        };
        let embedding = EmbeddingWithPositionConfig::new(self.vocab_size, d)
            // Zeros, not a random draw the load replaces (the layer draws its table eagerly).
            .with_token_initializer(burn::nn::Initializer::Zeros)
            .with_scheme(LearnedConfig::new(self.max_position_embeddings).into())
            .with_padding_idx(padding_idx)
            .try_init(device)?;
        let layers = (0..self.num_hidden_layers)
            .map(|_| BertLayer {
                query: linear(d, d),
                key: linear(d, d),
                value: linear(d, d),
                attention_output: linear(d, d),
                attention_norm: norm(),
                intermediate: linear(d, self.intermediate_size),
                output: linear(self.intermediate_size, d),
                output_norm: norm(),
                n_heads: self.num_attention_heads,
                activation,
            })
            .collect();
        Ok(Bert {
            embedding,
            weights: BertWeights {
                token_types: EmbeddingConfig::new(self.type_vocab_size, d).init(device),
                embedding_norm: norm(),
                layers,
                head: MlmHead {
                    dense: linear(d, d),
                    norm: norm(),
                    weight: head
                        .own_weight
                        .then(|| Param::from_tensor(Tensor::zeros([self.vocab_size, d], device))),
                    bias: Param::from_tensor(Tensor::zeros([self.vocab_size], device)),
                    activation,
                },
                causal: self.is_decoder,
            },
        })
    }
}

impl BertLayer {
    /// `LN(h + dense2(act(dense1(h))))` after `h = LN(x + dense(attention(x)))`.
    ///
    /// # Shapes
    ///
    /// - `x`: `[batch, seq, hidden_size]`, and the output
    pub fn forward(&self, x: Tensor<3>, options: &AttendOptions) -> Tensor<3> {
        let [batch, seq, d_model] = x.dims();
        let (h, d_head) = (self.n_heads, d_model / self.n_heads);
        let split = |t: Tensor<3>| t.reshape([batch, seq, h, d_head]).swap_dims(1, 2);
        let q = split(self.query.forward(x.clone()));
        let k = split(self.key.forward(x.clone()));
        let v = split(self.value.forward(x.clone()));
        // Scaled by d_head^-0.5, attend's default.
        let attended = attend(q, k, v, options)
            .swap_dims(1, 2)
            .reshape([batch, seq, d_model]);
        let x = self
            .attention_norm
            .forward(x + self.attention_output.forward(attended));
        let hidden = self.activation.apply(self.intermediate.forward(x.clone()));
        self.output_norm.forward(x + self.output.forward(hidden))
    }
}

impl MlmHead {
    /// Logits `[batch, seq, vocab_size]` of hidden states `[batch, seq, hidden_size]`, with
    /// `words` `[vocab_size, hidden_size]` as the decoder's weight unless it has its own.
    pub fn forward(&self, x: Tensor<3>, words: Tensor<2>) -> Tensor<3> {
        let x = self
            .norm
            .forward(self.activation.apply(self.dense.forward(x)));
        let table = self.weight.as_ref().map_or(words, Param::val);
        let bias = self.bias.val().unsqueeze::<3>();
        crate::decoder::tied_logits(x, table) + bias
    }
}

impl Bert {
    /// Masked-LM logits. Positions are `0..seq` in every row (BERT pads on the right); padded
    /// keys are hidden from every query, padded queries are computed as transformers does.
    ///
    /// # Shapes
    ///
    /// - `ids`, `token_type_ids`, `attention_mask_padding` (true at padding): `[batch, seq]`
    /// - output: `[batch, seq, vocab_size]`
    ///
    /// # Panics
    ///
    /// If `seq` exceeds `max_position_embeddings`. Token ids outside the vocabulary come out as
    /// NaN rows (see [`EmbeddingWithPosition`]; [`try_forward`](Self::try_forward) refuses
    /// them); token type ids are not checked here.
    pub fn forward(
        &self,
        ids: Tensor<2, Int>,
        token_type_ids: Tensor<2, Int>,
        attention_mask_padding: Tensor<2, Bool>,
    ) -> Tensor<3> {
        let x = self.embedding.forward(ids) + self.weights.token_types.forward(token_type_ids);
        self.encode(x, attention_mask_padding)
    }

    /// [`forward`](Self::forward) for input from outside (a tokenizer, a user): token ids are
    /// checked by the layer's [`EmbeddingWithPosition::try_forward`] (one small read-back of
    /// its status) and token type ids on the host (one read-back), before anything else runs.
    ///
    /// # Shapes
    ///
    /// As [`forward`](Self::forward).
    ///
    /// # Errors
    ///
    /// [`ModelError::Position`] for a token id outside `0..vocab_size` or a sequence longer
    /// than `max_position_embeddings` (the id, its place, the limit and the fix);
    /// [`ModelError::TokenType`] for a token type id outside `0..type_vocab_size`.
    pub fn try_forward(
        &self,
        ids: Tensor<2, Int>,
        token_type_ids: Tensor<2, Int>,
        attention_mask_padding: Tensor<2, Bool>,
    ) -> Result<Tensor<3>, ModelError> {
        let types = self.weights.token_types.weight.dims()[0];
        let [_, seq] = token_type_ids.dims();
        let bad = token_type_ids
            .to_data()
            .iter::<i64>()
            .enumerate()
            .find(|(_, t)| !(0..types as i64).contains(t));
        if let Some((index, id)) = bad {
            return Err(ModelError::TokenType {
                id,
                at: [index / seq.max(1), index % seq.max(1)],
                type_vocab_size: types,
            });
        }
        let x = self.embedding.try_forward(ids)? + self.weights.token_types.forward(token_type_ids);
        Ok(self.encode(x, attention_mask_padding))
    }

    /// The layers and the head over embedded tokens.
    fn encode(&self, x: Tensor<3>, attention_mask_padding: Tensor<2, Bool>) -> Tensor<3> {
        let w = &self.weights;
        let mut x = w.embedding_norm.forward(x);
        let options = AttendOptions::new()
            .key_padding(attention_mask_padding)
            .causal(w.causal);
        for layer in &w.layers {
            x = layer.forward(x, &options);
        }
        w.head.forward(x, self.embedding.tokens.val())
    }
}

/// The keys of the checkpoint's weights files (every shard), from their headers.
///
/// # Errors
///
/// [`ModelError::Store`] if burn cannot read the header.
pub(crate) fn file_keys(checkpoint: &Checkpoint) -> Result<BTreeSet<String>, ModelError> {
    let mut keys = BTreeSet::new();
    for shard in &checkpoint.shards {
        let mut store = SafetensorsStore::from_file(shard);
        keys.extend(store.keys().map_err(|e| ModelError::Store {
            file: shard.display().to_string(),
            detail: e.to_string(),
        })?);
    }
    Ok(keys)
}

/// The remaps of a `BertForMaskedLM` checkpoint into [`BertWeights`] (the word and position
/// tables are loaded by the layer's `pretrained::bert`), the head's decoder from `head`.
pub fn remaps(head: HeadSource) -> Vec<Remap> {
    let mut remaps = vec![
        ("bert.embeddings.token_type_embeddings", "token_types"),
        ("bert.embeddings.LayerNorm", "embedding_norm"),
        (
            "bert.encoder.layer.{}.attention.self.query",
            "layers.{}.query",
        ),
        ("bert.encoder.layer.{}.attention.self.key", "layers.{}.key"),
        (
            "bert.encoder.layer.{}.attention.self.value",
            "layers.{}.value",
        ),
        (
            "bert.encoder.layer.{}.attention.output.dense",
            "layers.{}.attention_output",
        ),
        (
            "bert.encoder.layer.{}.attention.output.LayerNorm",
            "layers.{}.attention_norm",
        ),
        (
            "bert.encoder.layer.{}.intermediate.dense",
            "layers.{}.intermediate",
        ),
        ("bert.encoder.layer.{}.output.dense", "layers.{}.output"),
        (
            "bert.encoder.layer.{}.output.LayerNorm",
            "layers.{}.output_norm",
        ),
        ("cls.predictions.transform.dense", "head.dense"),
        ("cls.predictions.transform.LayerNorm", "head.norm"),
        // `cls.predictions.decoder.{weight,bias}` -> `head.{weight,bias}`.
        ("cls.predictions.decoder", "head"),
    ];
    if !head.own_bias {
        // `cls.predictions.bias` -> `head.bias` (the remaps above apply first).
        remaps.push(("cls.predictions", "head"));
    }
    remaps
}

/// Builds the model `checkpoint` describes and loads its weights: [`BertWeights`] with
/// [`Checkpoint::load`], the word and position tables with the layer's `pretrained::bert`.
///
/// # Errors
///
/// [`ModelError::Config`] for a field that does not fit, and what [`BertConfig::init`],
/// [`Checkpoint::load`] and `pretrained::bert` give ([`ModelError::Pretrained`]).
pub fn load(checkpoint: &Checkpoint, device: &Device) -> Result<Bert, ModelError> {
    let config: BertConfig = checkpoint.config()?;
    let path = checkpoint.config_path.display().to_string();
    let head = HeadSource::of(&file_keys(checkpoint)?, config.tie_word_embeddings);
    let mut model = config.init(head, &path, device)?;
    checkpoint.load(&mut model.weights, &remaps(head), device)?;
    // The layer's loader converts the file's floats to the module's dtype on the host; then
    // the compute dtype.
    burn_positional::pretrained::bert(&mut model.embedding, &checkpoint.weights_path)?;
    model.embedding = checkpoint.cast(model.embedding, device)?;
    Ok(model)
}
