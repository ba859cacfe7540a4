//! The caches and stores modules own: one bounded, keyed store ([`Slots`]) and what is built on
//! it.
//!
//! - [`Slots`]: entries under keys, shared by the clones of the module that owns it (a training
//!   step maps the model into a new value and what was cached must survive that), freed when the
//!   last clone drops, at most `capacity` of them (least recently used out first), behind one
//!   lock that a panic elsewhere does not poison. The one place where bounds and locking live.
//! - [`Grown`]: one table grown on demand (the sinusoid rows past the cache, RoPE's angles),
//!   one [`DeviceKey`] at a time.
//! - [`ShapeCache`]: square tensors that depend only on shapes (ALiBi biases, T5 bucket ids,
//!   causal masks), up to [`CACHED_SQUARES`] of them, windowed per call.
//! - `StatusLog` (in `status.rs`): the pending statuses of an embedding, one log per thread.
//!
//! Nothing is process-global: each cache belongs to the module that uses it (`Alibi` its biases,
//! `T5Bias` its bucket ids, `SelfAttention` its causal masks), so nothing outlives the modules.
//!
//! A [`ShapeCache`] serves any request for queries at `offset..offset + seq_q` and keys at
//! `0..seq_k` that fits inside a cached square (queries and keys at `0..n`) as a slice of it, the
//! way x-transformers slices its cached ALiBi bias. A request that fits none builds a larger
//! square in place of the old one (twice as large, so that decoding one token at a time rebuilds
//! only when the length doubles).

use std::cell::Cell;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use burn::tensor::{DType, Device};

/// Squares kept per shape cache: one per device (with or without autodiff), dtype and variant,
/// for up to this many of them; past it the least recently used goes.
pub const CACHED_SQUARES: usize = 16;

/// Tables kept per [`Grown`]: one. Each may reach [`GROWN_TABLE_VALUES`](crate::GROWN_TABLE_VALUES)
/// values, so a request under another key (a device move, another dtype) replaces it.
const GROWN_TABLES: usize = 1;

thread_local! {
    /// Squares built on this thread: what a test reads to see that a bias is reused, never
    /// rebuilt per call (per thread, so that tests running beside each other do not interfere).
    static BUILDS: Cell<usize> = const { Cell::new(0) };
}

/// Squares built by the shape caches on this thread so far (score biases, T5 bucket ids, causal
/// masks); compare two readings around the calls you care about.
#[doc(hidden)]
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub fn shape_cache_builds() -> usize {
    BUILDS.with(Cell::get)
}

/// A store's entries, least recently used first; `None` while emptied (see [`Slots`]).
type Entries<K, V> = Vec<(K, Option<V>)>;

/// Entries under keys, shared by clones, at most `capacity` of them: see the
/// [module docs](self).
///
/// Entries are ordered by use, least recent first. An entry is `None` only while a closure
/// that emptied it runs (or after it panicked); such entries count as absent.
pub(crate) struct Slots<K, V> {
    entries: Arc<Mutex<Entries<K, V>>>,
    capacity: usize,
}

impl<K, V> Clone for Slots<K, V> {
    fn clone(&self) -> Self {
        Self {
            entries: self.entries.clone(),
            capacity: self.capacity,
        }
    }
}

impl<K: PartialEq + Clone, V> Slots<K, V> {
    /// An empty store holding at most `capacity` entries (`usize::MAX`: as many as are put in).
    ///
    /// # Panics
    ///
    /// If `capacity` is 0.
    pub(crate) fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "a store must hold at least one entry");
        Self {
            entries: Arc::default(),
            capacity,
        }
    }

    /// The entries, whatever a panic while they were locked left: every change is made under
    /// the lock in one step, or leaves an empty entry that counts as absent.
    fn lock(&self) -> MutexGuard<'_, Entries<K, V>> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|(_, value)| value.is_some());
        entries
    }

    /// Runs `f` on the entry under `key` (`None` if there is none), in place and under the
    /// lock; whatever `f` leaves is kept under `key` (`None` removes it), as the most recently
    /// used entry. A new entry past `capacity` evicts the least recently used one.
    pub(crate) fn with<R>(&self, key: &K, f: impl FnOnce(&mut Option<V>) -> R) -> R {
        let mut entries = self.lock();
        match entries.iter().position(|(k, _)| k == key) {
            // Most recently used last.
            Some(i) => entries[i..].rotate_left(1),
            None => entries.push((key.clone(), None)),
        }
        let last = entries.len() - 1;
        let out = f(&mut entries[last].1);
        if entries[last].1.is_none() {
            entries.pop();
        } else if entries.len() > self.capacity {
            entries.remove(0);
        }
        out
    }

    /// Removes and returns the entries `pick` picks, least recently used first.
    pub(crate) fn take(&self, mut pick: impl FnMut(&K, &V) -> bool) -> Vec<(K, V)> {
        let mut entries = self.lock();
        let (taken, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut *entries)
            .into_iter()
            .partition(|(k, v)| v.as_ref().is_some_and(|v| pick(k, v)));
        *entries = kept;
        taken
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect()
    }

    /// Reads every entry, least recently used first, without changing the order.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&mut dyn Iterator<Item = (&K, &V)>) -> R) -> R {
        let entries = self.lock();
        let mut iter = entries
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)));
        f(&mut iter)
    }
}

