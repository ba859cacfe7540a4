//! NTK-aware base scaling (bloc97 2023): transformers' `dynamic` at a fixed length, with no
//! `rope_type` of its own.

use super::{RopeType, Rotation, ntk_needs_more_dims};
use crate::PositionError;

/// [`RopeScaling::NtkAware`](super::RopeScaling::NtkAware): the factor.
pub(super) struct NtkAware(pub(super) f64);

impl RopeType for NtkAware {
    fn rope_type(&self) -> &'static str {
        "ntk_aware"
    }

    fn factor(&self) -> f64 {
        self.0
    }

    fn factor_at_least_one(&self) -> bool {
        true
    }

    fn validate(&self, dim: usize) -> Result<(), PositionError> {
        if dim <= 2 {
            return ntk_needs_more_dims(self.rope_type(), dim);
        }
        Ok(())
    }

    fn frequencies(&self, rotation: &Rotation, _len: usize) -> (Vec<f64>, f64) {
        let d = rotation.dim as f64;
        let base = rotation.base * self.0.powf(d / (d - 2.0));
        (rotation.default_inv_freq(base), 1.0)
    }
}
