//! RoPE from random Hugging Face `config.json`s, against transformers itself.
//!
//! `tests/fixtures/hf/rope_fuzz/cases.json` was written by `tools/hf_rope_fuzz.py` (run by hand;
//! the transformers version is in the file and in every failure message): random but valid
//! configs over every `rope_type` and the model types whose config classes read them
//! differently (Llama, Mistral, Qwen 2/3, Phi, Phi-3, GPT-NeoX, StableLM, Gemma 1-4, DeepSeek
//! V3, Falcon's `n_head` and class defaults, multimodal `text_config`) or that rotate adjacent
//! pairs in place (Cohere 1/2, GLM 1/4, Helium, ERNIE 4.5: `interleaved_rotation`, q rotated by
//! their own `apply_rotary_pos_emb`), many with optional keys left out so that the config
//! classes' defaults apply. For each: the model's rotary module's `inv_freq` and `attention_scaling`, and
//! at a few windows of positions (below and past the original context, and one far out: from
//! 8192, 32768 or 131000, where 1 ulp off in an `inv_freq` entry shows) the window's `inv_freq`
//! and a fixed `q` rotated by the model's `apply_rotary_pos_emb`. Here the same config goes
//! through `RopeConfig::from_hf_config` and the layer, and must match to 1e-5 of the largest
//! magnitude. The configs transformers refuses must be refused here too. Set `HF_ROPE_FUZZ` to
//! another file written by the script for a wider check.

use burn::prelude::*;
use burn_positional::{RopeConfig, RopeLayout};
use serde_json::Value;

use super::hf_rope::{floats, to_interleaved};

/// `Some(message)` unless `|got - want| <= 1e-5 * max |want|` element by element.
fn mismatch(got: &[f64], want: &[f64], what: &str) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!(
            "{what}: {} values, transformers gives {}",
            got.len(),
            want.len()
        ));
    }
    let scale = want
        .iter()
        .fold(0f64, |m, w| m.max(w.abs()))
        .max(f64::MIN_POSITIVE);
    let (i, g, w) = got
        .iter()
        .zip(want)
        .enumerate()
        .map(|(i, (g, w))| (i, *g, *w))
        .find(|(_, g, w)| (g - w).abs() > 1e-5 * scale)?;
    Some(format!(
        "{what}: element {i} is {g}, transformers gives {w} (tolerance {:e})",
        1e-5 * scale
    ))
}

/// The script's `q`: `((k * 7919) % 23 - 11) / 8` over the flattened `[seq, head_dim]` window.
fn q_values(seq: usize, head_dim: usize) -> Vec<f32> {
    (0..seq * head_dim)
        .map(|k| ((k * 7919) % 23) as f32 - 11.0)
        .map(|x| x / 8.0)
        .collect()
}