#[cfg(test)]
impl<K, V> Slots<K, V> {
    /// A handle that lets go with the last clone: what tests read to see the store freed.
    pub(crate) fn watch(&self) -> std::sync::Weak<impl Sized + use<K, V>> {
        Arc::downgrade(&self.entries)
    }
}

/// Where a cached tensor may be reused: the same device, the same autodiff flag (burn's `==` on
/// devices ignores it, and a tensor of the autodiff device must not feed a forward of the inner
/// one, as burn-train's `valid()` runs) and the same dtype. The one rule of every cache in this
/// crate: the shape caches here, the grown sinusoid table and RoPE's grown angles.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DeviceKey {
    device: Device,
    autodiff: bool,
    dtype: DType,
}

impl DeviceKey {
    pub(crate) fn new(device: &Device, dtype: DType) -> Self {
        Self {
            device: device.clone(),
            autodiff: device.is_autodiff(),
            dtype,
        }
    }
}

/// One tensor (or tuple of tensors) grown on demand and shared by clones of a module, with the
/// [`DeviceKey`] it was made for: a [`Slots`] of one entry, so a request under another key
/// replaces it.
pub(crate) struct Grown<T, K = DeviceKey>(Slots<K, T>);

impl<T, K> Clone for Grown<T, K> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T, K: PartialEq + Clone> Default for Grown<T, K> {
    fn default() -> Self {
        Self(Slots::new(GROWN_TABLES))
    }
}

impl<T, K: PartialEq + Clone + core::fmt::Debug> core::fmt::Debug for Grown<T, K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let key = self
            .0
            .read(|entries| entries.last().map(|(key, _)| format!("{key:?}")));
        write!(f, "Grown({})", key.as_deref().unwrap_or("empty"))
    }
}

impl<T, K: PartialEq + Clone> Grown<T, K> {
    /// Runs `f` on the entry for `key` (`None` if there is none, or it was made for another
    /// key); whatever `f` leaves in the slot is kept under `key`.
    pub(crate) fn with<R>(&self, key: &K, f: impl FnOnce(&mut Option<T>) -> R) -> R {
        self.0.with(key, f)
    }
}

/// A tensor that can be sliced to a `[.., rows, cols]` window.
pub(crate) trait Window: Clone + Send + 'static {
    /// Rows `rows` and columns `cols` of the last two dimensions.
    fn window(&self, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>) -> Self;
}

/// A cached square: the tensor for queries and keys at `0..n`.
struct Square<T> {
    n: usize,
    tensor: T,
}

/// Squares keyed by `K` (a [`DeviceKey`], with whatever else the tensor depends on): see the
/// [module docs](self). Shared by clones of the module that owns it.
pub(crate) struct ShapeCache<T, K = DeviceKey>(Slots<K, Square<T>>);

impl<T, K> Clone for ShapeCache<T, K> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T, K: PartialEq + Clone> Default for ShapeCache<T, K> {
    fn default() -> Self {
        Self(Slots::new(CACHED_SQUARES))
    }
}

impl<T, K: PartialEq + Clone> core::fmt::Debug for ShapeCache<T, K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let sizes: Vec<usize> = self.0.read(|squares| squares.map(|(_, s)| s.n).collect());
        write!(f, "ShapeCache({sizes:?})")
    }
}

