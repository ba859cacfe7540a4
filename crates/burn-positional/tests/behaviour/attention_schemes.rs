//! The schemes that act on attention: RoPE on queries and keys, ALiBi and T5 biases on scores.

use burn::prelude::*;
use burn::tensor::Tolerance;
use burn_positional::score_bias::{alibi_slopes, t5_bucket};
use burn_positional::{
    AlibiConfig, AttentionInput, RopeConfig, RopeLayout, ScoreBiasConfig, SelfAttentionConfig,
    T5BiasConfig,
};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

fn tensor4(values: Vec<f32>, shape: [usize; 4], device: &Device) -> Tensor<4> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

fn values(t: Tensor<4>) -> Vec<f32> {
    t.into_data().iter::<f32>().collect()
}

/// RoPE by its definition (Su et al. 2021, eq. 34), in f64, for one vector at position `p`.
fn rope_reference(
    x: &[f32],
    p: f64,
    base: f64,
    rotary_dims: usize,
    layout: RopeLayout,
) -> Vec<f64> {
    let half = rotary_dims / 2;
    let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for j in 0..half {
        let angle = p / base.powf((2 * j) as f64 / rotary_dims as f64);
        let (ia, ib) = match layout {
            RopeLayout::Interleaved => (2 * j, 2 * j + 1),
            RopeLayout::HalfSplit => (j, j + half),
        };
        let (a, b) = (x[ia] as f64, x[ib] as f64);
        out[ia] = a * angle.cos() - b * angle.sin();
        out[ib] = a * angle.sin() + b * angle.cos();
    }
    out
}

fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

