//! `rope_type: "dynamic"`: NTK-aware scaling whose base follows the length.

use burn::config::Config;

use super::{Regime, RopeType, Rotation, invalid, ntk_needs_more_dims};
use crate::PositionError;

/// `rope_type: "dynamic"`: NTK-aware scaling whose base follows the current length `L` once
/// it passes `max_position_embeddings`:
/// `base' = base * (factor * L / max_position_embeddings - (factor - 1))^(d / (d - 2))`.
#[derive(Config, Debug, PartialEq)]
pub struct DynamicScaling {
    /// `factor`.
    pub factor: f64,
    /// `max_position_embeddings`: up to this length the trained frequencies are used.
    pub max_position_embeddings: usize,
}

impl RopeType for DynamicScaling {
    fn rope_type(&self) -> &'static str {
        "dynamic"
    }

    fn factor(&self) -> f64 {
        self.factor
    }

    fn is_length_dependent(&self) -> bool {
        true
    }

    fn regime(&self, len: usize) -> Regime {
        if len > self.max_position_embeddings {
            Regime::Length(len)
        } else {
            Regime::Trained
        }
    }

    fn validate(&self, dim: usize) -> Result<(), PositionError> {
        // transformers' dynamic computes `dim / (dim - 2)` at init: only 2 divides by zero.
        if dim == 2 {
            return ntk_needs_more_dims(self.rope_type(), dim);
        }
        if self.max_position_embeddings == 0 {
            return invalid(
                format!("{self:?}"),
                "dynamic scaling divides by max_position_embeddings",
                "set max_position_embeddings to the trained context length".into(),
            );
        }
        Ok(())
    }

    fn frequencies(&self, rotation: &Rotation, len: usize) -> (Vec<f64>, f64) {
        let base = rotation.base;
        if len <= self.max_position_embeddings {
            return (rotation.default_inv_freq(base), 1.0);
        }
        let r = |x: f64| rotation.round(x);
        let d = rotation.dim as f64;
        // Past the limit transformers computes the base from a tensor `seq_len`, so
        // every step is an f32 tensor op.
        let (len, max) = (len as f64, self.max_position_embeddings as f64);
        let stretch = r(r(r(r(self.factor) * r(len)) / r(max)) - r(self.factor - 1.0));
        // `tensor ** python_float`: PyTorch keeps the exponent in f64.
        let base = r(r(base) * r(stretch.powf(d / (d - 2.0))));
        (rotation.default_inv_freq(base), 1.0)
    }
}
