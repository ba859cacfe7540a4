//! Fused rotary position embedding: one pass that reads each element of queries or keys once
//! and writes it once, rotating pairs of dimensions by angles given as `cos` and `sin` tables.
//!
//! | backend | implementation |
//! | --- | --- |
//! | any (the extension's default body) | plain tensor ops: two slices, four products, a difference, a sum and a concatenation ([`reference_rope`]), the twin every other implementation is tested against |
//! | Cube (wgpu, CUDA) | a `#[cube(launch_unchecked)]` kernel, one unit per pair (and per passed-through dimension), reading `x` through its strides (a `swap_dims` view costs no copy) |
//! | Flex, NdArray | multi-threaded (rayon) host loops, SIMD chosen at run time |
//! | `Autodiff<B>` | the inner backend's op, and for the backward the same op rotating the other way (a rotation's transpose is its inverse) |
//!
//! The angles are the caller's: `cos` and `sin` already hold the attention factor and the
//! frequency set, one row per position (`[1, seq, pairs]` shared by the batch, or
//! `[batch, seq, pairs]` for explicit positions). They receive no gradient.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) mod cube;
#[cfg(any(feature = "flex", feature = "ndarray"))]
pub(crate) mod host;
pub(crate) mod reference;

use std::cell::Cell;

use burn::backend::Dispatch;
use burn::tensor::Tensor;

use crate::{PositionalKernels, fused_covers};

/// Which dimensions of a head form a rotated pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RotaryLayout {
    /// `(x[2j], x[2j + 1])`: GPT-J, Meta's LLaMA code, burn's `RotaryEncoding`.
    Interleaved,
    /// `(x[j], x[j + pairs])`: GPT-NeoX, Hugging Face's `rotate_half`.
    HalfSplit,
}

/// Everything the rotary extension method takes besides tensors.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RopeArgs {
    pub(crate) layout: RotaryLayout,
    /// Rotate by minus the angles (the backward: a rotation's transpose).
    pub(crate) inverse: bool,
}

impl RopeArgs {
    /// The rotation the other way.
    #[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
    pub(crate) fn inverted(&self) -> Self {
        Self {
            layout: self.layout,
            inverse: !self.inverse,
        }
    }
}

/// The dims `[batch, heads, seq, d_head]` of `x` and `[rows, seq, pairs]` of the tables,
/// checked to fit together. Panics with both shapes when they do not.
pub(crate) fn check_shapes(x: &[usize], cos: &[usize], sin: &[usize]) -> ([usize; 4], [usize; 3]) {
    let fits = x.len() == 4
        && cos.len() == 3
        && cos == sin
        && (cos[0] == 1 || cos[0] == x[0])
        && cos[1] == x[2]
        && 2 * cos[2] <= x[3];
    assert!(
        fits,
        "fused_rope: x {x:?}, cos {cos:?} and sin {sin:?} do not fit together (x [batch, heads, \
         seq, d_head], cos and sin [1 or batch, seq, pairs] with 2 * pairs <= d_head)"
    );
    ([x[0], x[1], x[2], x[3]], [cos[0], cos[1], cos[2]])
}

thread_local! {
    static ROPE_CALLS: Cell<u64> = const { Cell::new(0) };
}

/// How many times the calling thread has launched the fused rotary extension through
/// [`fused_rope`]. A diagnostic for tests (per thread). Only with the `testing` feature.
#[cfg(feature = "testing")]
pub fn fused_rope_calls() -> u64 {
    ROPE_CALLS.with(Cell::get)
}

