//! The CubeCL kernel of [`super::skinny_matmul`]: `output[r, c] = Σ_j x[r, j] w[j, c]` for a
//! few rows `r`, `w` row-major `[k, n]` (a linear layer's weight as burn stores it), read once
//! from device memory in vectors of `N` columns.
//!
//! A cube is `cols x slices` units: unit `(u, s)` owns the vector of columns `cube * cols + u`
//! and the inputs `j = s, s + slices, ..`; it sums its products in f32, the cube adds the
//! `slices` partial sums in shared memory (a tree), and unit `(u, 0)` writes the row's vector.
//! The `cols` units of a slice read `cols` consecutive vectors of one row of `w` (coalesced);
//! each of the `rows` rows is one pass over the unit's inputs, so `w` comes from device memory
//! once and from the caches after that.
//!
//! On NVIDIA GPUs (NVRTC for `sm_90` and `sm_80`, `docs/gpu.md`): the GPU's shape of 256 units
//! and 4 KiB of shared memory (f32) runs at 100 % theoretical occupancy; the transposed weight's
//! kernel takes 40 registers in f32, 6 cubes per multiprocessor, 75 %, limited by registers
//! (each unit sums a vector of products per row in f32 beside its slice's inputs).

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]

use burn::backend::{TensorMetadata, cubecl::dtype_to_storage_type};
use burn::tensor::Shape;
use burn_cubecl::{
    kernel::{
        into_contiguous,
        matmul::{MatmulStrategy, matmul},
    },
    ops::numeric::empty_device_dtype,
    tensor::CubeTensor,
};
use cubecl::prelude::*;

/// Column vectors per cube, and units sharing one, each over every `slices`-th input (a power
/// of two): on a GPU 8 and 32, so that a cube has 256 units to hide memory latency with and
/// even a 768-column layer fills a few dozen cubes; on a CPU adapter (lavapipe, whose
/// `sync_cube` is costly and whose units run in order anyway) 64 and 1, one unit per column
/// vector and no shared memory: on lavapipe, GPT-2's decode-step products took 7.4 ms each the
/// GPU's way.
///
/// A test forces the slices (`args.slices`, 256 units per cube); otherwise the adapter decides.
fn shape(args: &super::SkinnyArgs, client: &cubecl::client::Client) -> (usize, usize) {
    match args.slices {
        Some(1) => (64, 1),
        Some(slices) => (256 / slices, slices),
        None if client.properties().identity.physical.is_none() => (64, 1),
        None => (8, 32),
    }
}

#[cube(launch_unchecked, create_dummy_kernel)]
fn skinny_kernel<F: Float, N: Size>(
    x: &Tensor<F>,
    w: &Tensor<Vector<F, N>>,
    output: &mut Tensor<Vector<F, N>>,
    rows: u32,
    k: u32,
    n_vectors: u32,
    #[comptime] cols: usize,
    #[comptime] slices: usize,
    #[define(F)] _dtype: ElemType,
) {
    let u = UNIT_POS_X as usize;
    let s = UNIT_POS_Y as usize;
    let column = CUBE_POS_X as usize * cols + u;
    let k = k as usize;
    let n_vectors = n_vectors as usize;
    for r in 0..rows as usize {
        let mut sum = Vector::<f32, N>::new(0.0);
        if column < n_vectors {
            let mut j = s;
            while j < k {
                let xj = f32::cast_from(x[r * k + j]);
                sum += Vector::<f32, N>::cast_from(w[j * n_vectors + column])
                    * Vector::<f32, N>::new(xj);
                j += slices;
            }
        }
        if comptime!(slices == 1) {
            // One unit per column vector: nothing to add up across units.
            if column < n_vectors {
                output[r * n_vectors + column] = Vector::<F, N>::cast_from(sum);
            }
        } else {
            let mut partial = Shared::<[Vector<f32, N>]>::new_slice(comptime!(cols * slices));
            partial[s * cols + u] = sum;
            sync_cube();
            // From the cube's size, a run-time value: the loop below runs on the device.
            let mut half = CUBE_DIM_Y as usize / 2;
            while half > 0 {
                if s < half {
                    let own = partial[s * cols + u];
                    let other = partial[(s + half) * cols + u];
                    partial[s * cols + u] = own + other;
                }
                sync_cube();
                half /= 2;
            }
            if s == 0 && column < n_vectors {
                output[r * n_vectors + column] = Vector::<F, N>::cast_from(partial[u]);
            }
            sync_cube();
        }
    }
}

