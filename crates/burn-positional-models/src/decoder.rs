//! The decoder that Llama, Qwen 2 and 3, Mistral, Phi-3 and Gemma 2 and 3 share in transformers
//! (`modeling_llama.py` and the files that copy it): RMSNorm before attention and MLP, rotary
//! queries and keys, grouped key and value heads, an optional sliding window per layer, a gated
//! MLP. Each family's file reads its `config.json` into a [`DecoderSpec`] and names its keys.
//! What the families add is a field of the spec each:
//!
//! | family | what | spec field |
//! | --- | --- | --- |
//! | Qwen 3, Gemma 3 | an RMSNorm of each query and key head before the rotation | [`DecoderSpec::qk_norm`] |
//! | Gemma 2, 3 | norms that scale by `1 + w` in f32 | [`DecoderSpec::norm_style`] |
//! | Gemma 2, 3 | a norm after attention and after the MLP too | [`DecoderSpec::sandwich_norms`] |
//! | Gemma 2, 3 | embeddings times `sqrt(hidden)` rounded to the weights' dtype | [`DecoderSpec::embed_scale`] |
//! | Gemma 2, 3 | `query_pre_attn_scalar^-0.5` as the score scale | [`DecoderSpec::attention_scale`] |
//! | Gemma 2 | attention scores capped (in [`attend`]'s kernels) | [`DecoderSpec::attention_softcap`] |
//! | Gemma 2, 3 | final logits capped ([`softcap`]) | [`DecoderSpec::final_softcap`] |
//! | Gemma 3 | a second rotary base for the sliding layers | [`DecoderSpec::local_rope`], [`DecoderSpec::local_layers`] |
//! | Phi-3 | query, key and value in one projection | [`DecoderSpec::fused`] |
//!
//! GPT-NeoX ([`crate::gpt_neox`]) keeps its own blocks (LayerNorm, parallel residual) and uses
//! [`DecoderAttention`] with [`QkvLayout::Interleaved`].

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, RmsNorm, RmsNormConfig};
use burn::tensor::{Device, Tensor};
use burn_positional::{
    AbsolutePositionConfig, AttendOptions, EmbeddingWithPosition, EmbeddingWithPositionConfig,
    KvCache, Rope, RopeConfig, Window, attend, softcap,
};

pub use crate::config_checks::{
    check_cap, check_heads, check_sliding_has_window, check_window, sliding_layers,
};
pub use crate::ops::{
    Activation, NormStyle, affine, gelu_tanh, in_dtype, project, rms_norm, rms_norm_with,
    tied_logits,
};

use crate::ModelError;
use crate::generate::{CausalLm, Step};

/// How a fused query-key-value projection lays out its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QkvLayout {
    /// `[q of every head | k of every head | v of every head]` (Phi-3's `qkv_proj`).
    #[default]
    Stacked,
    /// Per head `[q | k | v]` (GPT-NeoX's `query_key_value`, viewed as
    /// `[batch, seq, heads, 3 head_dim]` and chunked).
    Interleaved,
}

