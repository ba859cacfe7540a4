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
/// the T5 table) equal the spelled-out path's.
pub fn tiled_gradients_equal_the_spelled_out_gradients(device: &Device) {
    device.seed(14);
    for scheme in SCHEMES {
        for causal in [false, true] {
            let block = block(scheme, causal, Some(8), device);
            let x = Tensor::<3>::random([2, 19, D_MODEL], Distribution::Normal(0.0, 1.0), device);
            let mask = padding(2, 19, 5, device);
            let weights =
                Tensor::<3>::random([2, 19, D_MODEL], Distribution::Normal(0.0, 1.0), device);
            let loss = |output: Tensor<3>| (output * weights.clone()).sum();
            let input = || AttentionInput::new(x.clone()).key_padding(mask.clone());
            let tiled = loss(block.forward_input(input())).backward();
            let spelled = loss(block.forward_weights(input()).output).backward();
            let what = format!("{scheme:?}, causal {causal}");
            for (name, param) in [
                ("query", &block.query.weight),
                ("key", &block.key.weight),
                ("value", &block.value.weight),
            ] {
                let a = param.grad(&tiled).expect("a gradient");
                let b = param.grad(&spelled).expect("a gradient");
                a.into_data()
                    .assert_approx_eq::<f32>(&b.into_data(), Tolerance::absolute(1e-3));
                let _ = (name, &what);
            }
            if let Some(burn_positional::ScoreBias::T5(t5)) = &block.score_bias {
                let a = t5.table.grad(&tiled).expect("the T5 table gets a gradient");
                let b = t5
                    .table
                    .grad(&spelled)
                    .expect("the T5 table gets a gradient");
                a.into_data()
                    .assert_approx_eq::<f32>(&b.into_data(), Tolerance::absolute(1e-3));
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
    use super::tiled_gradients_equal_the_spelled_out_gradients;
    on_every_autodiff_device!(tiled_gradients_equal_the_spelled_out_gradients);
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
