//! Context extension: how the rotation frequencies of a model trained on sequences up to some
//! length are changed to reach further, as every Hugging Face checkpoint configures it, one file
//! per `rope_type` as transformers keeps one function per type (`ROPE_INIT_FUNCTIONS`).
//!
//! Each type implements [`RopeType`]: its inverse frequencies `inv_freq[j]` (position `p`
//! rotates pair `j` by `p * inv_freq[j]`) and attention factor, following transformers'
//! `modeling_rope_utils.py` (v5) line by line, defaults and edge cases included; its checks; and,
//! for the length-dependent ones, which frequency set a length uses ([`Regime`]). The table of
//! types is on [`RopeScaling`]; [`RopeScaling::rope`] is the one place that maps a variant to its
//! type.
//!
//! Adding a `rope_type`: a file here with its parameters (a `Config` struct) and its
//! `impl RopeType`, a variant of [`RopeScaling`] and its arm in [`RopeScaling::rope`], a row of
//! the table on [`RopeScaling`], the re-export in `rotary/mod.rs` and `lib.rs`, and, for
//! `config.json`, the reader's arm in `hf_config`.

use burn::config::Config;

use super::torch_pow;
use crate::PositionError;

mod default;
mod dynamic;
mod linear;
mod llama3;
mod longrope;
mod ntk_aware;
mod proportional;
mod yarn;

pub use dynamic::DynamicScaling;
pub use llama3::Llama3Scaling;
pub use longrope::LongRopeScaling;
pub use proportional::ProportionalScaling;
pub use yarn::YarnScaling;

/// How the angle tables are rounded.
#[derive(Config, Debug, PartialEq, Copy)]
pub enum RopeArithmetic {
    /// Frequencies and angles in f64, rounded once to f32: accurate at far positions. The
    /// default. One exception: [`RopeScaling::Dynamic`] past `max_position_embeddings` has
    /// frequencies of its own for every length, and its angles are computed on the device, in
    /// f32, from those frequencies rounded once (see [`Rope`](super::Rope)).
    Exact,
    /// Rounded to f32 at every step where transformers (PyTorch) holds an f32 tensor: the
    /// inverse frequencies, `position * inv_freq`, cos and sin, the attention factor's product.
    /// The powers `base^(2j / d)` are torch's on the CPU to the bit (SLEEF's pow on vector
    /// chunks of 32 pairs, glibc's `powf` on the rest, as torch runs on AVX512), not correctly
    /// rounded ones: far positions of a wide head depend on that last bit.
    /// A checkpoint was trained with these values, so
    /// [`RopeConfig::from_hf_config`](crate::RopeConfig::from_hf_config) picks it; it is also the
    /// only arithmetic that accepts an odd partial width, as transformers does (rounded up to
    /// whole pairs).
    Transformers,
}

impl RopeArithmetic {
    /// Rounds as this arithmetic stores a value: to f32 for `Transformers`, not at all for
    /// `Exact`.
    fn round(self, x: f64) -> f64 {
        match self {
            Self::Exact => x,
            Self::Transformers => x as f32 as f64,
        }
    }
}