/// What a family's `config.json` says about its decoder, after transformers' defaults.
///
/// `#[non_exhaustive]`: a family that needs a new setting adds a field without breaking code
/// that reads or edits a spec (take one from a family's `spec` and assign its fields).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DecoderSpec {
    /// `vocab_size`.
    pub vocab_size: usize,
    /// `hidden_size`.
    pub hidden_size: usize,
    /// `intermediate_size`.
    pub intermediate_size: usize,
    /// `num_hidden_layers`.
    pub n_layers: usize,
    /// `num_attention_heads`.
    pub n_heads: usize,
    /// `num_key_value_heads`.
    pub n_kv_heads: usize,
    /// `head_dim`.
    pub head_dim: usize,
    /// `rms_norm_eps`.
    pub rms_norm_eps: f64,
    /// `tie_word_embeddings`: the output projection is the token table.
    pub tie_word_embeddings: bool,
    /// Biases on the query, key and value projections (Qwen 2; Llama's `attention_bias`).
    pub qkv_bias: bool,
    /// A bias on the output projection (Llama's `attention_bias`).
    pub o_bias: bool,
    /// Biases in the MLP (Llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// `hidden_act`.
    pub activation: Activation,
    /// The sliding window of each layer, `None` for full attention.
    pub windows: Vec<Option<usize>>,
    /// Query, key and value in one projection, gate and up in one (Phi-3's `qkv_proj`,
    /// `gate_up_proj`).
    pub fused: bool,
    /// The rotary settings, from `RopeConfig::from_hf_config`.
    pub rope: RopeConfig,
    /// Phi-3's `original_max_position_embeddings`: generation recomputes its cache once when
    /// the sequence first passes it (see [`CausalLm::recompute_cache`]).
    pub recompute_past: Option<usize>,
    /// An RMSNorm over each query and key head (`q_norm`, `k_norm`, width `head_dim`) after the
    /// projection and before the rotation (Qwen 3, Gemma 3).
    pub qk_norm: bool,
    /// How every RMSNorm of the model applies its weight.
    pub norm_style: NormStyle,
    /// Gemma's four norms a layer: `post_attention_layernorm` on the attention's output,
    /// `pre_feedforward_layernorm` before the MLP, `post_feedforward_layernorm` on its output.
    pub sandwich_norms: bool,
    /// Token embeddings times `sqrt(hidden_size)`, the factor rounded to the weights' dtype
    /// first (Gemma: 55.4256 is 55.5 in bf16).
    pub embed_scale: bool,
    /// The score scale (`None`: `head_dim^-0.5`; Gemma: `query_pre_attn_scalar^-0.5`).
    pub attention_scale: Option<f64>,
    /// `attn_logit_softcapping` (Gemma 2): scores become `c tanh(s / c)` before the mask.
    pub attention_softcap: Option<f64>,
    /// `final_logit_softcapping` (Gemma 2, 3): logits become `c tanh(l / c)`.
    pub final_softcap: Option<f64>,
    /// A second rotary for the layers [`local_layers`](Self::local_layers) marks (Gemma 3's
    /// sliding layers: `rope_local_base_freq`, `rope_parameters.sliding_attention`).
    pub local_rope: Option<RopeConfig>,
    /// Per layer: does it rotate with [`local_rope`](Self::local_rope)?
    pub local_layers: Vec<bool>,
}

impl DecoderSpec {
    /// A Llama-shaped spec: no biases, SiLU, every layer full, Llama's norms; the families
    /// overwrite what their config says.
    pub(crate) fn plain(rope: RopeConfig) -> Self {
        Self {
            vocab_size: 0,
            hidden_size: 0,
            intermediate_size: 0,
            n_layers: 0,
            n_heads: 0,
            n_kv_heads: 0,
            head_dim: 0,
            rms_norm_eps: 1e-6,
            tie_word_embeddings: false,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            activation: Activation::Silu,
            windows: Vec::new(),
            fused: false,
            rope,
            recompute_past: None,
            qk_norm: false,
            norm_style: NormStyle::Llama,
            sandwich_norms: false,
            embed_scale: false,
            attention_scale: None,
            attention_softcap: None,
            final_softcap: None,
            local_rope: None,
            local_layers: Vec::new(),
        }
    }
}

/// Query, key and value projections: three, or one fused (Phi-3).
#[derive(Module, Debug)]
pub struct Projections {
    /// `q_proj`, or Phi-3's `qkv_proj` (`[q; k; v]` rows).
    pub query: Linear,
    /// `k_proj` (absent when fused).
    pub key: Option<Linear>,
    /// `v_proj` (absent when fused).
    pub value: Option<Linear>,
}

/// One attention: projections, rotary positions, grouped heads, an optional window.
#[derive(Module, Debug)]
pub struct DecoderAttention {
    /// Query, key and value projections.
    pub qkv: Projections,
    /// `o_proj`.
    pub output: Linear,
    /// Query heads.
    pub n_heads: usize,
    /// Key and value heads.
    pub n_kv_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// The layer's sliding window (`None`: every key).
    pub window: Option<usize>,
    /// `q_norm` (Qwen 3, Gemma 3): over each query head, before the rotation.
    pub q_norm: Option<RmsNorm>,
    /// `k_norm`: over each key head, before the rotation.
    pub k_norm: Option<RmsNorm>,
    /// How `q_norm` and `k_norm` apply their weights.
    #[module(skip)]
    pub norm_style: NormStyle,
    /// How a fused projection lays out query, key and value.
    #[module(skip)]
    pub qkv_layout: QkvLayout,
    /// The score scale (`None`: `head_dim^-0.5`).
    #[module(skip)]
    pub scale: Option<f64>,
    /// A tanh cap on the scores (Gemma 2).
    #[module(skip)]
    pub softcap: Option<f64>,
    /// Rotates with the decoder's [`Decoder::local_rope`] (Gemma 3's sliding layers).
    #[module(skip)]
    pub local_rope: bool,
}

