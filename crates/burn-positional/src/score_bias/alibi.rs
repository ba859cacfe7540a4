//! ALiBi, from [Train Short, Test Long](https://arxiv.org/abs/2108.12409) (Press et al. 2022):
//! no position vectors at all; each head adds `-m_h * distance` to its attention scores, with a
//! fixed slope `m_h` per head. Nearby tokens are favoured, more strongly in some heads than in
//! others, and nothing runs out past the training length.
//!
//! One bias for encoders and decoders: `-m_h |i - j|`. On every key a causal block lets through
//! (`j <= i`) it equals the paper's causal `-m_h (i - j)`, and the block's causal mask hides the
//! rest, so whether attention is causal is the block's to say
//! ([`SelfAttentionConfig::causal`](crate::SelfAttentionConfig::causal)), never the bias's.

use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay};
use burn::tensor::{DType, Device, Shape, Tensor, TensorData};

use super::distance::{bias_term, relative};
use crate::PositionError;
use crate::attention::CompactBias;
use crate::cache::{DeviceKey, ShapeCache};

/// Configuration of [`Alibi`].
#[derive(Config, Debug, PartialEq)]
pub struct AlibiConfig {
    /// Number of attention heads (one slope each).
    pub n_heads: usize,
}

/// Per-head linear distance penalties. Built by [`AlibiConfig::init`]; constant.
///
/// The bias is computed on the device from index arithmetic and cached by shape (see
/// [`bias`](Self::bias)) in a cache this module owns, shared by its clones (a training step,
/// a device move) and freed with the last of them. To build it once for every block of a
/// model, compute it once and pass it to each block (as with one T5 table).
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::AlibiConfig;
///
/// let device = Device::flex();
/// let alibi = AlibiConfig::new(12).init(&device);
/// assert_eq!(alibi.bias(0, 5, 5).dims(), [1, 12, 5, 5]); // [1, n_heads, seq_q, seq_k]
/// ```
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct Alibi {
    /// `[n_heads]`: the slopes, as in the paper ([`alibi_slopes`]). Private: the cached bias
    /// was built from them, and is right only while they stay the paper's slopes for
    /// `n_heads`. Read them with [`slopes`](Self::slopes).
    ///
    /// ```compile_fail
    /// use burn::prelude::*;
    /// let device = Device::flex();
    /// let mut alibi = burn_positional::AlibiConfig::new(2).init(&device);
    /// alibi.slopes = Tensor::from_floats([1.0, 2.0], &device); // other slopes, same cache: refused
    /// ```
    slopes: Tensor<1>,
    /// Biases by shape, shared by clones.
    #[module(skip)]
    biases: ShapeCache<Tensor<4>>,
}

impl ModuleDisplay for Alibi {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new()
            .with_new_line_after_attribute(false)
            .optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        let [n_heads] = self.slopes.dims();
        content.add("n_heads", &n_heads).optional()
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

    /// Checks the config ([`validate`](Self::validate)) and builds the slopes.
    pub fn try_init(&self, device: &Device) -> Result<Alibi, PositionError> {
        self.validate()?;
        let slopes: Vec<f32> = alibi_slopes(self.n_heads)
            .into_iter()
            .map(|m| m as f32)
            .collect();
        Ok(Alibi {
            slopes: Tensor::from_data(TensorData::new(slopes, [self.n_heads]), device),
            biases: ShapeCache::default(),
        })
    }

    /// Builds the slopes.
    ///
    /// # Panics
    ///
    /// If `n_heads` is 0, with [`try_init`](Self::try_init)'s message.
    pub fn init(&self, device: &Device) -> Alibi {
        self.try_init(device).unwrap_or_else(|err| panic!("{err}"))
    }
}

impl Alibi {
    /// `[n_heads]`: the slopes, as in the paper ([`alibi_slopes`]).
    pub fn slopes(&self) -> Tensor<1> {
        self.slopes.clone()
    }

    /// The score bias `-m_h |i - j|` for queries at positions `i` in `offset..offset + seq_q`
    /// against keys at positions `j` in `0..seq_k`, in the slopes' dtype. No length limit. A
    /// causal block masks the keys after each query itself: on the keys it keeps, this is the
    /// paper's causal `-m_h (i - j)`.
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
        let key = DeviceKey::new(&device, dtype);
        self.biases
            .get(key, offset, seq_q, seq_k, |n| self.build(n, dtype))
    }

    /// The bias for queries and keys at `0..n`: `[1, n_heads, n, n]`.
    fn build(&self, n: usize, dtype: DType) -> Tensor<4> {
        let device = self.slopes.device();
        let rel = relative(0, n, n, &device);
        let bias = bias_term(&CompactBias::Alibi(self.slopes.clone()), rel, DType::F32)
            .expect("ALiBi has a bias"); // [1, n_heads, n, n]
        bias.cast(dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::shape_cache_builds;

    #[test]
    fn the_bias_cache_is_shared_by_clones_and_freed_with_them() {
        let device = Device::flex();
        let alibi = AlibiConfig::new(4).init(&device);
        let clone = alibi.clone();
        let _ = alibi.bias(0, 6, 6);
        let built = shape_cache_builds();
        let _ = clone.bias(1, 5, 6);
        assert_eq!(
            shape_cache_builds(),
            built,
            "the clone cuts the same square"
        );
        let _ = AlibiConfig::new(4).init(&device).bias(0, 6, 6);
        assert_eq!(
            shape_cache_builds(),
            built + 1,
            "another module has its own"
        );
        let cache = alibi.biases.watch();
        drop(alibi);
        assert!(cache.upgrade().is_some(), "the clone still holds it");
        drop(clone);
        assert!(cache.upgrade().is_none(), "freed with the last clone");
    }
}