/// Context extension: how the angles of a model trained on sequences up to some length are
/// changed to reach further, as every Hugging Face checkpoint configures it. Each variant
/// computes the inverse frequencies `inv_freq[j]` (position `p` turns pair `j` by
/// `p * inv_freq[j]`) and an attention factor multiplying cos and sin, following transformers'
/// `modeling_rope_utils.py` (v5), defaults and edge cases included:
///
/// | variant | transformers `rope_type` | used by |
/// | --- | --- | --- |
/// | `None` | `default` | Llama 3 8B, Mistral, Qwen 2/2.5/3, Gemma 1/2 |
/// | `Interpolation` | `linear` | Gemma 3 global layers |
/// | `NtkAware` | (none: `dynamic` at a fixed length) | bloc97's NTK-aware scaling |
/// | `Dynamic` | `dynamic` | opt-in |
/// | `Yarn` | `yarn` | Qwen 2.5 long context, DeepSeek V2/V3, gpt-oss |
/// | `LongRope` | `longrope` | Phi-3 / 3.5 128k, Phi-4-mini |
/// | `Llama3` | `llama3` | Llama 3.1, 3.2, 3.3 |
/// | `Proportional` | `proportional` | Gemma 4 full-attention layers |
///
/// `Dynamic` and `LongRope` depend on the length of the sequence being attended: see
/// [`Rope`](super::Rope) for what that means for cached decoding.
///
/// ```text
/// None                 inv_freq[j] = base^(-2j / d)
/// Interpolation(s)     inv_freq[j] = base^(-2j / d) / s                    (Chen et al. 2023)
/// NtkAware(s)          inv_freq[j] = (base * s^(d / (d - 2)))^(-2j / d)    (bloc97 2023)
/// ```
///
/// with `d = rotary_dims`. Interpolation squeezes every position into the trained range (so
/// neighbours move closer: the highest frequency turns `s` times slower). NTK-aware scaling
/// raises the base so that the lowest frequency turns `s` times slower and the highest not at
/// all: near positions keep their trained angles, far ones are interpolated.
#[derive(Config, Debug, PartialEq)]
pub enum RopeScaling {
    /// The angles as trained (`rope_type: "default"`).
    None,
    /// Position interpolation by this factor, at least 1 (`rope_type: "linear"`).
    Interpolation(f64),
    /// NTK-aware base scaling by this factor (at least 1; needs `rotary_dims > 2`).
    NtkAware(f64),
    /// `rope_type: "dynamic"`.
    Dynamic(DynamicScaling),
    /// `rope_type: "yarn"`.
    Yarn(YarnScaling),
    /// `rope_type: "longrope"`.
    LongRope(LongRopeScaling),
    /// `rope_type: "llama3"`.
    Llama3(Llama3Scaling),
    /// `rope_type: "proportional"`.
    Proportional(ProportionalScaling),
}

/// Which set of frequencies a sequence of some length uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Regime {
    /// The frequencies built at `init` (every variant up to its switch length).
    Trained,
    /// `LongRope` past `original_max_position_embeddings`.
    Long,
    /// `Dynamic` past `max_position_embeddings`: its frequencies for this length.
    Length(usize),
}

/// One `rope_type`: what transformers' `ROPE_INIT_FUNCTIONS` entry computes, and what the layer
/// must know about it. The defaults fit a type whose frequencies do not depend on the length.
pub(crate) trait RopeType {
    /// Transformers' `rope_type` (`"ntk_aware"` for [`RopeScaling::NtkAware`], which has none).
    fn rope_type(&self) -> &'static str;

    /// The context-extension factor, 1 for the default.
    fn factor(&self) -> f64;

    /// `(inv_freq, attention_factor)` for sequences of length `len` (0: the trained set):
    /// `ceil(dim / 2)` frequencies for a rotation of formula width `rotation.dim`, rounded as
    /// `rotation.arithmetic` says.
    fn frequencies(&self, rotation: &Rotation, len: usize) -> (Vec<f64>, f64);

    /// Checks the parameters against the formula width `dim`, after the factor's common check.
    fn validate(&self, _dim: usize) -> Result<(), PositionError> {
        Ok(())
    }

    /// Whether the factor must be at least 1 (not only positive).
    fn factor_at_least_one(&self) -> bool {
        false
    }

    /// Whether the frequencies depend on the length of the sequence.
    fn is_length_dependent(&self) -> bool {
        false
    }

    /// Which frequency set a sequence of length `len` uses.
    fn regime(&self, _len: usize) -> Regime {
        Regime::Trained
    }

    /// A length that selects `regime` (the inverse of [`regime`](Self::regime)).
    fn length_of(&self, regime: Regime) -> usize {
        match regime {
            Regime::Length(len) => len,
            Regime::Trained | Regime::Long => 0,
        }
    }

    /// Whether pairs are formed over the whole head whatever `rotary_dims` says (Gemma 4's
    /// `proportional`).
    fn pairs_whole_head(&self) -> bool {
        false
    }
}

