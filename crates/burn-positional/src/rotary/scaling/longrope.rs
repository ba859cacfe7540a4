//! `rope_type: "longrope"` (Ding et al. 2024).

use burn::config::Config;

use super::{Regime, RopeArithmetic, RopeType, Rotation, invalid, pairs, torch_powers};
use crate::PositionError;

/// `rope_type: "longrope"` (Ding et al. 2024): one factor per frequency, `short_factor` up to
/// `original_max_position_embeddings`, `long_factor` past it, and an attention factor.
#[derive(Config, Debug, PartialEq)]
pub struct LongRopeScaling {
    /// `short_factor`: one per rotated pair.
    pub short_factor: Vec<f64>,
    /// `long_factor`: one per rotated pair.
    pub long_factor: Vec<f64>,
    /// `original_max_position_embeddings`: longer sequences use `long_factor`.
    pub original_max_position_embeddings: usize,
    /// `factor`; transformers' default is `max_position_embeddings /
    /// original_max_position_embeddings`, which the config reader fills in.
    pub factor: f64,
    /// `attention_factor`; when `None`, `sqrt(1 + ln(factor) / ln(original))` (1 for a factor
    /// of at most 1).
    #[config(default = "None")]
    pub attention_factor: Option<f64>,
}

impl RopeType for LongRopeScaling {
    fn rope_type(&self) -> &'static str {
        "longrope"
    }

    fn factor(&self) -> f64 {
        self.factor
    }

    fn is_length_dependent(&self) -> bool {
        true
    }

    fn regime(&self, len: usize) -> Regime {
        if len > self.original_max_position_embeddings {
            Regime::Long
        } else {
            Regime::Trained
        }
    }

    fn length_of(&self, regime: Regime) -> usize {
        match regime {
            Regime::Length(len) => len,
            Regime::Long => self.original_max_position_embeddings + 1,
            Regime::Trained => 0,
        }
    }

    fn validate(&self, dim: usize) -> Result<(), PositionError> {
        // One factor per pair, or one for all (broadcast, as transformers does).
        if ![1, pairs(dim)].contains(&self.short_factor.len())
            || ![1, pairs(dim)].contains(&self.long_factor.len())
        {
            return invalid(
                format!(
                    "short_factor of {} and long_factor of {} entries",
                    self.short_factor.len(),
                    self.long_factor.len()
                ),
                "longrope needs one factor per rotated pair",
                format!("give {} factors each (rotary_dims {dim} / 2)", pairs(dim)),
            );
        }
        if self.original_max_position_embeddings < 2 {
            return invalid(
                format!("{}", self.original_max_position_embeddings),
                "longrope's attention factor divides by ln(original_max_position_embeddings)",
                "set original_max_position_embeddings to the pretraining context".into(),
            );
        }
        Ok(())
    }

    fn frequencies(&self, rotation: &Rotation, len: usize) -> (Vec<f64>, f64) {
        let c = self;
        let (base, dim) = (rotation.base, rotation.dim);
        let d = dim as f64;
        let r = |x: f64| rotation.round(x);
        let factors = if len > c.original_max_position_embeddings {
            &c.long_factor
        } else {
            &c.short_factor
        };
        // One factor for all pairs broadcasts, as in transformers.
        let factor = |i: usize| factors[if factors.len() == 1 { 0 } else { i }];
        let inv = match rotation.arithmetic {
            RopeArithmetic::Exact => (0..dim)
                .step_by(2)
                .enumerate()
                .map(|(i, j)| base.powf(-(j as f64) / d) / factor(i))
                .collect(),
            // `1.0 / (ext_factors * base**inv_freq_shape)`.
            RopeArithmetic::Transformers => torch_powers(base, dim, dim)
                .into_iter()
                .enumerate()
                .map(|(i, p)| r(1.0 / r(r(factor(i)) * p)))
                .collect(),
        };
        let attention = c.attention_factor.unwrap_or_else(|| {
            if c.factor <= 1.0 {
                1.0
            } else {
                (1.0 + c.factor.ln() / (c.original_max_position_embeddings as f64).ln()).sqrt()
            }
        });
        (inv, attention)
    }
}
