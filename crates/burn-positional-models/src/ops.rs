//! The numerics the ports share, each as transformers computes it: the activations, RMSNorm in
//! Llama's and Gemma's styles, linear layers through the layer's skinny product while decoding,
//! a head tied to the token table, and a scalar rounded to a dtype.

use burn::nn::{Linear, RmsNorm};
use burn::tensor::activation;
use burn::tensor::{DType, Tensor};
use burn_positional::{SKINNY_MAX_ROWS, skinny_matmul, skinny_matmul_transposed};

use crate::ModelError;

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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::RmsNormConfig;
    use burn::tensor::Device;
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
                .try_into_vec::<f32>()
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
