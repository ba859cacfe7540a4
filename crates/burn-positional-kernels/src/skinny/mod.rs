//! Products of a few rows by a matrix, `x [rows, k] . w [k, n]` with `rows` at most
//! [`SKINNY_MAX_ROWS`]: what every linear layer of a decoding step computes (one row per
//! sequence of the batch).
//!
//! Why an op of its own: on wgpu without burn's autotune (a user's default build), burn's
//! `matmul` takes cubek's tiled unit matmul, which spreads a product over tiles of rows; with
//! one row, almost all of each tile is padding. In the GPU kit's profile of a warm GPT-2 decode
//! step on lavapipe (cubecl's own log of every kernel's duration, `docs/gpu.md`), those
//! matmuls were 90 % of the step's device time. The Cube kernel here (`cube.rs`) reads the
//! weight once, in vectors along its rows, each cube summing a slice of the inputs per unit and
//! the slices in shared memory.
//!
//! | backend | implementation |
//! | --- | --- |
//! | Cube (wgpu, CUDA), without autodiff | the kernel in `cube.rs` |
//! | anything else (flex, ndarray, autodiff devices, more rows) | burn's `matmul` |

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) mod cube;

use burn::tensor::Tensor;

/// What the op takes besides its two tensors: the units per column vector, where a test forces
/// them (captured when the op is called, as burn's fusion may run it later on another thread);
/// `None`: by the adapter (`cube.rs`).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
pub(crate) struct SkinnyArgs {
    pub slices: Option<usize>,
    /// The weight is given as `[n, k]` (the product is `x . w^T`).
    pub transposed: bool,
}