/// Rotates `x` by the angles whose cosines and sines are `cos` and `sin`, in one pass: pair
/// `j` of every head (see [`RotaryLayout`]) becomes `(a cos - b sin, a sin + b cos)`, and the
/// dimensions past `2 * pairs` are copied (partial rotary). On a device [`fused_covers`] does
/// not cover, the same numbers from [`reference_rope`]. No read from the device.
///
/// `cos` and `sin` are cast to the dtype of `x` first (as transformers' `cos.to(x.dtype)`);
/// the CPU backends then compute in f32 and round once. They receive no gradient.
///
/// # Shapes
///
/// - x: `[batch, heads, seq, d_head]` (any strides)
/// - cos, sin: `[1 or batch, seq, pairs]`, `2 * pairs <= d_head`
/// - output: `[batch, heads, seq, d_head]`, contiguous
///
/// # Panics
///
/// If the shapes do not fit together as above, or the tensors lie on different devices.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_kernels::{RotaryLayout, fused_rope};
///
/// let device = Device::flex();
/// let x = Tensor::<4>::ones([2, 4, 3, 8], &device);
/// // A quarter turn for every pair at every position.
/// let cos = Tensor::<3>::zeros([1, 3, 4], &device);
/// let sin = Tensor::<3>::ones([1, 3, 4], &device);
/// let out = fused_rope(x, cos, sin, RotaryLayout::HalfSplit);
/// assert_eq!(out.dims(), [2, 4, 3, 8]);
/// // (1, 1) turned a quarter: (-1, 1).
/// let first: Vec<f32> = out.slice([0..1, 0..1, 0..1, 0..8]).into_data().try_to_vec::<f32>().unwrap();
/// assert_eq!(first, [-1.0, -1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0]);
/// ```
pub fn fused_rope(x: Tensor<4>, cos: Tensor<3>, sin: Tensor<3>, layout: RotaryLayout) -> Tensor<4> {
    let (cos, sin) = prepare(&x, cos, sin);
    let args = RopeArgs {
        layout,
        inverse: false,
    };
    if !fused_covers(&x.device()) {
        return run_reference(x, cos, sin, &args);
    }
    ROPE_CALLS.with(|calls| calls.set(calls.get() + 1));
    Tensor::from_dispatch(<Dispatch as PositionalKernels>::fused_rope(
        x.into_dispatch(),
        cos.into_dispatch(),
        sin.into_dispatch(),
        args,
    ))
}

/// [`fused_rope`]'s numbers from plain burn tensor ops (two slices, four products, a
/// difference, a sum and a concatenation, in the dtype of `x`): the slow twin, on any device.
///
/// # Shapes
///
/// As [`fused_rope`].
///
/// # Panics
///
/// As [`fused_rope`].
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_kernels::{RotaryLayout, fused_rope, reference_rope};
///
/// let device = Device::flex();
/// let x = Tensor::<4>::random([1, 2, 5, 6], burn::tensor::Distribution::Default, &device);
/// let cos = Tensor::<3>::random([1, 5, 2], burn::tensor::Distribution::Default, &device);
/// let sin = Tensor::<3>::random([1, 5, 2], burn::tensor::Distribution::Default, &device);
/// let slow = reference_rope(x.clone(), cos.clone(), sin.clone(), RotaryLayout::Interleaved);
/// let fast = fused_rope(x, cos, sin, RotaryLayout::Interleaved);
/// assert!(fast.all_close(slow, None, Some(1e-6)));
/// ```
pub fn reference_rope(
    x: Tensor<4>,
    cos: Tensor<3>,
    sin: Tensor<3>,
    layout: RotaryLayout,
) -> Tensor<4> {
    let (cos, sin) = prepare(&x, cos, sin);
    let args = RopeArgs {
        layout,
        inverse: false,
    };
    run_reference(x, cos, sin, &args)
}

/// Checks the shapes and devices, and casts the tables to the dtype of `x`.
fn prepare(x: &Tensor<4>, cos: Tensor<3>, sin: Tensor<3>) -> (Tensor<3>, Tensor<3>) {
    check_shapes(&x.dims(), &cos.dims(), &sin.dims());
    let device = x.device();
    assert!(
        cos.device() == device && sin.device() == device,
        "fused_rope: x is on {device:?}, cos on {:?} and sin on {:?}. Fix: move the tables to \
         the device of x",
        cos.device(),
        sin.device()
    );
    let dtype = x.dtype();
    let cast = |t: Tensor<3>| if t.dtype() == dtype { t } else { t.cast(dtype) };
    (cast(cos), cast(sin))
}

fn run_reference(x: Tensor<4>, cos: Tensor<3>, sin: Tensor<3>, args: &RopeArgs) -> Tensor<4> {
    Tensor::from_dispatch(reference::rope::<Dispatch>(
        x.into_dispatch(),
        cos.into_dispatch(),
        sin.into_dispatch(),
        args,
    ))
}