/// The gated MLP: `down(act(gate(x)) * up(x))`.
#[derive(Module, Debug)]
pub struct GatedMlp {
    /// `gate_proj`, or Phi-3's `gate_up_proj` (`[gate; up]` rows).
    pub gate: Linear,
    /// `up_proj` (absent when fused).
    pub up: Option<Linear>,
    /// `down_proj`.
    pub down: Linear,
    /// `hidden_act`.
    #[module(skip)]
    pub activation: Activation,
}

/// One decoder layer.
#[derive(Module, Debug)]
pub struct DecoderLayer {
    /// `input_layernorm`.
    pub input_norm: RmsNorm,
    /// `self_attn`.
    pub attention: DecoderAttention,
    /// The norm before the MLP: Llama's `post_attention_layernorm`, Gemma's
    /// `pre_feedforward_layernorm`.
    pub post_attention_norm: RmsNorm,
    /// `mlp`.
    pub mlp: GatedMlp,
    /// Gemma's `post_attention_layernorm`, on the attention's output before the residual.
    pub attention_out_norm: Option<RmsNorm>,
    /// Gemma's `post_feedforward_layernorm`, on the MLP's output before the residual.
    pub mlp_out_norm: Option<RmsNorm>,
}

/// A decoder-only language model of the Llama family.
#[derive(Module, Debug)]
pub struct Decoder {
    /// `model.embed_tokens`: the layer's embedding with no absolute position (positions live
    /// in the rotary queries and keys), so an id outside the vocabulary is never a silent
    /// gather: NaN rows and a status the layer's `check_inputs` names.
    pub embed: EmbeddingWithPosition,
    /// `model.layers`.
    pub layers: Vec<DecoderLayer>,
    /// `model.norm`.
    pub norm: RmsNorm,
    /// `lm_head` (absent when tied to `embed`).
    pub lm_head: Option<Linear>,
    /// Rotary positions, shared by the layers (transformers' `model.rotary_emb`).
    pub rope: Rope,
    /// See [`DecoderSpec::recompute_past`].
    #[module(skip)]
    pub recompute_past: Option<usize>,
    /// The sliding layers' rotary (Gemma 3), for layers whose attention says
    /// [`DecoderAttention::local_rope`].
    pub local_rope: Option<Rope>,
    /// How the layers' and the final norm apply their weights.
    #[module(skip)]
    pub norm_style: NormStyle,
    /// See [`DecoderSpec::final_softcap`].
    #[module(skip)]
    pub final_softcap: Option<f64>,
}