impl<T: RopeType + ?Sized> RopeType for &T {
    fn rope_type(&self) -> &'static str {
        (**self).rope_type()
    }
    fn factor(&self) -> f64 {
        (**self).factor()
    }
    fn frequencies(&self, rotation: &Rotation, len: usize) -> (Vec<f64>, f64) {
        (**self).frequencies(rotation, len)
    }
    fn validate(&self, dim: usize) -> Result<(), PositionError> {
        (**self).validate(dim)
    }
    fn factor_at_least_one(&self) -> bool {
        (**self).factor_at_least_one()
    }
    fn is_length_dependent(&self) -> bool {
        (**self).is_length_dependent()
    }
    fn regime(&self, len: usize) -> Regime {
        (**self).regime(len)
    }
    fn length_of(&self, regime: Regime) -> usize {
        (**self).length_of(regime)
    }
    fn pairs_whole_head(&self) -> bool {
        (**self).pairs_whole_head()
    }
}

/// What every type's frequencies are computed from: the base, the formula width and the
/// rounding.
pub(crate) struct Rotation {
    /// Wavelength base (`rope_theta`).
    pub(crate) base: f64,
    /// Formula width (`rotary_dims`; the whole head for `Proportional`).
    pub(crate) dim: usize,
    /// How values are rounded.
    pub(crate) arithmetic: RopeArithmetic,
}

impl Rotation {
    /// Rounds as the arithmetic stores a value.
    pub(crate) fn round(&self, x: f64) -> f64 {
        self.arithmetic.round(x)
    }

    /// `1.0 / (base ** (arange(0, dim, 2) / dim))`: transformers' default frequencies for
    /// `base` (which NTK scaling raises).
    pub(crate) fn default_inv_freq(&self, base: f64) -> Vec<f64> {
        let dim = self.dim;
        match self.arithmetic {
            RopeArithmetic::Exact => (0..dim)
                .step_by(2)
                .map(|j| base.powf(-(j as f64) / dim as f64))
                .collect(),
            RopeArithmetic::Transformers => torch_powers(base, dim, dim)
                .into_iter()
                .map(|p| self.round(1.0 / p))
                .collect(),
        }
    }
}

/// Number of rotated pairs for a formula width `dim`: `ceil(dim / 2)`, as transformers'
/// `arange(0, dim, 2)`.
pub(crate) fn pairs(dim: usize) -> usize {
    dim.div_ceil(2)
}

/// A scaling's parameters refused: the error every type's `validate` returns.
pub(crate) fn invalid(value: String, rule: &'static str, fix: String) -> Result<(), PositionError> {
    Err(PositionError::InvalidConfig {
        field: "RopeConfig::scaling",
        value,
        rule,
        fix,
    })
}

/// NTK scaling on 2 or fewer rotated dimensions, refused.
pub(crate) fn ntk_needs_more_dims(rope_type: &str, dim: usize) -> Result<(), PositionError> {
    invalid(
        format!("{rope_type} with rotary_dims = {dim}"),
        "NTK scaling raises the base to the power rotary_dims / (rotary_dims - 2), \
         which needs more than 2 rotated dimensions",
        "rotate at least 4 dimensions, or use RopeScaling::Interpolation".into(),
    )
}

