//! The fused implementations against the reference twin (the trait's default body).
//!
//! CPU: flex and ndarray. GPU: wgpu (lavapipe where there is no GPU; never skipped: without an
//! adapter these tests fail). Autodiff: the hand-written backward against the
//! gradients autodiff derives through the reference body.

use burn::backend::{Autodiff, Backend, Flex};
use burn::tensor::{Device, DeviceKind, Distribution, Int, Tensor, TensorData, Tolerance};
use burn_positional_kernels::{
    FusedCombine, FusedEmbeddingError, FusedEmbeddingOptions, FusedPositions, PositionSource,
    Sinusoid, fused_embedding, reference, try_fused_embedding,
};

const VOCAB: usize = 11;
const D_TOKEN: usize = 8;
const BATCH: usize = 2;
const SEQ: usize = 5;

/// Ids with a padding id (0), an id past the vocabulary (11) and a negative one (-1).
fn ids(device: &Device) -> Tensor<2, Int> {
    Tensor::from_data([[3, 0, 10, 11, 4], [-1, 5, 5, 2, 0]], device)
}

fn tokens(device: &Device) -> Tensor<2> {
    Tensor::random([VOCAB, D_TOKEN], Distribution::Normal(0.0, 1.0), device)
}

fn explicit_positions(device: &Device) -> Tensor<2, Int> {
    // Left-padded second row; position 7 is past a 7-row learned table.
    Tensor::from_data([[0, 1, 2, 3, 7], [0, 0, 1, 2, 3]], device)
}

/// The cases: (source width, combine, positions, learned table rows).
fn cases() -> Vec<(usize, FusedCombine, Option<usize>, bool)> {
    vec![
        // (d_position, combine, offset (None = explicit), learned)
        (D_TOKEN, FusedCombine::Add, Some(0), false),
        (D_TOKEN, FusedCombine::Add, Some(40), false),
        (6, FusedCombine::Concat, None, false),
        (D_TOKEN, FusedCombine::Add, Some(3), true),
        (4, FusedCombine::Concat, None, true),
        (D_TOKEN, FusedCombine::Add, None, true),
        // Widths that set the GPU kernel's vector size: 4 above, 2 here (8 + 6), 1 for an
        // odd learned width (8 + 3).
        (6, FusedCombine::Concat, Some(2), false),
        (3, FusedCombine::Concat, Some(1), true),
        (3, FusedCombine::Concat, None, true),
        // Learned rows offset..offset + 5 of 7: at the start, in the middle, at the end, past it.
        (D_TOKEN, FusedCombine::Add, Some(0), true),
        (D_TOKEN, FusedCombine::Add, Some(2), true),
    ]
}

struct Case {
    tokens: Tensor<2>,
    ids: Tensor<2, Int>,
    positions: FusedPositions,
    source: PositionSource,
    options: FusedEmbeddingOptions,
}

fn build(
    device: &Device,
    (d_position, combine, offset, learned): (usize, FusedCombine, Option<usize>, bool),
) -> Case {
    let positions = match offset {
        Some(o) => FusedPositions::Offset(o),
        None => FusedPositions::Explicit(explicit_positions(device)),
    };
    let source = if learned {
        PositionSource::Learned(Tensor::random(
            [7, d_position],
            Distribution::Normal(0.0, 1.0),
            device,
        ))
    } else {
        PositionSource::Sinusoidal(Sinusoid::new(d_position))
    };
    Case {
        tokens: tokens(device),
        ids: ids(device),
        positions,
        source,
        options: FusedEmbeddingOptions {
            scale: 2.0,
            padding_idx: Some(0),
            combine,
            offset: 0,
            sequential_positions: false,
        },
    }
}

/// The reference body on backend `B`, called directly on the backend primitives.
fn reference_on<B: Backend>(case: &Case) -> (Tensor<3>, Tensor<2, Int>)
where
    burn::backend::DispatchTensor: burn::backend::DispatchKindConversion<B>,
{
    let [_, seq] = case.ids.dims();
    let device = case.ids.device();
    let (positions, offset) = match &case.positions {
        FusedPositions::Offset(o) => (
            Tensor::<1, Int>::arange(0..seq as i64, &device).reshape([1, seq]),
            *o as i64,
        ),
        FusedPositions::Explicit(p) => (p.clone(), 0),
    };
    let position = match &case.source {
        PositionSource::Sinusoidal(s) => reference::Position::Sinusoidal(*s),
        PositionSource::Learned(t) => {
            reference::Position::Learned(t.clone().try_into_primitive::<B>().unwrap())
        }
    };
    let options = FusedEmbeddingOptions {
        offset,
        ..case.options.clone()
    };
    let (out, status) = reference::fused_embedding::<B>(
        case.tokens.clone().try_into_primitive::<B>().unwrap(),
        case.ids.clone().try_into_primitive::<B>().unwrap(),
        positions.try_into_primitive::<B>().unwrap(),
        position,
        &options,
    );
    (
        Tensor::from_primitive::<B>(out),
        Tensor::from_primitive::<B>(status),
    )
}

