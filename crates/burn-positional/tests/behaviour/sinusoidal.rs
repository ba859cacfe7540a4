//! Sinusoidal values against outside references.

use burn::nn::{Initializer, PositionalEncodingConfig};
use burn::prelude::*;
use burn_positional::{EmbeddingWithPositionConfig, Positions, SinusoidalConfig};

/// The paper's formula (Vaswani et al. 2017, section 3.5), written as printed and evaluated
/// in f64: `PE(p, 2i) = sin(p / 10000^(2i/d))`, `PE(p, 2i+1) = cos(p / 10000^(2i/d))`.
fn paper_formula(p: f64, column: usize, d: usize) -> f64 {
    let two_i = (column - column % 2) as f64;
    let angle = p / 10_000f64.powf(two_i / d as f64);
    if column.is_multiple_of(2) {
        angle.sin()
    } else {
        angle.cos()
    }
}

/// An embedding whose token vectors are all zero, so its output is the position table.
fn table_only(
    d_model: usize,
    cache_len: usize,
    device: &Device,
) -> burn_positional::EmbeddingWithPosition {
    EmbeddingWithPositionConfig::new(4, d_model)
        .with_token_initializer(Initializer::Zeros)
        .with_scheme(SinusoidalConfig::new().with_cache_len(cache_len).into())
        .init(device)
}

fn assert_matches_formula(output: Tensor<3>, positions: &[Vec<u64>], tolerance: f64) {
    let [batch, seq, d] = output.dims();
    let values: Vec<f32> = output.into_data().iter::<f32>().collect();
    let mut worst = 0f64;
    for b in 0..batch {
        for s in 0..seq {
            for c in 0..d {
                let got = values[(b * seq + s) * d + c] as f64;
                let want = paper_formula(positions[b][s] as f64, c, d);
                worst = worst.max((got - want).abs());
            }
        }
    }
    assert!(
        worst <= tolerance,
        "max abs error {worst:e} > {tolerance:e}"
    );
}

pub fn near_positions_match_the_paper_formula(device: &Device) {
    let (seq, d_model) = (64, 32);
    let embed = table_only(d_model, 4096, device);
    let ids = Tensor::<2, Int>::zeros([1, seq], device);
    let positions = vec![(0..seq as u64).collect()];
    assert_matches_formula(embed.forward(ids), &positions, 1e-6);
}

pub fn far_positions_match_the_paper_formula(device: &Device) {
    // Up to position 100 000, past the cache (1024 rows here), by offset and explicitly.
    let d_model = 64;
    let embed = table_only(d_model, 1024, device);
    let ids = Tensor::<2, Int>::zeros([1, 10], device);
    let output = embed.forward_at(ids, Positions::Offset(99_991));
    assert_matches_formula(output, &[(99_991..100_001).collect()], 1e-6);

    let explicit: Vec<u64> = vec![0, 1023, 1024, 4095, 4096, 50_000, 99_999, 100_000];
    let ids = Tensor::<2, Int>::zeros([1, explicit.len()], device);
    let p = Tensor::<2, Int>::from_data(
        TensorData::new(
            explicit.iter().map(|&p| p as i64).collect::<Vec<_>>(),
            [1, explicit.len()],
        ),
        device,
    );
    let output = embed.forward_at(ids, Positions::Explicit(p));
    assert_matches_formula(output, &[explicit], 1e-6);
}

pub fn seed_000_worked_example(device: &Device) {
    // Seed 000 computes d_model = 2 by hand: PE = [[0.0000, 1.0000], [0.8415, 0.5403]].
    let embed = table_only(2, 16, device);
    let output = embed.forward(Tensor::<2, Int>::zeros([1, 2], device));
    let expected = TensorData::from([[[0.0f32, 1.0], [0.8415, 0.5403]]]);
    output
        .into_data()
        .assert_approx_eq::<f32>(&expected, burn::tensor::Tolerance::absolute(5e-5));
}