impl RopeScaling {
    /// The type of this variant: the one place that maps a variant to its [`RopeType`].
    pub(crate) fn rope(&self) -> Box<dyn RopeType + '_> {
        match self {
            Self::None => Box::new(default::DefaultRope),
            Self::Interpolation(s) => Box::new(linear::Linear(*s)),
            Self::NtkAware(s) => Box::new(ntk_aware::NtkAware(*s)),
            Self::Dynamic(c) => Box::new(c),
            Self::Yarn(c) => Box::new(c),
            Self::LongRope(c) => Box::new(c),
            Self::Llama3(c) => Box::new(c),
            Self::Proportional(c) => Box::new(c),
        }
    }

    /// The context-extension factor, 1 for `None`.
    pub fn factor(&self) -> f64 {
        self.rope().factor()
    }

    /// Whether the frequencies depend on the length of the sequence (`Dynamic`, `LongRope`).
    pub fn is_length_dependent(&self) -> bool {
        self.rope().is_length_dependent()
    }

    /// Transformers' `rope_type` of this variant (`NtkAware` has none: `"ntk_aware"`).
    pub fn rope_type(&self) -> &'static str {
        self.rope().rope_type()
    }

    pub(crate) fn regime(&self, len: usize) -> Regime {
        self.rope().regime(len)
    }

    /// A length that selects `regime` (the inverse of [`regime`](Self::regime)).
    pub(crate) fn length_of(&self, regime: Regime) -> usize {
        self.rope().length_of(regime)
    }

    /// Whether pairs are formed over the whole head whatever `rotary_dims` says
    /// ([`RopeScaling::Proportional`]).
    pub(crate) fn pairs_whole_head(&self) -> bool {
        self.rope().pairs_whole_head()
    }

    /// Number of rotated pairs for a formula width `dim`: `ceil(dim / 2)`, as transformers'
    /// `arange(0, dim, 2)`.
    pub(crate) fn pairs(dim: usize) -> usize {
        pairs(dim)
    }

    /// `(inv_freq, attention_factor)` for sequences of length `len` (0: the trained set), for
    /// a rotation of formula width `dim` (`rotary_dims`; the whole head for `Proportional`),
    /// following transformers' `modeling_rope_utils.py` with `arithmetic`'s rounding.
    ///
    /// `inv_freq` has `ceil(dim / 2)` entries (`dim / 2` for `Proportional`).
    pub fn frequencies(
        &self,
        base: f64,
        dim: usize,
        len: usize,
        arithmetic: RopeArithmetic,
    ) -> (Vec<f64>, f64) {
        let rotation = Rotation {
            base,
            dim,
            arithmetic,
        };
        self.rope().frequencies(&rotation, len)
    }

    /// Checks the variant against the formula width `dim` (`rotary_dims`, the whole head for
    /// `Proportional`).
    pub(crate) fn validate(&self, dim: usize) -> Result<(), PositionError> {
        let rope = self.rope();
        let factor = rope.factor();
        if !factor.is_finite() || factor <= 0.0 || (rope.factor_at_least_one() && factor < 1.0) {
            return invalid(
                format!("{self:?}"),
                "a context-extension factor is a finite number of at least 1 (the test \
                 length over the trained length)",
                "use RopeScaling::None for the trained length, or a factor such as 2.0 for \
                 twice it"
                    .into(),
            );
        }
        rope.validate(dim)
    }
}

