//! Every position scheme by name, for examples and tools: what each puts in the embedding and
//! in the attention blocks. [`Scheme`] for sequences (text), [`GridScheme`] for the patches of
//! a picture (rows and columns).

use std::fmt;
use std::str::FromStr;

use burn_positional::absolute::PatchGridConfig;

use crate::{
    AbsolutePositionConfig, AlibiConfig, Grid, LearnedConfig, LearnedInit, RopeAxes, RopeConfig,
    RopeLayout, ScoreBiasConfig, SinusoidalConfig, T5BiasConfig,
};

/// A position scheme, by the name users know it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// No positions anywhere.
    None,
    /// Sinusoidal vectors added to the embedding (Vaswani et al. 2017).
    Sinusoidal,
    /// A trained table added to the embedding (BERT, GPT).
    Learned,
    /// A trained table that starts as the sinusoidal one.
    LearnedFromSinusoidal,
    /// Rotary positions on queries and keys (Su et al. 2021; LLaMA).
    Rope,
    /// Linear distance penalties on the scores (Press et al. 2022).
    Alibi,
    /// T5's bucketed relative bias on the scores (Raffel et al. 2020).
    T5,
}

/// Where a scheme's parts go.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemeParts {
    /// The embedding's absolute scheme.
    pub embedding: AbsolutePositionConfig,
    /// Rotary positions for every attention block.
    pub rope: Option<RopeConfig>,
    /// A score bias for every attention block.
    pub score_bias: Option<ScoreBiasConfig>,
}

impl Scheme {
    /// Every scheme, in the order of the table of modern schemes.
    pub const ALL: [Scheme; 7] = [
        Scheme::None,
        Scheme::Sinusoidal,
        Scheme::Learned,
        Scheme::LearnedFromSinusoidal,
        Scheme::T5,
        Scheme::Rope,
        Scheme::Alibi,
    ];

    /// The parts of this scheme for blocks with `n_heads` heads `d_head` wide and a learned
    /// table of `max_len` rows. The same for causal and bidirectional blocks: the blocks decide
    /// (ALiBi's bias is masked by a causal block, T5's buckets follow the block's `causal`).
    pub fn parts(self, max_len: usize, n_heads: usize, d_head: usize) -> SchemeParts {
        let none = SchemeParts {
            embedding: AbsolutePositionConfig::None,
            rope: None,
            score_bias: None,
        };
        match self {
            Self::None => none,
            Self::Sinusoidal => SchemeParts {
                embedding: SinusoidalConfig::new().into(),
                ..none
            },
            Self::Learned => SchemeParts {
                embedding: LearnedConfig::new(max_len).into(),
                ..none
            },
            Self::LearnedFromSinusoidal => SchemeParts {
                embedding: LearnedConfig::new(max_len)
                    .with_init(LearnedInit::Sinusoidal { base: 10_000.0 })
                    .into(),
                ..none
            },
            Self::Rope => SchemeParts {
                rope: Some(RopeConfig::new(d_head)),
                ..none
            },
            Self::Alibi => SchemeParts {
                score_bias: Some(ScoreBiasConfig::Alibi(AlibiConfig::new(n_heads))),
                ..none
            },
            Self::T5 => SchemeParts {
                score_bias: Some(ScoreBiasConfig::T5(T5BiasConfig::new(n_heads))),
                ..none
            },
        }
    }
}

impl FromStr for Scheme {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|s| s.to_string() == name.to_ascii_lowercase())
            .ok_or_else(|| {
                let names: Vec<String> = Self::ALL.iter().map(|s| s.to_string()).collect();
                format!(
                    "unknown scheme {name:?}: choose one of {}",
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Sinusoidal => "sinusoidal",
            Self::Learned => "learned",
            Self::LearnedFromSinusoidal => "learned-from-sinusoidal",
            Self::Rope => "rope",
            Self::Alibi => "alibi",
            Self::T5 => "t5",
        })
    }
}

/// A position scheme for the patches of a picture, on a grid of rows and columns. Score biases
/// (ALiBi, T5) measure distances along a sequence, where a distance has one axis, so they have
/// no 2D form here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GridScheme {
    /// No positions anywhere.
    None,
    /// A trained table with one row per patch of the grid, added to the patch vectors (ViT,
    /// Dosovitskiy et al. 2021; here without a class token), starting as ViT's: `N(0, 0.02)`.
    Learned,
    /// MAE's 2D sin-cos (He et al. 2022): half the width for the column, half for the row,
    /// added to the patch vectors.
    Sincos,
    /// Axial 2D RoPE on queries and keys: the first half of the pairs turns with the row, the
    /// second half with the column (Qwen2-VL's vision encoder).
    Rope,
    /// Axial 2D RoPE in Pixtral's layout: the frequencies dealt to rows and columns in turn.
    RopePixtral,
}

impl GridScheme {
    /// Every grid scheme.
    pub const ALL: [GridScheme; 5] = [
        GridScheme::None,
        GridScheme::Learned,
        GridScheme::Sincos,
        GridScheme::Rope,
        GridScheme::RopePixtral,
    ];

    /// The parts of this scheme for patches on `grid` and heads `d_head` wide. Every part is
    /// the layer's own: a learned patch grid ([`PatchGridConfig`], no prefix rows), MAE's
    /// table ([`SinusoidalConfig`] read with `on_grid`), an axial rope ([`RopeAxes`], in the
    /// half-split layout of Qwen2-VL's and Pixtral's code); a rope turns at the grid's
    /// positions when the block's input says where the tokens sit
    /// ([`AttentionInput::rotary_at`](crate::AttentionInput::rotary_at)).
    pub fn parts(self, grid: &Grid, d_head: usize) -> SchemeParts {
        let none = SchemeParts {
            embedding: AbsolutePositionConfig::None,
            rope: None,
            score_bias: None,
        };
        let rope = |axes| {
            RopeConfig::new(d_head)
                .with_layout(RopeLayout::HalfSplit)
                .with_axes(axes)
        };
        let axes = grid.axes();
        match self {
            Self::None => none,
            Self::Learned => SchemeParts {
                embedding: LearnedConfig::new(grid.len())
                    .with_grid(Some(
                        PatchGridConfig::new(grid.sizes().to_vec()).with_prefix(0),
                    ))
                    .into(),
                ..none
            },
            Self::Sincos => SchemeParts {
                embedding: SinusoidalConfig::new().into(),
                ..none
            },
            Self::Rope => SchemeParts {
                rope: Some(rope(RopeAxes::Axial(axes))),
                ..none
            },
            Self::RopePixtral => SchemeParts {
                rope: Some(rope(RopeAxes::AxialAlternate(axes))),
                ..none
            },
        }
    }
}

impl FromStr for GridScheme {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|s| s.to_string() == name.to_ascii_lowercase())
            .ok_or_else(|| {
                let names: Vec<String> = Self::ALL.iter().map(|s| s.to_string()).collect();
                format!(
                    "unknown grid scheme {name:?}: choose one of {}",
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for GridScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Learned => "learned-2d",
            Self::Sincos => "sincos-2d",
            Self::Rope => "rope-2d",
            Self::RopePixtral => "rope-2d-pixtral",
        })
    }
}