pub fn rope_matches_an_f64_evaluation_of_each_layout(device: &Device) {
    let (seq, d_head) = (6, 12);
    for layout in [RopeLayout::Interleaved, RopeLayout::HalfSplit] {
        for rotary_dims in [12, 8] {
            let rope = RopeConfig::new(d_head)
                .with_layout(layout)
                .with_rotary_dims(Some(rotary_dims))
                .with_cache_len(16)
                .init(device);
            let x = pseudo_random(seq * d_head, 3);
            for offset in [0, 5, 100_000] {
                let got =
                    values(rope.apply(tensor4(x.clone(), [1, 1, seq, d_head], device), offset));
                for s in 0..seq {
                    let want = rope_reference(
                        &x[s * d_head..(s + 1) * d_head],
                        (offset + s) as f64,
                        10_000.0,
                        rotary_dims,
                        layout,
                    );
                    for (g, w) in got[s * d_head..(s + 1) * d_head].iter().zip(want) {
                        assert!(
                            (*g as f64 - w).abs() < 1e-5,
                            "{layout:?} rot {rotary_dims} offset {offset}: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}

pub fn rope_scores_depend_only_on_the_offset(device: &Device) {
    // Property: q_i · k_j after rotation equals q_(i+s) · k_(j+s) after rotation.
    let d_head = 16;
    let rope = RopeConfig::new(d_head).init(device);
    let mut runner = TestRunner::new(ProptestConfig::with_cases(8));
    runner
        .run(
            &(0usize..500, 0usize..500, 0usize..5000, any::<u64>()),
            |(i, j, shift, seed)| {
                let q = tensor4(pseudo_random(d_head, seed), [1, 1, 1, d_head], device);
                let k = tensor4(pseudo_random(d_head, seed ^ 1), [1, 1, 1, d_head], device);
                let score = |a: usize, b: usize| -> f32 {
                    (rope.apply(q.clone(), a) * rope.apply(k.clone(), b))
                        .sum()
                        .into_scalar::<f32>()
                };
                let (near, far) = (score(i, j), score(i + shift, j + shift));
                prop_assert!((near - far).abs() < 1e-4, "{near} vs {far}");
                // Rotation preserves norms.
                let norm = |t: Tensor<4>| t.powf_scalar(2.0).sum().into_scalar::<f32>().sqrt();
                prop_assert!((norm(rope.apply(q.clone(), i)) - norm(q.clone())).abs() < 1e-4);
                Ok(())
            },
        )
        .unwrap();
}

pub fn rope_offset_equals_slice(device: &Device) {
    let (seq, d_head, k) = (10, 8, 4);
    let rope = RopeConfig::new(d_head).with_cache_len(6).init(device);
    let x = tensor4(
        pseudo_random(2 * seq * d_head, 9),
        [1, 2, seq, d_head],
        device,
    );
    let full = rope
        .apply(x.clone(), 0)
        .slice([0..1, 0..2, k..seq, 0..d_head]);
    let tail = rope.apply(x.slice([0..1, 0..2, k..seq, 0..d_head]), k);
    full.into_data()
        .assert_approx_eq::<f32>(&tail.into_data(), Tolerance::absolute(1e-6));
}

pub fn rope_layouts_are_one_rotation_up_to_a_permutation(device: &Device) {
    // Interleaved(x) = P^-1 HalfSplit(P x), with P gathering even dims then odd dims.
    let (seq, d_head) = (5, 8);
    let interleaved = RopeConfig::new(d_head).init(device);
    let half_split = RopeConfig::new(d_head)
        .with_layout(RopeLayout::HalfSplit)
        .init(device);
    let x = tensor4(pseudo_random(seq * d_head, 5), [1, 1, seq, d_head], device);
    let to_half: Vec<i64> = (0..d_head as i64)
        .step_by(2)
        .chain((1..d_head as i64).step_by(2))
        .collect();
    let mut back = vec![0i64; d_head];
    for (new, &old) in to_half.iter().enumerate() {
        back[old as usize] = new as i64;
    }
    let index = |v: Vec<i64>| Tensor::<1, Int>::from_data(TensorData::new(v, [d_head]), device);
    let via_half = half_split
        .apply(x.clone().select(3, index(to_half)), 7)
        .select(3, index(back));
    via_half.into_data().assert_approx_eq::<f32>(
        &interleaved.apply(x, 7).into_data(),
        Tolerance::absolute(1e-6),
    );
}

pub fn alibi_slopes_follow_the_paper(_device: &Device) {
    // Press et al. 2022, section 3 and the reference `get_slopes`: 2^(-8h/n) for a power of two
    // n; otherwise the slopes of the power of two below, then every other slope of twice it.
    let p = |e: f64| 2f64.powf(e);
    assert_eq!(alibi_slopes(1), vec![p(-8.0)]);
    assert_eq!(alibi_slopes(2), vec![p(-4.0), p(-8.0)]);
    assert_eq!(
        alibi_slopes(8),
        (1..=8).map(|h| p(-(h as f64))).collect::<Vec<_>>()
    );
    let sixteen: Vec<f64> = (1..=16).map(|h| p(-0.5 * h as f64)).collect();
    assert_eq!(alibi_slopes(16).len(), 16);
    for (a, b) in alibi_slopes(16).iter().zip(&sixteen) {
        assert!((a - b).abs() < 1e-15);
    }
    let twelve: Vec<f64> = (1..=8)
        .map(|h| p(-(h as f64)))
        .chain([-0.5, -1.5, -2.5, -3.5].map(p))
        .collect();
    for (a, b) in alibi_slopes(12).iter().zip(&twelve) {
        assert!((a - b).abs() < 1e-15, "{:?}", alibi_slopes(12));
    }
}

/// `-m_h |i - j|` for every query `i` (at its offset) and key `j`, against the paper's slopes in
/// f64.
pub fn alibi_bias_is_linear_in_distance(device: &Device) {
    let n_heads = 12;
    let slopes = alibi_slopes(n_heads);
    let alibi = AlibiConfig::new(n_heads).init(device);
    for offset in [0, 3] {
        let (seq_q, seq_k) = (4, 4 + offset + 2); // keys on both sides of every query
        let bias = values(alibi.bias(offset, seq_q, seq_k));
        for h in 0..n_heads {
            for r in 0..seq_q {
                let i = offset + r;
                for j in 0..seq_k {
                    let got = bias[(h * seq_q + r) * seq_k + j] as f64;
                    let d = (i as f64 - j as f64).abs();
                    assert!((got + slopes[h] * d).abs() < 1e-5, "head {h}, {i} -> {j}");
                }
            }
        }
    }
}

/// The block alone decides whether attention is causal, for every score bias: a non-causal
/// block with ALiBi or T5 lets a query attend to later keys, a causal one does not, and the
/// configs sized from the block are the same whichever order `with_causal` comes in.
pub fn the_block_decides_causal_for_every_score_bias(device: &Device) {
    let (seq, d_model, n_heads) = (5, 24, 12);
    let base = SelfAttentionConfig::new(d_model, n_heads);
    for causal in [false, true] {
        assert_eq!(
            base.clone().with_causal(causal).with_alibi(),
            base.clone().with_alibi().with_causal(causal)
        );
        assert_eq!(
            base.clone().with_causal(causal).with_t5(),
            base.clone().with_t5().with_causal(causal)
        );
    }
    let x = Tensor::<3>::from_data(
        TensorData::new(pseudo_random(seq * d_model, 2), [1, seq, d_model]),
        device,
    );
    for (name, config) in [
        ("alibi", base.clone().with_alibi()),
        ("t5", base.clone().with_t5()),
    ] {
        for causal in [false, true] {
            let block = config.clone().with_causal(causal).init(device);
            let weights = values(
                block
                    .forward_weights(AttentionInput::new(x.clone()))
                    .weights,
            );
            for h in 0..n_heads {
                for i in 0..seq {
                    for j in i + 1..seq {
                        let w = weights[(h * seq + i) * seq + j];
                        if causal {
                            assert_eq!(w, 0.0, "{name}, causal: query {i} saw key {j}");
                        } else {
                            assert!(w > 0.0, "{name}, not causal: query {i} missed key {j}");
                        }
                    }
                }
            }
        }
    }
    // A causal block with ALiBi gives what the paper's causal bias (`-m (i - j)` on earlier
    // keys, `-inf` on later ones) gives when passed to the same block without a bias of its own.
    let block = base.with_causal(true).with_alibi().init(device);
    let mut plain = block.clone();
    plain.score_bias = None;
    let slopes = alibi_slopes(n_heads);
    let paper: Vec<f32> = (0..n_heads)
        .flat_map(|h| (0..seq).flat_map(move |i| (0..seq).map(move |j| (h, i, j))))
        .map(|(h, i, j)| {
            if j > i {
                f32::NEG_INFINITY
            } else {
                (-slopes[h] * (i - j) as f64) as f32
            }
        })
        .collect();
    let paper = tensor4(paper, [1, n_heads, seq, seq], device);
    for (ours, theirs) in [
        (
            block.forward(x.clone()),
            plain.forward_input(AttentionInput::new(x.clone()).score_bias(paper.clone())),
        ),
        (
            block.forward_weights(AttentionInput::new(x.clone())).output,
            plain
                .forward_weights(AttentionInput::new(x.clone()).score_bias(paper))
                .output,
        ),
    ] {
        ours.into_data()
            .assert_approx_eq::<f32>(&theirs.into_data(), Tolerance::absolute(1e-5));
    }
}

/// T5's bucket function as first written (Mesh TensorFlow, `_relative_position_bucket`):
/// `n = -relative_position`, a `(n < 0)` half for bidirectional, log in f32.
fn mesh_tf_bucket(
    relative_position: i64,
    bidirectional: bool,
    num_buckets: i64,
    max_distance: i64,
) -> i64 {
    let (mut ret, mut n, mut num_buckets) = (0, -relative_position, num_buckets);
    if bidirectional {
        num_buckets /= 2;
        ret += i64::from(n < 0) * num_buckets;
        n = n.abs();
    } else {
        n = n.max(0);
    }
    let max_exact = num_buckets / 2;
    if n < max_exact {
        return ret + n;
    }
    let val = max_exact
        + ((n as f32 / max_exact as f32).ln() / (max_distance as f32 / max_exact as f32).ln()
            * (num_buckets - max_exact) as f32) as i64;
    ret + val.min(num_buckets - 1)
}

pub fn t5_buckets_match_t5(device: &Device) {
    for bidirectional in [true, false] {
        for rel in -200..=200 {
            assert_eq!(
                t5_bucket(rel, bidirectional, 32, 128) as i64,
                mesh_tf_bucket(rel, bidirectional, 32, 128),
                "relative position {rel}, bidirectional {bidirectional}"
            );
        }
    }
    // Anchors evaluated by hand from the definition (32 buckets, max distance 128).
    for (rel, bi, uni) in [
        (0, 0, 0),
        (-1, 1, 1),
        (1, 17, 0),
        (-8, 8, 8),
        (-12, 9, 12),
        (-50, 13, 24),
        (-200, 15, 31),
        (8, 24, 0),
        (200, 31, 0),
    ] {
        assert_eq!(
            (
                t5_bucket(rel, true, 32, 128),
                t5_bucket(rel, false, 32, 128)
            ),
            (bi, uni),
            "{rel}"
        );
    }
    // The module's bucket ids use key - query.
    let t5 = T5BiasConfig::new(4).init(device);
    let ids: Vec<i64> = t5
        .buckets(2, 1, 5, false)
        .into_data()
        .iter::<i64>()
        .collect();
    assert_eq!(ids, vec![2, 1, 0, 17, 18]);
    // A causal block's buckets: later keys all fall in bucket 0 (the block masks them).
    let ids: Vec<i64> = t5
        .buckets(2, 1, 5, true)
        .into_data()
        .iter::<i64>()
        .collect();
    assert_eq!(ids, vec![2, 1, 0, 0, 0]);
}

pub fn every_attention_scheme_breaks_equivariance(device: &Device) {
    // Without any scheme the block is equivariant (see equivariance.rs); with each, it is not.
    let (seq, d_model, n_heads) = (5, 16, 4);
    let perm = [4i64, 2, 0, 1, 3];
    let schemes = [
        SelfAttentionConfig::new(d_model, n_heads),
        SelfAttentionConfig::new(d_model, n_heads)
            .with_rope(Some(RopeConfig::new(d_model / n_heads))),
        SelfAttentionConfig::new(d_model, n_heads)
            .with_score_bias(Some(ScoreBiasConfig::Alibi(AlibiConfig::new(n_heads)))),
        SelfAttentionConfig::new(d_model, n_heads).with_score_bias(Some(ScoreBiasConfig::T5(
            T5BiasConfig::new(n_heads).with_initializer(burn::nn::Initializer::Normal {
                mean: 0.0,
                std: 1.0,
            }),
        ))),
    ];
    let x = Tensor::<3>::from_data(
        TensorData::new(pseudo_random(seq * d_model, 4), [1, seq, d_model]),
        device,
    );
    let index = Tensor::<1, Int>::from_data(TensorData::new(perm.to_vec(), [seq]), device);
    for (n, config) in schemes.iter().enumerate() {
        let block = config.init(device);
        let lhs = block.forward(x.clone().select(1, index.clone()));
        let rhs = block.forward(x.clone()).select(1, index.clone());
        let gap = (lhs - rhs).abs().max().into_scalar::<f32>();
        if n == 0 {
            assert!(gap < 1e-4, "no scheme: gap {gap}");
        } else {
            assert!(gap > 1e-2, "scheme {n}: gap only {gap}");
        }
    }
}

on_every_device!(
    rope_matches_an_f64_evaluation_of_each_layout,
    rope_scores_depend_only_on_the_offset,
    rope_offset_equals_slice,
    rope_layouts_are_one_rotation_up_to_a_permutation,
    alibi_slopes_follow_the_paper,
    alibi_bias_is_linear_in_distance,
    the_block_decides_causal_for_every_score_bias,
    t5_buckets_match_t5,
    every_attention_scheme_breaks_equivariance,
);
