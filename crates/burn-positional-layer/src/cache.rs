//! Tensors that depend only on shapes (score biases, bucket ids, masks), built once on the device
//! and reused.
//!
//! A [`ShapeCache`] holds a few square tensors, each for queries and keys at positions `0..n`,
//! and serves any request for queries at `offset..offset + seq_q` and keys at `0..seq_k` that fits
//! inside one as a slice of it, the way x-transformers slices its cached ALiBi bias. A request
//! that fits none builds a larger square in place of the old one (twice as large, so that
//! decoding one token at a time rebuilds only when the length doubles). One square is kept per
//! device and dtype, up to [`CACHED_SQUARES`] of them.
//!
//! Caches are shared: every module built from one config (every block of a model) finds the same
//! cache through [`shared`], so a bias is built once per shape for the whole model, and clones of
//! a module (a training step maps the model into a new value) keep it.

use std::any::Any;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use burn::tensor::{DType, Device};

/// Squares kept per cache: one per device (with or without autodiff) and dtype, for up to this
/// many of them; past it the least recently used goes.
pub const CACHED_SQUARES: usize = 16;

thread_local! {
    /// Squares built on this thread: what a test reads to see that a bias is reused, never
    /// rebuilt per call (per thread, so that tests running beside each other do not interfere).
    static BUILDS: Cell<usize> = const { Cell::new(0) };
}

/// Squares built by the shape caches on this thread so far (score biases, T5 bucket ids, causal
/// masks); compare two readings around the calls you care about.
#[doc(hidden)]
pub fn shape_cache_builds() -> usize {
    BUILDS.with(Cell::get)
}

/// A tensor that can be sliced to a `[.., rows, cols]` window.
pub(crate) trait Window: Clone + Send + 'static {
    /// Rows `rows` and columns `cols` of the last two dimensions.
    fn window(&self, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>) -> Self;
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
/// [`DeviceKey`] it was made for: a training step maps the module into a new value and the
/// growth should survive it. At most one entry: a request under another key replaces it.
pub(crate) struct Grown<T>(Arc<Mutex<Option<(DeviceKey, T)>>>);

impl<T> Clone for Grown<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> Default for Grown<T> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<T> core::fmt::Debug for Grown<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let key = self
            .0
            .lock()
            .ok()
            .and_then(|t| t.as_ref().map(|(key, _)| key.dtype));
        write!(f, "Grown({key:?})")
    }
}

impl<T: Clone> Grown<T> {
    /// Runs `f` on the entry for `key` (`None` if there is none, or it was made for another
    /// key); whatever `f` leaves in the slot is kept under `key`.
    pub(crate) fn with<R>(&self, key: &DeviceKey, f: impl FnOnce(&mut Option<T>) -> R) -> R {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut mine = match slot.take() {
            Some((k, value)) if k == *key => Some(value),
            other => {
                *slot = other;
                None
            }
        };
        let out = f(&mut mine);
        if let Some(value) = mine {
            *slot = Some((key.clone(), value));
        }
        out
    }
}

struct Square<T> {
    key: DeviceKey,
    n: usize,
    tensor: T,
}

/// See the [module docs](self).
pub(crate) struct ShapeCache<T> {
    squares: Arc<Mutex<Vec<Square<T>>>>,
}

impl<T> Clone for ShapeCache<T> {
    fn clone(&self) -> Self {
        Self {
            squares: self.squares.clone(),
        }
    }
}

impl<T> Default for ShapeCache<T> {
    fn default() -> Self {
        Self {
            squares: Arc::default(),
        }
    }
}

impl<T> core::fmt::Debug for ShapeCache<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let sizes: Vec<usize> = self
            .squares
            .lock()
            .map(|s| s.iter().map(|s| s.n).collect())
            .unwrap_or_default();
        write!(f, "ShapeCache({sizes:?})")
    }
}

impl<T: Window> ShapeCache<T> {
    /// The window for queries at `offset..offset + seq_q` and keys at `0..seq_k`, cut from a
    /// cached square, or from a new one made by `build(n)` (the tensor for queries and keys at
    /// `0..n`, on `device` in `dtype`). No device-to-host read either way.
    pub(crate) fn get(
        &self,
        device: &Device,
        dtype: DType,
        offset: usize,
        seq_q: usize,
        seq_k: usize,
        build: impl FnOnce(usize) -> T,
    ) -> T {
        let need = (offset + seq_q).max(seq_k);
        let key = DeviceKey::new(device, dtype);
        let rows = offset..offset + seq_q;
        let mut squares = self.squares.lock().unwrap_or_else(|e| e.into_inner());
        let fits = |s: &Square<T>| s.key == key && s.n >= need;
        if let Some(i) = squares.iter().position(fits) {
            // Most recently used last.
            let square = squares.remove(i);
            let window = square.tensor.window(rows, 0..seq_k);
            squares.push(square);
            return window;
        }
        // Grow geometrically past a smaller square of the same kind, so that a sequence growing
        // one token at a time (cached decoding) rebuilds log(n) times, not n times.
        let smaller = squares
            .iter()
            .filter(|s| s.key == key)
            .map(|s| s.n)
            .max()
            .unwrap_or(0);
        let n = if smaller == 0 {
            need
        } else {
            need.max(2 * smaller)
        };
        squares.retain(|s| s.key != key);
        let tensor = build(n);
        BUILDS.with(|n| n.set(n.get() + 1));
        let window = tensor.window(rows, 0..seq_k);
        squares.push(Square { key, n, tensor });
        if squares.len() > CACHED_SQUARES {
            squares.remove(0);
        }
        window
    }
}

type Registry = HashMap<String, Box<dyn Any + Send>>;

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Mutex::default);

/// The process-wide cache for `key` (a config's identity, for example `"alibi/8/causal"`):
/// every module built from an equal config shares it.
pub(crate) fn shared<T: Window>(key: String) -> ShapeCache<T> {
    let mut registry = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    registry
        .entry(key)
        .or_insert_with(|| Box::new(ShapeCache::<T>::default()))
        .downcast_ref::<ShapeCache<T>>()
        .expect("one tensor type per cache key")
        .clone()
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