pub fn agrees_with_burns_positional_encoding(device: &Device) {
    // burn's own `PositionalEncoding` as a reference implementation (f32, so 1e-5).
    let (batch, seq, d_model) = (2, 50, 32);
    let ours =
        table_only(d_model, 4096, device).forward(Tensor::<2, Int>::zeros([batch, seq], device));
    let burns = PositionalEncodingConfig::new(d_model)
        .init(device)
        .forward(Tensor::zeros([batch, seq, d_model], device));
    ours.into_data()
        .assert_approx_eq::<f32>(&burns.into_data(), burn::tensor::Tolerance::absolute(1e-5));
}

/// What one call answers: `Ok` with the output (NaN rows as a mask, the other values as
/// they are), or `Err` with the message.
fn answer(out: Result<Tensor<3>, String>) -> Result<(Vec<bool>, Tensor<3>), String> {
    let out = out?;
    let nan = out.clone().is_nan();
    let mask = nan.clone().into_data().iter::<bool>().collect();
    Ok((mask, out.mask_fill(nan, 0.0)))
}

fn assert_same(a: Result<Tensor<3>, String>, b: Result<Tensor<3>, String>, what: &str) {
    match (answer(a), answer(b)) {
        (Ok((nan_a, a)), Ok((nan_b, b))) => {
            assert_eq!(nan_a, nan_b, "{what}: NaN rows");
            let diff = (a - b).abs().max().into_scalar::<f32>();
            assert!(diff == 0.0, "{what}: values differ by {diff}");
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "{what}"),
        (a, b) => panic!(
            "{what}: a fresh module answers {:?}, the same module after a long call {:?}",
            a.map(|(nan, _)| nan),
            b.map(|(nan, _)| nan)
        ),
    }
}

/// The same explicit positions, between `cache_len` and a length an earlier call grew the
/// table to, get the same answer whatever came before: from a fresh module, from one that
/// embedded a long sequence first, and (autodiff devices) from `valid()` of either, which moves
/// the module to the inner device.
pub fn explicit_positions_answer_the_same_whatever_came_before(device: &Device) {
    let config = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(SinusoidalConfig::new().with_cache_len(16).into());
    let ids = Tensor::<2, Int>::ones([2, 3], device);
    let positions = Tensor::<2, Int>::from_data([[0, 40, 2], [1, 2, 3]], device);
    let long = |embed: &burn_positional::EmbeddingWithPosition| {
        embed.forward_at(Tensor::ones([1, 4], device), Positions::Offset(100));
        embed.check_inputs().unwrap();
    };
    // Two modules with the same token table.
    let pair = || {
        let fresh = config.init(device);
        let mut grown = config.init(device);
        grown.tokens = fresh.tokens.clone();
        (fresh, grown)
    };
    let mut pairs = vec![pair()];
    if device.is_autodiff() {
        let (fresh, grown) = pair();
        long(&grown);
        pairs.push((fresh.valid(), grown.valid()));
    }
    for (fresh, grown) in pairs {
        long(&grown);
        type Run = fn(
            &burn_positional::EmbeddingWithPosition,
            Tensor<2, Int>,
            Positions,
        ) -> Result<Tensor<3>, String>;
        let calls: [(&str, Run); 3] = [
            ("forward_at, then check_inputs", |e, ids, at| {
                let out = e.forward_at(ids, at);
                e.check_inputs().map_err(|err| err.to_string())?;
                Ok(out)
            }),
            ("try_forward_at", |e, ids, at| {
                e.try_forward_at(ids, at).map_err(|err| err.to_string())
            }),
            ("reference", |e, ids, at| {
                e.try_forward_reference(ids, at)
                    .map_err(|err| err.to_string())
            }),
        ];
        for (what, call) in calls {
            for at in [
                Positions::Explicit(positions.clone()),
                Positions::Explicit(positions.clone().slice([0..1, 0..3])),
            ] {
                let a = call(&fresh, ids.clone(), at.clone());
                let b = call(&grown, ids.clone(), at);
                assert_same(a, b, what);
            }
        }
    }
}

on_every_device!(
    explicit_positions_answer_the_same_whatever_came_before,
    near_positions_match_the_paper_formula,
    far_positions_match_the_paper_formula,
    seed_000_worked_example,
    agrees_with_burns_positional_encoding,
);