impl<T: Window, K: PartialEq + Clone> ShapeCache<T, K> {
    /// The window for queries at `offset..offset + seq_q` and keys at `0..seq_k`, cut from the
    /// square cached under `key`, or from a new one made by `build(n)` (the tensor for queries
    /// and keys at `0..n`, on the key's device and dtype). No device-to-host read either way.
    pub(crate) fn get(
        &self,
        key: K,
        offset: usize,
        seq_q: usize,
        seq_k: usize,
        build: impl FnOnce(usize) -> T,
    ) -> T {
        let need = (offset + seq_q).max(seq_k);
        let rows = offset..offset + seq_q;
        self.0.with(&key, |square| {
            if let Some(square) = square.as_ref().filter(|s| s.n >= need) {
                return square.tensor.window(rows, 0..seq_k);
            }
            // Grow geometrically past a smaller square, so that a sequence growing one token at
            // a time (cached decoding) rebuilds log(n) times, not n times. The smaller square
            // goes before the larger one is built.
            let n = square
                .take()
                .map_or(need, |smaller| need.max(2 * smaller.n));
            let tensor = build(n);
            BUILDS.with(|n| n.set(n.get() + 1));
            let window = tensor.window(rows, 0..seq_k);
            *square = Some(Square { n, tensor });
            window
        })
    }
}

#[cfg(test)]
impl<T, K> ShapeCache<T, K> {
    /// See [`Slots::watch`].
    pub(crate) fn watch(&self) -> std::sync::Weak<impl Sized + use<T, K>> {
        self.0.watch()
    }
}

