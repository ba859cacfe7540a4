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

// The tree follows the README's families: the embedding; absolute positions (added to the
// token vectors); rotary (queries and keys); score biases (attention scores); the attention that
// takes them; pretrained weights. Infrastructure (shape caches, size limits) is private.
pub mod absolute;
pub mod attention;
mod cache;
pub mod embedding;
mod error;
mod limits;
#[cfg(feature = "pretrained")]
pub mod pretrained;
pub mod rotary;
pub mod score_bias;
pub mod training;

pub use absolute::{
    AbsolutePosition, AbsolutePositionConfig, LearnedConfig, LearnedInit, LearnedPosition,
    SinusoidalConfig, SinusoidalPosition,
};
pub use attention::{
    AttendOptions, AttentionBias, AttentionInput, AttentionOutput, AttentionPositions, KvCache,
    SelfAttention, SelfAttentionConfig, Window, attend, check_softcap, padding_mask, softcap,
    try_attend, try_softcap,
};
/// Add or concatenate: one type for the layer's config and the kernels.
pub use burn_positional_kernels::Combine;
/// Whether a device computes on the host CPU (flex, ndarray).
pub use burn_positional_kernels::computes_on_host;
/// Which path a device takes: the fused kernel (its backend's feature is on) or plain tensor ops.
pub use burn_positional_kernels::fused_covers;
pub use burn_positional_kernels::{Grid, GridError};
/// A few rows times a matrix or its transpose (a decoding step's linear layers and tied head),
/// in one kernel on wgpu and CUDA.
pub use burn_positional_kernels::{SKINNY_MAX_ROWS, skinny_matmul, skinny_matmul_transposed};
pub use embedding::{EmbeddingWithPosition, EmbeddingWithPositionConfig, Positions};
pub use error::PositionError;
pub use rotary::hf_config::HfConfigError;
pub use rotary::{
    DynamicScaling, Llama3Scaling, LongRopeScaling, ProportionalScaling, Rope, RopeArithmetic,
    RopeAxes, RopeConfig, RopeLayout, RopeScaling, YarnScaling,
};
pub use score_bias::{Alibi, AlibiConfig, ScoreBias, ScoreBiasConfig, T5Bias, T5BiasConfig};

/// Hooks for this crate's own tests (the `testing` feature): counters and tuning constants.
/// Nothing here is stable.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing {
    pub use crate::cache::{CACHED_SQUARES, host_table_builds, shape_cache_builds};
    pub use crate::embedding::status::KEPT_STATUSES;
    pub use crate::limits::{GROWN_TABLE_VALUES, MAX_TABLE_VALUES};
    pub use burn_positional_kernels::{flash_attention_calls, fused_calls, fused_rope_calls};
}

/// Compile-time: every public module can be shared by threads and cloned into workers (burn's
/// data-parallel training clones the model onto each device's thread).
const _: () = {
    const fn shared<T: Send + Sync + Clone + 'static>() {}
    shared::<EmbeddingWithPosition>();
    shared::<SelfAttention>();
    shared::<AbsolutePosition>();
    shared::<SinusoidalPosition>();
    shared::<LearnedPosition>();
    shared::<T5Bias>();
    shared::<Alibi>();
    shared::<Rope>();
    shared::<ScoreBias>();
    shared::<KvCache>();
    shared::<PositionError>();
};