impl DecoderSpec {
    /// Builds the decoder (weights random until loaded).
    ///
    /// # Errors
    ///
    /// [`ModelError::Position`] if the layer refuses the rotary settings.
    pub fn init(&self, device: &Device) -> Result<Decoder, ModelError> {
        let (h, kv, d) = (self.n_heads, self.n_kv_heads, self.head_dim);
        let linear = |i, o, bias| LinearConfig::new(i, o).with_bias(bias).init(device);
        let norm = || {
            RmsNormConfig::new(self.hidden_size)
                .with_epsilon(self.rms_norm_eps)
                .init(device)
        };
        let layers = (0..self.n_layers)
            .map(|i| {
                let qkv = if self.fused {
                    Projections {
                        query: linear(self.hidden_size, (h + 2 * kv) * d, self.qkv_bias),
                        key: None,
                        value: None,
                    }
                } else {
                    Projections {
                        query: linear(self.hidden_size, h * d, self.qkv_bias),
                        key: Some(linear(self.hidden_size, kv * d, self.qkv_bias)),
                        value: Some(linear(self.hidden_size, kv * d, self.qkv_bias)),
                    }
                };
                let (gate_width, up) = if self.fused {
                    (2 * self.intermediate_size, None)
                } else {
                    (
                        self.intermediate_size,
                        Some(linear(
                            self.hidden_size,
                            self.intermediate_size,
                            self.mlp_bias,
                        )),
                    )
                };
                let head_norm = || {
                    self.qk_norm.then(|| {
                        RmsNormConfig::new(d)
                            .with_epsilon(self.rms_norm_eps)
                            .init(device)
                    })
                };
                DecoderLayer {
                    input_norm: norm(),
                    attention: DecoderAttention {
                        qkv,
                        output: linear(h * d, self.hidden_size, self.o_bias),
                        n_heads: h,
                        n_kv_heads: kv,
                        head_dim: d,
                        window: self.windows.get(i).copied().flatten(),
                        q_norm: head_norm(),
                        k_norm: head_norm(),
                        norm_style: self.norm_style,
                        qkv_layout: QkvLayout::Stacked,
                        scale: self.attention_scale,
                        softcap: self.attention_softcap,
                        local_rope: self.local_rope.is_some()
                            && self.local_layers.get(i).copied().unwrap_or(false),
                    },
                    post_attention_norm: norm(),
                    mlp: GatedMlp {
                        gate: linear(self.hidden_size, gate_width, self.mlp_bias),
                        up,
                        down: linear(self.intermediate_size, self.hidden_size, self.mlp_bias),
                        activation: self.activation,
                    },
                    attention_out_norm: self.sandwich_norms.then(norm),
                    mlp_out_norm: self.sandwich_norms.then(norm),
                }
            })
            .collect();
        Ok(Decoder {
            embed: EmbeddingWithPositionConfig::new(self.vocab_size, self.hidden_size)
                // Zeros, not a random draw the load replaces (the layer draws its table eagerly).
                .with_token_initializer(burn::nn::Initializer::Zeros)
                .with_scheme(AbsolutePositionConfig::None)
                // Gemma: sqrt(hidden) in f32 here; `load` rounds it to the weights' dtype.
                .with_scale_tokens(self.embed_scale)
                .try_init(device)?,
            layers,
            norm: norm(),
            lm_head: (!self.tie_word_embeddings)
                .then(|| linear(self.hidden_size, self.vocab_size, false)),
            rope: self.rope.try_init(device)?,
            recompute_past: self.recompute_past,
            local_rope: match &self.local_rope {
                Some(rope) => Some(rope.try_init(device)?),
                None => None,
            },
            norm_style: self.norm_style,
            final_softcap: self.final_softcap,
        })
    }
}

