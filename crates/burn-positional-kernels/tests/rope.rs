//! The fused rotary op against its reference twin (plain tensor ops), on flex, ndarray and
//! wgpu (lavapipe where there is no GPU; never skipped), with and without autodiff: outputs
//! and gradients for both layouts, full and partial rotation, a table per batch row or one
//! shared, strided inputs, and every float dtype the device has. Values by hand from the
//! formula in f64.

use burn::tensor::{DType, Device, Distribution, Tensor, TensorData, Tolerance};
use burn_positional_kernels::{RotaryLayout, fused_rope, fused_rope_calls, reference_rope};
use proptest::prelude::*;

mod common;
use common::devices;

/// (batch, heads, seq, d_head, pairs, table rows).
const SHAPES: [(usize, usize, usize, usize, usize, usize); 6] = [
    (2, 3, 7, 8, 4, 1),
    (2, 2, 1, 8, 4, 2),
    // Partial rotation: 3 pairs of 10 dimensions, 4 passed through; an odd width.
    (1, 2, 63, 10, 3, 1),
    (2, 1, 65, 7, 3, 2),
    (1, 1, 5, 6, 3, 1),
    // Nothing rotated: a copy.
    (1, 2, 3, 4, 0, 1),
];

fn random<const D: usize>(shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

fn tables(rows: usize, seq: usize, pairs: usize, device: &Device) -> (Tensor<3>, Tensor<3>) {
    let angles = random([rows, seq, pairs], device) * 3.0;
    (angles.clone().cos(), angles.sin())
}

#[test]
fn fused_equals_reference_on_every_device() {
    for device in devices() {
        for (batch, heads, seq, d_head, pairs, rows) in SHAPES {
            for layout in [RotaryLayout::Interleaved, RotaryLayout::HalfSplit] {
                let x = random([batch, heads, seq, d_head], &device);
                let (cos, sin) = tables(rows, seq, pairs, &device);
                let before = fused_rope_calls();
                let fused = fused_rope(x.clone(), cos.clone(), sin.clone(), layout);
                assert_eq!(
                    fused_rope_calls(),
                    before + 1,
                    "{device:?}: not the fused path"
                );
                let slow = reference_rope(x, cos, sin, layout);
                fused
                    .into_data()
                    .assert_approx_eq::<f32>(&slow.into_data(), Tolerance::absolute(1e-5));
            }
        }
    }
}

/// Queries as attention code makes them: `[batch, seq, heads, d_head]` swapped to
/// `[batch, heads, seq, d_head]`, a view with strides (and a slice of it, with an offset).
#[test]
fn strided_inputs() {
    for device in devices() {
        let x = random([2, 9, 3, 8], &device).swap_dims(1, 2);
        let x = x.slice([0..2, 0..3, 2..9, 0..8]);
        let (cos, sin) = tables(2, 7, 4, &device);
        for layout in [RotaryLayout::Interleaved, RotaryLayout::HalfSplit] {
            let fused = fused_rope(x.clone(), cos.clone(), sin.clone(), layout);
            let slow = reference_rope(x.clone(), cos.clone(), sin.clone(), layout);
            fused
                .into_data()
                .assert_approx_eq::<f32>(&slow.into_data(), Tolerance::absolute(1e-5));
        }
    }
}

#[test]
fn gradients_equal_the_reference_autodiff() {
    for device in devices().into_iter().filter(Device::is_autodiff) {
        for (batch, heads, seq, d_head, pairs, rows) in SHAPES {
            for layout in [RotaryLayout::Interleaved, RotaryLayout::HalfSplit] {
                let x = random([batch, heads, seq, d_head], &device);
                let weights = random([batch, heads, seq, d_head], &device);
                let (cos, sin) = tables(rows, seq, pairs, &device);
                let grad_of =
                    |rotate: fn(Tensor<4>, Tensor<3>, Tensor<3>, RotaryLayout) -> Tensor<4>| {
                        let x = x.clone().detach().require_grad();
                        let out = rotate(x.clone(), cos.clone(), sin.clone(), layout);
                        let grads = (out * weights.clone()).sum().backward();
                        x.grad(&grads).unwrap()
                    };
                grad_of(fused_rope).into_data().assert_approx_eq::<f32>(
                    &grad_of(reference_rope).into_data(),
                    Tolerance::absolute(1e-5),
                );
            }
        }
    }
}

#[test]
fn half_precision() {
    for device in devices() {
        for dtype in [DType::F16, DType::BF16] {
            if !device.supports_dtype(dtype) {
                continue;
            }
            let x = random([2, 2, 5, 8], &device);
            let (cos, sin) = tables(1, 5, 4, &device);
            for layout in [RotaryLayout::Interleaved, RotaryLayout::HalfSplit] {
                // f32 tables, cast to the dtype of x inside.
                let out = fused_rope(x.clone().cast(dtype), cos.clone(), sin.clone(), layout);
                assert_eq!(out.dtype(), dtype, "{device:?}");
                let exact = reference_rope(x.clone(), cos.clone(), sin.clone(), layout);
                out.cast(DType::F32)
                    .into_data()
                    .assert_approx_eq::<f32>(&exact.into_data(), Tolerance::absolute(5e-2));
            }
        }
    }
}

/// One head, one position, angles 0.3 and 1.1 (pairs 0 and 1) and a passed-through dimension,
/// from `(a cos - b sin, a sin + b cos)` evaluated in f64.
#[test]
fn values_from_the_formula() {
    let x = [0.5f64, -1.25, 2.0, 0.75, 3.0];
    let angles = [0.3f64, 1.1];
    let turn = |a: f64, b: f64, t: f64| (a * t.cos() - b * t.sin(), a * t.sin() + b * t.cos());
    let (i0, i1) = (turn(x[0], x[1], angles[0]), turn(x[2], x[3], angles[1]));
    let interleaved = [i0.0, i0.1, i1.0, i1.1, x[4]];
    let (h0, h1) = (turn(x[0], x[2], angles[0]), turn(x[1], x[3], angles[1]));
    let half_split = [h0.0, h1.0, h0.1, h1.1, x[4]];
    for device in devices() {
        let input = Tensor::<4>::from_data(
            TensorData::new(x.map(|v| v as f32).to_vec(), [1, 1, 1, 5]),
            &device,
        );
        let table = |f: fn(f64) -> f64| {
            Tensor::<3>::from_data(
                TensorData::new(angles.map(|t| f(t) as f32).to_vec(), [1, 1, 2]),
                &device,
            )
        };
        for (layout, expected) in [
            (RotaryLayout::Interleaved, interleaved),
            (RotaryLayout::HalfSplit, half_split),
        ] {
            let out = fused_rope(input.clone(), table(f64::cos), table(f64::sin), layout);
            out.into_data().assert_approx_eq::<f32>(
                &TensorData::new(expected.map(|v| v as f32).to_vec(), [1, 1, 1, 5]),
                Tolerance::absolute(1e-6),
            );
        }
    }
}

#[test]
fn shapes_that_do_not_fit_panic_with_both_shapes() {
    let device = Device::flex();
    let x = random([1, 2, 4, 6], &device);
    let (cos, sin) = tables(1, 4, 4, &device);
    let message = std::panic::catch_unwind(|| fused_rope(x, cos, sin, RotaryLayout::HalfSplit))
        .err()
        .and_then(|e| e.downcast::<String>().ok())
        .expect("a panic with a message");
    assert!(
        message.contains("[1, 2, 4, 6]") && message.contains("[1, 4, 4]"),
        "{message}"
    );
}

/// Pairs of 1 to 4, a passed-through dimension, 2 heads of 3 positions: `(d_head, x, angles)`.
fn rotation_case() -> impl Strategy<Value = (usize, Vec<f32>, Vec<f32>)> {
    (1usize..5).prop_flat_map(|pairs| {
        let d_head = 2 * pairs + 1;
        (
            Just(d_head),
            prop::collection::vec(-10.0f32..10.0, 2 * 3 * d_head),
            prop::collection::vec(-100.0f32..100.0, 3 * pairs),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// A rotation keeps each pair's length, and rotating back (the sines negated) gives `x`
    /// again: the two properties of a rotation, whatever the angles.
    #[test]
    fn rotations_keep_lengths_and_invert((d_head, x, angles) in rotation_case(), half_split in any::<bool>()) {
        let device = Device::flex();
        let layout = if half_split { RotaryLayout::HalfSplit } else { RotaryLayout::Interleaved };
        let pairs = angles.len() / 3;
        let x = Tensor::<4>::from_data(TensorData::new(x, [1, 2, 3, d_head]), &device);
        let angles = Tensor::<3>::from_data(TensorData::new(angles, [1, 3, pairs]), &device);
        let (cos, sin) = (angles.clone().cos(), angles.sin());
        let out = fused_rope(x.clone(), cos.clone(), sin.clone(), layout);
        let back = fused_rope(out.clone(), cos, -sin, layout);
        back.into_data().assert_approx_eq::<f32>(&x.clone().into_data(), Tolerance::absolute(1e-4));
        let squares = |t: Tensor<4>| t.powi_scalar(2).sum_dim(3);
        squares(out).into_data().assert_approx_eq::<f32>(&squares(x).into_data(), Tolerance::relative(1e-5));
    }
}
