//! Context extension: how the rotation frequencies of a model trained on sequences up to some
//! length are changed to reach further, as every Hugging Face checkpoint configures it.
//!
//! Each variant computes the inverse frequencies `inv_freq[j]` (position `p` rotates pair `j`
//! by `p * inv_freq[j]`) and an attention factor multiplying both cos and sin, following
//! transformers' `modeling_rope_utils.py` (v5) line by line, defaults and edge cases included:
//!
//! | variant | transformers `rope_type` | used by |
//! | --- | --- | --- |
//! | [`None`](RopeScaling::None) | `default` | Llama 3 8B, Mistral, Qwen 2/2.5/3, Gemma 1/2 |
//! | [`Interpolation`](RopeScaling::Interpolation) | `linear` | Gemma 3 global layers |
//! | [`NtkAware`](RopeScaling::NtkAware) | (none: `dynamic` at a fixed length) | bloc97's NTK-aware scaling |
//! | [`Dynamic`](RopeScaling::Dynamic) | `dynamic` | opt-in |
//! | [`Yarn`](RopeScaling::Yarn) | `yarn` | Qwen 2.5 long context, DeepSeek V2/V3, gpt-oss |
//! | [`LongRope`](RopeScaling::LongRope) | `longrope` | Phi-3 / 3.5 128k, Phi-4-mini |
//! | [`Llama3`](RopeScaling::Llama3) | `llama3` | Llama 3.1, 3.2, 3.3 |
//! | [`Proportional`](RopeScaling::Proportional) | `proportional` | Gemma 4 full-attention layers |
//!
//! `Dynamic` and `LongRope` depend on the length of the sequence being attended (the last
//! position plus one, as transformers' `max(position_ids) + 1`); see [`Rope`](super::Rope) for
//! what that means for cached decoding.

use burn::config::Config;

use super::torch_pow;
use crate::PositionError;

/// How the angle tables are rounded.
#[derive(Config, Debug, PartialEq, Copy)]
pub enum RopeArithmetic {
    /// Frequencies and angles in f64, rounded once to f32: accurate at any position. The
    /// default.
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

impl RopeScaling {
    /// The context-extension factor, 1 for `None`.
    pub fn factor(&self) -> f64 {
        match self {
            Self::None => 1.0,
            Self::Interpolation(s) | Self::NtkAware(s) => *s,
            Self::Dynamic(c) => c.factor,
            Self::Yarn(c) => c.factor,
            Self::LongRope(c) => c.factor,
            Self::Llama3(c) => c.factor,
            Self::Proportional(c) => c.factor,
        }
    }

    /// Whether the frequencies depend on the length of the sequence (`Dynamic`, `LongRope`).
    pub fn is_length_dependent(&self) -> bool {
        matches!(self, Self::Dynamic(_) | Self::LongRope(_))
    }

    /// Transformers' `rope_type` of this variant (`NtkAware` has none: `"ntk_aware"`).
    pub fn rope_type(&self) -> &'static str {
        match self {
            Self::None => "default",
            Self::Interpolation(_) => "linear",
            Self::NtkAware(_) => "ntk_aware",
            Self::Dynamic(_) => "dynamic",
            Self::Yarn(_) => "yarn",
            Self::LongRope(_) => "longrope",
            Self::Llama3(_) => "llama3",
            Self::Proportional(_) => "proportional",
        }
    }

    pub(crate) fn regime(&self, len: usize) -> Regime {
        match self {
            Self::Dynamic(c) if len > c.max_position_embeddings => Regime::Length(len),
            Self::LongRope(c) if len > c.original_max_position_embeddings => Regime::Long,
            _ => Regime::Trained,
        }
    }

    /// A length that selects `regime` (the inverse of [`regime`](Self::regime)).
    pub(crate) fn length_of(&self, regime: Regime) -> usize {
        match (self, regime) {
            (_, Regime::Length(len)) => len,
            (Self::LongRope(c), Regime::Long) => c.original_max_position_embeddings + 1,
            _ => 0,
        }
    }

