//! RoPE as Hugging Face checkpoints configure it, against transformers itself.
//!
//! The fixtures in `tests/fixtures/hf/rope/*.json` were written by `tools/hf_rope_fixtures.py`
//! with transformers (the version is in each file and in every failure message): for each
//! `config.json`, the model's own rotary module's `inv_freq` and `attention_scaling`, and `q`
//! rotated by `apply_rotary_pos_emb` with that module's cos and sin at windows of positions,
//! many past the original context. Here the same `config.json` goes through
//! `RopeConfig::from_hf_config` and the layer, on every device, and must match to 1e-5 of the
//! largest magnitude. CI never runs Python.

use burn::prelude::*;
use burn_positional::{
    AttentionInput, KvCache, Rope, RopeConfig, RopeLayout, RopeScaling, SelfAttentionConfig,
};
use serde_json::Value;

/// The committed fixtures, or those of the directory `HF_ROPE_FIXTURES` names (the script's
/// `--random N --out DIR` writes many random configurations there: a wider check by hand).
fn fixtures() -> Vec<(String, Value)> {
    let committed = crate::package_dir().join("tests/fixtures/hf/rope");
    let dir = std::env::var("HF_ROPE_FIXTURES")
        .unwrap_or_else(|_| committed.to_string_lossy().into_owned());
    let dir = dir.as_str();
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("{dir}: {err}"))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 16, "fixtures missing in {dir}");
    eprintln!("{} fixtures from {dir}", paths.len());
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            (name, serde_json::from_str(&text).unwrap())
        })
        .collect()
}

pub(crate) fn floats(value: &Value) -> Vec<f64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

/// `|got - want| <= 1e-5 * max |want|` element by element.
fn assert_matches(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want
        .iter()
        .fold(0f64, |m, w| m.max(w.abs()))
        .max(f64::MIN_POSITIVE);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * scale,
            "{what}: element {i} is {g}, transformers gives {w} (tolerance {:e})",
            1e-5 * scale
        );
    }
}

/// Rows of `head_dim` values from the half-split order (pair `j` is `(x[j], x[j + pairs])`) to
/// the interleaved one (`(x[2j], x[2j + 1])`); dimensions past the rotated pairs stay.
pub(crate) fn to_interleaved(rows: &[f64], head_dim: usize, pairs: usize) -> Vec<f64> {
    rows.chunks(head_dim)
        .flat_map(|row| {
            let mut out = row.to_vec();
            for j in 0..pairs {
                out[2 * j] = row[j];
                out[2 * j + 1] = row[j + pairs];
            }
            out
        })
        .collect()
}

/// The inverse of [`to_interleaved`].
fn to_half_split(rows: &[f64], head_dim: usize, pairs: usize) -> Vec<f64> {
    rows.chunks(head_dim)
        .flat_map(|row| {
            let mut out = row.to_vec();
            for j in 0..pairs {
                out[j] = row[2 * j];
                out[j + pairs] = row[2 * j + 1];
            }
            out
        })
        .collect()
}

/// `[1, 1, seq, head_dim]` on the device, rotated by `rope` at `offset`, back on the host.
fn rotate(rope: &Rope, q: &[f64], seq: usize, offset: usize, device: &Device) -> Vec<f64> {
    let head_dim = q.len() / seq;
    let q: Vec<f32> = q.iter().map(|&x| x as f32).collect();
    let q = Tensor::<4>::from_data(TensorData::new(q, [1, 1, seq, head_dim]), device);
    rope.apply(q, offset)
        .into_data()
        .iter::<f32>()
        .map(f64::from)
        .collect()
}