fn fused(case: &Case) -> (Tensor<3>, Tensor<2, Int>) {
    fused_embedding(
        case.tokens.clone(),
        case.ids.clone(),
        case.positions.clone(),
        case.source.clone(),
        case.options.clone(),
    )
}

fn assert_same(
    fused: (Tensor<3>, Tensor<2, Int>),
    reference: (Tensor<3>, Tensor<2, Int>),
    what: &str,
) {
    let (out, status) = fused;
    let (ref_out, ref_status) = reference;
    assert_eq!(out.dims(), ref_out.dims(), "{what}: output shape");
    // f32 sinusoid evaluation in the reference body vs f64 on the host: positions < 50 keep the
    // difference far below 1e-4.
    out.into_data()
        .assert_approx_eq::<f32>(&ref_out.into_data(), Tolerance::absolute(1e-4));
    let got: Vec<i64> = status.into_data().iter::<i64>().collect();
    let want: Vec<i64> = ref_status.into_data().iter::<i64>().collect();
    assert_eq!(got, want, "{what}: status");
}

fn check_all<B: Backend>(device: &Device)
where
    burn::backend::DispatchTensor: burn::backend::DispatchKindConversion<B>,
{
    for spec in cases() {
        let case = build(device, spec);
        assert_same(fused(&case), reference_on::<B>(&case), &format!("{spec:?}"));
    }
}

#[test]
fn flex_fused_matches_reference() {
    check_all::<Flex>(&Device::flex());
}

#[test]
#[allow(deprecated)]
fn ndarray_fused_matches_reference() {
    check_all::<burn::backend::NdArray>(&Device::ndarray());
}

#[test]
fn wgpu_fused_matches_reference() {
    check_all::<burn::backend::Cube>(&Device::wgpu(DeviceKind::DefaultDevice));
}

#[test]
fn status_codes_and_error() {
    let device = Device::flex();
    let case = build(&device, (D_TOKEN, FusedCombine::Add, Some(3), true));
    let (_, status) = fused(&case);
    // ids [[3, 0, 10, 11, 4], [-1, 5, 5, 2, 0]]; positions 3..8 against a 7-row table.
    let want = TensorData::from([[0i64, 0, 0, 1, 2], [1, 0, 0, 0, 2]]);
    assert_eq!(
        status.into_data().iter::<i64>().collect::<Vec<_>>(),
        want.iter::<i64>().collect::<Vec<_>>()
    );
    let err = try_fused_embedding(
        case.tokens,
        case.ids,
        case.positions,
        case.source,
        case.options,
    )
    .unwrap_err();
    assert_eq!(
        err,
        FusedEmbeddingError::TokenIdOutOfRange {
            id: 11,
            batch: 0,
            position: 3,
            vocab_size: VOCAB
        }
    );
}

/// Gradients of the hand-written backward against autodiff through the reference body, on
/// `device` (an autodiff device whose inner backend is `B`).
fn check_backward<B: Backend>(device: &Device)
where
    burn::backend::DispatchTensor: burn::backend::DispatchKindConversion<Autodiff<B>>,
{
    for spec in cases() {
        let case = build(device, spec);
        let tokens = case.tokens.clone().require_grad();
        let table = match &case.source {
            PositionSource::Learned(t) => Some(t.clone().require_grad()),
            PositionSource::Sinusoidal(_) => None,
        };
        let source = match (&case.source, &table) {
            (PositionSource::Learned(_), Some(t)) => PositionSource::Learned(t.clone()),
            (s, _) => s.clone(),
        };
        let d_out = fused(&case).0.dims()[2];
        let weights =
            Tensor::<3>::random([BATCH, SEQ, d_out], Distribution::Normal(0.0, 1.0), device);

        // Hand-written backward.
        let (out, _) = fused_embedding(
            tokens.clone(),
            case.ids.clone(),
            case.positions.clone(),
            source,
            case.options.clone(),
        );
        let grads = (out * weights.clone()).sum().backward();
        let token_grad = tokens.grad(&grads).unwrap();
        let table_grad = table.as_ref().map(|t| t.grad(&grads).unwrap());

        // Reference body on Autodiff<B>: gradients derived through the plain ops.
        let ref_tokens = case.tokens.clone().require_grad();
        let ref_table = table.as_ref().map(|t| t.clone().detach().require_grad());
        let ref_case = Case {
            tokens: ref_tokens.clone(),
            ids: case.ids.clone(),
            positions: case.positions.clone(),
            source: match &ref_table {
                Some(t) => PositionSource::Learned(t.clone()),
                None => case.source.clone(),
            },
            options: case.options.clone(),
        };
        let (ref_out, _) = reference_on::<Autodiff<B>>(&ref_case);
        let ref_grads = (ref_out * weights).sum().backward();
        token_grad.into_data().assert_approx_eq::<f32>(
            &ref_tokens.grad(&ref_grads).unwrap().into_data(),
            Tolerance::absolute(1e-4),
        );
        if let (Some(g), Some(t)) = (table_grad, ref_table) {
            g.into_data().assert_approx_eq::<f32>(
                &t.grad(&ref_grads).unwrap().into_data(),
                Tolerance::absolute(1e-4),
            );
        }
    }
}

