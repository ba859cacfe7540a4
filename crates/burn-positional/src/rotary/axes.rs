//! Rotary positions on grids: which axis of a position (frame, row, column) turns each pair,
//! and with which frequency. Text has one axis; the vision families split the pairs between the
//! axes, each in its own layout, which [`RopeAxes`] names.

use burn::config::Config;

use super::scaling::{RopeArithmetic, RopeScaling};
use crate::PositionError;

/// How the pairs of a rotation are dealt to the axes of a position (frame, row, column):
///
/// | `RopeAxes` | pair `j` of `P` turns with | frequency | used by |
/// | --- | --- | --- | --- |
/// | `Sequence` | the position | `inv_freq[j]` | every text model |
/// | `MRope(sections)` | axis `i % 3` of the section `i` holding `j` | `inv_freq[j]` | Qwen2-VL, Qwen2.5-VL (`mrope_section`) |
/// | `MRopeInterleaved(sections)` | row if `j % 3 == 1` and `j < 3 h`, column if `j % 3 == 2` and `j < 3 w`, else frame | `inv_freq[j]` | Qwen3-VL (`mrope_interleaved`) |
/// | `Axial(n)` | axis `j / (P / n)` | `inv_freq'[j % (P / n)]` of a rotation `rotary_dims / n` wide | Qwen2-VL's and Qwen2.5-VL's vision encoders |
/// | `AxialAlternate(n)` | axis `a` for the `ceil((P - a) / n)` pairs after those of axes `< a` | `inv_freq[n i + a]` for the axis's `i`-th pair | Pixtral |
///
/// A position with one axis (text, or `Positions::Offset`/`Explicit`) sits at that position on
/// every axis, as M-RoPE places text tokens: the rotation is then plain RoPE with these
/// frequencies.
#[derive(Config, Debug, PartialEq)]
pub enum RopeAxes {
    /// One axis: every pair turns with the token's position. The default.
    Sequence,
    /// M-RoPE (Qwen2-VL): the pairs cut into consecutive sections (`mrope_section`, e.g.
    /// `[16, 24, 24]` for 64 pairs), section `i` turning with axis `i % 3` (frame, row,
    /// column); pair `j` keeps the whole rotation's frequency `j`.
    MRope(Vec<usize>),
    /// Qwen3-VL's interleaved M-RoPE: with `mrope_section = [t, h, w]`, pair `j` turns with the
    /// row when `j % 3 == 1` and `j < 3 h`, with the column when `j % 3 == 2` and `j < 3 w`,
    /// with the frame otherwise; pair `j` keeps frequency `j`.
    MRopeInterleaved(Vec<usize>),
    /// Axial, in blocks: the pairs cut into `n` equal blocks in axis order (rows then columns),
    /// each block with the frequencies of a rotation `rotary_dims / n` wide (Qwen2-VL's vision
    /// encoder: `VisionRotaryEmbedding(head_dim / 2)`).
    Axial(usize),
    /// Axial, frequencies dealt in turn: frequency `k` of the whole rotation goes to axis
    /// `k % n`, then the pairs are grouped by axis (Pixtral: rows take `freqs[::2]`, columns
    /// `freqs[1::2]`). When `n` does not divide the pairs, the first axes take one pair more, as
    /// the slices do (9 pairs: rows 5, columns 4).
    AxialAlternate(usize),
}

impl RopeAxes {
    /// How many axes a position has for this layout.
    pub fn axes(&self) -> usize {
        match self {
            Self::Sequence => 1,
            Self::MRope(_) | Self::MRopeInterleaved(_) => 3,
            Self::Axial(n) | Self::AxialAlternate(n) => *n,
        }
    }

    /// A short name for messages and `Display`.
    pub fn name(&self) -> String {
        match self {
            Self::Sequence => "sequence".into(),
            Self::MRope(s) => format!("mrope {s:?}"),
            Self::MRopeInterleaved(s) => format!("mrope interleaved {s:?}"),
            Self::Axial(n) => format!("axial {n}"),
            Self::AxialAlternate(n) => format!("axial alternate {n}"),
        }
    }

