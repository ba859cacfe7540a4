//! `rope_type: "llama3"`: three wavelength bands.

use burn::config::Config;

use super::{RopeArithmetic, RopeType, Rotation, invalid};
use crate::PositionError;

/// `rope_type: "llama3"`: three wavelength bands. Wavelengths shorter than
/// `original / high_freq_factor` are kept, longer than `original / low_freq_factor` divided by
/// `factor`, and those between blended smoothly.
#[derive(Config, Debug, PartialEq)]
pub struct Llama3Scaling {
    /// `factor` (8 in Llama 3.1, 32 in Llama 3.2).
    pub factor: f64,
    /// `low_freq_factor` (1 in Llama 3.1).
    pub low_freq_factor: f64,
    /// `high_freq_factor` (4 in Llama 3.1).
    pub high_freq_factor: f64,
    /// `original_max_position_embeddings` (8192 in Llama 3.1).
    pub original_max_position_embeddings: usize,
}

impl RopeType for Llama3Scaling {
    fn rope_type(&self) -> &'static str {
        "llama3"
    }

    fn factor(&self) -> f64 {
        self.factor
    }

    fn validate(&self, _dim: usize) -> Result<(), PositionError> {
        if self.high_freq_factor == self.low_freq_factor {
            return invalid(
                format!(
                    "low_freq_factor {} and high_freq_factor {}",
                    self.low_freq_factor, self.high_freq_factor
                ),
                "llama3's blend divides by high_freq_factor - low_freq_factor",
                "use Llama 3.1's values: low_freq_factor 1, high_freq_factor 4".into(),
            );
        }
        Ok(())
    }

    fn frequencies(&self, rotation: &Rotation, _len: usize) -> (Vec<f64>, f64) {
        (
            llama3(
                self,
                rotation.default_inv_freq(rotation.base),
                rotation.arithmetic,
            ),
            1.0,
        )
    }
}

/// transformers' `_compute_llama3_parameters`, from the default frequencies.
fn llama3(c: &Llama3Scaling, inv_freq: Vec<f64>, arithmetic: RopeArithmetic) -> Vec<f64> {
    let r = |x: f64| arithmetic.round(x);
    let old = c.original_max_position_embeddings as f64;
    let low_freq_wavelen = r(old / c.low_freq_factor);
    let high_freq_wavelen = r(old / c.high_freq_factor);
    let factor = r(c.factor);
    inv_freq
        .into_iter()
        .map(|w| {
            // `scalar / tensor` is PyTorch's `__rtruediv__`: `tensor.reciprocal() * scalar`.
            let wavelen = r(r(1.0 / w) * r(2.0 * std::f64::consts::PI));
            let kept_or_divided = if wavelen > low_freq_wavelen {
                r(w / factor)
            } else {
                w
            };
            let smooth = r(r(r(r(1.0 / wavelen) * r(old)) - r(c.low_freq_factor))
                / r(c.high_freq_factor - c.low_freq_factor));
            let smoothed =
                r(r(r(r(1.0 - smooth) * kept_or_divided) / factor) + r(smooth * kept_or_divided));
            // transformers' `~(wavelen < high) * ~(wavelen > low)`, spelled alike (NaN too).
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            let medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
            if medium { smoothed } else { kept_or_divided }
        })
        .collect()
}
