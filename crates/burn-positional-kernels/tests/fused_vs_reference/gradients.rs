//! The tables' gradients (the extension's table gradient: ids sorted once, a segment per row)
//! against sums evaluated independently in f64 on the host, on flex, ndarray and wgpu with
//! autodiff: many tokens per row (a run of the scan longer than one), every row of the table
//! (more rows than the scan's 256 units), padding and bad ids, shared and per-sequence explicit
//! positions, concatenated parts whose widths set every vector size. Plus determinism (the same
//! bits twice) and half-precision gradients.

use burn::tensor::{DType, Device, DeviceKind, Int, Tensor, TensorData, Tolerance};
use burn_positional_kernels::{Combine, FusedEmbeddingOptions, Positions, fused_embedding};

const VOCAB: usize = 300;
const MAX_LEN: usize = 45;
const BATCH: usize = 3;
const SEQ: usize = 40;
const PAD: usize = 7;

#[allow(deprecated)]
fn autodiff_devices() -> Vec<Device> {
    vec![
        Device::flex().autodiff(),
        Device::ndarray().autodiff(),
        Device::wgpu(DeviceKind::DefaultDevice).autodiff(),
    ]
}

/// Skewed ids: a third of them one frequent id (3), some padding, two bad ones, the rest spread
/// over the whole vocabulary (ids past 256 included).
fn id_values() -> Vec<i64> {
    (0..BATCH * SEQ)
        .map(|t| match t % 6 {
            0 | 3 => 3,
            1 if t % 12 == 1 => PAD as i64,
            _ if t == 17 => VOCAB as i64,
            _ if t == 50 => -2,
            _ => ((t * t * 37 + 11) % VOCAB) as i64,
        })
        .collect()
}

/// Positions per sequence (left-padded rows, one past the table) or shared by the batch.
fn position_values(shared: bool) -> Vec<i64> {
    let rows = if shared { 1 } else { BATCH };
    (0..rows * SEQ)
        .map(|t| {
            let (b, s) = (t / SEQ, t % SEQ);
            match (b, s) {
                (0, 39) => MAX_LEN as i64,
                _ => (s as i64 - b as i64).max(0) % MAX_LEN as i64 + (s % 3) as i64,
            }
        })
        .collect()
}

/// The loss weights (the output gradient), a smooth deterministic pattern.
fn weight_values(d_out: usize) -> Vec<f32> {
    (0..BATCH * SEQ * d_out)
        .map(|i| ((i as f64) * 0.37).sin() as f32 + 0.25)
        .collect()
}

#[allow(clippy::too_many_arguments)]
/// `[rows, width]` in f64: `scale * Σ w[t, first + c]` over the tokens `t` whose index is the
/// row (valid and not `skip`) and whose output is not NaN (`dead`: with `Add`, a bad id or a bad
/// position makes the whole row NaN, which the loss leaves out).
fn expected(
    index: &[i64],
    shared: bool,
    dead: &[bool],
    w: &[f32],
    d_out: usize,
    (rows, first, width): (usize, usize, usize),
    scale: f64,
    skip: Option<usize>,
) -> Vec<f32> {
    let mut out = vec![0f64; rows * width];
    for t in 0..BATCH * SEQ {
        let v = index[if shared { t % SEQ } else { t }];
        if dead[t] || v < 0 || v as usize >= rows || Some(v as usize) == skip {
            continue;
        }
        for c in 0..width {
            out[v as usize * width + c] += f64::from(w[t * d_out + first + c]);
        }
    }
    out.into_iter().map(|x| (x * scale) as f32).collect()
}

struct Grads {
    tokens: Tensor<2>,
    table: Tensor<2>,
}

fn run(device: &Device, d_token: usize, d_position: usize, shared: bool, dtype: DType) -> Grads {
    let combine = if d_position == d_token {
        Combine::Add
    } else {
        Combine::Concat {
            d_token,
            d_position,
        }
    };
    let d_out = if combine == Combine::Add {
        d_token
    } else {
        d_token + d_position
    };
    let fill = |rows: usize, width: usize| {
        let values: Vec<f32> = (0..rows * width).map(|i| (i % 13) as f32 * 0.1).collect();
        Tensor::<2>::from_data(TensorData::new(values, [rows, width]), device)
            .cast(dtype)
            .require_grad()
    };
    let tokens = fill(VOCAB, d_token);
    let table = fill(MAX_LEN, d_position);
    let ids = Tensor::<2, Int>::from_data(TensorData::new(id_values(), [BATCH, SEQ]), device);
    let rows = if shared { 1 } else { BATCH };
    let positions = Tensor::<2, Int>::from_data(
        TensorData::new(position_values(shared), [rows, SEQ]),
        device,
    );
    let options = FusedEmbeddingOptions {
        scale: 1.5,
        padding_idx: Some(PAD),
        combine,
    };
    let (out, _) = fused_embedding(
        tokens.clone(),
        ids,
        Positions::Explicit(positions),
        Some(table.clone()),
        &options,
    )
    .unwrap();
    let out = out.clone().mask_fill(out.is_nan(), 0.0);
    let w = Tensor::<3>::from_data(
        TensorData::new(weight_values(d_out), [BATCH, SEQ, d_out]),
        device,
    )
    .cast(dtype);
    let grads = (out * w).sum().backward();
    Grads {
        tokens: tokens.grad(&grads).unwrap(),
        table: table.grad(&grads).unwrap(),
    }
}