    /// Checks the layout for a rotation `rotary_dims` wide (`pairs` whole pairs) and its
    /// scaling: M-RoPE's sections summing to the pairs, Qwen3-VL's three sections, `Axial`'s
    /// axes dividing the pairs, `AxialAlternate`'s at most as many as the pairs, and no context
    /// extension (no checkpoint combines the two, and transformers' length-dependent types read
    /// one axis).
    pub fn validate(
        &self,
        rotary_dims: usize,
        pairs: usize,
        scaling: &RopeScaling,
    ) -> Result<(), PositionError> {
        if *self == Self::Sequence {
            return Ok(());
        }
        if *scaling != RopeScaling::None {
            return Err(PositionError::InvalidConfig {
                field: "RopeConfig::scaling",
                value: scaling.rope_type().to_string(),
                rule: "rotary positions on several axes take the trained angles only",
                fix: format!(
                    "use RopeScaling::None with axes {}, or RopeAxes::Sequence",
                    self.name()
                ),
            });
        }
        match self {
            Self::Sequence => Ok(()),
            // Qwen3-VL's interleaving reads three sections and never their sum.
            Self::MRopeInterleaved(sections) if sections.len() != 3 => {
                Err(PositionError::InvalidConfig {
                    field: "mrope_section",
                    value: format!("{sections:?} ({} sections)", sections.len()),
                    rule: "the interleaved layout (mrope_interleaved) reads three sections, \
                           [frame, row, column] pairs",
                    fix: format!(
                        "give three sections, e.g. [24, 20, 20] as Qwen3-VL does for 64 pairs \
                         (this rotation has {pairs})"
                    ),
                })
            }
            Self::MRopeInterleaved(_) => Ok(()),
            Self::MRope(sections) => {
                let sum: usize = sections.iter().sum();
                if sum != pairs || sections.is_empty() {
                    return Err(PositionError::InvalidConfig {
                        field: "mrope_section",
                        value: format!("{sections:?} (sum {sum})"),
                        rule: "M-RoPE's sections share out the rotated pairs exactly",
                        fix: format!(
                            "give sections that sum to {pairs}, the pairs of a rotation \
                             {rotary_dims} wide (head_dim / 2), e.g. [16, 24, 24] for 64"
                        ),
                    });
                }
                Ok(())
            }
            Self::Axial(n) => {
                let n = *n;
                // Each block is a rotation `rotary_dims / n` wide of whole pairs.
                if n == 0 || n > 3 || rotary_dims % (2 * n) != 0 {
                    return Err(PositionError::InvalidConfig {
                        field: "RopeAxes::Axial",
                        value: n.to_string(),
                        rule: "blocked axial rotation has 1 to 3 axes, each a rotation of the \
                               same number of whole pairs (transformers' Qwen2-VL vision rotary \
                               fails on any other head too)",
                        fix: format!(
                            "choose axes that divide the {pairs} pairs (a rotation {rotary_dims} \
                             wide), or RopeAxes::AxialAlternate, which deals them out unevenly"
                        ),
                    });
                }
                Ok(())
            }
            Self::AxialAlternate(n) => {
                let n = *n;
                if n == 0 || n > 3 || n > pairs {
                    return Err(PositionError::InvalidConfig {
                        field: "RopeAxes::AxialAlternate",
                        value: n.to_string(),
                        rule: "axial rotation with frequencies dealt in turn has 1 to 3 axes, \
                               each taking at least one pair",
                        fix: format!(
                            "choose 1 to {} axes for the {pairs} pairs (a rotation {rotary_dims} \
                             wide)",
                            pairs.clamp(1, 3)
                        ),
                    });
                }
                Ok(())
            }
        }
    }

    /// The axis each pair turns with, for `pairs` pairs (checked by [`validate`](Self::validate)).
    pub fn pair_axes(&self, pairs: usize) -> Vec<usize> {
        match self {
            Self::Sequence => vec![0; pairs],
            Self::MRope(sections) => sections
                .iter()
                .enumerate()
                .flat_map(|(i, &len)| std::iter::repeat_n(i % 3, len))
                .collect(),
            Self::MRopeInterleaved(sections) => (0..pairs)
                .map(|j| match j % 3 {
                    1 if j < 3 * sections[1] => 1,
                    2 if j < 3 * sections[2] => 2,
                    _ => 0,
                })
                .collect(),
            Self::Axial(n) => (0..pairs).map(|j| j / (pairs / n)).collect(),
            // Axis `a` takes frequencies a, a + n, ...: `ceil((pairs - a) / n)` of them.
            Self::AxialAlternate(n) => (0..*n)
                .flat_map(|a| std::iter::repeat_n(a, pairs.saturating_sub(a).div_ceil(*n)))
                .collect(),
        }
    }

    /// The inverse frequency of each pair, given how the scaling computes the frequencies of a
    /// rotation of some width (`frequencies(width)`): the whole rotation's for `Sequence` and
    /// M-RoPE, `n` copies of a rotation `rotary_dims / n` wide for `Axial`, the whole
    /// rotation's dealt to the axes for `AxialAlternate`.
    pub(crate) fn pair_frequencies(
        &self,
        rotary_dims: usize,
        mut frequencies: impl FnMut(usize) -> Vec<f64>,
    ) -> Vec<f64> {
        match self {
            Self::Sequence | Self::MRope(_) | Self::MRopeInterleaved(_) => frequencies(rotary_dims),
            Self::Axial(n) => frequencies(rotary_dims / n).repeat(*n),
            Self::AxialAlternate(n) => {
                let all = frequencies(rotary_dims);
                (0..*n)
                    .flat_map(|axis| all.iter().copied().skip(axis).step_by(*n))
                    .collect()
            }
        }
    }
}

