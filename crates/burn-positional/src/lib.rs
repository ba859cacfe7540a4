#![doc = include_str!("../README.md")]
//!
//! The positional layer of a transformer for [burn](https://burn.dev): token ids in,
//! position-aware vectors out, on any burn `Device` (wgpu, flex, ndarray, with or without
//! autodiff).
//!
//! # Vocabulary
//!
//! One name per dimension, everywhere: `batch`, `seq` (tokens per row), `d_model` (output
//! width), `d_token` and `d_position` (the two parts of a concatenation), `vocab_size`,
//! `max_len` (rows of a learned table), `n_heads`, `d_head`.
//!
//! # Errors
//!
//! Programming errors panic with the values in the message (burn's convention, documented under
//! `# Panics`). Input from outside (token ids, position ids, config files, saved records) has a
//! `try_` twin returning [`PositionError`], whose message names the value, the limit and the fix.
//! The panicking twins panic with that same message.
//!
//! The one exception is the forward itself: [`EmbeddingWithPosition::forward`] never reads from
//! the device (a read stalls a GPU queue), so bad token ids come out as NaN rows and
//! [`EmbeddingWithPosition::check_inputs`] names them when the caller chooses;
//! [`EmbeddingWithPosition::try_forward`] checks at once.

#![warn(missing_docs)]

mod alibi;
mod attention;
mod cache;
mod embedding;
mod error;
pub mod hf_config;
mod ids;
mod learned;
mod limits;
mod materialize;
#[cfg(feature = "pretrained")]
pub mod pretrained;
mod records;
mod reference;
mod rope;
mod scheme;
mod sinusoidal;
mod status;
mod t5_bias;

pub use alibi::{Alibi, AlibiConfig, alibi_slopes};
pub use attention::{
    AttentionInput, AttentionOutput, KvCache, ScoreBias, ScoreBiasConfig, SelfAttention,
    SelfAttentionConfig, TILE_VALUES, padding_mask,
};
/// The fused forward ([`EmbeddingWithPosition`]'s default path), for direct use.
pub use burn_positional_kernels as kernels;
/// Add or concatenate: one type for the layer's config and the kernels.
pub use burn_positional_kernels::Combine;
pub use cache::CACHED_SQUARES;
/// Test hooks (the `testing` feature): how often this thread built a shape cache.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub use cache::shape_cache_builds;
pub use embedding::{EmbeddingWithPosition, EmbeddingWithPositionConfig};
pub use error::PositionError;
pub use hf_config::{HF_ROPE_TYPES, HfConfigError};
pub use ids::check_token_ids;
pub use learned::{LearnedConfig, LearnedInit, LearnedPosition};
pub use limits::{GROWN_TABLE_VALUES, MAX_TABLE_VALUES};
pub use materialize::materialize;
pub use records::read_record;
pub use rope::{
    DynamicScaling, Llama3Scaling, LongRopeScaling, ProportionalScaling, Rope, RopeArithmetic,
    RopeConfig, RopeLayout, RopeScaling, YarnScaling,
};
pub use scheme::{AbsolutePosition, NoPosition, PositionSchemeConfig, Positions};
pub use sinusoidal::{SinusoidalConfig, SinusoidalPosition, sinusoid_frequencies, sinusoid_rows};
pub use status::KEPT_STATUSES;
pub use t5_bias::{T5Bias, T5BiasConfig, t5_bucket};

/// Compile-time: every public module can be shared by threads and cloned into workers (burn's
/// data-parallel training clones the model onto each device's thread).
const _: () = {
    const fn shared<T: Send + Sync + Clone + 'static>() {}
    shared::<EmbeddingWithPosition>();
    shared::<SelfAttention>();
    shared::<AbsolutePosition>();
    shared::<NoPosition>();
    shared::<SinusoidalPosition>();
    shared::<LearnedPosition>();
    shared::<T5Bias>();
    shared::<Alibi>();
    shared::<Rope>();
    shared::<ScoreBias>();
    shared::<KvCache>();
    shared::<PositionError>();
};