    /// Number of rotated pairs for a formula width `dim`: `ceil(dim / 2)`, as transformers'
    /// `arange(0, dim, 2)`.
    pub(crate) fn pairs(dim: usize) -> usize {
        dim.div_ceil(2)
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
        let r = |x: f64| arithmetic.round(x);
        // 1 / base^(j / dim) for j in 0, 2, 4, .. < dim: `1.0 / (base ** (arange(0, dim, 2) / dim))`.
        let default = |base: f64| -> Vec<f64> {
            match arithmetic {
                RopeArithmetic::Exact => (0..dim)
                    .step_by(2)
                    .map(|j| base.powf(-(j as f64) / dim as f64))
                    .collect(),
                RopeArithmetic::Transformers => torch_powers(base, dim, dim)
                    .into_iter()
                    .map(|p| r(1.0 / p))
                    .collect(),
            }
        };
        let d = dim as f64;
        match self {
            Self::None => (default(base), 1.0),
            Self::Interpolation(s) => {
                let s = r(*s);
                (default(base).into_iter().map(|w| r(w / s)).collect(), 1.0)
            }
            Self::NtkAware(s) => (default(base * s.powf(d / (d - 2.0))), 1.0),
            Self::Dynamic(c) => {
                if len <= c.max_position_embeddings {
                    return (default(base), 1.0);
                }
                // Past the limit transformers computes the base from a tensor `seq_len`, so
                // every step is an f32 tensor op.
                let (len, max) = (len as f64, c.max_position_embeddings as f64);
                let stretch = r(r(r(r(c.factor) * r(len)) / r(max)) - r(c.factor - 1.0));
                // `tensor ** python_float`: PyTorch keeps the exponent in f64.
                let base = r(r(base) * r(stretch.powf(d / (d - 2.0))));
                (default(base), 1.0)
            }
            Self::Yarn(c) => yarn(c, base, dim, arithmetic),
            Self::LongRope(c) => {
                let factors = if len > c.original_max_position_embeddings {
                    &c.long_factor
                } else {
                    &c.short_factor
                };
                // One factor for all pairs broadcasts, as in transformers.
                let factor = |i: usize| factors[if factors.len() == 1 { 0 } else { i }];
                let inv = match arithmetic {
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
                        (1.0 + c.factor.ln() / (c.original_max_position_embeddings as f64).ln())
                            .sqrt()
                    }
                });
                (inv, attention)
            }
            Self::Llama3(c) => (llama3(c, default(base), arithmetic), 1.0),
            Self::Proportional(c) => {
                // `int(rope_proportion * head_dim // 2)`, the rest of the head's pairs still.
                let rotated = ((c.partial_rotary_factor * d) / 2.0).floor().max(0.0) as usize;
                let factor = r(c.factor);
                // `base ** (arange(0, 2 * rope_angles, 2) / head_dim)`: a row of `rotated`
                // entries, which is what torch splits into vector chunks.
                let rotated = rotated.min(dim / 2);
                let inv_rotated: Vec<f64> = match arithmetic {
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
    }

    /// Checks the variant against the formula width `dim` (`rotary_dims`, the whole head for
    /// `Proportional`).
    pub(crate) fn validate(&self, dim: usize) -> Result<(), PositionError> {
        let invalid = |value: String, rule: &'static str, fix: String| {
            Err(PositionError::InvalidConfig {
                field: "RopeConfig::scaling",
                value,
                rule,
                fix,
            })
        };
        let factor = self.factor();
        let needs_at_least_one = matches!(self, Self::Interpolation(_) | Self::NtkAware(_));
        if !factor.is_finite() || factor <= 0.0 || (needs_at_least_one && factor < 1.0) {
            return invalid(
                format!("{self:?}"),
                "a context-extension factor is a finite number of at least 1 (the test \
                 length over the trained length)",
                "use RopeScaling::None for the trained length, or a factor such as 2.0 for \
                 twice it"
                    .into(),
            );
        }
        // transformers' dynamic computes `dim / (dim - 2)` at init: only 2 divides by zero.
        if (matches!(self, Self::NtkAware(_)) && dim <= 2)
            || (matches!(self, Self::Dynamic(_)) && dim == 2)
        {
            return invalid(
                format!("{} with rotary_dims = {dim}", self.rope_type()),
                "NTK scaling raises the base to the power rotary_dims / (rotary_dims - 2), \
                 which needs more than 2 rotated dimensions",
                "rotate at least 4 dimensions, or use RopeScaling::Interpolation".into(),
            );
        }
        match self {
            Self::Dynamic(c) if c.max_position_embeddings == 0 => invalid(
                format!("{c:?}"),
                "dynamic scaling divides by max_position_embeddings",
                "set max_position_embeddings to the trained context length".into(),
            ),
            // The ramp has `dim / 2` entries for `ceil(dim / 2)` pairs: transformers broadcasts
            // one entry (dim 3) and fails on any other odd width.
            Self::Yarn(c)
                if c.original_max_position_embeddings == 0 || (dim % 2 == 1 && dim != 3) =>
            {
                invalid(
                    format!(
                        "original_max_position_embeddings {} with rotary_dims = {dim}",
                        c.original_max_position_embeddings
                    ),
                    "yarn needs a pretraining context of at least 1 and an even rotated width \
                     (its ramp has rotary_dims / 2 entries, one per pair; transformers fails \
                     on odd widths too, but 3)",
                    "set original_max_position_embeddings, and an even rotary width".into(),
                )
            }
            // One factor per pair, or one for all (broadcast, as transformers does).
            Self::LongRope(c)
                if ![1, Self::pairs(dim)].contains(&c.short_factor.len())
                    || ![1, Self::pairs(dim)].contains(&c.long_factor.len()) =>
            {
                invalid(
                    format!(
                        "short_factor of {} and long_factor of {} entries",
                        c.short_factor.len(),
                        c.long_factor.len()
                    ),
                    "longrope needs one factor per rotated pair",
                    format!(
                        "give {} factors each (rotary_dims {dim} / 2)",
                        Self::pairs(dim)
                    ),
                )
            }
            Self::LongRope(c) if c.original_max_position_embeddings < 2 => invalid(
                format!("{}", c.original_max_position_embeddings),
                "longrope's attention factor divides by ln(original_max_position_embeddings)",
                "set original_max_position_embeddings to the pretraining context".into(),
            ),
            Self::Llama3(c) if c.high_freq_factor == c.low_freq_factor => invalid(
                format!(
                    "low_freq_factor {} and high_freq_factor {}",
                    c.low_freq_factor, c.high_freq_factor
                ),
                "llama3's blend divides by high_freq_factor - low_freq_factor",
                "use Llama 3.1's values: low_freq_factor 1, high_freq_factor 4".into(),
            ),
            Self::Proportional(c) if !(0.0..=1.0).contains(&c.partial_rotary_factor) => invalid(
                format!("partial_rotary_factor {}", c.partial_rotary_factor),
                "the share of rotating pairs lies in 0..=1",
                "use a value such as 0.25".into(),
            ),
            _ => Ok(()),
        }
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

/// transformers' `_compute_yarn_parameters`.
fn yarn(c: &YarnScaling, base: f64, dim: usize, arithmetic: RopeArithmetic) -> (Vec<f64>, f64) {
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