/// Every fixture: the config reader gives transformers' `inv_freq` and attention factor, and the
/// layer rotates `q` at every window as `apply_rotary_pos_emb` did, on this device, in both
/// layouts: the checkpoint's (half-split, or interleaved for DeepSeek-style
/// `rope_interleave`) and the other one on the permuted `q`.
pub fn rope_matches_transformers_for_every_rope_type(device: &Device) {
    let mut rope_types = std::collections::BTreeSet::new();
    for (name, fixture) in fixtures() {
        let version = fixture["transformers"].as_str().unwrap();
        let source = format!(
            "{name} (transformers {version}, {})",
            fixture["rotary_class"]
        );
        let json = fixture["config"].to_string();
        let config = match fixture["layer_type"].as_str() {
            None => RopeConfig::from_hf_config(&json),
            Some(layer) => RopeConfig::from_hf_config_layer(&json, layer),
        }
        .unwrap_or_else(|err| panic!("{source}: {err}"));
        let head_dim = fixture["head_dim"].as_u64().unwrap() as usize;
        assert_eq!(config.d_head, head_dim, "{source}: head_dim");
        // transformers' output is half-split; its input is interleaved for `rope_interleave`.
        let interleaved_input = fixture["interleaved_input"].as_bool().unwrap_or(false);
        let layout = if interleaved_input {
            RopeLayout::Interleaved
        } else {
            RopeLayout::HalfSplit
        };
        assert_eq!(config.layout, layout, "{source}: the checkpoint's layout");
        rope_types.insert(config.scaling.rope_type());
        let half_split = config
            .clone()
            .with_layout(RopeLayout::HalfSplit)
            .init(device);
        let interleaved = config
            .clone()
            .with_layout(RopeLayout::Interleaved)
            .init(device);
        let rope = config.init(device);
        let pairs = rope.inv_freq().len();
        assert_matches(
            &rope.inv_freq(),
            &floats(&fixture["inv_freq"]),
            &format!("{source}: inv_freq"),
        );
        let attention = fixture["attention_factor"].as_f64().unwrap();
        assert!(
            (rope.attention_factor() - attention).abs() <= 1e-12 * attention.abs().max(1.0),
            "{source}: attention factor {} vs {attention}",
            rope.attention_factor()
        );
        for window in fixture["windows"].as_array().unwrap() {
            let offset = window["offset"].as_u64().unwrap() as usize;
            let seq = window["seq"].as_u64().unwrap() as usize;
            let what = format!("{source}, positions {offset}..{}", offset + seq);
            assert_matches(
                &rope.inv_freq_at(offset + seq),
                &floats(&window["inv_freq"]),
                &format!("{what}: inv_freq"),
            );
            let q = floats(&window["q"]);
            let (q_half_split, q_interleaved) = if interleaved_input {
                (to_half_split(&q, head_dim, pairs), q)
            } else {
                (q.clone(), to_interleaved(&q, head_dim, pairs))
            };
            let want = floats(&window["rotated"]);
            assert_matches(
                &rotate(&half_split, &q_half_split, seq, offset, device),
                &want,
                &format!("{what}: rotated q, half-split"),
            );
            assert_matches(
                &rotate(&interleaved, &q_interleaved, seq, offset, device),
                &to_interleaved(&want, head_dim, pairs),
                &format!("{what}: rotated q, interleaved"),
            );
        }
    }
    let all = [
        "default",
        "dynamic",
        "linear",
        "llama3",
        "longrope",
        "proportional",
        "yarn",
    ];
    assert_eq!(
        rope_types.into_iter().collect::<Vec<_>>(),
        all,
        "every rope_type has a fixture"
    );
}

