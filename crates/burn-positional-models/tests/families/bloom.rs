//! BLOOM: ALiBi through the layer's `attend`, against transformers' own way of adding it
//! (`slope * key position` counted on the attention mask), its slopes for any head count, and
//! the config names transformers maps.

use burn::tensor::activation::softmax;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use burn_positional::{AlibiConfig, AttendOptions, AttentionBias, attend};
use burn_positional_models::Batch;
use burn_positional_models::bloom::BloomConfig;

use crate::decoders::{decoder_generates_as_transformers, decoder_logits_match};
use crate::fixture::Fixture;

/// Logits of the padded batch, a padded row against its prompt alone.
fn bloom(device: &Device) {
    decoder_logits_match("bloom", device);
}

/// Greedy tokens and step logits against transformers, cached steps against one forward.
mod generation {
    fn bloom(device: &burn::tensor::Device) {
        super::decoder_generates_as_transformers("bloom", device);
    }

    on_every_inference_device!(bloom);
}

/// The layer's slopes equal transformers' `_get_alibi_slopes`: the fixture's 6 heads exactly
/// as transformers wrote them, and every head count to 128 against the function transcribed
/// (a float32 base raised to integer powers, as torch computes it). The layer computes in f64
/// and rounds once, torch raises a rounded base: they part by a few float32 steps, under
/// 1e-6 relative up to 128 heads (BLOOM-176B has 112).
fn bloom_alibi_slopes_match_transformers(device: &Device) {
    let fx = Fixture::open("bloom");
    let written: Vec<f32> = fx.json["alibi_slopes"]
        .as_array()
        .expect("expected.json: alibi_slopes")
        .iter()
        .map(|s| s.as_f64().unwrap() as f32)
        .collect();
    let ours = |n: usize| -> Vec<f32> {
        let slopes = AlibiConfig::new(n).init(device).slopes();
        slopes.into_data().iter::<f32>().collect()
    };
    assert_eq!(ours(written.len()), written, "{}", fx.source());
    for n in 1..=128 {
        let theirs = transformers_slopes(n);
        for (h, (a, b)) in ours(n).iter().zip(&theirs).enumerate() {
            assert!(
                ((a - b) / b).abs() < 1e-6,
                "{n} heads, head {h}: ours {a}, transformers {b}"
            );
        }
    }
}

/// transformers 5.24's `modeling_bloom._get_alibi_slopes`.
fn transformers_slopes(n: usize) -> Vec<f32> {
    let closest = 1usize << n.ilog2();
    let base = |c: usize| 2f64.powf(-(2f64.powf(-((c as f64).log2() - 3.0)))) as f32;
    let mut slopes: Vec<f32> = (1..=closest as i32)
        .map(|p| base(closest).powi(p))
        .collect();
    if closest != n {
        let extra = closest.min(n - closest);
        slopes.extend((0..extra).map(|i| base(2 * closest).powi(2 * i as i32 + 1)));
    }
    slopes
}

