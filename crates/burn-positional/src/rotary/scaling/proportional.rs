//! `rope_type: "proportional"` (Gemma 4).

use burn::config::Config;

use super::{RopeArithmetic, RopeType, Rotation, invalid, torch_powers};
use crate::PositionError;

/// `rope_type: "proportional"` (Gemma 4): the first `floor(partial_rotary_factor * d / 2)`
/// pairs rotate at the frequencies they would have in a fully rotated head of width `d`
/// (`base^(-2j / d)`), the other pairs not at all (frequency 0); all divided by `factor`.
/// Pairs are formed over the whole head (`rotary_dims = d_head`).
#[derive(Config, Debug, PartialEq)]
pub struct ProportionalScaling {
    /// `partial_rotary_factor`: the share of pairs that rotate.
    #[config(default = 1.0)]
    pub partial_rotary_factor: f64,
    /// `factor`.
    #[config(default = 1.0)]
    pub factor: f64,
}

impl RopeType for ProportionalScaling {
    fn rope_type(&self) -> &'static str {
        "proportional"
    }

    fn factor(&self) -> f64 {
        self.factor
    }

    fn pairs_whole_head(&self) -> bool {
        true
    }

    fn validate(&self, _dim: usize) -> Result<(), PositionError> {
        if !(0.0..=1.0).contains(&self.partial_rotary_factor) {
            return invalid(
                format!("partial_rotary_factor {}", self.partial_rotary_factor),
                "the share of rotating pairs lies in 0..=1",
                "use a value such as 0.25".into(),
            );
        }
        Ok(())
    }

    fn frequencies(&self, rotation: &Rotation, _len: usize) -> (Vec<f64>, f64) {
        let (base, dim) = (rotation.base, rotation.dim);
        let d = dim as f64;
        let r = |x: f64| rotation.round(x);
        // `int(rope_proportion * head_dim // 2)`, the rest of the head's pairs still.
        let rotated = ((self.partial_rotary_factor * d) / 2.0).floor().max(0.0) as usize;
        let factor = r(self.factor);
        // `base ** (arange(0, 2 * rope_angles, 2) / head_dim)`: a row of `rotated`
        // entries, which is what torch splits into vector chunks.
        let rotated = rotated.min(dim / 2);
        let inv_rotated: Vec<f64> = match rotation.arithmetic {
            RopeArithmetic::Exact => (0..rotated)
                .map(|j| base.powf(-((2 * j) as f64) / d))
                .collect(),
            RopeArithmetic::Transformers => torch_powers(base, 2 * rotated, dim)
                .into_iter()
                .map(|p| r(1.0 / p))
                .collect(),
        };
        let inv = (0..dim / 2)
            .map(|j| inv_rotated.get(j).map_or(0.0, |&w| r(w / factor)))
            .collect();
        (inv, 1.0)
    }
}