impl<const D: usize, K> Window for burn::tensor::Tensor<D, K>
where
    K: burn::tensor::kind::Basic + 'static,
    burn::tensor::Tensor<D, K>: Clone + Send,
{
    fn window(&self, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>) -> Self {
        let dims = self.dims();
        if rows.start == 0 && rows.end == dims[D - 2] && cols.start == 0 && cols.end == dims[D - 1]
        {
            return self.clone();
        }
        let ranges: [std::ops::Range<usize>; D] = core::array::from_fn(|i| {
            if i == D - 2 {
                rows.clone()
            } else if i == D - 1 {
                cols.clone()
            } else {
                0..dims[i]
            }
        });
        self.clone().slice(ranges)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Tensor;

    fn keys<V>(slots: &Slots<&'static str, V>) -> Vec<&'static str> {
        slots.read(|entries| entries.map(|(k, _)| *k).collect())
    }

    fn put<V>(slots: &Slots<&'static str, V>, key: &'static str, value: V) {
        slots.with(&key, |slot| *slot = Some(value));
    }

    #[test]
    fn slots_keep_capacity_and_evict_the_least_recently_used() {
        let slots = Slots::new(2);
        put(&slots, "a", 1);
        put(&slots, "b", 2);
        // Reading "a" makes "b" the least recently used.
        assert_eq!(slots.with(&"a", |slot| *slot), Some(1));
        put(&slots, "c", 3);
        assert_eq!(keys(&slots), ["a", "c"]);
        assert_eq!(slots.with(&"b", |slot| *slot), None, "evicted");
        // A miss that leaves nothing behind stores nothing, and evicts nothing.
        assert_eq!(keys(&slots), ["a", "c"]);
        // Replacing an entry does not grow the store.
        put(&slots, "a", 10);
        assert_eq!(keys(&slots), ["c", "a"]);
        // Emptying an entry removes it.
        slots.with(&"c", |slot| *slot = None);
        assert_eq!(keys(&slots), ["a"]);
    }

    #[test]
    fn slots_survive_a_panic_under_the_lock() {
        let slots = Slots::new(4);
        put(&slots, "a", 1);
        let clone = slots.clone();
        let panicked = std::thread::spawn(move || {
            clone.with(&"b", |slot| {
                *slot = Some(2);
                panic!("a build fails half way");
            })
        })
        .join();
        assert!(panicked.is_err());
        // The lock is poisoned; the store still answers, with what was committed.
        assert_eq!(slots.with(&"a", |slot| *slot), Some(1));
        assert_eq!(keys(&slots).len(), 2);
    }

    #[test]
    fn take_removes_what_it_picks() {
        let slots = Slots::new(usize::MAX);
        for (key, value) in [("a", 1), ("b", 2), ("c", 3)] {
            put(&slots, key, value);
        }
        let odd = slots.take(|_, v| v % 2 == 1);
        assert_eq!(odd, [("a", 1), ("c", 3)]);
        assert_eq!(keys(&slots), ["b"]);
    }

    #[test]
    fn clones_share_and_the_last_drop_frees() {
        let value = Arc::new(());
        let slots = Slots::new(2);
        put(&slots, "a", value.clone());
        let clone = slots.clone();
        assert!(
            clone.with(&"a", |slot| slot.is_some()),
            "a clone sees the entry"
        );
        put(&clone, "b", value.clone());
        assert_eq!(keys(&slots), ["a", "b"], "and the owner sees the clone's");
        let store = slots.watch();
        drop(slots);
        assert_eq!(
            Arc::strong_count(&value),
            3,
            "a clone still holds the entries"
        );
        drop(clone);
        assert!(
            store.upgrade().is_none(),
            "the store is freed with its last clone"
        );
        assert_eq!(Arc::strong_count(&value), 1, "and so are its entries");
    }

    /// Builds `[n, n]` squares of `n`, counting the builds.
    fn square(cache: &ShapeCache<Tensor<2>>, key: DeviceKey, seq: usize, built: &Cell<usize>) {
        let device = Device::flex();
        let window = cache.get(key, 0, seq, seq, |n| {
            built.set(built.get() + 1);
            Tensor::<2>::full([n, n], n as f32, &device)
        });
        assert_eq!(window.dims(), [seq, seq]);
    }

    #[test]
    fn a_shape_cache_is_keyed_by_device_autodiff_and_dtype() {
        let device = Device::flex();
        let cache = ShapeCache::default();
        let built = Cell::new(0);
        square(&cache, DeviceKey::new(&device, DType::F32), 8, &built);
        square(&cache, DeviceKey::new(&device, DType::F32), 5, &built);
        assert_eq!(built.get(), 1, "a window of the cached square");
        square(&cache, DeviceKey::new(&device, DType::F16), 5, &built);
        square(
            &cache,
            DeviceKey::new(&device.clone().autodiff(), DType::F32),
            5,
            &built,
        );
        assert_eq!(
            built.get(),
            3,
            "another dtype, another autodiff flag: a miss each"
        );
        // Growing one at a time rebuilds when the length doubles, not per step.
        for seq in 9..=16 {
            square(&cache, DeviceKey::new(&device, DType::F32), seq, &built);
        }
        assert_eq!(built.get(), 4);
        assert_eq!(format!("{cache:?}"), "ShapeCache([5, 5, 16])");
    }

    #[test]
    fn a_shape_cache_keeps_at_most_cached_squares() {
        let device = Device::flex();
        let cache: ShapeCache<Tensor<2>, (usize, DeviceKey)> = ShapeCache::default();
        for variant in 0..CACHED_SQUARES + 3 {
            let key = (variant, DeviceKey::new(&device, DType::F32));
            let _ = cache.get(key, 0, 2, 2, |n| Tensor::<2>::zeros([n, n], &device));
        }
        let kept = cache
            .0
            .read(|squares| squares.map(|(key, _)| key.0).collect::<Vec<_>>());
        assert_eq!(kept, (3..CACHED_SQUARES + 3).collect::<Vec<_>>());
    }

    #[test]
    fn grown_keeps_one_table() {
        let device = Device::flex();
        let grown = Grown::<usize>::default();
        let (f32_key, f16_key) = (
            DeviceKey::new(&device, DType::F32),
            DeviceKey::new(&device, DType::F16),
        );
        grown.with(&f32_key, |slot| *slot = Some(1));
        assert_eq!(
            grown.with(&f16_key, |slot| *slot),
            None,
            "another key misses"
        );
        assert_eq!(
            grown.with(&f32_key, |slot| *slot),
            Some(1),
            "and a miss replaces nothing"
        );
        grown.with(&f16_key, |slot| *slot = Some(2));
        assert_eq!(grown.with(&f32_key, |slot| *slot), None, "replaced");
        let shown = format!("{grown:?}");
        assert!(
            shown.starts_with("Grown(DeviceKey") && shown.contains("dtype: F16"),
            "{shown}"
        );
        assert_eq!(format!("{:?}", Grown::<usize>::default()), "Grown(empty)");
    }
}