#[cfg(feature = "testing")]
thread_local! {
    static SLICES: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Sets (`Some`: 1, or a power of two up to 32) or clears (`None`) the units that share a
/// column vector in the calling thread's [`skinny_matmul`] calls (normally 32 on a GPU and 1 on
/// a CPU adapter): tests of both kernel shapes on any adapter.
#[cfg(feature = "testing")]
pub fn set_thread_skinny_slices(slices: Option<usize>) {
    assert!(
        slices.is_none_or(|s| s.is_power_of_two() && s <= 32),
        "set_thread_skinny_slices: {slices:?} is not 1 or a power of two up to 32"
    );
    SLICES.with(|cell| cell.set(slices));
}

/// The most rows [`skinny_matmul`] sends to its kernel; more take burn's `matmul`.
pub const SKINNY_MAX_ROWS: usize = 16;

/// `x . w` for `x` `[rows, k]` and `w` `[k, n]` (a linear layer's weight as burn stores it),
/// the same numbers as `x.matmul(w)` (summed in f32, stored in the dtype of `x`). On a Cube
/// device (wgpu, CUDA) without autodiff, with `rows <=` [`SKINNY_MAX_ROWS`], one kernel that
/// reads `w` once; elsewhere burn's `matmul`.
///
/// # Shapes
///
/// - x: `[rows, k]`
/// - w: `[k, n]`
/// - output: `[rows, n]`
///
/// # Panics
///
/// If the inner sizes differ, or `x` and `w` differ in dtype or device.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_kernels::skinny_matmul;
///
/// let device = Device::flex();
/// let x = Tensor::<2>::ones([1, 3], &device);
/// let w = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], &device);
/// let out = skinny_matmul(x, w);
/// assert_eq!(out.dims(), [1, 2]);
/// assert_eq!(out.into_data().try_to_vec::<f32>().unwrap(), [9.0, 12.0]);
/// ```
pub fn skinny_matmul(x: Tensor<2>, w: Tensor<2>) -> Tensor<2> {
    let ([rows, k], [k_w, n]) = (x.dims(), w.dims());
    assert_eq!(
        k, k_w,
        "skinny_matmul: x is [{rows}, {k}] but w is [{k_w}, {n}]: the inner sizes must agree. \
         Fix: pass w as [k, n] (a burn Linear's weight), or transpose it"
    );
    assert_eq!(
        x.dtype(),
        w.dtype(),
        "skinny_matmul: x is {:?} but w is {:?}. Fix: cast one to the other's dtype",
        x.dtype(),
        w.dtype()
    );
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    if rows <= SKINNY_MAX_ROWS && takes_kernel(&x.device()) {
        return launch(x, w, false);
    }
    x.matmul(w)
}

/// `x . t^T` for `x` `[rows, k]` and `t` `[n, k]` (PyTorch's `Linear` layout, or a tied
/// head's `[vocab, hidden]` token table), the same numbers as `x.matmul(t.transpose())`: as
/// [`skinny_matmul`], one kernel on a Cube device without autodiff for at most
/// [`SKINNY_MAX_ROWS`] rows (each output a dot product along a row of `t`); elsewhere burn's
/// `matmul` as `(t . x^T)^T`, which reads `t` in place where a CPU backend would copy it.
///
/// # Shapes
///
/// - x: `[rows, k]`
/// - t: `[n, k]`
/// - output: `[rows, n]`
///
/// # Panics
///
/// If the inner sizes differ, or `x` and `t` differ in dtype or device.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_kernels::skinny_matmul_transposed;
///
/// let device = Device::flex();
/// let x = Tensor::<2>::ones([1, 3], &device);
/// let t = Tensor::<2>::from_floats([[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]], &device);
/// let out = skinny_matmul_transposed(x, t);
/// assert_eq!(out.dims(), [1, 2]);
/// assert_eq!(out.into_data().try_to_vec::<f32>().unwrap(), [9.0, 12.0]);
/// ```
pub fn skinny_matmul_transposed(x: Tensor<2>, t: Tensor<2>) -> Tensor<2> {
    let ([rows, k], [n, k_t]) = (x.dims(), t.dims());
    assert_eq!(
        k, k_t,
        "skinny_matmul_transposed: x is [{rows}, {k}] but t is [{n}, {k_t}]: the inner sizes \
         must agree. Fix: pass t as [n, k] (a PyTorch Linear's weight, a token table)"
    );
    assert_eq!(
        x.dtype(),
        t.dtype(),
        "skinny_matmul_transposed: x is {:?} but t is {:?}. Fix: cast one to the other's dtype",
        x.dtype(),
        t.dtype()
    );
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    if rows <= SKINNY_MAX_ROWS && takes_kernel(&x.device()) {
        return launch(x, t, true);
    }
    // `(t . x^T)^T`: burn's CPU backends copy a transposed right operand to contiguous memory
    // first, which for `x . t^T` would be the whole of `t` on every call.
    t.matmul(x.transpose()).transpose()
}

/// The op on a Cube device: the kernel's shape as the calling thread forces it (tests), the
/// weight `[k, n]` or, `transposed`, `[n, k]`.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn launch(x: Tensor<2>, w: Tensor<2>, transposed: bool) -> Tensor<2> {
    use burn::backend::Dispatch;

    use crate::PositionalKernels;
    #[cfg(feature = "testing")]
    let slices = SLICES.with(|cell| cell.get());
    #[cfg(not(feature = "testing"))]
    let slices = None;
    Tensor::from_dispatch(<Dispatch as PositionalKernels>::skinny_matmul(
        x.into_dispatch(),
        w.into_dispatch(),
        SkinnyArgs { slices, transposed },
    ))
}

/// Whether the device is a Cube device without autodiff (the kernel has no backward).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn takes_kernel(device: &burn::tensor::Device) -> bool {
    !device.is_autodiff()
        && matches!(
            device.as_dispatch().clone().inner(),
            burn::backend::DispatchDevice::Cube(_)
        )
}

/// The output's shape and dtype, for burn's fusion (the op runs when the stream does).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn meta(
    x: &burn::backend::fusion::custom::TensorSpec,
    w: &burn::backend::fusion::custom::TensorSpec,
    args: &SkinnyArgs,
) -> burn::backend::fusion::custom::TensorSpec {
    let n = if args.transposed {
        w.shape[0]
    } else {
        w.shape[1]
    };
    burn::backend::fusion::custom::TensorSpec::new(
        burn::tensor::Shape::new([x.shape[0], n]),
        x.dtype,
    )
}
