//! The decoder that Llama, Qwen 2, Mistral and Phi-3 share in transformers (`modeling_llama.py`
//! and the files that copy it): RMSNorm before attention and MLP, rotary queries and keys,
//! grouped key and value heads, an optional sliding window per layer, a gated MLP. Each family's
//! file reads its `config.json` into a [`DecoderSpec`] and names its keys.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, RmsNorm, RmsNormConfig};
use burn::tensor::activation;
use burn::tensor::{DType, Device, Tensor};
use burn_positional::{
    AbsolutePositionConfig, AttendOptions, EmbeddingWithPosition, EmbeddingWithPositionConfig,
    KvCache, Rope, RopeConfig, SKINNY_MAX_ROWS, Window, attend, skinny_matmul,
    skinny_matmul_transposed,
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

/// What a family's `config.json` says about its decoder, after transformers' defaults.
#[derive(Debug, Clone)]
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
    /// `post_attention_layernorm`.
    pub post_attention_norm: RmsNorm,
    /// `mlp`.
    pub mlp: GatedMlp,
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
                DecoderLayer {
                    input_norm: norm(),
                    attention: DecoderAttention {
                        qkv,
                        output: linear(h * d, self.hidden_size, self.o_bias),
                        n_heads: h,
                        n_kv_heads: kv,
                        head_dim: d,
                        window: self.windows.get(i).copied().flatten(),
                    },
                    post_attention_norm: norm(),
                    mlp: GatedMlp {
                        gate: linear(self.hidden_size, gate_width, self.mlp_bias),
                        up,
                        down: linear(self.intermediate_size, self.hidden_size, self.mlp_bias),
                        activation: self.activation,
                    },
                }
            })
            .collect();
        Ok(Decoder {
            embed: EmbeddingWithPositionConfig::new(self.vocab_size, self.hidden_size)
                // Zeros, not a random draw the load replaces (the layer draws its table eagerly).
                .with_token_initializer(burn::nn::Initializer::Zeros)
                .with_scheme(AbsolutePositionConfig::None)
                .try_init(device)?,
            layers,
            norm: norm(),
            lm_head: (!self.tie_word_embeddings)
                .then(|| linear(self.hidden_size, self.vocab_size, false)),
            rope: self.rope.try_init(device)?,
            recompute_past: self.recompute_past,
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
        let (q, k, v) = match (&self.qkv.key, &self.qkv.value) {
            (Some(key), Some(value)) => (
                project(&self.qkv.query, x.clone()),
                project(key, x.clone()),
                project(value, x),
            ),
            _ => {
                let qkv = project(&self.qkv.query, x);
                (
                    qkv.clone().slice([0..batch, 0..seq, 0..h * d]),
                    qkv.clone().slice([0..batch, 0..seq, h * d..(h + kv) * d]),
                    qkv.slice([0..batch, 0..seq, (h + kv) * d..(h + 2 * kv) * d]),
                )
            }
        };
        let split = |t: Tensor<3>, heads: usize| t.reshape([batch, seq, heads, d]).swap_dims(1, 2);
        // transformers: cos and sin of `position_ids` from the frequencies of max(position_ids) + 1.
        let q = rope.apply_at_len(split(q, h), step.positions.clone(), step.len);
        let k = rope.apply_at_len(split(k, kv), step.positions.clone(), step.len);
        let v = split(v, kv);
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
        let mut x = self.embed.forward(step.ids.clone());
        for (i, layer) in self.layers.iter().enumerate() {
            let cache = caches.as_deref_mut().map(|c| &mut c[i]);
            let attended = layer.attention.forward(
                rms_norm(&layer.input_norm, x.clone()),
                &self.rope,
                step,
                cache,
            );
            x = x + attended;
            x = x.clone() + layer.mlp.forward(rms_norm(&layer.post_attention_norm, x));
        }
        rms_norm(&self.norm, x)
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
        match &self.lm_head {
            Some(head) => head.forward(x),
            // Tied: logits = x . table^T.
            None => tied_logits(x, self.embed.tokens.val()),
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
/// - x: `[batch, seq, width]`, output: the same
pub fn rms_norm(norm: &RmsNorm, x: Tensor<3>) -> Tensor<3> {
    let dtype = x.dtype();
    let wide = if dtype == DType::F32 {
        x
    } else {
        x.cast(DType::F32)
    };
    let variance = wide.clone().square().mean_dim(2);
    let normed = wide * (variance + norm.epsilon).sqrt().recip();
    let normed = if dtype == DType::F32 {
        normed
    } else {
        normed.cast(dtype)
    };
    normed * norm.gamma.val().unsqueeze()
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
    let mut remaps = vec![
        ("model.embed_tokens.weight", "embed.tokens"),
        ("model.norm", "norm"),
        ("lm_head", "lm_head"),
        ("model.layers.{}.input_layernorm", "layers.{}.input_norm"),
        (
            "model.layers.{}.post_attention_layernorm",
            "layers.{}.post_attention_norm",
        ),
        (
            "model.layers.{}.self_attn.o_proj",
            "layers.{}.attention.output",
        ),
        ("model.layers.{}.mlp.down_proj", "layers.{}.mlp.down"),
    ];
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
    checkpoint.load(&mut model, &remaps(spec.fused), device)?;
    Ok(model)
}