/// `cos` and `sin` of each token's angles, row-major `[tokens, pairs]`: pair `j` of a token at
/// coordinates `c` turns by `c[pair_axes[j]] * inv_freq[j]`, rounded as `arithmetic` says (as
/// the one-axis tables are: once from f64, or the f32 product then cos and sin).
pub(crate) fn grid_angle_rows(
    coordinates: &[i64],
    axes: usize,
    pair_axes: &[usize],
    inv_freq: &[f64],
    arithmetic: RopeArithmetic,
) -> (Vec<f32>, Vec<f32>) {
    let tokens = coordinates.len() / axes.max(1);
    let (mut cos, mut sin) = (
        Vec::with_capacity(tokens * inv_freq.len()),
        Vec::with_capacity(tokens * inv_freq.len()),
    );
    for token in coordinates.chunks_exact(axes) {
        for (&axis, &w) in pair_axes.iter().zip(inv_freq) {
            let p = token[axis];
            let (s, c) = match arithmetic {
                RopeArithmetic::Exact => (p as f64 * w).sin_cos(),
                RopeArithmetic::Transformers => ((p as f32 * w as f32) as f64).sin_cos(),
            };
            cos.push(c as f32);
            sin.push(s as f32);
        }
    }
    (cos, sin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mrope_sections_cycle_the_three_axes() {
        let axes = RopeAxes::MRope(vec![2, 3, 3]).pair_axes(8);
        assert_eq!(axes, [0, 0, 1, 1, 1, 2, 2, 2]);
        // Qwen3-VL's interleaving with [3, 3, 2] over 8 pairs: t h w t h w t h.
        let axes = RopeAxes::MRopeInterleaved(vec![3, 3, 2]).pair_axes(8);
        assert_eq!(axes, [0, 1, 2, 0, 1, 2, 0, 1]);
    }

    #[test]
    fn axial_layouts_deal_frequencies_as_the_families_do() {
        let f = |width: usize| (0..width / 2).map(|k| (width * 100 + k) as f64).collect();
        // Qwen2-VL's vision encoder: two blocks, each a rotation half as wide.
        assert_eq!(
            RopeAxes::Axial(2).pair_frequencies(8, f),
            [400.0, 401.0, 400.0, 401.0]
        );
        // Pixtral: rows take freqs[::2], columns freqs[1::2].
        assert_eq!(
            RopeAxes::AxialAlternate(2).pair_frequencies(8, f),
            [800.0, 802.0, 801.0, 803.0]
        );
        assert_eq!(RopeAxes::Axial(2).pair_axes(4), [0, 0, 1, 1]);
        // Pixtral with 9 pairs (head width 18): rows take freqs[::2] (5 of them), columns
        // freqs[1::2] (4), as its `PixtralRotaryEmbedding` slices them.
        assert_eq!(
            RopeAxes::AxialAlternate(2).pair_frequencies(18, f),
            [
                1800.0, 1802.0, 1804.0, 1806.0, 1808.0, 1801.0, 1803.0, 1805.0, 1807.0
            ]
        );
        assert_eq!(
            RopeAxes::AxialAlternate(2).pair_axes(9),
            [0, 0, 0, 0, 0, 1, 1, 1, 1]
        );
        assert_eq!(RopeAxes::AxialAlternate(3).pair_axes(4), [0, 0, 1, 2]);
        assert!(
            RopeAxes::AxialAlternate(2)
                .validate(18, 9, &RopeScaling::None)
                .is_ok()
        );
    }

    #[test]
    fn bad_sections_name_the_sum_and_the_pairs() {
        let err = RopeAxes::MRope(vec![16, 24, 16])
            .validate(128, 64, &RopeScaling::None)
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("[16, 24, 16] (sum 56)"), "{text}");
        assert!(text.contains("sum to 64"), "{text}");
        let err = RopeAxes::Axial(3)
            .validate(16, 8, &RopeScaling::None)
            .unwrap_err();
        assert!(err.to_string().contains("divide the 8 pairs"), "{err}");
        assert!(err.to_string().contains("`RopeAxes::Axial`"), "{err}");
        let err = RopeAxes::AxialAlternate(3)
            .validate(4, 2, &RopeScaling::None)
            .unwrap_err();
        assert!(
            err.to_string().contains("`RopeAxes::AxialAlternate` = 3"),
            "{err}"
        );
        // Two sections summing to the pairs: the interleaved layout wants three, and says so
        // (issue 71: it asked for sections summing to 12, which these do).
        let err = RopeAxes::MRopeInterleaved(vec![6, 6])
            .validate(24, 12, &RopeScaling::None)
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("[6, 6] (2 sections)")
                && text.contains("give three sections")
                && !text.contains("sum to"),
            "{text}"
        );
        let err = RopeAxes::Axial(2)
            .validate(16, 8, &RopeScaling::Interpolation(2.0))
            .unwrap_err();
        assert!(err.to_string().contains("RopeScaling::None"), "{err}");
    }
}
