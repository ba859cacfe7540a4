//! `rope_type: "default"`: the angles as trained.

use super::{RopeType, Rotation};

/// [`RopeScaling::None`](super::RopeScaling::None).
pub(super) struct DefaultRope;

impl RopeType for DefaultRope {
    fn rope_type(&self) -> &'static str {
        "default"
    }

    fn factor(&self) -> f64 {
        1.0
    }

    fn frequencies(&self, rotation: &Rotation, _len: usize) -> (Vec<f64>, f64) {
        (rotation.default_inv_freq(rotation.base), 1.0)
    }
}