#[test]
fn flex_autodiff_backward_matches_reference_autodiff() {
    check_backward::<Flex>(&Device::flex().autodiff());
}

#[test]
fn wgpu_autodiff_backward_matches_reference_autodiff() {
    check_backward::<burn::backend::Cube>(&Device::wgpu(DeviceKind::DefaultDevice).autodiff());
}

/// Values by hand: token row times scale plus the interleaved (sin, cos) row.
#[test]
fn anchor_values_on_flex() {
    let device = Device::flex();
    let tokens = Tensor::<2>::from_data([[0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]], &device);
    let ids = Tensor::<2, Int>::from_data([[1, 1]], &device);
    let options = FusedEmbeddingOptions {
        scale: 0.5,
        ..Default::default()
    };
    let (out, _) = fused_embedding(
        tokens,
        ids,
        FusedPositions::Offset(1),
        PositionSource::Sinusoidal(Sinusoid::new(4)),
        options,
    );
    let w1 = 10_000f64.powf(-0.5);
    let row = |p: f64| {
        [
            0.5 + p.sin(),
            1.0 + p.cos(),
            1.5 + (p * w1).sin(),
            2.0 + (p * w1).cos(),
        ]
        .map(|v| v as f32)
    };
    out.into_data().assert_approx_eq::<f32>(
        &TensorData::new([row(1.0), row(2.0)].concat(), [1, 2, 4]),
        Tolerance::absolute(1e-6),
    );
}

/// Far positions: the host paths evaluate in f64, the reference body and the CubeCL kernel in
/// f32, whose angle error grows with the position (about 4e-3 rad at 100 000). Documents the
/// gap; see the guide's open problems.
#[test]
fn far_positions_f32_gap_is_bounded() {
    let device = Device::flex();
    let case = build(&device, (D_TOKEN, FusedCombine::Add, Some(100_000), false));
    let (fused_out, _) = fused(&case);
    let (ref_out, _) = reference_on::<Flex>(&case);
    let diff = (fused_out - ref_out).abs().max().into_scalar::<f32>();
    eprintln!("max |f64 host - f32 reference| at positions 100000..100005: {diff}");
    assert!(diff < 2e-2, "{diff}");

    let gpu = Device::wgpu(DeviceKind::DefaultDevice);
    let (gpu_out, _) = fused_embedding(
        case.tokens.clone().to_device(&gpu),
        case.ids.clone().to_device(&gpu),
        case.positions.clone(),
        case.source.clone(),
        case.options.clone(),
    );
    let (host_out, _) = fused(&case);
    let diff = (gpu_out.to_device(&device) - host_out)
        .abs()
        .max()
        .into_scalar::<f32>();
    eprintln!("max |f64 host - f32 CubeCL kernel| at positions 100000..100005: {diff}");
    assert!(diff < 2e-2, "{diff}");
}

/// Random shapes and options, fused against the reference on every device: widths that set
/// every GPU vector size (1, 2, 4) and mix them across the token and position parts, ids and
/// positions in and out of range, padding, scale, add and concat, offsets and explicit
/// positions.
mod random_cases {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    struct Spec {
        vocab: usize,
        d_token: usize,
        d_position: usize,
        combine: FusedCombine,
        /// `Some(rows)` for a learned table, `None` for sinusoidal.
        table_len: Option<usize>,
        batch: usize,
        seq: usize,
        /// `batch * seq` ids, some outside `0..vocab`.
        ids: Vec<i64>,
        /// `Err(offset)`, or `Ok(batch * seq explicit positions)`.
        positions: Result<Vec<i64>, usize>,
        padding_idx: Option<usize>,
        scale: f32,
    }

