//! The tiled attention (issue 27): a block's own ALiBi or T5 bias computed inside tiles of
//! queries instead of a `seq x seq` square. It must give what the spelled-out path gives (the
//! scores, bias, masks and softmax written out in full, as `forward_weights` computes them), for
//! every scheme, causal and not, padded and not, at an offset, for lengths that are not
//! multiples of the tile, and its gradients must be the spelled-out path's.

use burn::prelude::*;
use burn::tensor::{Distribution, Tolerance};
use burn_positional::{
    AttentionInput, KvCache, ScoreBiasConfig, SelfAttention, SelfAttentionConfig, T5BiasConfig,
};

const D_MODEL: usize = 16;
const N_HEADS: usize = 2;

#[derive(Clone, Copy, Debug)]
enum Scheme {
    None,
    Rope,
    Alibi,
    T5,
}

const SCHEMES: [Scheme; 4] = [Scheme::None, Scheme::Rope, Scheme::Alibi, Scheme::T5];

fn block(scheme: Scheme, causal: bool, tile_rows: Option<usize>, device: &Device) -> SelfAttention {
    let config = SelfAttentionConfig::new(D_MODEL, N_HEADS)
        .with_causal(causal)
        .with_tile_rows(tile_rows);
    let config = match scheme {
        Scheme::None => config,
        Scheme::Rope => config.with_rotary(),
        Scheme::Alibi => config.with_alibi(),
        // A small max_distance and a table far from zero: clamped distances and buckets show.
        Scheme::T5 => config.with_score_bias(Some(ScoreBiasConfig::T5(
            T5BiasConfig::new(N_HEADS)
                .with_num_buckets(8)
                .with_max_distance(20)
                .with_initializer(burn::nn::Initializer::Normal {
                    mean: 0.0,
                    std: 1.0,
                }),
        ))),
    };
    config.init(device)
}

fn close(a: Tensor<3>, b: Tensor<3>, what: &str) {
    assert_eq!(a.dims(), b.dims(), "{what}: shapes");
    let a = a.into_data();
    assert!(
        a.iter::<f32>().all(f32::is_finite),
        "{what}: NaN or infinity in the tiled output"
    );
    a.assert_approx_eq::<f32>(&b.into_data(), Tolerance::absolute(2e-4));
}

/// Key padding: the first sequence has none, the second its first `pad` keys (left padding),
/// the third every key (a fully padded row must give zero attention, never NaN).
fn padding(batch: usize, seq: usize, pad: usize, device: &Device) -> Tensor<2, Bool> {
    let mut mask = vec![false; batch * seq];
    for j in 0..pad.min(seq) {
        mask[seq + j] = true;
    }
    if batch > 2 {
        mask[2 * seq..3 * seq].fill(true);
    }
    Tensor::from_data(TensorData::new(mask, [batch, seq]), device)
}

/// Tiled forward = spelled-out forward, for every scheme, causal and not, padded and not, for
/// lengths around the tile (16 rows): 1, 7, 63, 65; and 1000 (63 tiles minus a remainder) for
/// the biases, causal and padded.
pub fn tiled_equals_the_spelled_out_path(device: &Device) {
    device.seed(11);
    let cases = [1, 7, 63, 65]
        .into_iter()
        .flat_map(|seq| SCHEMES.map(|scheme| (seq, scheme, vec![false, true])))
        .chain([
            (1000, Scheme::Alibi, vec![true]),
            (1000, Scheme::T5, vec![true]),
        ]);
    for (seq, scheme, causals) in cases {
        {
            for causal in causals {
                let block = block(scheme, causal, Some(16), device);
                let batch = if seq > 100 { 2 } else { 3 };
                let x = Tensor::<3>::random(
                    [batch, seq, D_MODEL],
                    Distribution::Normal(0.0, 1.0),
                    device,
                );
                let paddings = if seq > 100 {
                    vec![true]
                } else {
                    vec![false, true]
                };
                for padded in paddings {
                    let input = |x: Tensor<3>| {
                        let input = AttentionInput::new(x);
                        if padded {
                            input.key_padding(padding(batch, seq, seq / 3 + 1, device))
                        } else {
                            input
                        }
                    };
                    let what = format!("{scheme:?}, causal {causal}, padded {padded}, seq {seq}");
                    let tiled = block.forward_input(input(x.clone()));
                    let spelled = block.forward_weights(input(x.clone())).output;
                    close(tiled, spelled, &what);
                }
            }
        }
    }
}

