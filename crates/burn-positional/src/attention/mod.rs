//! The self-attention block, its inputs, its cache and its score biases.
//!
//! - [`config`]: [`SelfAttentionConfig`], its checks and `init`;
//! - [`block`]: [`SelfAttention`] and its forwards;
//! - [`input`]: [`AttentionInput`], [`AttentionOutput`], [`padding_mask`];
//! - [`kv_cache`]: [`KvCache`], bound to the block that filled it;
//! - [`mask`]: the causal mask, cached by shape.

mod block;
mod config;
mod input;
mod kv_cache;
mod mask;
mod tiled;

pub use block::SelfAttention;
pub use config::SelfAttentionConfig;
pub use input::{AttentionInput, AttentionOutput, padding_mask};
pub use kv_cache::KvCache;
pub(crate) use tiled::CompactBias;
