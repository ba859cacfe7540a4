//! [`KvCache`]: the keys and values a causal block has seen, bound to the block that filled it.

use burn::tensor::Tensor;

/// The keys and values a causal block has seen, for decoding one token (or chunk) at a time
/// with [`SelfAttention::forward_cache`](crate::SelfAttention::forward_cache). One cache per
/// block.
///
/// Keys are stored after RoPE's rotation, except under a rope whose frequencies follow the
/// sequence's length (`RopeScaling::Dynamic`, `RopeScaling::LongRope`): those are stored before
/// it and rotated with the current frequencies at every step, so that decoding past the switch
/// equals one forward over the whole sequence (see [`Rope`](crate::Rope)). Each step
/// concatenates the new keys and values on the device (no read).
///
/// A block with grouped heads ([`SelfAttentionConfig::n_kv_heads`](crate::SelfAttentionConfig::n_kv_heads))
/// caches its `n_kv_heads` key and value heads, not one per query head. A block with a
/// [`sliding_window`](crate::SelfAttentionConfig::sliding_window) `w` keeps only the last
/// `w - 1` keys (at least one): the cache rolls, and its memory stays bounded however long
/// the decoding runs ([`kept`](Self::kept) says how many it holds).
///
/// A cache is bound to the block that filled it (that block and its clones) and to its batch
/// size: another block, or a batch of another size, is refused with a message before the
/// cache is touched, so a mistake never gives silently wrong output nor empties the cache.
/// [`clear`](Self::clear) unbinds it.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    pub(super) keys: Option<Tensor<4>>,
    pub(super) values: Option<Tensor<4>>,
    /// Position of the first key kept: 0, or past it once a windowed block's cache rolls.
    pub(super) start: usize,
    /// The block and batch size that filled it.
    pub(super) owner: Option<(BlockId, usize)>,
}

/// The identity of a block, drawn at `init`: kept by clones, record loads and device moves
/// (the same weights), new for every other block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BlockId(u64);

impl BlockId {
    pub(super) fn next() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Self(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tokens seen so far: the position of the next query (kept keys and those a rolling
    /// cache has let go).
    pub fn len(&self) -> usize {
        self.start + self.kept()
    }

    /// Keys (and values) held: [`len`](Self::len), or for a windowed block at most its window.
    pub fn kept(&self) -> usize {
        self.keys.as_ref().map_or(0, |k| k.dims()[2])
    }

    /// Position of the first key held.
    pub fn start(&self) -> usize {
        self.start
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything (a new sequence), and the block and batch it was bound to.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Panics, leaving the cache as it is, unless it is empty or was filled by `block` (or a
    /// clone of it) with `batch` sequences.
    pub(super) fn check_owner(&self, block: BlockId, batch: usize) {
        let Some((owner, cached)) = self.owner else {
            return;
        };
        assert!(
            owner == block,
            "this KvCache was filled by another attention block (it holds {} tokens of that \
             block's keys and values). Fix: give every block its own cache (one KvCache per \
             block, for example `vec![KvCache::new(); n_blocks]`), or `clear` it first",
            self.len()
        );
        assert!(
            cached == batch,
            "this KvCache holds {cached} sequences, the input has {batch}. Fix: decode the same \
             batch of sequences with it, or `clear` it to start a new batch (the cache was left \
             as it was)"
        );
    }
}