/// Decoding one token at a time with a [`KvCache`] equals one forward over the whole sequence
/// for the length-dependent variants, on both sides of their switch: the cached keys are
/// rotated again with the frequencies of the current length (see the `rope` module docs).
pub fn cached_decoding_equals_the_full_forward_across_the_switch(device: &Device) {
    device.seed(5);
    let (n_heads, d_head, seq) = (2, 8, 12);
    let configs = [
        r#"{"hidden_size": 16, "num_attention_heads": 2, "max_position_embeddings": 6,
            "rope_scaling": {"type": "dynamic", "factor": 3.0}}"#,
        r#"{"hidden_size": 16, "num_attention_heads": 2, "max_position_embeddings": 24,
            "original_max_position_embeddings": 6,
            "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6],
                             "long_factor": [1.0, 2.0, 4.0, 9.0]}}"#,
    ];
    for json in configs {
        let rope = RopeConfig::from_hf_config(json).unwrap();
        assert!(rope.scaling.is_length_dependent());
        let kind = rope.scaling.rope_type();
        let block = SelfAttentionConfig::new(n_heads * d_head, n_heads)
            .with_causal(true)
            .with_rope(Some(rope))
            .init(device);
        let x = Tensor::<3>::random(
            [2, seq, n_heads * d_head],
            burn::tensor::Distribution::Normal(0.0, 1.0),
            device,
        );
        let full = block.forward(x.clone());
        for prefill in [1, 4] {
            let mut cache = KvCache::new();
            let mut steps = Vec::new();
            let mut start = 0;
            while start < seq {
                let end = if start == 0 { prefill } else { start + 1 };
                let chunk = x.clone().slice([0..2, start..end]);
                steps.push(block.forward_cache(AttentionInput::new(chunk), &mut cache));
                start = end;
            }
            let steps = Tensor::cat(steps, 1);
            // Each step's last rows equal the full forward's rows of a sequence that ends there:
            // a causal block's row i depends on tokens 0..=i only, and on the frequencies of the
            // length. Compare the last step with the full forward (same length) ...
            let last = |t: Tensor<3>| t.slice([0..2, seq - 1..seq]);
            assert!(
                last(steps.clone()).all_close(last(full.clone()), Some(1e-4), Some(1e-4)),
                "{kind}, prefill {prefill}: the last step differs from the full forward"
            );
            // ... and every step with a full forward over the prefix that ends at it.
            for end in [prefill, seq / 2, seq - 1] {
                let prefix = block.forward(x.clone().slice([0..2, 0..end]));
                let want = prefix.slice([0..2, end - 1..end]);
                let got = steps.clone().slice([0..2, end - 1..end]);
                assert!(
                    got.all_close(want, Some(1e-4), Some(1e-4)),
                    "{kind}, prefill {prefill}: step ending at {end} differs from the forward \
                     over 0..{end}"
                );
            }
        }
    }
}

/// Reading the same Llama 3.1 and Qwen YaRN configs the README shows gives the layer's
/// variants with the checkpoints' values.
pub fn readme_configs_read_as_shown(device: &Device) {
    let llama = RopeConfig::from_hf_config(LLAMA_3_1_8B).unwrap();
    assert_eq!((llama.d_head, llama.base), (128, 500_000.0));
    let RopeScaling::Llama3(bands) = &llama.scaling else {
        panic!("{:?}", llama.scaling)
    };
    assert_eq!(bands.original_max_position_embeddings, 8192);
    let qwen = RopeConfig::from_hf_config(QWEN_2_5_7B_YARN).unwrap();
    let RopeScaling::Yarn(yarn) = &qwen.scaling else {
        panic!("{:?}", qwen.scaling)
    };
    assert_eq!(
        (yarn.factor, yarn.original_max_position_embeddings),
        (4.0, 32768)
    );
    let rope = qwen.init(device);
    // 0.1 ln(4) + 1, transformers' default attention factor for yarn.
    assert!((rope.attention_factor() - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-12);
    let q = Tensor::<4>::ones([1, 2, 3, 128], device);
    assert_eq!(rope.apply(q, 40_000).dims(), [1, 2, 3, 128]);
}

const LLAMA_3_1_8B: &str = r#"{
  "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
  "num_key_value_heads": 8, "max_position_embeddings": 131072, "rope_theta": 500000.0,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}
}"#;

const QWEN_2_5_7B_YARN: &str = r#"{
  "model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
  "max_position_embeddings": 131072, "rope_theta": 1000000.0,
  "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}
}"#;

on_every_device!(
    rope_matches_transformers_for_every_rope_type,
    cached_decoding_equals_the_full_forward_across_the_switch,
    readme_configs_read_as_shown,
);
