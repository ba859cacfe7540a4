//! `rope_type: "yarn"` (Peng et al. 2023).

use burn::config::Config;

use super::{RopeArithmetic, RopeType, Rotation, invalid, torch_powers};
use crate::PositionError;

/// `rope_type: "yarn"` (Peng et al. 2023): a per-frequency ramp between interpolation (low
/// frequencies) and extrapolation (high ones), with an attention factor.
#[derive(Config, Debug, PartialEq)]
pub struct YarnScaling {
    /// `factor`: the context extension.
    pub factor: f64,
    /// `original_max_position_embeddings`: the pretraining context.
    pub original_max_position_embeddings: usize,
    /// `attention_factor`; when `None`, `0.1 ln(factor) + 1`, or the ratio of the `mscale`
    /// terms when `mscale` and `mscale_all_dim` are both set and non-zero.
    #[config(default = "None")]
    pub attention_factor: Option<f64>,
    /// `beta_fast`; 32 when `None` or 0.
    #[config(default = "None")]
    pub beta_fast: Option<f64>,
    /// `beta_slow`; 1 when `None` or 0.
    #[config(default = "None")]
    pub beta_slow: Option<f64>,
    /// `mscale` (DeepSeek).
    #[config(default = "None")]
    pub mscale: Option<f64>,
    /// `mscale_all_dim` (DeepSeek).
    #[config(default = "None")]
    pub mscale_all_dim: Option<f64>,
    /// `truncate`: round the ramp's bounds outwards to whole dimensions. True by default, as
    /// in transformers (gpt-oss sets it to false).
    #[config(default = true)]
    pub truncate: bool,
}

impl RopeType for YarnScaling {
    fn rope_type(&self) -> &'static str {
        "yarn"
    }

    fn factor(&self) -> f64 {
        self.factor
    }

    fn validate(&self, dim: usize) -> Result<(), PositionError> {
        // The ramp has `dim / 2` entries for `ceil(dim / 2)` pairs: transformers broadcasts
        // one entry (dim 3) and fails on any other odd width.
        if self.original_max_position_embeddings == 0 || (dim % 2 == 1 && dim != 3) {
            return invalid(
                format!(
                    "original_max_position_embeddings {} with rotary_dims = {dim}",
                    self.original_max_position_embeddings
                ),
                "yarn needs a pretraining context of at least 1 and an even rotated width \
                 (its ramp has rotary_dims / 2 entries, one per pair; transformers fails \
                 on odd widths too, but 3)",
                "set original_max_position_embeddings, and an even rotary width".into(),
            );
        }
        Ok(())
    }

    fn frequencies(&self, rotation: &Rotation, _len: usize) -> (Vec<f64>, f64) {
        yarn(self, rotation)
    }
}

/// transformers' `_compute_yarn_parameters`.
fn yarn(c: &YarnScaling, rotation: &Rotation) -> (Vec<f64>, f64) {
    let (base, dim, arithmetic) = (rotation.base, rotation.dim, rotation.arithmetic);
    let r = |x: f64| arithmetic.round(x);
    let factor = c.factor;
    let get_mscale = |scale: f64, mscale: f64| {
        if scale <= 1.0 {
            1.0
        } else {
            0.1 * mscale * scale.ln() + 1.0
        }
    };
    // `if mscale and mscale_all_dim`: both set and non-zero.
    let attention = c
        .attention_factor
        .unwrap_or_else(|| match (c.mscale, c.mscale_all_dim) {
            (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                get_mscale(factor, m) / get_mscale(factor, all)
            }
            _ => get_mscale(factor, 1.0),
        });
    // `get("beta_fast") or 32`: None and 0 both give the default.
    let beta_fast = c.beta_fast.filter(|&b| b != 0.0).unwrap_or(32.0);
    let beta_slow = c.beta_slow.filter(|&b| b != 0.0).unwrap_or(1.0);
    let d = dim as f64;
    let original = c.original_max_position_embeddings as f64;
    let correction_dim = |rotations: f64| {
        (d * (original / (rotations * 2.0 * std::f64::consts::PI)).ln()) / (2.0 * base.ln())
    };
    let (mut low, mut high) = (correction_dim(beta_fast), correction_dim(beta_slow));
    if c.truncate {
        (low, high) = (low.floor(), high.ceil());
    }
    let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
    if low == high {
        high += 0.001; // transformers: "Prevent singularity"
    }
    let (low_r, span) = (r(low), r(high - low));
    // `dim / 2` ramp entries; one (dim 3) broadcasts over both pairs.
    let ramp_entries = dim / 2;
    // `pos_freqs = base ** (arange(0, dim, 2).float() / dim)`.
    let pos_freqs: Vec<f64> = match arithmetic {
        RopeArithmetic::Exact => (0..dim)
            .step_by(2)
            .map(|j| base.powf(j as f64 / d))
            .collect(),
        RopeArithmetic::Transformers => torch_powers(base, dim, dim),
    };
    let inv = pos_freqs
        .into_iter()
        .enumerate()
        .map(|(i, pos_freq)| {
            let ramp_i = if ramp_entries == 1 { 0 } else { i };
            let extrapolation = r(1.0 / pos_freq);
            let interpolation = r(1.0 / r(r(factor) * pos_freq));
            let ramp = r(r(ramp_i as f64 - low_r) / span).clamp(0.0, 1.0);
            let extrapolation_share = r(1.0 - ramp);
            r(r(interpolation * r(1.0 - extrapolation_share))
                + r(extrapolation * extrapolation_share))
        })
        .collect();
    (inv, attention)
}