/// `base ** (torch.arange(0, width, 2).float() / dim)` as transformers computes it in f32 on
/// the CPU: the base rounded to f32, the exponents divided in f32 (exactly rounded), and the
/// power from [`torch_pow::pow_row`], which reproduces torch's SLEEF chunks and glibc tail bit
/// for bit (a correctly rounded pow is 1 ulp off in about 2% of the entries torch computes in
/// vector chunks).
fn torch_powers(base: f64, width: usize, dim: usize) -> Vec<f64> {
    let exponents: Vec<f32> = (0..width)
        .step_by(2)
        .map(|j| (j as f64 / dim as f64) as f32)
        .collect();
    torch_pow::pow_row(base as f32, &exponents)
        .into_iter()
        .map(f64::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Meta's `apply_scaling` (llama-models, `llama3/model.py`), in f64: the reference the
    /// `llama3` rope_type reproduces.
    fn meta_apply_scaling(freqs: &[f64], c: &Llama3Scaling) -> Vec<f64> {
        let old = c.original_max_position_embeddings as f64;
        let (low_wavelen, high_wavelen) = (old / c.low_freq_factor, old / c.high_freq_factor);
        freqs
            .iter()
            .map(|&freq| {
                let wavelen = 2.0 * std::f64::consts::PI / freq;
                if wavelen < high_wavelen {
                    freq
                } else if wavelen > low_wavelen {
                    freq / c.factor
                } else {
                    let smooth = (old / wavelen - c.low_freq_factor)
                        / (c.high_freq_factor - c.low_freq_factor);
                    (1.0 - smooth) * freq / c.factor + smooth * freq
                }
            })
            .collect()
    }

    #[test]
    fn llama3_follows_metas_apply_scaling_with_llama_3_1s_values() {
        let c = Llama3Scaling::new(8.0, 1.0, 4.0, 8192);
        let exact =
            RopeScaling::Llama3(c.clone()).frequencies(500_000.0, 128, 0, RopeArithmetic::Exact);
        let plain = RopeScaling::None
            .frequencies(500_000.0, 128, 0, RopeArithmetic::Exact)
            .0;
        let want = meta_apply_scaling(&plain, &c);
        for (j, (got, want)) in exact.0.iter().zip(&want).enumerate() {
            assert!(
                (got - want).abs() <= 1e-12 * want,
                "pair {j}: {got} vs {want}"
            );
        }
        // All three bands are present at these values: kept, divided, blended.
        let kept = exact.0.iter().zip(&plain).filter(|(g, p)| g == p).count();
        let divided = exact
            .0
            .iter()
            .zip(&plain)
            .filter(|(g, p)| (*g * 8.0 - *p).abs() < 1e-15)
            .count();
        assert!(
            kept > 0 && divided > 0 && kept + divided < 64,
            "{kept} kept, {divided} divided"
        );
    }

    proptest! {
        /// With nothing to extend (factor 1, all-one longrope factors, a proportional rotation of
        /// every pair, a dynamic limit not passed), every variant gives the default frequencies and no attention factor, in
        /// both arithmetics: the variants differ from RoPE only by the extension.
        #[test]
        fn every_variant_at_factor_one_is_the_default(
            pairs in 2usize..40,
            base in prop::sample::select(vec![100.0, 10_000.0, 500_000.0, 1e6]),
            original in 2usize..5000,
            len in 0usize..20_000,
            transformers in any::<bool>(),
        ) {
            let dim = 2 * pairs;
            let arithmetic = if transformers { RopeArithmetic::Transformers } else { RopeArithmetic::Exact };
            let (plain, _) = RopeScaling::None.frequencies(base, dim, len, arithmetic);
            let variants = [
                RopeScaling::Interpolation(1.0),
                RopeScaling::Llama3(Llama3Scaling::new(1.0, 1.0, 4.0, original)),
                RopeScaling::Yarn(YarnScaling::new(1.0, original)),
                RopeScaling::LongRope(LongRopeScaling::new(vec![1.0; pairs], vec![1.0; pairs], original, 1.0)),
                RopeScaling::Proportional(ProportionalScaling::new()),
                // Dynamic grows its base with the length even at factor 1: below its limit only.
                RopeScaling::Dynamic(DynamicScaling::new(2.0, len.max(1))),
            ];
            for scaling in variants {
                let (inv, attention) = scaling.frequencies(base, dim, len, arithmetic);
                prop_assert_eq!(attention, 1.0, "{:?}", scaling);
                prop_assert_eq!(inv.len(), plain.len());
                for (j, (a, b)) in inv.iter().zip(&plain).enumerate() {
                    prop_assert!((a - b).abs() <= 1e-6 * b, "{:?} pair {}: {} vs {}", scaling, j, a, b);
                }
            }
        }

        /// Interpolation-like variants never turn a pair faster than the default, and yarn's
        /// and llama3's lowest frequency is slowed by the full factor.
        #[test]
        fn extensions_only_slow_the_rotation(
            pairs in 4usize..64,
            factor in 1.0f64..64.0,
            original in 64usize..10_000,
        ) {
            let (dim, base, exact) = (2 * pairs, 10_000.0, RopeArithmetic::Exact);
            let (plain, _) = RopeScaling::None.frequencies(base, dim, 0, exact);
            for scaling in [
                RopeScaling::Interpolation(factor),
                RopeScaling::Llama3(Llama3Scaling::new(factor, 1.0, 4.0, original)),
                RopeScaling::Yarn(YarnScaling::new(factor, original)),
            ] {
                let (inv, _) = scaling.frequencies(base, dim, 0, exact);
                for (a, b) in inv.iter().zip(&plain) {
                    prop_assert!(*a <= b * (1.0 + 1e-12), "{:?}: {} faster than {}", scaling, a, b);
                    prop_assert!(*a >= b / factor * (1.0 - 1e-12), "{:?}: {} slower than {} / factor", scaling, a, b);
                }
            }
        }
    }
}
