//! ALiBi, from [Train Short, Test Long](https://arxiv.org/abs/2108.12409) (Press et al. 2022):
//! no position vectors at all; each head adds `-m_h * distance` to its attention scores, with a
//! fixed slope `m_h` per head. Nearby tokens are favoured, more strongly in some heads than in
//! others, and nothing runs out past the training length.

use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay};
use burn::tensor::{Bool, DType, Device, Int, Shape, Tensor, TensorData};

use crate::PositionError;
use crate::cache::{self, ShapeCache};

/// Which tokens' distance counts.
#[derive(Config, Debug, PartialEq, Copy)]
pub enum AlibiDirection {
    /// Decoder style, as in the paper: bias `-m * (i - j)` for keys `j <= i`; keys after the
    /// query get `-inf`, so the bias is also the causal mask.
    Causal,
    /// Encoder style: bias `-m * |i - j|` in both directions.
    Symmetric,
}

/// Configuration of [`Alibi`].
#[derive(Config, Debug, PartialEq)]
pub struct AlibiConfig {
    /// Number of attention heads (one slope each).
    pub n_heads: usize,
    /// Causal (the paper's) or symmetric.
    #[config(default = "AlibiDirection::Causal")]
    pub direction: AlibiDirection,
}

/// Per-head linear distance penalties. Built by [`AlibiConfig::init`]; constant.
///
/// The bias is computed on the device from index arithmetic and cached by shape (see
/// [`bias`](Self::bias)): every `Alibi` built from an equal config shares one cache, so the
/// blocks of a model build it once per sequence length.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_layer::AlibiConfig;
///
/// let device = Device::flex();
/// let alibi = AlibiConfig::new(12).init(&device);
/// assert_eq!(alibi.bias(0, 5, 5).dims(), [1, 12, 5, 5]); // [1, n_heads, seq_q, seq_k]
/// ```
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct Alibi {
    /// `[n_heads]`: the slopes, as in the paper ([`alibi_slopes`]). Private: the cached bias
    /// is shared by every block of `n_heads` heads and one direction, which is right only while
    /// the slopes are a function of `n_heads` alone. Read them with [`slopes`](Self::slopes).
    ///
    /// ```compile_fail
    /// use burn::prelude::*;
    /// let device = Device::flex();
    /// let mut alibi = burn_positional_layer::AlibiConfig::new(2).init(&device);
    /// alibi.slopes = Tensor::from_floats([1.0, 2.0], &device); // other slopes, same cache: refused
    /// ```
    slopes: Tensor<1>,
    /// Causal or symmetric.
    #[module(skip)]
    pub direction: AlibiDirection,
}

impl ModuleDisplay for Alibi {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new()
            .with_new_line_after_attribute(false)
            .optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        let [n_heads] = self.slopes.dims();
        content
            .add("n_heads", &n_heads)
            .add("direction", &format!("{:?}", self.direction))
            .optional()
    }
}

/// The paper's slopes for `n_heads` heads.
///
/// For a power of two `n`, the geometric sequence starting at `2^(-8/n)` with that ratio:
/// `m_h = 2^(-8h/n)` for `h = 1..=n`. Otherwise, with `n'` the largest power of two below `n`,
/// the `n'` slopes of `n'` heads followed by every other slope of `2n'` heads, as many as needed
/// (the paper's reference code, `get_slopes`).
///
/// # Panics
///
/// If `n_heads` is 0.
pub fn alibi_slopes(n_heads: usize) -> Vec<f64> {
    assert!(n_heads > 0, "ALiBi needs at least one head");
    let power_of_two = |n: usize| -> Vec<f64> {
        let start = 2f64.powf(-8.0 / n as f64);
        (1..=n).map(|h| start.powi(h as i32)).collect()
    };
    if n_heads.is_power_of_two() {
        return power_of_two(n_heads);
    }
    let closest = 1usize << n_heads.ilog2();
    let mut slopes = power_of_two(closest);
    slopes.extend(
        power_of_two(2 * closest)
            .into_iter()
            .step_by(2)
            .take(n_heads - closest),
    );
    slopes
}