impl DecoderAttention {
    /// `x` `[batch, seq, hidden]` attended over the step's keys (and the cached ones).
    pub fn forward(
        &self,
        x: Tensor<3>,
        rope: &Rope,
        step: &Step,
        cache: Option<&mut KvCache>,
    ) -> Tensor<3> {
        let [batch, seq, _] = x.dims();
        let (h, kv, d) = (self.n_heads, self.n_kv_heads, self.head_dim);
        // Each `[batch, seq, heads, head_dim]`.
        let heads = |t: Tensor<3>, n: usize| t.reshape([batch, seq, n, d]);
        let (q, k, v) = match (&self.qkv.key, &self.qkv.value, self.qkv_layout) {
            (Some(key), Some(value), _) => (
                heads(project(&self.qkv.query, x.clone()), h),
                heads(project(key, x.clone()), kv),
                heads(project(value, x), kv),
            ),
            (_, _, QkvLayout::Stacked) => {
                let qkv = project(&self.qkv.query, x);
                (
                    heads(qkv.clone().slice([0..batch, 0..seq, 0..h * d]), h),
                    heads(
                        qkv.clone().slice([0..batch, 0..seq, h * d..(h + kv) * d]),
                        kv,
                    ),
                    heads(
                        qkv.slice([0..batch, 0..seq, (h + kv) * d..(h + 2 * kv) * d]),
                        kv,
                    ),
                )
            }
            (_, _, QkvLayout::Interleaved) => {
                // GPT-NeoX: `view(batch, seq, heads, 3 head_dim).chunk(3, -1)`.
                let qkv = project(&self.qkv.query, x).reshape([batch, seq, h, 3 * d]);
                let part = |i: usize| {
                    qkv.clone()
                        .slice([0..batch, 0..seq, 0..h, i * d..(i + 1) * d])
                };
                (part(0), part(1), part(2))
            }
        };
        // Qwen 3 and Gemma 3 norm each head before the rotation.
        let q = match &self.q_norm {
            Some(norm) => rms_norm_with(self.norm_style, norm, q),
            None => q,
        };
        let k = match &self.k_norm {
            Some(norm) => rms_norm_with(self.norm_style, norm, k),
            None => k,
        };
        // transformers: cos and sin of `position_ids` from the frequencies of max(position_ids) + 1.
        let q = rope.apply_at_len(q.swap_dims(1, 2), step.positions.clone(), step.len);
        let k = rope.apply_at_len(k.swap_dims(1, 2), step.positions.clone(), step.len);
        let v = v.swap_dims(1, 2);
        // Keys are cached as rotated (transformers' behaviour past a longrope switch).
        let (k, v) = match (cache, self.window) {
            (Some(cache), Some(w)) => cache.append_window(k, v, w),
            (Some(cache), None) => cache.append(k, v),
            (None, _) => (k, v),
        };
        let keys = k.dims()[2];
        let seq = step.ids.dims()[1];
        let mut options = AttendOptions::new().causal(true);
        if step.sequential && keys == step.past + seq {
            // Positions 0, 1, .. and no padding: the queries sit after the cached keys.
            options = options.offset(step.past);
        } else {
            let (key_positions, key_padding) = step.last_keys(keys);
            options = options
                .positions(step.positions.clone(), key_positions)
                .key_padding(key_padding);
        }
        if let Some(w) = self.window {
            options = options.window(Window::hf(w));
        }
        if let Some(scale) = self.scale {
            options = options.scale(scale);
        }
        if let Some(cap) = self.softcap {
            options = options.softcap(cap);
        }
        let out = attend(q, k, v, &options);
        project(
            &self.output,
            out.swap_dims(1, 2).reshape([batch, seq, h * d]),
        )
    }
}

impl GatedMlp {
    /// `down(act(gate(x)) * up(x))`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let (gate, up) = match &self.up {
            Some(up) => (project(&self.gate, x.clone()), project(up, x)),
            None => {
                let both = project(&self.gate, x);
                let [b, s, width] = both.dims();
                let half = width / 2;
                (
                    both.clone().slice([0..b, 0..s, 0..half]),
                    both.slice([0..b, 0..s, half..width]),
                )
            }
        };
        project(&self.down, self.activation.apply(gate) * up)
    }
}

impl Decoder {
    /// Hidden states `[batch, seq, hidden]` after the final norm.
    pub fn hidden(&self, step: &Step, mut caches: Option<&mut [KvCache]>) -> Tensor<3> {
        let norm = |n: &RmsNorm, x: Tensor<3>| rms_norm_with(self.norm_style, n, x);
        let out_norm = |n: &Option<RmsNorm>, x: Tensor<3>| match n {
            Some(n) => norm(n, x),
            None => x,
        };
        let mut x = self.embed.forward(step.ids.clone());
        for (i, layer) in self.layers.iter().enumerate() {
            let cache = caches.as_deref_mut().map(|c| &mut c[i]);
            let rope = match (&self.local_rope, layer.attention.local_rope) {
                (Some(local), true) => local,
                _ => &self.rope,
            };
            let attended =
                layer
                    .attention
                    .forward(norm(&layer.input_norm, x.clone()), rope, step, cache);
            x = x + out_norm(&layer.attention_out_norm, attended);
            let mlp = layer
                .mlp
                .forward(norm(&layer.post_attention_norm, x.clone()));
            x = x + out_norm(&layer.mlp_out_norm, mlp);
        }
        norm(&self.norm, x)
    }
}

impl CausalLm for Decoder {
    fn n_layers(&self) -> usize {
        self.layers.len()
    }

    fn vocab_size(&self) -> usize {
        self.embed.vocab_size()
    }

