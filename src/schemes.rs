//! Every position scheme by name, for examples and tools: what each puts in the embedding and
//! in the attention blocks.

use std::fmt;
use std::str::FromStr;

use crate::{
    AbsolutePositionConfig, AlibiConfig, LearnedConfig, LearnedInit, RopeConfig, ScoreBiasConfig,
    SinusoidalConfig, T5BiasConfig,
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