impl AlibiConfig {
    /// Checks the config: at least one head.
    pub fn validate(&self) -> Result<(), PositionError> {
        if self.n_heads == 0 {
            return Err(PositionError::InvalidConfig {
                field: "AlibiConfig::n_heads",
                value: "0".into(),
                rule: "ALiBi gives each head a slope, so it needs at least one head",
                fix: "set n_heads to the attention block's number of heads".into(),
            });
        }
        Ok(())
    }

    /// Builds the slopes.
    ///
    /// # Panics
    ///
    /// If `n_heads` is 0.
    pub fn init(&self, device: &Device) -> Alibi {
        if let Err(err) = self.validate() {
            panic!("{err}");
        }
        let slopes: Vec<f32> = alibi_slopes(self.n_heads)
            .into_iter()
            .map(|m| m as f32)
            .collect();
        Alibi {
            slopes: Tensor::from_data(TensorData::new(slopes, [self.n_heads]), device),
            direction: self.direction,
        }
    }
}

impl Alibi {
    /// `[n_heads]`: the slopes, as in the paper ([`alibi_slopes`]).
    pub fn slopes(&self) -> Tensor<1> {
        self.slopes.clone()
    }

    /// The score bias for queries at positions `offset..offset + seq_q` against keys at
    /// positions `0..seq_k`, in the slopes' dtype. No length limit.
    ///
    /// Built on the device (`arange`, a broadcast subtraction, one multiply by the slopes) for
    /// queries and keys at `0..n`, cached, and sliced for every later request that fits: a
    /// model pays for it once per sequence length, never per block or per call.
    ///
    /// # Shapes
    ///
    /// - output: `[1, n_heads, seq_q, seq_k]`
    pub fn bias(&self, offset: usize, seq_q: usize, seq_k: usize) -> Tensor<4> {
        self.bias_as(offset, seq_q, seq_k, self.slopes.dtype())
    }

    /// [`bias`](Self::bias) in `dtype` (computed in f32, cast once when cached).
    pub(crate) fn bias_as(
        &self,
        offset: usize,
        seq_q: usize,
        seq_k: usize,
        dtype: DType,
    ) -> Tensor<4> {
        let [n_heads] = self.slopes.dims();
        let device = self.slopes.device();
        if seq_q == 0 || seq_k == 0 {
            return Tensor::zeros(Shape::new([1, n_heads, seq_q, seq_k]), (&device, dtype));
        }
        // One cache per config, found by value, so every block (and every clone, record load
        // or device move) of this config shares it. The slopes are a function of `n_heads`
        // (the field is private), so `n_heads` and the direction are all the bias depends on.
        let cache: ShapeCache<Tensor<4>> =
            cache::shared(format!("alibi/{n_heads}/{:?}", self.direction));
        cache.get(&device, dtype, offset, seq_q, seq_k, |n| {
            self.build(n, dtype)
        })
    }

    /// The bias for queries and keys at `0..n`: `[1, n_heads, n, n]`.
    fn build(&self, n: usize, dtype: DType) -> Tensor<4> {
        let [n_heads] = self.slopes.dims();
        let device = self.slopes.device();
        let index = Tensor::<1, Int>::arange(0..n as i64, &device);
        // query - key, exact in integers, converted once.
        let distance = (index.clone().reshape([n, 1]) - index.reshape([1, n]))
            .float()
            .cast(DType::F32);
        let distance = match self.direction {
            AlibiDirection::Causal => distance,
            AlibiDirection::Symmetric => distance.abs(),
        };
        let slopes = self
            .slopes
            .clone()
            .cast(DType::F32)
            .reshape([1, n_heads, 1, 1]);
        let bias = distance.unsqueeze::<4>().mul(slopes).neg(); // [1, n_heads, n, n]
        let bias = match self.direction {
            AlibiDirection::Symmetric => bias,
            AlibiDirection::Causal => {
                // Keys after the query: -inf, so the bias is also the causal mask.
                let later = Tensor::<2, Bool>::tril_mask([n, n], 0, &device);
                bias.mask_fill(
                    later.unsqueeze::<4>().expand([1, n_heads, n, n]),
                    f32::NEG_INFINITY,
                )
            }
        };
        bias.cast(dtype)
    }
}
