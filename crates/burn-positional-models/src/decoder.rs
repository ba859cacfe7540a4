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
use burn::tensor::activation;
use burn::tensor::{DType, Device, Tensor};
use burn_positional::{
    AbsolutePositionConfig, AttendOptions, EmbeddingWithPosition, EmbeddingWithPositionConfig,
    KvCache, Rope, RopeConfig, SKINNY_MAX_ROWS, Window, attend, skinny_matmul,
    skinny_matmul_transposed, softcap,
};

use crate::ModelError;
use crate::generate::{CausalLm, Step};

/// The activation of the gated MLP (`hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `silu` (`swish`).
    Silu,
    /// `gelu` (erf).
    Gelu,
    /// `gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`: the tanh approximation.
    GeluTanh,
    /// `relu`.
    Relu,
    /// `relu6`.
    Relu6,
    /// `quick_gelu`: `x sigmoid(1.702 x)`.
    QuickGelu,
    /// `tanh`.
    Tanh,
    /// `sigmoid`.
    Sigmoid,
    /// `linear`: the identity.
    Linear,
}

impl Activation {
    /// transformers' `ACT2FN` name.
    ///
    /// # Errors
    ///
    /// [`ModelError::Config`] for a name without a port.
    pub fn from_hf(name: &str, path: &str) -> Result<Self, ModelError> {
        Ok(match name {
            "silu" | "swish" => Self::Silu,
            "gelu" => Self::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Self::GeluTanh,
            "relu" => Self::Relu,
            "relu6" => Self::Relu6,
            "quick_gelu" => Self::QuickGelu,
            "tanh" => Self::Tanh,
            "sigmoid" => Self::Sigmoid,
            "linear" => Self::Linear,
            other => {
                return Err(ModelError::Config {
                    path: path.to_string(),
                    detail: format!(
                        "the activation \"{other}\" (`hidden_act`, `activation_function`) has \
                         no port (supported: silu, swish, gelu, gelu_new, gelu_pytorch_tanh, \
                         gelu_fast, relu, relu6, quick_gelu, tanh, sigmoid, linear)"
                    ),
                });
            }
        })
    }

    /// Applies it. In f16 and bf16 it computes in f32 and rounds once, as PyTorch's kernels
    /// do (burn composes `gelu` and the others from several ops, each rounded in the input's
    /// dtype).
    pub fn apply<const D: usize>(self, x: Tensor<D>) -> Tensor<D> {
        let dtype = x.dtype();
        if dtype != DType::F32 && dtype.is_float() {
            return self.apply_f32(x.cast(DType::F32)).cast(dtype);
        }
        self.apply_f32(x)
    }

    fn apply_f32<const D: usize>(self, x: Tensor<D>) -> Tensor<D> {
        match self {
            Self::Silu => activation::silu(x),
            Self::Gelu => activation::gelu(x),
            Self::GeluTanh => gelu_tanh(x),
            Self::Relu => activation::relu(x),
            Self::Relu6 => activation::relu6(x),
            Self::QuickGelu => x.clone() * activation::sigmoid(x * 1.702),
            Self::Tanh => activation::tanh(x),
            Self::Sigmoid => activation::sigmoid(x),
            Self::Linear => x,
        }
    }
}

/// transformers' `NewGELUActivation` (`gelu_new`, and `gelu_pytorch_tanh`'s formula):
/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, computed as
/// `x sigmoid(2 sqrt(2/pi) (x + 0.044715 x x x))` (the same function: `(1 + tanh z) / 2 =
/// sigmoid(2z)`). burn's `gelu_approximate` raises to the third power with `powf` and calls
/// `tanh`, each a scalar libm call per element on the CPU: 20 % of GPT-2's prefill on flex.
///
/// # Shapes
///
/// - x: any, output: the same
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    const TWO_SQRT_2_OVER_PI: f64 =
        2.0 * core::f64::consts::FRAC_2_SQRT_PI * core::f64::consts::FRAC_1_SQRT_2;
    let cubed = x.clone() * x.clone() * x.clone();
    let inner = (x.clone() + cubed * 0.044715) * TWO_SQRT_2_OVER_PI;
    x * activation::sigmoid(inner)
}

/// How an RMSNorm applies its weight `w` (the mean square and the division are in f32 in both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NormStyle {
    /// `LlamaRMSNorm`: the normed values cast to the input's dtype, then times `w`.
    #[default]
    Llama,
    /// `Gemma2RMSNorm`, `Gemma3RMSNorm`: times `1 + w` in f32, then cast (the weights are stored
    /// as offsets from 1 and initialised to zeros).
    Gemma,
}

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