/// `attend` with ALiBi slopes, explicit positions, a causal mask and key padding gives
/// transformers' BLOOM attention, written out as `modeling_bloom.py` computes it: `slope *
/// key position` (`(mask.cumsum() - 1) * mask`) added to `q . k / sqrt(head_dim)`, then the
/// causal-and-padding mask by index, softmax, `. v`. The two biases differ by `slope * query
/// position` along each row, which the softmax ignores; checked for the whole left-padded
/// prompt and for one decoding query over all keys.
fn bloom_alibi_equals_transformers_bias(device: &Device) {
    let (batch, heads, seq, d) = (2, 6, 9, 8);
    let mask = Batch::left_padded(&[vec![1; seq], vec![1; 5]], 0).mask;
    let values = |salt: usize| -> Tensor<4> {
        let n = batch * heads * seq * d;
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * 7919 + salt * 104729) as f32 * 0.37).sin())
            .collect();
        Tensor::from_data(TensorData::new(v, [batch, heads, seq, d]), device)
    };
    let (q, k, v) = (values(1), values(2), values(3));
    let slopes = AlibiConfig::new(heads).init(device).slopes();
    let scale = 1.0 / (d as f64).sqrt();

    // transformers: alibi [batch, heads, 1, seq] from key positions, the mask by index.
    let key_pos: Vec<f32> = mask
        .iter()
        .flat_map(|row| {
            let mut seen = 0.0;
            row.iter().map(move |&m| {
                seen += m as i32 as f32;
                if m { seen - 1.0 } else { 0.0 }
            })
        })
        .collect();
    let key_pos = Tensor::<4>::from_data(TensorData::new(key_pos, [batch, 1, 1, seq]), device);
    let alibi = slopes.clone().reshape([1, heads, 1, 1]) * key_pos;
    let hidden: Vec<bool> = (0..batch)
        .flat_map(|b| (0..seq).flat_map(move |i| (0..seq).map(move |j| (b, i, j))))
        .map(|(b, i, j)| j > i || !mask[b][j])
        .collect();
    let hidden =
        Tensor::<4, Bool>::from_data(TensorData::new(hidden, [batch, 1, seq, seq]), device)
            .expand([batch, heads, seq, seq]);
    let scores = q.clone().matmul(k.clone().swap_dims(2, 3)) * scale + alibi;
    let theirs = softmax(scores.mask_fill(hidden, f32::MIN), 3).matmul(v.clone());

    // The layer: positions as generation gives them, key padding, causal.
    let positions = Batch::new(vec![vec![0; seq]; batch], mask.clone()).positions();
    let flat: Vec<i64> = positions.concat();
    let positions = Tensor::<2, Int>::from_data(TensorData::new(flat, [batch, seq]), device);
    let padding: Vec<bool> = mask.iter().flatten().map(|&m| !m).collect();
    let padding = Tensor::<2, Bool>::from_data(TensorData::new(padding, [batch, seq]), device);
    let options = |query: Tensor<2, Int>| {
        AttendOptions::new()
            .bias(AttentionBias::Alibi(slopes.clone()))
            .causal(true)
            .positions(query, positions.clone())
            .key_padding(padding.clone())
            .scale(scale)
    };
    let ours = attend(q.clone(), k.clone(), v.clone(), &options(positions.clone()));
    let last = seq - 1;
    let ours_last = attend(
        q.slice([0..batch, 0..heads, last..seq, 0..d]),
        k,
        v,
        &options(positions.clone().slice([0..batch, last..seq])),
    );
    for (b, row) in mask.iter().enumerate() {
        for (i, _) in row.iter().enumerate().filter(|(_, m)| **m) {
            let at = |t: Tensor<4>, i: usize| -> Vec<f32> {
                t.slice([b..b + 1, 0..heads, i..i + 1, 0..d])
                    .into_data()
                    .iter::<f32>()
                    .collect()
            };
            let expected = at(theirs.clone(), i);
            let mut got = vec![(at(ours.clone(), i), "prompt")];
            if i == last {
                got.push((at(ours_last.clone(), 0), "decoding query"));
            }
            for (got, what) in got {
                let err = got
                    .iter()
                    .zip(&expected)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(
                    err < 1e-5,
                    "row {b} query {i} ({what}): differs by {err:.2e}"
                );
            }
        }
    }
}

on_every_device!(
    bloom,
    bloom_alibi_slopes_match_transformers,
    bloom_alibi_equals_transformers_bias
);

/// The names transformers also reads win over BLOOM's own, as in transformers 5.24
/// (`BloomConfig.from_dict({"n_head": 4, "num_attention_heads": 8, "hidden_size": 48,
/// "n_embed": 32})` has `n_head == 8`, `hidden_size == 32`); the defaults are `BloomConfig`'s.
#[test]
fn bloom_config_reads_transformers_names() {
    let c: BloomConfig = serde_json::from_str(
        r#"{"n_head": 4, "num_attention_heads": 8, "hidden_size": 48, "n_embed": 32,
            "n_layer": 2, "num_hidden_layers": 3}"#,
    )
    .unwrap();
    assert_eq!((c.d_model(), c.n_heads(), c.n_layers()), (32, 8, 3));
    let d: BloomConfig = serde_json::from_str(r#"{"n_embed": null}"#).unwrap();
    assert_eq!(
        (
            d.vocab_size,
            d.d_model(),
            d.n_heads(),
            d.n_layers(),
            d.layer_norm_epsilon
        ),
        (250880, 64, 8, 2, 1e-5)
    );
    assert!(d.tie_word_embeddings && !d.apply_residual_connection_post_layernorm);
    assert!(d.pretraining_tp == 1 && !d.slow_but_exact);
}
