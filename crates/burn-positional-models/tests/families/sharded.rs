//! Sharded checkpoints (`model.safetensors.index.json` and its shards), as transformers'
//! `save_pretrained(max_shard_size=...)` writes them (`tools/sharded_fixtures.py`): the same
//! weights as the f32 fixture, so the same logits. GPT-2's token and position tables sit in two
//! different shards, read through the index by the layer's `pretrained::gpt2`. Broken folders
//! are refused naming the file and the fix.

use burn::tensor::Device;
use burn_positional_models::{CausalLm, Checkpoint, ModelError, load_causal_lm};

use crate::fixture::{Fixture, max_relative_error};

fn loads_from_shards(name: &str, device: &Device) {
    let fx = Fixture::open(name);
    let source = fx.source();
    let checkpoint = fx.checkpoint();
    assert!(
        checkpoint.shards.len() >= 2,
        "{source}: {:?}",
        checkpoint.shards
    );
    assert!(
        checkpoint
            .weights_path
            .ends_with("model.safetensors.index.json")
    );
    let model = load_causal_lm(&fx.dir, device).unwrap_or_else(|e| panic!("{source}: {e}"));
    let logits = model.forward(&fx.prompt_step(device), None);
    let err = max_relative_error(logits, fx.tensor("logits", device), &fx.batch().mask);
    assert!(err < 1e-4, "{source}: logits differ by {err:.2e}");
}

fn llama_sharded(device: &Device) {
    loads_from_shards("llama_sharded", device)
}

fn gpt2_sharded(device: &Device) {
    loads_from_shards("gpt2_sharded", device)
}

on_every_inference_device!(llama_sharded, gpt2_sharded);

/// A copy of the sharded Llama fixture with its index replaced by `index` (and shards removed
/// as `drop` says).
fn broken(index: &str, drop: &[&str]) -> tempfile::TempDir {
    let src = Fixture::open("llama_sharded").dir;
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if !drop.contains(&name.as_str()) {
            std::fs::copy(&path, dir.path().join(&name)).unwrap();
        }
    }
    if !index.is_empty() {
        std::fs::write(dir.path().join("model.safetensors.index.json"), index).unwrap();
    }
    dir
}

#[test]
fn broken_indexes_are_refused_naming_the_file() {
    // A shard the index names is missing.
    let dir = broken("", &["model-00003-of-00004.safetensors"]);
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(err, ModelError::Io { .. }), "{err}");
    assert!(
        err.to_string().contains("model-00003-of-00004.safetensors"),
        "{err}"
    );
    // Not JSON, no weight_map, a file outside the folder.
    for (index, says) in [
        ("{", "not JSON"),
        (r#"{"metadata": {}}"#, "no `weight_map`"),
        (
            r#"{"weight_map": {"lm_head.weight": "../model.safetensors"}}"#,
            "not a file of this folder",
        ),
        (
            r#"{"weight_map": {"lm_head.weight": 3}}"#,
            "not to a file name",
        ),
    ] {
        let dir = broken(index, &[]);
        let err = Checkpoint::open(dir.path()).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, ModelError::Config { .. }), "{message}");
        assert!(message.contains(says), "{index}: {message}");
        assert!(
            message.contains("model.safetensors.index.json"),
            "{message}"
        );
    }
    // An index that leaves a tensor out: the missing tensor is named.
    let text = std::fs::read_to_string(
        Fixture::open("llama_sharded")
            .dir
            .join("model.safetensors.index.json"),
    )
    .unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let map = json["weight_map"].as_object_mut().unwrap();
    let shard = map["model.norm.weight"].as_str().unwrap().to_string();
    // Keep only the first shard's tensors: whatever the others held is missing.
    map.retain(|_, v| v.as_str() == Some(shard.as_str()));
    let dir = broken(&json.to_string(), &[]);
    let err = load_causal_lm(dir.path(), &crate::devices::flex()).unwrap_err();
    assert!(matches!(err, ModelError::MissingTensor { .. }), "{err}");
}