/// The default tile (from the score budget) is the path a block with its own ALiBi or T5 bias
/// takes without autodiff; it equals the spelled-out path too.
pub fn the_default_tiled_path_equals_the_spelled_out_path(device: &Device) {
    device.seed(12);
    for scheme in [Scheme::Alibi, Scheme::T5] {
        for causal in [false, true] {
            let block = block(scheme, causal, None, device);
            let x = Tensor::<3>::random([2, 40, D_MODEL], Distribution::Normal(0.0, 1.0), device);
            let what = format!("{scheme:?}, causal {causal}");
            close(
                block.forward(x.clone()),
                block.forward_weights(AttentionInput::new(x)).output,
                &what,
            );
        }
    }
}

/// Decoding with a cache through the tiled path (queries at an offset, seq_q != seq_k) equals
/// the full spelled-out forward.
pub fn tiled_cached_decoding_equals_the_full_forward(device: &Device) {
    device.seed(13);
    let seq = 21;
    for scheme in SCHEMES {
        let block = block(scheme, true, Some(4), device);
        let x = Tensor::<3>::random([2, seq, D_MODEL], Distribution::Normal(0.0, 1.0), device);
        let full = block.forward_weights(AttentionInput::new(x.clone())).output;
        let mut cache = KvCache::new();
        let mut steps = Vec::new();
        let mut start = 0;
        for end in [9, 10, 11, 17, seq] {
            let chunk = x.clone().slice([0..2, start..end]);
            steps.push(block.forward_cache(AttentionInput::new(chunk), &mut cache));
            start = end;
        }
        close(Tensor::cat(steps, 1), full, &format!("{scheme:?}, cached"));
    }
}

/// Gradients through the tiled path (queries, keys, values by way of their projections, and
/// the T5 table) equal the spelled-out path's, with a fully padded sequence in the batch and an
/// upstream gradient large enough (x 50) that `0 x inf` would show: burn's attention fallback,
/// which the tiled path used before it had its own backward, gave NaN there.
pub fn tiled_gradients_equal_the_spelled_out_gradients(device: &Device) {
    device.seed(14);
    for scheme in SCHEMES {
        for causal in [false, true] {
            let block = block(scheme, causal, Some(8), device);
            let x = Tensor::<3>::random([3, 19, D_MODEL], Distribution::Normal(0.0, 1.0), device);
            let mask = padding(3, 19, 5, device);
            let weights =
                Tensor::<3>::random([3, 19, D_MODEL], Distribution::Normal(0.0, 50.0), device);
            let loss = |output: Tensor<3>| (output * weights.clone()).sum();
            let input = || AttentionInput::new(x.clone()).key_padding(mask.clone());
            let tiled = loss(block.forward_input(input())).backward();
            let spelled = loss(block.forward_weights(input()).output).backward();
            let what = format!("{scheme:?}, causal {causal}");
            let mut pairs = vec![
                ("query", &block.query.weight),
                ("key", &block.key.weight),
                ("value", &block.value.weight),
            ]
            .into_iter()
            .map(|(name, param)| (name, param.grad(&tiled), param.grad(&spelled)))
            .collect::<Vec<_>>();
            if let Some(burn_positional::ScoreBias::T5(t5)) = &block.score_bias {
                pairs.push(("T5 table", t5.table.grad(&tiled), t5.table.grad(&spelled)));
            }
            for (name, a, b) in pairs {
                let (a, b) = (a.expect("a gradient"), b.expect("a gradient"));
                let a = a.into_data();
                assert!(
                    a.iter::<f32>().all(f32::is_finite),
                    "{what}: NaN or infinity in the tiled {name} gradient"
                );
                a.assert_approx_eq::<f32>(&b.into_data(), Tolerance::rel_abs(1e-3, 2e-2));
            }
        }
    }
}

