//! ALiBi, from [Train Short, Test Long](https://arxiv.org/abs/2108.12409) (Press et al. 2022):
//! no position vectors at all; each head adds `-m_h * distance` to its attention scores, with a
//! fixed slope `m_h` per head. Nearby tokens are favoured, more strongly in some heads than in
//! others, and nothing runs out past the training length.

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Bool, Device, Tensor, TensorData};

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
/// ```
/// use burn::prelude::*;
/// use burn_positional_layer::AlibiConfig;
///
/// let device = Device::flex();
/// let alibi = AlibiConfig::new(12).init(&device);
/// assert_eq!(alibi.bias(0, 5, 5).dims(), [1, 12, 5, 5]); // [1, n_heads, seq_q, seq_k]
/// ```
#[derive(Module, Debug)]
pub struct Alibi {
    /// `[n_heads]`: the slopes, as in the paper.
    pub slopes: Tensor<1>,
    /// Causal or symmetric.
    #[module(skip)]
    pub direction: AlibiDirection,
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
    /// Builds the slopes.
    ///
    /// # Panics
    ///
    /// If `n_heads` is 0.
    pub fn init(&self, device: &Device) -> Alibi {
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
    /// The score bias for queries at positions `offset..offset + seq_q` against keys at
    /// positions `0..seq_k`. No length limit.
    ///
    /// # Shapes
    ///
    /// - output: `[1, n_heads, seq_q, seq_k]`
    pub fn bias(&self, offset: usize, seq_q: usize, seq_k: usize) -> Tensor<4> {
        let [n_heads] = self.slopes.dims();
        let device = self.slopes.device();
        // Distances query - key, [seq_q, seq_k], subtracted as integers, then rounded once.
        let distance: Vec<f32> = (offset..offset + seq_q)
            .flat_map(|i| (0..seq_k).map(move |j| (i as i64 - j as i64) as f32))
            .map(|d| match self.direction {
                AlibiDirection::Causal => d,
                AlibiDirection::Symmetric => d.abs(),
            })
            .collect();
        let distance = Tensor::<2>::from_data(TensorData::new(distance, [seq_q, seq_k]), &device);
        let slopes = self.slopes.clone().reshape([1, n_heads, 1, 1]);
        let bias = distance.unsqueeze::<4>().mul(slopes).neg(); // [1, n_heads, seq_q, seq_k]
        match self.direction {
            AlibiDirection::Symmetric => bias,
            AlibiDirection::Causal => {
                // Keys after the query: -inf, so the bias is also the causal mask.
                let later = Tensor::<2, Bool>::tril_mask([seq_q, seq_k], offset as i64, &device);
                bias.mask_fill(
                    later.unsqueeze::<4>().expand([1, n_heads, seq_q, seq_k]),
                    f32::NEG_INFINITY,
                )
            }
        }
    }
}