/// The transposed weight's kernel: `output[r, c] = Σ_j x[r, j] t[c, j]` for `t` row-major
/// `[n, k]` (PyTorch's `Linear` layout, and a tied head's `[vocab, hidden]` table). Unit
/// `(s, u)` owns row `c = cube * cols + u` of `t` and its vectors `s, s + slices, ..` along
/// `k`: the `slices` units of a row are consecutive (`s` is the fast index), so they read
/// consecutive vectors of it; the cube adds the slices' partial vectors in shared memory and
/// unit `(0, u)` adds the lanes and writes the value.
#[cube(launch_unchecked, create_dummy_kernel)]
fn skinny_t_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    t: &Tensor<Vector<F, N>>,
    output: &mut Tensor<F>,
    rows: u32,
    k_vectors: u32,
    n: u32,
    #[comptime] cols: usize,
    #[comptime] slices: usize,
    #[define(F)] _dtype: ElemType,
) {
    let s = UNIT_POS_X as usize;
    let u = UNIT_POS_Y as usize;
    let c = CUBE_POS_X as usize * cols + u;
    let k_vectors = k_vectors as usize;
    let n = n as usize;
    for r in 0..rows as usize {
        let mut sum = Vector::<f32, N>::new(0.0);
        if c < n {
            let mut j = s;
            while j < k_vectors {
                sum += Vector::<f32, N>::cast_from(x[r * k_vectors + j])
                    * Vector::<f32, N>::cast_from(t[c * k_vectors + j]);
                j += slices;
            }
        }
        // With one slice the unit's sum is the row's; else the slices' sums are added below.
        let mut total = sum;
        if comptime!(slices > 1) {
            let mut partial = Shared::<[Vector<f32, N>]>::new_slice(comptime!(cols * slices));
            partial[u * slices + s] = sum;
            sync_cube();
            // From the cube's size, a run-time value: the loop below runs on the device.
            let mut half = CUBE_DIM_X as usize / 2;
            while half > 0 {
                if s < half {
                    let own = partial[u * slices + s];
                    let other = partial[u * slices + s + half];
                    partial[u * slices + s] = own + other;
                }
                sync_cube();
                half /= 2;
            }
            total = partial[u * slices];
            sync_cube();
        }
        if s == 0 && c < n {
            let mut value = 0.0f32;
            #[unroll]
            for i in 0..total.vector_size().comptime() {
                value += total.extract(i);
            }
            output[r * n + c] = F::cast_from(value);
        }
    }
}

/// Checks that `x` and the weight share a dtype and a device; the output `[rows, n]`, empty.
fn output_of(x: &CubeTensor, w: &CubeTensor, [rows, n]: [usize; 2], op: &str) -> CubeTensor {
    assert_eq!(
        x.dtype, w.dtype,
        "{op}: x and the weight must share one dtype, got {:?} and {:?}",
        x.dtype, w.dtype
    );
    x.assert_is_on_same_device(w);
    empty_device_dtype(
        x.client.clone(),
        x.device.clone(),
        Shape::new([rows, n]),
        x.dtype,
    )
}

/// `v` as a launch's u32, or a panic naming `what`.
fn u32_of(v: usize, what: &str) -> u32 {
    u32::try_from(v).unwrap_or_else(|_| panic!("skinny_matmul: {what} = {v} exceeds u32"))
}

/// Host side: contiguous inputs, the output `[rows, n]` in the dtype of `x`, one launch.
pub(crate) fn launch(x: CubeTensor, w: CubeTensor, args: &super::SkinnyArgs) -> CubeTensor {
    if args.transposed {
        return launch_transposed(x, w, args);
    }
    let [rows, k] = x.shape().dims::<2>();
    let [k_w, n] = w.shape().dims::<2>();
    assert_eq!(
        k, k_w,
        "skinny_matmul: x is [{rows}, {k}] but w is [{k_w}, {n}]"
    );
    let output = output_of(&x, &w, [rows, n], "skinny_matmul");
    let (client, dtype) = (x.client.clone(), x.dtype);
    if rows * n == 0 {
        return output;
    }
    if !w.is_contiguous() {
        // A weight held transposed (`[n, k]` in memory, read as `[k, n]`): burn's matmul reads
        // it through its strides, where this kernel would copy it on every call.
        return matmul(x, w, None, MatmulStrategy::default(), dtype)
            .unwrap_or_else(|e| panic!("skinny_matmul: burn's matmul refused the shapes: {e:?}"));
    }
    let x = into_contiguous(x);
    let vector_size = client
        .io_optimized_vector_sizes(dtype.size())
        .filter(|&v| n % v == 0)
        .max()
        .unwrap_or(1);
    let n_vectors = n / vector_size;
    let (cols, slices) = shape(args, &client);
    let cube_count = CubeCount::Static(u32_of(n_vectors.div_ceil(cols), "the cubes"), 1, 1);
    // SAFETY: x is contiguous `[rows, k]`, w contiguous `[k, n]` read as `n / N` vectors per
    // row (`N` divides `n`), the output contiguous `[rows, n / N]` vectors. A unit reads `x`
    // at `r * k + j` and `w` at `j * n_vectors + column` only for `r < rows`, `j < k` and
    // `column < n_vectors`, and writes the output under the same bound on `column`; the
    // shared buffer holds `cols * slices` vectors and is indexed by `s < slices`, `u < cols`.
    unsafe {
        skinny_kernel::launch_unchecked(
            &client,
            cube_count,
            CubeDim::new_2d(cols as u32, slices as u32),
            vector_size,
            x.into_tensor_arg(),
            w.into_tensor_arg(),
            output.clone().into_tensor_arg(),
            u32_of(rows, "the rows"),
            u32_of(k, "k"),
            u32_of(n_vectors, "n"),
            cols,
            slices,
            dtype_to_storage_type(dtype),
        )
    };
    output
}