    fn spec() -> impl Strategy<Value = Spec> {
        (
            1usize..7,                                       // vocab
            1usize..10,                                      // d_token
            (1usize..6, prop::bool::ANY, prop::bool::ANY),   // half width, concat, learned
            (1usize..4, 1usize..7),                          // batch, seq
            1usize..9,                                       // learned table rows
            prop::bool::ANY,                                 // explicit positions
            prop::option::of(0usize..7),                     // padding id
            prop_oneof![Just(1.0f32), Just(0.5), Just(4.0)], // scale
        )
            .prop_flat_map(
                |(
                    vocab,
                    d_token,
                    (half, concat, learned),
                    (batch, seq),
                    rows,
                    explicit,
                    pad,
                    scale,
                )| {
                    let n = batch * seq;
                    let table_len = learned.then_some(rows);
                    // Learned widths may be odd; sinusoidal ones are even.
                    let d_position = match (concat, learned) {
                        (false, _) => d_token,
                        (true, true) => half * 2 - (half % 2),
                        (true, false) => half * 2,
                    };
                    let combine = if concat {
                        FusedCombine::Concat
                    } else {
                        FusedCombine::Add
                    };
                    let sinusoid_even = concat || learned || d_token % 2 == 0;
                    let top = table_len.unwrap_or(40) as i64 + 2;
                    let positions = if explicit {
                        prop::collection::vec(-1i64..top, n).prop_map(Ok).boxed()
                    } else {
                        (0usize..6).prop_map(Err).boxed()
                    };
                    (
                        prop::collection::vec(-2i64..vocab as i64 + 2, n),
                        positions,
                        Just((vocab, d_token, d_position, combine, table_len, batch, seq)),
                        Just((pad.filter(|&p| p < vocab), scale, sinusoid_even)),
                    )
                },
            )
            .prop_filter("sinusoidal widths are even", |(_, _, _, (_, _, even))| {
                *even
            })
            .prop_map(
                |(
                    ids,
                    positions,
                    (vocab, d_token, d_position, combine, table_len, batch, seq),
                    (padding_idx, scale, _),
                )| Spec {
                    vocab,
                    d_token,
                    d_position,
                    combine,
                    table_len,
                    batch,
                    seq,
                    ids,
                    positions,
                    padding_idx,
                    scale,
                },
            )
    }

    /// Deterministic values in [-2, 2), the same on every device.
    fn values(n: usize, salt: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 + salt * 11) % 101) as f32 / 25.0 - 2.0)
            .collect()
    }

    fn case(spec: &Spec, device: &Device) -> Case {
        let Spec {
            vocab,
            d_token,
            d_position,
            batch,
            seq,
            ..
        } = *spec;
        let tokens = Tensor::from_data(
            TensorData::new(values(vocab * d_token, 1), [vocab, d_token]),
            device,
        );
        let ids = Tensor::from_data(TensorData::new(spec.ids.clone(), [batch, seq]), device);
        let positions = match &spec.positions {
            Err(offset) => FusedPositions::Offset(*offset),
            Ok(p) => FusedPositions::Explicit(Tensor::from_data(
                TensorData::new(p.clone(), [batch, seq]),
                device,
            )),
        };
        let source = match spec.table_len {
            Some(rows) => PositionSource::Learned(Tensor::from_data(
                TensorData::new(values(rows * d_position, 2), [rows, d_position]),
                device,
            )),
            None => PositionSource::Sinusoidal(Sinusoid::new(d_position)),
        };
        Case {
            tokens,
            ids,
            positions,
            source,
            options: FusedEmbeddingOptions {
                scale: spec.scale,
                padding_idx: spec.padding_idx,
                combine: spec.combine,
                ..Default::default()
            },
        }
    }

    fn check<B: Backend>(spec: &Spec, device: &Device)
    where
        burn::backend::DispatchTensor: burn::backend::DispatchKindConversion<B>,
    {
        let case = case(spec, device);
        assert_same(fused(&case), reference_on::<B>(&case), &format!("{spec:?}"));
    }

    proptest! {
        // Each case runs on three devices, wgpu (lavapipe in CI) compiling a kernel for every
        // new combination of options: 24 cases keep this test to seconds.
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        #[allow(deprecated)]
        fn fused_equals_reference_on_random_shapes(spec in spec()) {
            check::<Flex>(&spec, &Device::flex());
            check::<burn::backend::NdArray>(&spec, &Device::ndarray());
            check::<burn::backend::Cube>(&spec, &Device::wgpu(DeviceKind::DefaultDevice));
        }
    }
}
