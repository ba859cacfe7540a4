//! [`KvCache`]: the keys and values a causal block has seen, bound to the block that filled it.

use burn::tensor::{Int, Tensor};

/// The keys and values a causal block has seen, for decoding one token (or chunk) at a time
/// with [`SelfAttention::forward_cache`](crate::SelfAttention::forward_cache). One cache per
/// block.
///
/// Keys are stored after RoPE's rotation, except under a rope whose frequencies follow the
/// sequence's length (`RopeScaling::Dynamic`, `RopeScaling::LongRope`): those are stored before
/// it and rotated with the current frequencies at every step, so that decoding past the switch
/// equals one forward over the whole sequence (see [`Rope`](crate::Rope)), unless the block
/// sets [`cache_rotated_keys`](crate::SelfAttentionConfig::cache_rotated_keys) (transformers'
/// behaviour: each key as it was rotated). Each step
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
///
/// An attention block of one's own (a model port) fills a cache with
/// [`append`](Self::append) or, with a sliding window, [`append_window`](Self::append_window).
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

    /// Appends a step's keys and values to the cache and returns every key and value to
    /// attend with (the cached ones, then the new ones), for an attention block of one's own
    /// (a model port that projects, rotates and attends itself, with [`attend`](crate::attend)).
    /// The first key returned sits at position [`start`](Self::start) as read before the call
    /// (0 unless the cache rolls). Keys are cached as given: rotate them first to keep each key
    /// as it was rotated (transformers' behaviour).
    ///
    /// # Shapes
    ///
    /// - keys, values: `[batch, n_kv_heads, seq_new, d_head]`
    /// - output: `[batch, n_kv_heads, kept + seq_new, d_head]` each
    ///
    /// # Panics
    ///
    /// If the cache was filled by a [`SelfAttention`](crate::SelfAttention) block, or holds
    /// keys of another batch size, head count or width, or `keys` and `values` differ in
    /// shape (the cache is left as it was).
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::KvCache;
    ///
    /// let device = Device::flex();
    /// let mut cache = KvCache::new();
    /// let step = || Tensor::<4>::ones([2, 1, 3, 8], &device);
    /// let (k, v) = cache.append(step(), step());
    /// assert_eq!(k.dims(), [2, 1, 3, 8]);
    /// let (k, _) = cache.append(step(), step());
    /// assert_eq!((k.dims(), cache.len()), ([2, 1, 6, 8], 6));
    /// ```
    pub fn append(&mut self, keys: Tensor<4>, values: Tensor<4>) -> (Tensor<4>, Tensor<4>) {
        self.check_step(&keys, &values);
        self.owner = None;
        self.push(keys, values, None)
    }

    /// [`append`](Self::append) for a block with transformers' `sliding_window = w`: returns
    /// the cached keys and the new ones, then keeps only the last `w - 1` (at least one), the
    /// keys the next query can see, so memory stays bounded however long decoding runs. The
    /// keys returned start at [`start`](Self::start) as read before the call; attend with
    /// [`Window::hf`](crate::Window::hf)`(w)` and those positions.
    ///
    /// # Shapes
    ///
    /// As [`append`](Self::append).
    ///
    /// # Panics
    ///
    /// As [`append`](Self::append).
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::KvCache;
    ///
    /// let device = Device::flex();
    /// let mut cache = KvCache::new();
    /// let step = |n| Tensor::<4>::ones([1, 2, n, 8], &device);
    /// let (k, _) = cache.append_window(step(10), step(10), 4);
    /// assert_eq!(k.dims(), [1, 2, 10, 8]); // the prompt attends to itself
    /// assert_eq!((cache.kept(), cache.start(), cache.len()), (3, 7, 10));
    /// let (k, _) = cache.append_window(step(1), step(1), 4);
    /// assert_eq!(k.dims(), [1, 2, 4, 8]); // keys 7..11
    /// ```
    pub fn append_window(
        &mut self,
        keys: Tensor<4>,
        values: Tensor<4>,
        sliding_window: usize,
    ) -> (Tensor<4>, Tensor<4>) {
        self.check_step(&keys, &values);
        self.owner = None;
        self.push(keys, values, Some(sliding_window.saturating_sub(1).max(1)))
    }

    /// Appends `k` and `v` and returns every key and value held before the roll; then keeps
    /// the last `keep` (all when `None`), copied (a slice would be a view holding every key).
    pub(super) fn push(
        &mut self,
        k: Tensor<4>,
        v: Tensor<4>,
        keep: Option<usize>,
    ) -> (Tensor<4>, Tensor<4>) {
        let (k, v) = match (self.keys.take(), self.values.take()) {
            (Some(past_k), Some(past_v)) => (
                Tensor::cat(vec![past_k, k], 2),
                Tensor::cat(vec![past_v, v], 2),
            ),
            _ => (k, v),
        };
        let held = k.dims()[2];
        let keep = keep.map_or(held, |keep| keep.min(held));
        let drop = held - keep;
        let kept = |t: &Tensor<4>| {
            if drop == 0 {
                t.clone()
            } else {
                let index = Tensor::<1, Int>::arange(drop as i64..held as i64, &t.device());
                t.clone().select(2, index)
            }
        };
        self.keys = Some(kept(&k));
        self.values = Some(kept(&v));
        self.start += drop;
        (k, v)
    }

    /// Panics, leaving the cache as it is, unless a step of `keys` and `values` fits it.
    fn check_step(&self, keys: &Tensor<4>, values: &Tensor<4>) {
        assert!(
            self.owner.is_none(),
            "this KvCache was filled by a SelfAttention block (it holds {} tokens of its keys \
             and values). Fix: give each of your own attention blocks a cache of its own, or \
             `clear` it first",
            self.len()
        );
        let [batch, heads, _, width] = keys.dims();
        assert!(
            values.dims() == keys.dims(),
            "KvCache: keys {:?} and values {:?} must have the same shape [batch, n_kv_heads, \
             seq_new, d_head]. Fix: split the key and value projections the same way",
            keys.dims(),
            values.dims()
        );
        if let Some(cached) = &self.keys {
            let [b, h, _, w] = cached.dims();
            assert!(
                (b, h, w) == (batch, heads, width),
                "KvCache holds [batch {b}, n_kv_heads {h}, _, d_head {w}] keys, the step has \
                 [batch {batch}, n_kv_heads {heads}, _, d_head {width}]. Fix: decode the same \
                 batch with the same block, or `clear` the cache to start a new batch (the \
                 cache was left as it was)"
            );
        }
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