/// (d_token, d_position): `Add`, and concatenations whose parts set the GPU kernel's vector
/// size to 4, 2 and 1.
const WIDTHS: [(usize, usize); 4] = [(12, 12), (12, 8), (6, 10), (5, 3)];

/// Expected values: the definition of the gradient (each table row's share of the loss
/// `Σ out * w` is the sum of `w` over the tokens that read it, times the token scale),
/// evaluated in f64 on the host.
#[test]
fn table_gradients_equal_f64_sums() {
    let ids = id_values();
    for device in autodiff_devices() {
        for (d_token, d_position) in WIDTHS {
            for shared in [false, true] {
                let what = format!("{device:?} {d_token}+{d_position} shared={shared}");
                let d_out = if d_token == d_position {
                    d_token
                } else {
                    d_token + d_position
                };
                let w = weight_values(d_out);
                let g = run(&device, d_token, d_position, shared, DType::F32);
                let positions = position_values(shared);
                let dead: Vec<bool> = (0..BATCH * SEQ)
                    .map(|t| {
                        let bad_id = !(0..VOCAB as i64).contains(&ids[t]);
                        let p = positions[if shared { t % SEQ } else { t }];
                        let bad_position = !(0..MAX_LEN as i64).contains(&p);
                        d_token == d_position && (bad_id || bad_position)
                    })
                    .collect();
                let token_expected = expected(
                    &ids,
                    false,
                    &dead,
                    &w,
                    d_out,
                    (VOCAB, 0, d_token),
                    1.5,
                    Some(PAD),
                );
                let first = d_out - d_position;
                let table_expected = expected(
                    &positions,
                    shared,
                    &dead,
                    &w,
                    d_out,
                    (MAX_LEN, first, d_position),
                    1.0,
                    None,
                );
                g.tokens.into_data().assert_approx_eq::<f32>(
                    &TensorData::new(token_expected, [VOCAB, d_token]),
                    Tolerance::absolute(1e-4),
                );
                g.table.into_data().assert_approx_eq::<f32>(
                    &TensorData::new(table_expected, [MAX_LEN, d_position]),
                    Tolerance::absolute(1e-4),
                );
                eprintln!("{what}: ok");
            }
        }
    }
}

/// The sums run in token order whatever the device's scheduling: two backward passes give the
/// same bits.
#[test]
fn table_gradients_are_deterministic() {
    for device in autodiff_devices() {
        let first = run(&device, 12, 8, false, DType::F32);
        let second = run(&device, 12, 8, false, DType::F32);
        assert_eq!(
            first.tokens.into_data(),
            second.tokens.into_data(),
            "{device:?}"
        );
        assert_eq!(
            first.table.into_data(),
            second.table.into_data(),
            "{device:?}"
        );
    }
}

/// f16 and bf16 tables get gradients in their own dtype, within the dtype's rounding of the
/// f32 gradient (sums kept in f32). A device without the dtype refuses it in the forward, with
/// the dtype in the message (`dtypes` in the parent file checks that); each dtype must run on
/// some device here.
#[test]
fn half_precision_gradients() {
    let mut ran = Vec::new();
    for device in autodiff_devices() {
        let reference = run(&device, 12, 8, false, DType::F32);
        for dtype in [DType::F16, DType::BF16] {
            if !device.supports_dtype(dtype) {
                continue;
            }
            ran.push((format!("{device:?}"), dtype));
            let g = run(&device, 12, 8, false, dtype);
            assert_eq!(g.tokens.dtype(), dtype, "{device:?}");
            assert_eq!(g.table.dtype(), dtype, "{device:?}");
            let tolerance = Tolerance::rel_abs(0.02, 0.1);
            g.tokens
                .cast(DType::F32)
                .into_data()
                .assert_approx_eq::<f32>(&reference.tokens.clone().into_data(), tolerance);
            g.table
                .cast(DType::F32)
                .into_data()
                .assert_approx_eq::<f32>(&reference.table.clone().into_data(), tolerance);
        }
    }
    eprintln!("half-precision gradients ran on {ran:?}");
    for dtype in [DType::F16, DType::BF16] {
        assert!(
            ran.iter().any(|(_, d)| *d == dtype),
            "{dtype:?} ran nowhere"
        );
    }
}