    fn recompute_cache(&self, total: usize, cached: usize) -> bool {
        // Phi3ForCausalLM.prepare_inputs_for_generation: `input_ids.shape[1] >= original + 1`
        // and `cache.get_seq_length() <= original`.
        self.recompute_past
            .is_some_and(|original| total > original && cached <= original)
    }

    fn hidden(&self, step: &Step, caches: Option<&mut [KvCache]>) -> Tensor<3> {
        Decoder::hidden(self, step, caches)
    }

    fn head(&self, x: Tensor<3>) -> Tensor<3> {
        let logits = match &self.lm_head {
            Some(head) => head.forward(x),
            // Tied: logits = x . table^T.
            None => tied_logits(x, self.embed.tokens.val()),
        };
        match self.final_softcap {
            Some(cap) => softcap(logits, cap),
            None => logits,
        }
    }
}

/// The remaps of a Llama-style checkpoint (`model.` prefix), with Phi-3's fused names when
/// `fused`.
pub fn remaps(fused: bool) -> Vec<crate::checkpoint::Remap> {
    remaps_for(fused, false)
}

/// [`remaps`], with Gemma's four norms a layer when `sandwich` (its `post_attention_layernorm`
/// is the attention's output norm; `pre_feedforward_layernorm` the MLP's input norm) and the
/// head norms `q_norm`, `k_norm` where a checkpoint has them.
pub fn remaps_for(fused: bool, sandwich: bool) -> Vec<crate::checkpoint::Remap> {
    let mut remaps = vec![
        ("model.embed_tokens.weight", "embed.tokens"),
        ("model.norm", "norm"),
        ("lm_head", "lm_head"),
        ("model.layers.{}.input_layernorm", "layers.{}.input_norm"),
        (
            "model.layers.{}.self_attn.o_proj",
            "layers.{}.attention.output",
        ),
        (
            "model.layers.{}.self_attn.q_norm",
            "layers.{}.attention.q_norm",
        ),
        (
            "model.layers.{}.self_attn.k_norm",
            "layers.{}.attention.k_norm",
        ),
        ("model.layers.{}.mlp.down_proj", "layers.{}.mlp.down"),
    ];
    if sandwich {
        remaps.extend([
            (
                "model.layers.{}.post_attention_layernorm",
                "layers.{}.attention_out_norm",
            ),
            (
                "model.layers.{}.pre_feedforward_layernorm",
                "layers.{}.post_attention_norm",
            ),
            (
                "model.layers.{}.post_feedforward_layernorm",
                "layers.{}.mlp_out_norm",
            ),
        ]);
    } else {
        remaps.push((
            "model.layers.{}.post_attention_layernorm",
            "layers.{}.post_attention_norm",
        ));
    }
    if fused {
        remaps.extend([
            (
                "model.layers.{}.self_attn.qkv_proj",
                "layers.{}.attention.qkv.query",
            ),
            ("model.layers.{}.mlp.gate_up_proj", "layers.{}.mlp.gate"),
        ]);
    } else {
        remaps.extend([
            (
                "model.layers.{}.self_attn.q_proj",
                "layers.{}.attention.qkv.query",
            ),
            (
                "model.layers.{}.self_attn.k_proj",
                "layers.{}.attention.qkv.key",
            ),
            (
                "model.layers.{}.self_attn.v_proj",
                "layers.{}.attention.qkv.value",
            ),
            ("model.layers.{}.mlp.gate_proj", "layers.{}.mlp.gate"),
            ("model.layers.{}.mlp.up_proj", "layers.{}.mlp.up"),
        ]);
    }
    remaps
}

/// Builds the decoder `spec` describes and loads `checkpoint`'s weights into it.
///
/// # Errors
///
/// As [`DecoderSpec::init`] and [`Checkpoint::load`](crate::Checkpoint::load).
pub fn load(
    spec: DecoderSpec,
    checkpoint: &crate::Checkpoint,
    device: &Device,
) -> Result<Decoder, ModelError> {
    let mut model = spec.init(device)?;
    checkpoint.load(
        &mut model,
        &remaps_for(spec.fused, spec.sandwich_norms),
        device,
    )?;
    if spec.embed_scale {
        model.embed.token_scale = in_dtype(
            model.embed.tokens.val().dtype(),
            (spec.hidden_size as f64).sqrt(),
        );
    }
    Ok(model)
}
