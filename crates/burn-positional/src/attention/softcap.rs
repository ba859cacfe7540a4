//! [`softcap`]: Gemma 2's tanh cap, `c tanh(x / c)`, for scores outside [`attend`](crate::attend)
//! (whose kernels cap the attention scores themselves, [`AttendOptions::softcap`]) — the final
//! logits of Gemma 2 and Gemma 3 (`final_logit_softcapping`).

use burn::tensor::Tensor;

use crate::PositionError;

/// `cap * tanh(x / cap)`: every value squashed into `(-cap, cap)`, nearly the identity where
/// `|x|` is small against `cap`. The three operations run in `x`'s dtype, each rounded, in
/// transformers' order (`Gemma2ForCausalLM.forward`: `logits / c`, `tanh`, `* c`), so a bf16 run
/// rounds where PyTorch's does.
///
/// # Shapes
///
/// - x: any, output: the same
///
/// # Panics
///
/// With [`try_softcap`]'s message when `cap` is not a positive finite number.
///
/// # Example
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::softcap;
///
/// let device = Device::flex();
/// let logits = Tensor::<3>::from_floats([[[-100.0, 0.5, 100.0]]], &device);
/// let capped = softcap(logits, 30.0);
/// assert_eq!(capped.dims(), [1, 1, 3]);
/// let values = capped.into_data().try_to_vec::<f32>().unwrap();
/// assert!(values[0] > -30.0 && values[2] < 30.0);
/// ```
pub fn softcap<const D: usize>(x: Tensor<D>, cap: f64) -> Tensor<D> {
    try_softcap(x, cap).unwrap_or_else(|e| panic!("{e}"))
}

/// [`softcap`], or the error that names a cap that is not a positive finite number. Checks the
/// number only: nothing is read from the device.
///
/// # Shapes
///
/// As [`softcap`].
///
/// # Errors
///
/// [`PositionError::InvalidConfig`] (field `softcap`) for a cap of 0, below 0, infinite or NaN:
/// transformers would divide by it and return NaN (0) or flip every sign (below 0).
pub fn try_softcap<const D: usize>(x: Tensor<D>, cap: f64) -> Result<Tensor<D>, PositionError> {
    check_softcap(cap)?;
    Ok((x / cap).tanh() * cap)
}

/// The check of [`try_softcap`], for a cap read from a config before any tensor exists.
///
/// # Errors
///
/// As [`try_softcap`].
pub fn check_softcap(cap: f64) -> Result<(), PositionError> {
    if cap.is_finite() && cap > 0.0 {
        return Ok(());
    }
    Err(PositionError::InvalidConfig {
        field: "softcap",
        value: cap.to_string(),
        rule: "a softcap divides the scores and bounds them to (-cap, cap): it must be a \
               positive finite number",
        fix: "leave the cap unset (null in config.json) to cap nothing, or give it a positive \
              value (Gemma 2: 30 for the final logits, 50 for attention)"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{DType, Device, TensorData};

    /// Expected values from `c tanh(x / c)` evaluated in f64 (the formula of Gemma 2's paper,
    /// §2, and of transformers' `Gemma2ForCausalLM.forward`).
    #[test]
    fn equals_the_formula_in_f64() {
        let device = Device::flex();
        let xs = [-1e4, -60.0, -30.0, -1.5, 0.0, 1e-3, 2.0, 29.0, 45.0, 1e4];
        for cap in [0.5, 5.0, 30.0, 50.0] {
            let got = softcap(Tensor::<1>::from_floats(xs, &device), cap)
                .into_data()
                .try_to_vec::<f32>()
                .unwrap();
            for (x, g) in xs.iter().zip(&got) {
                let want = cap * (x / cap).tanh();
                assert!(
                    (*g as f64 - want).abs() <= 1e-6 * cap.max(1.0),
                    "cap {cap}, x {x}: {g} vs {want}"
                );
            }
        }
    }

    #[test]
    fn bounded_odd_and_monotone() {
        let device = Device::flex();
        let xs: Vec<f32> = (-200..=200).map(|i| i as f32 * 0.75).collect();
        let cap = 7.0;
        let n = xs.len();
        let got = softcap(
            Tensor::<1>::from_data(TensorData::new(xs.clone(), [n]), &device),
            cap,
        )
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
        for (i, g) in got.iter().enumerate() {
            assert!(g.abs() <= cap as f32, "{g} outside the cap");
            assert_eq!(*g, -got[got.len() - 1 - i], "not odd at {i}");
            if i > 0 {
                assert!(*g >= got[i - 1], "not monotone at {i}");
            }
        }
    }

    #[test]
    fn keeps_the_dtype() {
        let device = Device::flex();
        let x = Tensor::<2>::from_floats([[1.0, -3.0]], &device).cast(DType::BF16);
        assert_eq!(softcap(x, 2.0).dtype(), DType::BF16);
    }

    #[test]
    fn a_cap_that_is_not_positive_is_refused_by_name() {
        let device = Device::flex();
        for cap in [0.0, -30.0, f64::NAN, f64::INFINITY] {
            let x = Tensor::<1>::from_floats([1.0], &device);
            let message = try_softcap(x, cap).unwrap_err().to_string();
            assert!(
                message.contains("softcap") && message.contains(&cap.to_string()),
                "{message}"
            );
        }
    }
}
