//! Self-attention without positions is permutation-equivariant (seed 002): `Attn(P x) =
//! P Attn(x)`, so "dog bites man" and "man bites dog" give the same rows, permuted. Positions
//! (or a causal mask) break the equality by a clear margin.

use burn::prelude::*;
use burn_positional::{
    AbsolutePositionConfig, EmbeddingWithPositionConfig, LearnedConfig, SelfAttention,
    SelfAttentionConfig, SinusoidalConfig,
};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

const D_MODEL: usize = 16;
/// Float noise allowed where the math says "equal".
const EQUAL: f32 = 1e-4;
/// The least difference that counts as "clearly not equal": 100 times the noise.
const CLEARLY_DIFFERENT: f32 = 100.0 * EQUAL;

/// Reorders the sequence: row `i` of the result is row `perm[i]` of `x`.
fn permute(x: Tensor<3>, perm: &[usize]) -> Tensor<3> {
    let index: Vec<i64> = perm.iter().map(|&i| i as i64).collect();
    let device = x.device();
    x.select(
        1,
        Tensor::<1, Int>::from_data(TensorData::new(index, [perm.len()]), &device),
    )
}

fn max_abs_diff(a: Tensor<3>, b: Tensor<3>) -> f32 {
    (a - b).abs().max().into_scalar::<f32>()
}

/// A sequence length, a permutation of it that is not the identity, and a seed.
fn cases() -> impl Strategy<Value = (Vec<usize>, Vec<f32>)> {
    (2usize..8)
        .prop_flat_map(|seq| {
            (
                Just((0..seq).collect::<Vec<_>>()).prop_shuffle(),
                proptest::collection::vec(-2.0f32..2.0, seq * D_MODEL),
            )
        })
        .prop_filter("a permutation that moves something", |(perm, _)| {
            perm.iter().enumerate().any(|(i, &p)| i != p)
        })
}

fn runner() -> TestRunner {
    TestRunner::new(ProptestConfig::with_cases(16))
}

/// `Block(P x)` against `P Block(x)`.
fn equivariance_gap(block: &SelfAttention, x: Tensor<3>, perm: &[usize]) -> f32 {
    max_abs_diff(
        block.forward(permute(x.clone(), perm)),
        permute(block.forward(x), perm),
    )
}

pub fn attention_without_positions_is_permutation_equivariant(device: &Device) {
    let block = SelfAttentionConfig::new(D_MODEL, 4).init(device);
    runner()
        .run(&cases(), |(perm, values)| {
            let seq = perm.len();
            let x = Tensor::<3>::from_data(TensorData::new(values, [1, seq, D_MODEL]), device);
            let gap = equivariance_gap(&block, x.clone(), &perm);
            prop_assert!(gap < EQUAL, "Attn(Px) - P Attn(x) = {gap}");
            // Mean pooling forgets the order, so pooled outputs are equal.
            let pooled = |t: Tensor<3>| t.mean_dim(1);
            let pooled_gap = max_abs_diff(
                pooled(block.forward(permute(x.clone(), &perm))),
                pooled(block.forward(x)),
            );
            prop_assert!(pooled_gap < EQUAL, "pooled gap {pooled_gap}");
            Ok(())
        })
        .unwrap();
}

/// Embeds distinct token ids with `scheme`, permutes the *ids*, and measures the gap.
fn gap_with_scheme(scheme: AbsolutePositionConfig, causal: bool, device: &Device) {
    let vocab = 16;
    let embed = EmbeddingWithPositionConfig::new(vocab, D_MODEL)
        .with_scheme(scheme.clone())
        .init(device);
    let block = SelfAttentionConfig::new(D_MODEL, 4)
        .with_causal(causal)
        .init(device);
    runner()
        .run(&cases(), |(perm, _)| {
            let seq = perm.len();
            let ids: Vec<i64> = (0..seq as i64).collect();
            let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, seq]), device);
            let permuted_ids = {
                let index: Vec<i64> = perm.iter().map(|&i| i as i64).collect();
                ids.clone().select(
                    1,
                    Tensor::<1, Int>::from_data(TensorData::new(index, [seq]), device),
                )
            };
            let embedded = embed.forward(permuted_ids);
            let lhs = block.forward(embedded.clone());
            let rhs = permute(block.forward(embed.forward(ids)), &perm);
            let gap = max_abs_diff(lhs.clone(), rhs.clone());
            let shown = |t: Tensor<3>| t.into_data().iter::<f32>().take(6).collect::<Vec<_>>();
            let context = format!(
                "embedded {:?}, lhs {:?}, rhs {:?}",
                shown(embedded),
                shown(lhs),
                shown(rhs)
            );
            let want_equal = scheme == AbsolutePositionConfig::None && !causal;
            if want_equal {
                prop_assert!(gap < EQUAL, "{scheme:?}: gap {gap}");
            } else {
                prop_assert!(
                    gap > CLEARLY_DIFFERENT,
                    "{scheme:?}, causal {causal}: gap only {gap} ({context})"
                );
            }
            Ok(())
        })
        .unwrap();
}

pub fn token_ids_without_positions_are_equivariant(device: &Device) {
    gap_with_scheme(AbsolutePositionConfig::None, false, device);
}

pub fn sinusoidal_positions_break_equivariance(device: &Device) {
    gap_with_scheme(SinusoidalConfig::new().into(), false, device);
}

pub fn learned_positions_break_equivariance(device: &Device) {
    gap_with_scheme(LearnedConfig::new(16).into(), false, device);
}

pub fn a_causal_mask_breaks_equivariance(device: &Device) {
    gap_with_scheme(AbsolutePositionConfig::None, true, device);
}

on_every_device!(
    attention_without_positions_is_permutation_equivariant,
    token_ids_without_positions_are_equivariant,
    sinusoidal_positions_break_equivariance,
    learned_positions_break_equivariance,
    a_causal_mask_breaks_equivariance,
);