/// Host side of the transposed weight `t` `[n, k]`: `x . t^T`, contiguous inputs, the output
/// `[rows, n]` in the dtype of `x`, one launch of [`skinny_t_kernel`].
fn launch_transposed(x: CubeTensor, t: CubeTensor, args: &super::SkinnyArgs) -> CubeTensor {
    let [rows, k] = x.shape().dims::<2>();
    let [n, k_t] = t.shape().dims::<2>();
    assert_eq!(
        k, k_t,
        "skinny_matmul_transposed: x is [{rows}, {k}] but t is [{n}, {k_t}]"
    );
    let output = output_of(&x, &t, [rows, n], "skinny_matmul_transposed");
    let (client, dtype) = (x.client.clone(), x.dtype);
    if rows * n == 0 {
        return output;
    }
    if !t.is_contiguous() {
        // `t` held as a `[k, n]` matrix's transpose: burn's matmul reads it through its strides.
        let t = <burn_cubecl::CubeBackend as burn::backend::ops::FloatTensorOps<
            burn_cubecl::CubeBackend,
        >>::float_swap_dims(t, 0, 1);
        return matmul(x, t, None, MatmulStrategy::default(), dtype)
            .unwrap_or_else(|e| panic!("skinny_matmul: burn's matmul refused the shapes: {e:?}"));
    }
    let x = into_contiguous(x);
    let vector_size = client
        .io_optimized_vector_sizes(dtype.size())
        .filter(|&v| k % v == 0)
        .max()
        .unwrap_or(1);
    let k_vectors = k / vector_size;
    let (cols, slices) = shape(args, &client);
    let cube_count = CubeCount::Static(u32_of(n.div_ceil(cols), "the cubes"), 1, 1);
    // SAFETY: x is contiguous `[rows, k / N]` vectors and t contiguous `[n, k / N]` (`N`
    // divides `k`), the output contiguous `[rows, n]`. A unit reads x at `r * k_vectors + j`
    // and t at `c * k_vectors + j` only for `r < rows`, `j < k_vectors`, `c < n`, writes the
    // output under the same bounds, and indexes the shared buffer of `cols * slices` vectors
    // with `u < cols`, `s < slices`.
    unsafe {
        skinny_t_kernel::launch_unchecked(
            &client,
            cube_count,
            CubeDim::new_2d(slices as u32, cols as u32),
            vector_size,
            x.into_tensor_arg(),
            t.into_tensor_arg(),
            output.clone().into_tensor_arg(),
            u32_of(rows, "the rows"),
            u32_of(k_vectors, "k"),
            u32_of(n, "n"),
            cols,
            slices,
            dtype_to_storage_type(dtype),
        )
    };
    output
}

/// The skinny products' specializations for the CUDA compile check ([`crate::cuda_check`]):
/// every dtype, both kernels, at the GPU's shape (8 column vectors of 32 slices) and the forced
/// one slice, vectors of 16 bytes.
#[cfg(feature = "cuda-check")]
pub(crate) fn cuda_cases(target: &crate::cuda_check::Target) -> Vec<crate::cuda_check::Case> {
    use crate::cuda_check::{Case, tensor, widest_vector};
    use burn::tensor::DType;
    let mut cases = Vec::new();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (cols, slices) in [(8, 32), (64, 1)] {
            let spec = format!("{dtype:?} {cols} columns x {slices} slices");
            cases.push(Case::new(
                "skinny product",
                spec.clone(),
                false,
                skinny_kernel::create_dummy_kernel(
                    target.properties.clone(),
                    target.target.clone(),
                    CubeCount::Static(1, 1, 1),
                    CubeDim::new_2d(cols as u32, slices as u32),
                    widest_vector(dtype),
                    tensor(2),
                    tensor(2),
                    tensor(2),
                    1,
                    1,
                    1,
                    cols,
                    slices,
                    dtype_to_storage_type(dtype),
                ),
            ));
            cases.push(Case::new(
                "skinny product, transposed weight",
                spec,
                false,
                skinny_t_kernel::create_dummy_kernel(
                    target.properties.clone(),
                    target.target.clone(),
                    CubeCount::Static(1, 1, 1),
                    CubeDim::new_2d(slices as u32, cols as u32),
                    widest_vector(dtype),
                    tensor(2),
                    tensor(2),
                    tensor(2),
                    1,
                    1,
                    1,
                    cols,
                    slices,
                    dtype_to_storage_type(dtype),
                ),
            ));
        }
    }
    cases
}
