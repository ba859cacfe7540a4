//! What the CPU implementations of every op share (flex and ndarray): reading a backend's
//! primitives as host slices ([`HostTensors`], [`Ints`]), output buffers advised for huge
//! pages, and the dtype conversions at the edges. Each op's host code (`crate::host` for the
//! embedding, `attention/host*.rs`, `rope/host.rs`, `table_grad/host.rs`) imports these;
//! `crate::host` dispatches the extension to them and to nothing else.

use std::borrow::Cow;
use std::mem::MaybeUninit;

#[cfg(feature = "flex")]
use burn::backend::{Flex, flex::FlexTensor};
use burn::tensor::{DType, TensorData};

/// Outputs with fewer elements than this are written on the calling thread.
pub(crate) const PARALLEL_FROM: usize = 1 << 18;

/// Integer values (ids, positions) as a backend stores them: borrowed i32 or i64, or a
/// converted copy. Read in i64, so both widths are compared in (at least) their own width.
pub(crate) enum Ints<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
    Owned(Vec<i64>),
}

impl Ints<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::I32(v) => v.len(),
            Self::I64(v) => v.len(),
            Self::Owned(v) => v.len(),
        }
    }

    #[inline]
    pub(crate) fn at(&self, i: usize) -> i64 {
        match self {
            Self::I32(v) => i64::from(v[i]),
            Self::I64(v) => v[i],
            Self::Owned(v) => v[i],
        }
    }
}

/// Outputs of at least this many bytes are advised for transparent huge pages before their
/// first touch: a fresh 100 MB output costs about half as much to fault in with 2 MB pages as
/// with 4 KB ones (measured on this project's machine, THP mode `madvise`).
const HUGE_PAGES_FROM: usize = 8 << 20;

/// An uninitialized buffer of `len` floats, advised for huge pages when large.
pub(crate) fn output_buffer(len: usize) -> Vec<MaybeUninit<f32>> {
    let mut output: Vec<MaybeUninit<f32>> = Vec::with_capacity(len);
    // SAFETY: `MaybeUninit<f32>` has no validity requirement, and the capacity is reserved.
    unsafe { output.set_len(len) };
    let bytes = len * size_of::<f32>();
    #[cfg(target_os = "linux")]
    if bytes >= HUGE_PAGES_FROM {
        const PAGE: usize = 4096;
        let start = output.as_mut_ptr() as usize;
        let aligned = start.next_multiple_of(PAGE);
        let end = (start + bytes) / PAGE * PAGE;
        if end > aligned {
            // SAFETY: the range lies inside this allocation and is page-aligned; the advice
            // changes how pages are backed, never their contents. Failure is harmless.
            unsafe {
                libc::madvise(
                    aligned as *mut libc::c_void,
                    end - aligned,
                    libc::MADV_HUGEPAGE,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (bytes, HUGE_PAGES_FROM);
    output
}

/// `data` in `dtype`: as it is when it already has it, else converted.
pub(crate) fn in_dtype(data: TensorData, dtype: DType) -> TensorData {
    if data.dtype() == dtype {
        data
    } else {
        data.convert_dtype(dtype)
    }
}

/// A buffer whose every element was written, as plain floats.
///
/// # Safety
///
/// Every element of `v` must be initialized.
pub(crate) unsafe fn assume_init(v: Vec<MaybeUninit<f32>>) -> Vec<f32> {
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: the caller guarantees every element was written; the buffer keeps its own length
    // and capacity, and `MaybeUninit<f32>` has the layout of `f32`.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<f32>(), v.len(), v.capacity()) }
}

/// Reads, converts and writes primitives of one CPU backend.
pub(crate) trait HostTensors {
    /// The primitive (the same type holds floats and ints on both CPU backends).
    type Primitive;
    /// The values as f32, borrowed when possible.
    fn floats(t: &Self::Primitive) -> Cow<'_, [f32]>;
    /// The values, borrowed when they are stored contiguous as i32 or i64.
    fn ints(t: &Self::Primitive) -> Ints<'_>;
    /// The values of a bool tensor (a copy: masks are small).
    fn bools(t: &Self::Primitive) -> Vec<bool>;
    /// A primitive holding `data`.
    fn from_data(data: TensorData) -> Self::Primitive;
}

#[cfg(feature = "flex")]
impl HostTensors for Flex {
    type Primitive = FlexTensor;

    fn floats(t: &FlexTensor) -> Cow<'_, [f32]> {
        match t.as_slice::<f32>() {
            Some(slice) => Cow::Borrowed(slice),
            None => Cow::Owned(t.clone().into_data().try_into_vec_as::<f32>().unwrap()),
        }
    }

    fn ints(t: &FlexTensor) -> Ints<'_> {
        if let Some(slice) = t.as_slice::<i32>() {
            return Ints::I32(slice);
        }
        if let Some(slice) = t.as_slice::<i64>() {
            return Ints::I64(slice);
        }
        Ints::Owned(t.clone().into_data().iter::<i64>().collect())
    }

    fn bools(t: &FlexTensor) -> Vec<bool> {
        t.clone().into_data().iter::<bool>().collect()
    }

    fn from_data(data: TensorData) -> FlexTensor {
        FlexTensor::from_data(data)
    }
}

#[cfg(feature = "ndarray")]
#[allow(deprecated)]
mod ndarray_io {
    use super::*;
    use burn::backend::{NdArray, ndarray::NdArrayTensor};

    impl HostTensors for NdArray {
        type Primitive = NdArrayTensor;

        fn floats(t: &NdArrayTensor) -> Cow<'_, [f32]> {
            if let NdArrayTensor::F32(storage) = t {
                let view = storage.view();
                // `ArrayView::to_slice` borrows from the storage (lifetime of `t`), not from the
                // view: zero-copy for a standard-layout array.
                if let Some(slice) = view.to_slice() {
                    return Cow::Borrowed(slice);
                }
                return Cow::Owned(view.iter().copied().collect());
            }
            Cow::Owned(data_of(t).try_into_vec_as::<f32>().unwrap())
        }

        fn ints(t: &NdArrayTensor) -> Ints<'_> {
            use burn::backend::ops::IntTensorOps;
            match t {
                NdArrayTensor::I64(storage) => {
                    if let Some(slice) = storage.view().to_slice() {
                        return Ints::I64(slice);
                    }
                }
                NdArrayTensor::I32(storage) => {
                    if let Some(slice) = storage.view().to_slice() {
                        return Ints::I32(slice);
                    }
                }
                _ => {}
            }
            // CPU: the future is ready at once.
            let data = burn::tensor::read_sync(NdArray::int_into_data(t.clone())).unwrap();
            Ints::Owned(data.iter::<i64>().collect())
        }

        fn bools(t: &NdArrayTensor) -> Vec<bool> {
            use burn::backend::ops::BoolTensorOps;
            // CPU: the future is ready at once.
            let data = burn::tensor::read_sync(NdArray::bool_into_data(t.clone())).unwrap();
            data.iter::<bool>().collect()
        }

        fn from_data(data: TensorData) -> NdArrayTensor {
            NdArrayTensor::from_data(data)
        }
    }

    fn data_of(t: &NdArrayTensor) -> TensorData {
        use burn::backend::ops::FloatTensorOps;
        // CPU: the future is ready at once.
        burn::tensor::read_sync(NdArray::float_into_data(t.clone())).unwrap()
    }
}
