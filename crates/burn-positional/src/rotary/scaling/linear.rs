//! `rope_type: "linear"`: position interpolation (Chen et al. 2023).

use super::{RopeType, Rotation};

/// [`RopeScaling::Interpolation`](super::RopeScaling::Interpolation): the factor.
pub(super) struct Linear(pub(super) f64);

impl RopeType for Linear {
    fn rope_type(&self) -> &'static str {
        "linear"
    }

    fn factor(&self) -> f64 {
        self.0
    }

    fn factor_at_least_one(&self) -> bool {
        true
    }

    fn frequencies(&self, rotation: &Rotation, _len: usize) -> (Vec<f64>, f64) {
        let r = |x: f64| rotation.round(x);
        let s = r(self.0);
        (
            rotation
                .default_inv_freq(rotation.base)
                .into_iter()
                .map(|w| r(w / s))
                .collect(),
            1.0,
        )
    }
}
