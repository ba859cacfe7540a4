//! The measurements of the properties report, on every device: each property takes the value
//! the math says it must for the schemes where the math is known.

use burn::prelude::*;
use burn_positional_examples::schemes::Scheme;
use burn_positional_studies::properties::{
    PropertiesConfig, SchemeProbe, closest_combination, measure,
};

fn row(scheme: Scheme, device: &Device) -> burn_positional_studies::properties::PropertyRow {
    let probe = SchemeProbe::init(scheme, &PropertiesConfig::new(), device);
    measure(&probe, &[]).unwrap_or_else(|e| panic!("{scheme}: {e}"))
}

/// Seed 002's relative-awareness: sinusoidal dot products, RoPE scores and the score biases
/// depend on `q - p` alone (`PE(p)·PE(p+k) = Σ cos(k ωᵢ)`; `R(p)ᵀR(q) = R(q - p)`; ALiBi and
/// T5 are functions of the distance by construction). A random learned table's do not.
fn scores_depend_on_absolute_position_only_for_learned_tables(device: &Device) {
    for scheme in [Scheme::Sinusoidal, Scheme::Rope, Scheme::Alibi, Scheme::T5] {
        let dependence = row(scheme, device).relative_score_dependence;
        assert!(dependence < 1e-4, "{scheme}: score dependence {dependence}");
    }
    let learned = row(Scheme::Learned, device).relative_score_dependence;
    assert!(
        learned > 0.3,
        "random learned table: dependence only {learned}"
    );
}

/// The shift from `p` to `p + 1` is one fixed rotation for sinusoidal vectors and for RoPE's
/// rotated probes: residual near zero over 128 positions 64 wide. A random table with more
/// rows than columns has no such map; with fewer, any table fits, and the row says so.
fn shift_map_residual_is_zero_for_rotations_and_large_for_a_random_table(device: &Device) {
    for scheme in [Scheme::Sinusoidal, Scheme::Rope] {
        let residual = row(scheme, device)
            .relative_shift_residual
            .expect("has vectors");
        assert!(residual < 1e-4, "{scheme}: residual {residual}");
    }
    let config = PropertiesConfig::new().with_d_model(8).with_n_heads(1);
    let probe = SchemeProbe::init(Scheme::Learned, &config, device);
    let residual = measure(&probe, &[])
        .unwrap()
        .relative_shift_residual
        .unwrap();
    assert!(
        residual > 0.3,
        "random 32x8 table: residual only {residual}"
    );
    let wide = row(Scheme::Learned, device);
    assert_eq!(wide.relative_shift_residual, None);
    assert!(wide.relative_shift_note.unwrap().contains("32 rows"));
    assert_eq!(row(Scheme::Alibi, device).relative_shift_residual, None);
}

/// Unique and bounded: sinusoidal vectors all have norm `sqrt(d/2)` and stay apart; without
/// positions every position is the same (distance 0); ALiBi's bias grows without bound.
fn uniqueness_and_bounds_match_the_formulas(device: &Device) {
    let config = PropertiesConfig::new();
    let sin = row(Scheme::Sinusoidal, device);
    let expected = (config.d_model as f64 / 2.0).sqrt();
    assert!(
        (sin.bounded_max_norm - expected).abs() < 1e-4,
        "{}",
        sin.bounded_max_norm
    );
    let past = sin.generalizable.max_norm.unwrap();
    assert!((past - expected).abs() < 1e-4, "norm past N: {past}");
    assert!(sin.unique_min_distance > 0.1, "{}", sin.unique_min_distance);
    assert_eq!(
        sin.generalizable.distinct,
        Some(config.length * config.reach)
    );
    assert_eq!(sin.deterministic_two_inits, Some(0.0));

    let none = row(Scheme::None, device);
    assert_eq!(none.unique_min_distance, 0.0);
    assert_eq!(none.generalizable.distinct, Some(1));

    let alibi = row(Scheme::Alibi, device);
    let grows = alibi.generalizable.max_norm.unwrap() / alibi.bounded_max_norm;
    // |bias(r)| = r |m|: the norm over 0..reach·N is (reach·N - 1) / (N - 1) times that over 0..N.
    let ratio = (config.length * config.reach - 1) as f64 / (config.length - 1) as f64;
    assert!(
        (grows - ratio).abs() < 1e-4,
        "ALiBi grows {grows}x, expected {ratio}x"
    );
}

/// Generalizable: a learned table has no rows past its length and says so; T5's buckets merge
/// distances (16 buckets per direction by default), so few distances stay distinct.
fn learned_tables_refuse_and_t5_merges_distances_past_the_length(device: &Device) {
    let learned = row(Scheme::Learned, device);
    let error = learned.generalizable.error.expect("no rows past N");
    assert!(
        error.contains("32"),
        "error should name the table length: {error}"
    );
    let t5 = row(Scheme::T5, device);
    assert_eq!(
        t5.generalizable.distinct,
        Some(16),
        "{:?}",
        t5.generalizable
    );
    assert_eq!(t5.generalizable.min_distance, Some(0.0));
}

/// The same parameters give the same signatures on flex; sinusoidal tables come from the host
/// in f64, so they agree to the bit.
fn signatures_agree_with_flex(device: &Device) {
    let flex = crate::devices::flex();
    for (scheme, tolerance) in [
        (Scheme::Sinusoidal, 0.0),
        (Scheme::Learned, 0.0),
        (Scheme::Rope, 1e-6),
    ] {
        let probe = SchemeProbe::init(scheme, &PropertiesConfig::new(), device);
        let ours = probe.signatures(0..32).unwrap();
        let theirs = probe.to_device(&flex).signatures(0..32).unwrap();
        let diff = ours
            .iter()
            .flatten()
            .zip(theirs.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(diff <= tolerance, "{scheme}: {diff} from flex");
    }
}

/// Seed 000 at realistic sizes: with sinusoidal positions no two different combinations come
/// close; without positions the same token at two positions is one vector.
fn combinations_collide_only_without_positions(device: &Device) {
    let config = PropertiesConfig::new().with_d_model(16).with_length(8);
    let sin = closest_combination(Scheme::Sinusoidal, 32, &config, device).unwrap();
    assert!(sin.distance > 0.05 * sin.mean_distance, "{sin:?}");
    let none = closest_combination(Scheme::None, 32, &config, device).unwrap();
    assert_eq!(none.distance, 0.0);
    assert_eq!(none.first.0, none.second.0, "the same token: {none:?}");
}

on_every_device!(
    scores_depend_on_absolute_position_only_for_learned_tables,
    shift_map_residual_is_zero_for_rotations_and_large_for_a_random_table,
    uniqueness_and_bounds_match_the_formulas,
    learned_tables_refuse_and_t5_merges_distances_past_the_length,
    signatures_agree_with_flex,
    combinations_collide_only_without_positions,
);