/// Every failure of one accepted case, empty when it matches.
fn check_case(case: &Value, source: &str, device: &Device) -> Vec<String> {
    let json = case["config"].to_string();
    let config = match case["layer_type"].as_str() {
        None => RopeConfig::from_hf_config(&json),
        Some(layer) => RopeConfig::from_hf_config_layer(&json, layer),
    };
    let config = match config {
        Ok(config) => config,
        Err(err) => return vec![format!("{source}: refused: {err}")],
    };
    let head_dim = case["head_dim"].as_u64().unwrap() as usize;
    if config.d_head != head_dim {
        return vec![format!(
            "{source}: head_dim {} vs transformers' {head_dim}",
            config.d_head
        )];
    }
    let interleaved_input = case["interleaved_input"].as_bool().unwrap();
    // Cohere, GLM, ...: their own rotate_half pairs adjacent dimensions; input and output are
    // interleaved (absent from fixtures written before it was recorded: false).
    let interleaved_rotation = case["interleaved_rotation"].as_bool().unwrap_or(false);
    let layout = if interleaved_input || interleaved_rotation {
        RopeLayout::Interleaved
    } else {
        RopeLayout::HalfSplit
    };
    if config.layout != layout {
        return vec![format!(
            "{source}: layout {:?}, not {layout:?}",
            config.layout
        )];
    }
    let rope = if interleaved_rotation {
        config.init(device)
    } else {
        config.with_layout(RopeLayout::HalfSplit).init(device)
    };
    let mut failures = Vec::new();
    failures.extend(mismatch(
        &rope.inv_freq(),
        &floats(&case["inv_freq"]),
        &format!("{source}: inv_freq"),
    ));
    let attention = case["attention_factor"].as_f64().unwrap();
    if (rope.attention_factor() - attention).abs() > 1e-6 * attention.abs().max(1.0) {
        failures.push(format!(
            "{source}: attention factor {} vs {attention}",
            rope.attention_factor()
        ));
    }
    let pairs = rope.inv_freq().len();
    for window in case["windows"].as_array().unwrap() {
        let offset = window["offset"].as_u64().unwrap() as usize;
        let seq = window["seq"].as_u64().unwrap() as usize;
        let what = format!("{source}, positions {offset}..{}", offset + seq);
        failures.extend(mismatch(
            &rope.inv_freq_at(offset + seq),
            &floats(&window["inv_freq"]),
            &format!("{what}: inv_freq"),
        ));
        let q = Tensor::<4>::from_data(
            TensorData::new(q_values(seq, head_dim), [1, 1, seq, head_dim]),
            device,
        );
        // transformers' input is interleaved for `rope_interleave`, its output half-split.
        let q = if interleaved_input {
            let q: Vec<f64> = q.into_data().iter::<f32>().map(f64::from).collect();
            let mut half = q.clone();
            for (row, out) in q.chunks(head_dim).zip(half.chunks_mut(head_dim)) {
                for j in 0..pairs {
                    out[j] = row[2 * j];
                    out[j + pairs] = row[2 * j + 1];
                }
            }
            let half: Vec<f32> = half.iter().map(|&x| x as f32).collect();
            Tensor::<4>::from_data(TensorData::new(half, [1, 1, seq, head_dim]), device)
        } else {
            q
        };
        let got: Vec<f64> = rope
            .apply(q, offset)
            .into_data()
            .iter::<f32>()
            .map(f64::from)
            .collect();
        let want = floats(&window["rotated"]);
        failures.extend(mismatch(&got, &want, &format!("{what}: rotated q")));
        // The interleaved layout on the permuted q gives the permuted output.
        if offset == 0 && !interleaved_input && !interleaved_rotation {
            let interleaved = rope
                .config()
                .with_layout(RopeLayout::Interleaved)
                .init(device);
            let q: Vec<f64> = q_values(seq, head_dim).iter().map(|&x| x as f64).collect();
            let q: Vec<f32> = to_interleaved(&q, head_dim, pairs)
                .iter()
                .map(|&x| x as f32)
                .collect();
            let q = Tensor::<4>::from_data(TensorData::new(q, [1, 1, seq, head_dim]), device);
            let got: Vec<f64> = interleaved
                .apply(q, offset)
                .into_data()
                .iter::<f32>()
                .map(f64::from)
                .collect();
            failures.extend(mismatch(
                &got,
                &to_interleaved(&want, head_dim, pairs),
                &format!("{what}: rotated q, interleaved"),
            ));
        }
    }
    failures
}

/// Every random config transformers accepts reads and rotates as transformers does; every one
/// it refuses is refused.
pub fn rope_matches_transformers_on_random_configs(device: &Device) {
    let committed = crate::package_dir().join("tests/fixtures/hf/rope_fuzz/cases.json");
    let path =
        std::env::var("HF_ROPE_FUZZ").unwrap_or_else(|_| committed.to_string_lossy().into_owned());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path}: {err}"));
    let fixture: Value = serde_json::from_str(&text).unwrap();
    let version = fixture["transformers"].as_str().unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 60, "{path}: only {} cases", cases.len());
    let mut failures = Vec::new();
    for case in cases {
        let source = format!(
            "{} (transformers {version}, {}{})",
            case["case"].as_str().unwrap(),
            case["rotary_class"].as_str().unwrap(),
            case["layer_type"]
                .as_str()
                .map(|l| format!(", {l}"))
                .unwrap_or_default()
        );
        let found = check_case(case, &source, device);
        if !found.is_empty() {
            failures.push(format!(
                "{}\n    config {}",
                found.join("\n    "),
                case["config"]
            ));
        }
    }
    for case in fixture["rejected"].as_array().unwrap() {
        let json = case["config"].to_string();
        let read = match case["layer_type"].as_str() {
            None => RopeConfig::from_hf_config(&json),
            Some(layer) => RopeConfig::from_hf_config_layer(&json, layer),
        };
        if let Ok(config) = read {
            failures.push(format!(
                "{} (transformers {version}) is refused there ({}), read here as {config:?}\n    \
                 config {json}",
                case["case"].as_str().unwrap(),
                case["transformers_error"].as_str().unwrap(),
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} random configs differ from transformers {version}:\n{}",
        failures.len(),
        cases.len() + fixture["rejected"].as_array().unwrap().len(),
        failures.join("\n")
    );
}

/// One device is enough: the rotation itself is checked on every device by `hf_rope`.
#[test]
fn rope_matches_transformers_on_random_configs_on_flex() {
    rope_matches_transformers_on_random_configs(&crate::devices::flex());
}