/// Gradients of a decoding step (queries at an offset, `seq_q < seq_k`, keys and values partly
/// from the cache) equal those of one spelled-out forward over the whole sequence with the loss
/// on the same rows.
pub fn tiled_cached_gradients_equal_the_full_forward(device: &Device) {
    device.seed(16);
    for scheme in SCHEMES {
        let block = block(scheme, true, Some(4), device);
        let x = Tensor::<3>::random([2, 19, D_MODEL], Distribution::Normal(0.0, 1.0), device);
        let weights = Tensor::<3>::random([2, 10, D_MODEL], Distribution::Normal(0.0, 1.0), device);
        let mut cache = KvCache::new();
        let _ = block.forward_cache(
            AttentionInput::new(x.clone().slice([0..2, 0..9])),
            &mut cache,
        );
        let step = block.forward_cache(
            AttentionInput::new(x.clone().slice([0..2, 9..19])),
            &mut cache,
        );
        let cached = (step * weights.clone()).sum().backward();
        let full = block
            .forward_weights(AttentionInput::new(x))
            .output
            .slice([0..2, 9..19]);
        let full = (full * weights).sum().backward();
        for (name, param) in [
            ("query", &block.query.weight),
            ("key", &block.key.weight),
            ("value", &block.value.weight),
        ] {
            let a = param.grad(&cached).expect("a gradient");
            let b = param.grad(&full).expect("a gradient");
            assert_eq!(a.dims(), b.dims(), "{scheme:?} {name}");
            a.into_data()
                .assert_approx_eq::<f32>(&b.into_data(), Tolerance::rel_abs(1e-3, 1e-3));
        }
    }
}

/// The op itself against the same attention spelled out in tensor ops, on leaf tensors:
/// output and the gradients of q, k, v and of the compact bias (ALiBi's slopes, a bias per
/// distance) at an offset (`seq_q` 7 after 5 cached keys), causal and not, with a fully padded
/// sequence, for tiles of 1, 3 and more rows than there are queries.
pub fn the_op_equals_the_spelled_out_ops(device: &Device) {
    use burn_positional_kernels::{AttendOptions, AttentionBias, tiled_attention};
    device.seed(17);
    let (batch, heads, seq_q, seq_k, d, offset, reach) = (3, 2, 7, 12, 4, 5, 3);
    let normal =
        |dims: [usize; 4]| Tensor::<4>::random(dims, Distribution::Normal(0.0, 1.0), device);
    let (q, k, v) = (
        normal([batch, heads, seq_q, d]),
        normal([batch, heads, seq_k, d]),
        normal([batch, heads, seq_k, d]),
    );
    let upstream = normal([batch, heads, seq_q, d]).mul_scalar(50.0);
    let slopes = Tensor::<1>::from_floats([0.5, 0.125], device);
    let by_distance = Tensor::<2>::random(
        [heads, 2 * reach + 1],
        Distribution::Normal(0.0, 1.0),
        device,
    );
    let mask = padding(batch, seq_k, 4, device);
    // key - query positions, [seq_q, seq_k]
    let rel = Tensor::<1, Int>::arange(0..seq_k as i64, device).reshape([1, seq_k])
        - Tensor::<1, Int>::arange(offset as i64..(offset + seq_q) as i64, device)
            .reshape([seq_q, 1]);
    for kind in ["none", "alibi", "by distance"] {
        for causal in [false, true] {
            for tile in [1, 3, 64] {
                let what = format!("{kind}, causal {causal}, tile {tile}");
                let leaf = |t: &Tensor<4>| t.clone().detach().require_grad();
                let (q1, k1, v1) = (leaf(&q), leaf(&k), leaf(&v));
                let (q2, k2, v2) = (leaf(&q), leaf(&k), leaf(&v));
                let (s1, s2) = (slopes.clone().require_grad(), slopes.clone().require_grad());
                let (b1, b2) = (
                    by_distance.clone().require_grad(),
                    by_distance.clone().require_grad(),
                );
                let bias = match kind {
                    "none" => AttentionBias::None,
                    "alibi" => AttentionBias::Alibi(s1.clone()),
                    _ => AttentionBias::ByDistance {
                        bias: b1.clone(),
                        reach,
                    },
                };
                let options = AttendOptions::new()
                    .bias(bias)
                    .key_padding(mask.clone())
                    .causal(causal)
                    .offset(offset)
                    .tile_rows(tile);
                let out = tiled_attention(q1.clone(), k1.clone(), v1.clone(), &options);
                // Spelled out: scores, bias, masks (-1e30, exactly 0 after exp), softmax, then a
                // row that sees no key set to zero.
                let mut scores = q2
                    .clone()
                    .matmul(k2.clone().swap_dims(2, 3))
                    .div_scalar((d as f64).sqrt());
                scores = match kind {
                    "none" => scores,
                    "alibi" => {
                        scores
                            - rel.clone().abs().float().reshape([1, 1, seq_q, seq_k])
                                * s2.clone().reshape([1, heads, 1, 1])
                    }
                    _ => {
                        let index = rel
                            .clone()
                            .clamp(-(reach as i64), reach as i64)
                            .add_scalar(reach as i64);
                        scores
                            + b2.clone()
                                .select(1, index.reshape([seq_q * seq_k]))
                                .reshape([1, heads, seq_q, seq_k])
                    }
                };
                let mut hidden = mask
                    .clone()
                    .reshape([batch, 1, 1, seq_k])
                    .expand([batch, heads, seq_q, seq_k]);
                if causal {
                    hidden = hidden.bool_or(
                        rel.clone()
                            .greater_elem(0)
                            .reshape([1, 1, seq_q, seq_k])
                            .expand([batch, heads, seq_q, seq_k]),
                    );
                }
                let weights =
                    burn::tensor::activation::softmax(scores.mask_fill(hidden.clone(), -1e30), 3)
                        .mask_fill(hidden, 0.0);
                let reference = weights.matmul(v2.clone());
                out.clone().into_data().assert_approx_eq::<f32>(
                    &reference.clone().into_data(),
                    Tolerance::absolute(1e-4),
                );
                let g1 = (out * upstream.clone()).sum().backward();
                let g2 = (reference * upstream.clone()).sum().backward();
                let mut pairs = vec![
                    (
                        "q",
                        q1.grad(&g1).map(|g| g.into_data()),
                        q2.grad(&g2).map(|g| g.into_data()),
                    ),
                    (
                        "k",
                        k1.grad(&g1).map(|g| g.into_data()),
                        k2.grad(&g2).map(|g| g.into_data()),
                    ),
                    (
                        "v",
                        v1.grad(&g1).map(|g| g.into_data()),
                        v2.grad(&g2).map(|g| g.into_data()),
                    ),
                ];
                match kind {
                    "alibi" => pairs.push((
                        "slopes",
                        s1.grad(&g1).map(|g| g.into_data()),
                        s2.grad(&g2).map(|g| g.into_data()),
                    )),
                    "by distance" => pairs.push((
                        "bias",
                        b1.grad(&g1).map(|g| g.into_data()),
                        b2.grad(&g2).map(|g| g.into_data()),
                    )),
                    _ => {}
                }
                for (name, a, b) in pairs {
                    let (a, b) = (
                        a.unwrap_or_else(|| panic!("{what}: no {name} gradient")),
                        b.expect("a reference gradient"),
                    );
                    assert!(
                        a.iter::<f32>().all(f32::is_finite),
                        "{what}: NaN in the {name} gradient"
                    );
                    a.assert_approx_eq::<f32>(&b, Tolerance::rel_abs(1e-3, 1e-2));
                }
            }
        }
    }
}

