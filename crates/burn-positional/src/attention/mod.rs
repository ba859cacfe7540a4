//! The self-attention block that hosts the rotary and score-bias families: its config, its
//! inputs, its KV cache, and the tiled attention that computes a score bias inside tiles of
//! queries.
//!
//! - [`SelfAttentionConfig`]: its checks and `init` (`config.rs`);
//! - [`SelfAttention`] and its forwards (`block.rs`);
//! - [`AttentionInput`], [`AttentionOutput`], [`padding_mask`] (`input.rs`);
//! - [`KvCache`], bound to the block that filled it (`kv_cache.rs`);
//! - [`attend`]: attention with positions in compact form, for attention a user writes
//!   (`attend.rs`); the causal mask of the spelled-out path, cached by shape (`mask.rs`).

mod attend;
mod block;
mod config;
mod input;
mod kv_cache;
mod mask;
mod softcap;

pub(crate) use attend::CompactBias;
pub use attend::{AttendOptions, AttentionBias, AttentionPositions, Window, attend, try_attend};
pub use block::SelfAttention;
pub use config::SelfAttentionConfig;
pub use input::{AttentionInput, AttentionOutput, padding_mask};
pub use kv_cache::KvCache;
pub use softcap::{check_softcap, softcap, try_softcap};
