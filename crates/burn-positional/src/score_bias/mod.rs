//! The score biases a block can own: [`ScoreBiasConfig`] (ALiBi or T5) and [`ScoreBias`].

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{DType, Device, Tensor};

mod alibi;
pub(crate) mod distance;
mod t5;

pub use alibi::{Alibi, AlibiConfig, alibi_slopes};
pub use t5::{T5Bias, T5BiasConfig, t5_bucket};

use crate::PositionError;
use crate::attention::CompactBias;

/// A score bias a block owns.
#[derive(Config, Debug, PartialEq)]
pub enum ScoreBiasConfig {
    /// ALiBi (Press et al. 2022).
    Alibi(AlibiConfig),
    /// T5's relative buckets (Raffel et al. 2020).
    T5(T5BiasConfig),
}

/// An initialized [`ScoreBiasConfig`].
// One per model, matched on every forward: boxing the large variant buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum ScoreBias {
    /// See [`Alibi`].
    Alibi(Alibi),
    /// See [`T5Bias`].
    T5(T5Bias),
}

impl ScoreBiasConfig {
    /// Number of heads the bias is built for.
    pub fn n_heads(&self) -> usize {
        match self {
            Self::Alibi(config) => config.n_heads,
            Self::T5(config) => config.n_heads,
        }
    }

    /// Checks the bias's own config.
    pub fn validate(&self) -> Result<(), PositionError> {
        match self {
            Self::Alibi(config) => config.validate(),
            Self::T5(config) => config.validate(),
        }
    }

    /// Checks the config ([`validate`](Self::validate)) and builds the bias.
    pub fn try_init(&self, device: &Device) -> Result<ScoreBias, PositionError> {
        Ok(match self {
            Self::Alibi(config) => ScoreBias::Alibi(config.try_init(device)?),
            Self::T5(config) => ScoreBias::T5(config.try_init(device)?),
        })
    }

    /// Builds the bias.
    ///
    /// # Panics
    ///
    /// If [`validate`](Self::validate) fails, with [`try_init`](Self::try_init)'s message.
    pub fn init(&self, device: &Device) -> ScoreBias {
        self.try_init(device).unwrap_or_else(|err| panic!("{err}"))
    }
}

impl ScoreBias {
    /// The bias for queries at `offset..offset + seq_q` and keys at `0..seq_k`, built on the
    /// device and cached by shape (see [`Alibi::bias`], [`T5Bias::bias`]), for the blocks it is
    /// passed to: `causal` is their [`causal`](crate::SelfAttention::causal) flag (T5's buckets
    /// depend on it; ALiBi's bias is the same either way, the block's mask does the masking).
    ///
    /// # Shapes
    ///
    /// - output: `[1, n_heads, seq_q, seq_k]`
    pub fn bias(&self, offset: usize, seq_q: usize, seq_k: usize, causal: bool) -> Tensor<4> {
        match self {
            Self::Alibi(alibi) => alibi.bias(offset, seq_q, seq_k),
            Self::T5(t5) => t5.bias(offset, seq_q, seq_k, causal),
        }
    }

    /// [`bias`](Self::bias) in `dtype`.
    pub(super) fn bias_as(
        &self,
        offset: usize,
        seq_q: usize,
        seq_k: usize,
        causal: bool,
        dtype: DType,
    ) -> Tensor<4> {
        match self {
            Self::Alibi(alibi) => alibi.bias_as(offset, seq_q, seq_k, dtype),
            Self::T5(t5) => cast(t5.bias(offset, seq_q, seq_k, causal), dtype),
        }
    }
}

impl ScoreBias {
    /// The bias in the compact form [`attend`](crate::attend) computes each tile from: ALiBi's
    /// slopes, or T5's bias per clamped distance (gathered from the table here, once per call,
    /// so gradients reach it), for a causal block if `causal` is set.
    pub fn attention_bias(&self, causal: bool) -> CompactBias {
        match self {
            Self::Alibi(alibi) => CompactBias::Alibi(alibi.slopes()),
            Self::T5(t5) => t5.by_distance(causal),
        }
    }
}

pub(super) fn cast(x: Tensor<4>, dtype: DType) -> Tensor<4> {
    if x.dtype() == dtype { x } else { x.cast(dtype) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One config pattern: `validate`, then `try_init` returns its error, and `init` panics with
    /// the same message.
    #[test]
    fn try_init_returns_what_validate_finds_and_init_panics_with_it() {
        let device = Device::flex();
        for config in [
            ScoreBiasConfig::Alibi(AlibiConfig::new(0)),
            ScoreBiasConfig::T5(T5BiasConfig::new(0)),
            ScoreBiasConfig::T5(T5BiasConfig::new(2).with_num_buckets(2)),
        ] {
            let err = config.validate().unwrap_err();
            assert_eq!(config.try_init(&device).unwrap_err(), err);
            let panic = std::panic::catch_unwind(|| config.init(&device)).unwrap_err();
            assert_eq!(panic.downcast_ref::<String>(), Some(&err.to_string()));
        }
        assert!(
            ScoreBiasConfig::Alibi(AlibiConfig::new(4))
                .try_init(&device)
                .is_ok()
        );
        assert!(
            ScoreBiasConfig::T5(T5BiasConfig::new(4))
                .try_init(&device)
                .is_ok()
        );
    }
}
