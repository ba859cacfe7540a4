//! `skinny_matmul` and `skinny_matmul_transposed` (a few rows times a matrix, or times a
//! matrix's transpose: the decoding step's linear layers and tied head) against the
//! product evaluated on the host in f64 from the same numbers, on every device: the Cube kernel
//! on wgpu in both of its shapes (32 units per column vector, a GPU's, and 1, a CPU adapter's;
//! forced in turn, so lavapipe compiles and checks both), burn's `matmul` elsewhere and past
//! `SKINNY_MAX_ROWS` rows.

use burn::tensor::{DType, Device, Distribution, Tensor};
use burn_positional_kernels::{
    SKINNY_MAX_ROWS, set_thread_skinny_slices, skinny_matmul, skinny_matmul_transposed,
};

/// `x . w` in f64 from the values the devices hold.
fn expected(x: &Tensor<2>, w: &Tensor<2>) -> Vec<f64> {
    let ([rows, k], [_, n]) = (x.dims(), w.dims());
    let x: Vec<f64> = x.to_data().convert::<f64>().try_to_vec().unwrap();
    let w: Vec<f64> = w.to_data().convert::<f64>().try_to_vec().unwrap();
    let mut out = vec![0.0; rows * n];
    for r in 0..rows {
        for c in 0..n {
            out[r * n + c] = (0..k).map(|j| x[r * k + j] * w[j * n + c]).sum();
        }
    }
    out
}

fn check(device: &Device, rows: usize, k: usize, n: usize, dtype: DType, transposed: bool) {
    let x = Tensor::<2>::random([rows, k], Distribution::Normal(0.0, 1.0), device).cast(dtype);
    // A weight held transposed (`[n, k]` in memory) takes burn's matmul, not a copy.
    let w = if transposed {
        Tensor::<2>::random([n, k], Distribution::Normal(0.0, 1.0), device)
            .cast(dtype)
            .transpose()
    } else {
        Tensor::<2>::random([k, n], Distribution::Normal(0.0, 1.0), device).cast(dtype)
    };
    let want = expected(&x, &w);
    let got = skinny_matmul(x.clone(), w.clone());
    compare(
        got,
        &want,
        (device, rows, k, n, dtype, transposed, "skinny_matmul"),
    );
    // The same product with the weight given as `[n, k]`: `x . t^T`, `t` contiguous when `w`
    // is a transpose (then the kernel's), a transposed view otherwise (burn's matmul).
    let t = w.transpose();
    let got = skinny_matmul_transposed(x, t);
    compare(
        got,
        &want,
        (
            device,
            rows,
            k,
            n,
            dtype,
            !transposed,
            "skinny_matmul_transposed",
        ),
    );
}

type Case<'a> = (&'a Device, usize, usize, usize, DType, bool, &'a str);

fn compare(got: Tensor<2>, want: &[f64], case: Case<'_>) {
    let (device, rows, k, n, dtype, transposed, op) = case;
    let got: Vec<f64> = got.to_data().convert::<f64>().try_to_vec().unwrap();
    assert_eq!(got.len(), want.len());
    // f32: sums of up to 300 products of unit normals; f16: the output's own rounding
    // (11 bits) of sums that reach about 20.
    let (abs, rel) = if dtype == DType::F16 {
        (0.05, 1e-2)
    } else {
        (1e-4, 1e-5)
    };
    for (i, (g, e)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - e).abs() <= abs + rel * e.abs(),
            "{op} on {device:?}, rows {rows} k {k} n {n} {dtype:?}, weight a transposed view \
             {transposed}: element {i} is {g}, the f64 product {e}"
        );
    }
}

fn cases(device: &Device) {
    // One row (batch 1), a few, the most the kernel takes, and one more (burn's matmul); odd
    // widths (vectors of 1), k of 1 and past the 32 slices; a transposed weight.
    for &(rows, k, n) in &[
        (1, 64, 48),
        (1, 300, 7),
        (3, 1, 12),
        (8, 33, 64),
        (SKINNY_MAX_ROWS, 40, 20),
        (SKINNY_MAX_ROWS + 1, 40, 20),
    ] {
        check(device, rows, k, n, DType::F32, false);
    }
    check(device, 2, 24, 16, DType::F32, true);
}

#[test]
fn skinny_matmul_equals_the_product() {
    let mut ran_f16 = 0;
    for device in super::devices() {
        for slices in [None, Some(32), Some(1)] {
            set_thread_skinny_slices(slices);
            cases(&device);
        }
        set_thread_skinny_slices(None);
        cases(&device.clone().autodiff());
        // f16 where the device computes in it; it must run somewhere (wgpu, at least).
        if device.supports_dtype(DType::F16) {
            ran_f16 += 1;
            for slices in [Some(32), Some(1)] {
                set_thread_skinny_slices(slices);
                check(&device, 4, 96, 40, DType::F16, false);
            }
            set_thread_skinny_slices(None);
        }
    }
    assert!(ran_f16 > 0, "f16 ran on no device");
}