/// transformers' `LlamaRMSNorm` (and `T5LayerNorm`): the mean square and the division in f32
/// whatever the input's dtype, the result cast back to it, then the weight. burn's `RmsNorm`
/// divides in the input's dtype, one more rounding per norm in bf16 and f16; in f32 the two
/// are the same.
///
/// # Shapes
///
/// - x: `[.., width]` (any rank), output: the same
pub fn rms_norm<const D: usize>(norm: &RmsNorm, x: Tensor<D>) -> Tensor<D> {
    rms_norm_with(NormStyle::Llama, norm, x)
}

/// An RMSNorm over the last axis in `style`: Llama's ([`rms_norm`]) or Gemma's, which scales by
/// `1 + w` in f32 before casting back (`Gemma2RMSNorm.forward`: `(normed * (1.0 +
/// weight.float())).type_as(x)`).
///
/// # Shapes
///
/// - x: `[.., width]` (any rank), output: the same
pub fn rms_norm_with<const D: usize>(style: NormStyle, norm: &RmsNorm, x: Tensor<D>) -> Tensor<D> {
    let dtype = x.dtype();
    let wide = if dtype == DType::F32 {
        x
    } else {
        x.cast(DType::F32)
    };
    let variance = wide.clone().square().mean_dim(D - 1);
    let normed = wide * (variance + norm.epsilon).sqrt().recip();
    let back = |t: Tensor<D>| {
        if dtype == DType::F32 {
            t
        } else {
            t.cast(dtype)
        }
    };
    match style {
        NormStyle::Llama => back(normed) * norm.gamma.val().unsqueeze(),
        NormStyle::Gemma => {
            let gamma = norm.gamma.val();
            let gamma = if gamma.dtype() == DType::F32 {
                gamma
            } else {
                gamma.cast(DType::F32)
            };
            back(normed * (gamma + 1.0).unsqueeze())
        }
    }
}

/// `x . table^T` (a head tied to the token table, `[vocab, hidden]`) computed as
/// `(table . x^T)^T`, so the table is read in its own layout: a CPU backend copies a transposed
/// operand to contiguous memory first, which for `x . table^T` is the whole vocabulary table on
/// every call (most of a decoding step's time for GPT-2 small on flex).
///
/// # Shapes
///
/// - x: `[batch, seq, hidden]`, table: `[vocab, hidden]`, output: `[batch, seq, vocab]`
pub fn tied_logits(x: Tensor<3>, table: Tensor<2>) -> Tensor<3> {
    let [batch, seq, hidden] = x.dims();
    let vocab = table.dims()[0];
    if batch * seq <= SKINNY_MAX_ROWS {
        // A decoding step: each logit a dot product along a row of the table, read once.
        return skinny_matmul_transposed(x.reshape([batch * seq, hidden]), table)
            .reshape([batch, seq, vocab]);
    }
    table
        .matmul(x.reshape([batch * seq, hidden]).transpose())
        .transpose()
        .reshape([batch, seq, vocab])
}

/// A linear layer on `x` `[batch, seq, d_in]`, as `layer.forward(x)`, through [`affine`].
pub fn project(layer: &Linear, x: Tensor<3>) -> Tensor<3> {
    affine(
        x,
        layer.weight.val(),
        layer.bias.as_ref().map(|bias| bias.val()),
    )
}