on_every_device!(
    a_longer_forward_first_changes_nothing,
    tiled_equals_the_spelled_out_path,
    the_default_tiled_path_equals_the_spelled_out_path,
    tiled_cached_decoding_equals_the_full_forward,
);
mod backward {
    use super::{
        the_op_equals_the_spelled_out_ops, tiled_cached_gradients_equal_the_full_forward,
        tiled_gradients_equal_the_spelled_out_gradients,
    };
    on_every_autodiff_device!(
        tiled_gradients_equal_the_spelled_out_gradients,
        tiled_cached_gradients_equal_the_full_forward,
        the_op_equals_the_spelled_out_ops,
    );
}

/// A block that has attended to a longer sequence gives a shorter one what a block that never
/// did gives (the tiled path builds its masks from positions, the spelled-out path windows a
/// cached square): on wgpu with autodiff a strided window of the cached causal mask once let
/// each query see itself alone after a forward at seq 7.
pub fn a_longer_forward_first_changes_nothing(device: &Device) {
    device.seed(15);
    let spelled = block(Scheme::None, true, None, device);
    let mut tiled = spelled.clone();
    tiled.tile_rows = Some(4);
    let x = |seq| Tensor::<3>::random([1, seq, D_MODEL], Distribution::Normal(0.0, 1.0), device);
    let _ = spelled.forward_weights(AttentionInput::new(x(7)));
    let short = x(2);
    close(
        spelled
            .forward_weights(AttentionInput::new(short.clone()))
            .output,
        tiled.forward(short),
        "seq 2 after seq 7",
    );
}