/// `x W + b` for `x` `[batch, seq, d_in]` and `W` `[d_in, d_out]`: when the batch and the
/// sequence hold at most [`SKINNY_MAX_ROWS`] rows (a decoding step), the product goes through
/// the layer's [`skinny_matmul`], which on wgpu and CUDA reads the weight once where burn's
/// tiled matmul pads each row to a tile (docs/gpu.md, the decode profile); else burn's
/// `linear`.
pub fn affine(x: Tensor<3>, weight: Tensor<2>, bias: Option<Tensor<1>>) -> Tensor<3> {
    let [batch, seq, d_in] = x.dims();
    if batch * seq > SKINNY_MAX_ROWS {
        return burn::tensor::module::linear(x, weight, bias);
    }
    let d_out = weight.dims()[1];
    let out = skinny_matmul(x.reshape([batch * seq, d_in]), weight);
    let out = match bias {
        Some(bias) => out + bias.unsqueeze::<2>(),
        None => out,
    };
    out.reshape([batch, seq, d_out])
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

/// `value` as a tensor of `dtype` holds it (`torch.tensor(value).to(dtype)`): Gemma's embedding
/// scale `sqrt(hidden_size)` is rounded to the weights' dtype before it multiplies
/// (`Gemma2TextScaledWordEmbedding`: `embed_scale.to(self.weight.dtype)`).
pub fn in_dtype(dtype: DType, value: f64) -> f64 {
    match dtype {
        DType::BF16 => burn::tensor::bf16::from_f64(value).to_f64(),
        DType::F16 => burn::tensor::f16::from_f64(value).to_f64(),
        DType::F64 => value,
        _ => value as f32 as f64,
    }
}

/// `layer_types` as transformers' configs hold it: per layer, `true` for `"sliding_attention"`,
/// `false` for `"full_attention"`.
///
/// # Errors
///
/// [`ModelError::Config`] naming `layer_types` when it does not hold one entry per layer
/// (`num_hidden_layers`), or holds another kind (`"chunked_attention"`, a typo).
pub fn sliding_layers(
    types: &[String],
    n_layers: usize,
    path: &str,
) -> Result<Vec<bool>, ModelError> {
    if types.len() != n_layers {
        return Err(ModelError::Config {
            path: path.to_string(),
            detail: format!(
                "`layer_types` has {} entries, but `num_hidden_layers` is {n_layers}: it \
                 needs one \"full_attention\" or \"sliding_attention\" per layer ({n_layers} \
                 entries), or none at all to take the family's pattern",
                types.len()
            ),
        });
    }
    types
        .iter()
        .enumerate()
        .map(|(i, t)| match t.as_str() {
            "sliding_attention" => Ok(true),
            "full_attention" => Ok(false),
            other => Err(ModelError::Config {
                path: path.to_string(),
                detail: format!(
                    "`layer_types[{i}]` is \"{other}\"; this port reads only \
                     \"full_attention\" and \"sliding_attention\""
                ),
            }),
        })
        .collect()
}

/// A `sliding_window` of at least one token.
///
/// # Errors
///
/// [`ModelError::Config`] naming `sliding_window` for 0: a window of no key hides every token,
/// itself included.
pub fn check_window(window: Option<usize>, path: &str) -> Result<Option<usize>, ModelError> {
    if window == Some(0) {
        return Err(ModelError::Config {
            path: path.to_string(),
            detail: "`sliding_window` is 0, a window that hides every key, the query's own \
                     included; it must be at least 1 (the window the checkpoint was trained \
                     with), or null for full attention"
                .into(),
        });
    }
    Ok(window)
}

/// A softcap field (`attn_logit_softcapping`, `final_logit_softcapping`): `null` or a positive
/// finite number.
///
/// # Errors
///
/// [`ModelError::Config`] naming the field for 0, a negative value or a non-finite one, with
/// the layer's rule ([`burn_positional::check_softcap`]).
pub fn check_cap(field: &str, cap: Option<f64>, path: &str) -> Result<Option<f64>, ModelError> {
    if let Some(c) = cap {
        burn_positional::check_softcap(c).map_err(|_| ModelError::Config {
            path: path.to_string(),
            detail: format!(
                "`{field}` is {c}: a softcap divides the scores and bounds them to (-cap, cap), \
                 so it must be a positive finite number, or null to cap nothing"
            ),
        })?;
    }
    Ok(cap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    /// Gemma's comment in `modeling_gemma2.py`: "sqrt(3072)=55.4256 to become 55.5" in bf16.
    #[test]
    fn the_embedding_scale_is_rounded_to_the_weights_dtype() {
        let s = 3072f64.sqrt();
        assert_eq!(in_dtype(DType::BF16, s), 55.5);
        assert_eq!(in_dtype(DType::F32, s), s as f32 as f64);
        assert_eq!(in_dtype(DType::F16, s), 55.4375);
        assert_eq!(in_dtype(DType::F64, s), s);
    }

    /// `Gemma2RMSNorm`: `x / sqrt(mean(x^2) + eps) * (1 + w)`, evaluated in f64 here; Llama's
    /// scales by `w`.
    #[test]
    fn norms_scale_by_w_or_one_plus_w() {
        let device = Device::flex();
        let x = [0.5f32, -1.25, 2.0, 0.0, 3.5, -0.75];
        let w = [0.1f32, -0.2, 0.0, 0.3, -1.0, 0.5];
        let mut norm = RmsNormConfig::new(6).with_epsilon(1e-6).init(&device);
        norm.gamma = burn::module::Param::from_tensor(Tensor::<1>::from_data(
            TensorData::new(w.to_vec(), [6]),
            &device,
        ));
        let input = Tensor::<2>::from_data(TensorData::new(x.to_vec(), [1, 6]), &device);
        let ms = x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / 6.0;
        let r = 1.0 / (ms + 1e-6).sqrt();
        for (style, offset) in [(NormStyle::Llama, 0.0), (NormStyle::Gemma, 1.0)] {
            let got = rms_norm_with(style, &norm, input.clone())
                .into_data()
                .convert::<f32>()
                .into_vec::<f32>()
                .unwrap();
            for i in 0..6 {
                let want = x[i] as f64 * r * (offset + w[i] as f64);
                assert!(
                    (got[i] as f64 - want).abs() < 1e-5,
                    "{style:?} {i}: {} vs {want}",
                    got[i]
                );
            }
        }
    }
}
