//! Pretrained weights (`burn_positional::pretrained`): tiny Hugging Face checkpoints load into
//! our modules and reproduce transformers' own outputs, and every bad checkpoint is refused
//! with the module left as it was.
//!
//! The fixtures (checkpoints and outputs) are written by `tools/hf_weight_fixtures.py`; each
//! JSON names the transformers and torch versions it came from, and every comparison names them.

use std::path::{Path, PathBuf};

use burn::prelude::*;
use burn_positional::pretrained::{self, PretrainedError, T5Stack};
use burn_positional::score_bias::t5_bucket;
use burn_positional::{
    AbsolutePosition, EmbeddingWithPosition, EmbeddingWithPositionConfig, LearnedConfig, Positions,
    T5Bias, T5BiasConfig,
};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    crate::package_dir()
        .join("tests/fixtures/hf/pretrained")
        .join(name)
}

fn json(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// "transformers 5.24.0 (torch 2.15.0)": where the expected numbers came from.
fn source(hf: &Value) -> String {
    format!(
        "transformers {} (torch {})",
        hf["transformers"].as_str().unwrap(),
        hf["torch"].as_str().unwrap()
    )
}

fn usize_of(v: &Value) -> usize {
    v.as_u64().unwrap() as usize
}

/// Every number of a nested JSON array, in order.
fn flatten(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Array(items) => items.iter().for_each(|item| flatten(item, out)),
        Value::Number(n) => out.push(n.as_f64().unwrap()),
        other => panic!("not a number: {other}"),
    }
}

/// `[batch, seq]` token ids from a JSON array of arrays.
fn ids(v: &Value, device: &Device) -> Tensor<2, Int> {
    let rows = v.as_array().unwrap();
    let seq = rows[0].as_array().unwrap().len();
    let flat: Vec<i64> = rows
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()))
        .collect();
    Tensor::from_data(TensorData::new(flat, [rows.len(), seq]), device)
}

/// Equal to 1e-5 of the largest magnitude expected.
fn assert_close<const D: usize>(actual: Tensor<D>, expected: &Value, what: &str, from: &str) {
    let actual: Vec<f32> = actual.into_data().iter::<f32>().collect();
    let mut want = Vec::new();
    flatten(expected, &mut want);
    assert_eq!(actual.len(), want.len(), "{what}: sizes differ from {from}");
    let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    assert!(scale > 0.0, "{what}: the expected values are all zero");
    for (i, (a, w)) in actual.iter().zip(&want).enumerate() {
        let err = (*a as f64 - w).abs();
        assert!(
            err <= 1e-5 * scale,
            "{what}: element {i} is {a}, {from} gives {w} (error {err:e}, allowed {:e})",
            1e-5 * scale
        );
    }
}

fn learned_embedding(hf: &Value, device: &Device) -> EmbeddingWithPosition {
    EmbeddingWithPositionConfig::new(usize_of(&hf["vocab_size"]), usize_of(&hf["d_model"]))
        .with_scheme(LearnedConfig::new(usize_of(&hf["max_len"])).into())
        .init(device)
}

fn position_table(embed: &EmbeddingWithPosition) -> TensorData {
    let AbsolutePosition::Learned(table) = &embed.position else {
        panic!("a learned embedding")
    };
    table.table.val().into_data()
}

/// The module's values, to show that a refused load changed nothing.
fn snapshot(embed: &EmbeddingWithPosition) -> (TensorData, TensorData) {
    (embed.tokens.val().into_data(), position_table(embed))
}

pub fn gpt2_safetensors_matches_transformers(device: &Device) {
    let hf = json("gpt2.json");
    let from = source(&hf);
    let mut embed = learned_embedding(&hf, device);
    let loaded = pretrained::gpt2(&mut embed, fixture("gpt2.safetensors")).unwrap();
    let keys: Vec<_> = loaded.tensors.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(keys, ["transformer.wte.weight", "transformer.wpe.weight"]);
    assert_eq!(loaded.unused, ["transformer.ln_f.weight"]);
    let x = ids(&hf["ids"], device);
    let what = "GPT-2 wte(ids) + wpe(pos) from gpt2.safetensors";
    assert_close(embed.forward(x.clone()), &hf["output"], what, &from);
    let offset = usize_of(&hf["offset"]);
    let what = "GPT-2 wte(ids) + wpe(offset + pos) from gpt2.safetensors";
    let out = embed.forward_at(x, Positions::Offset(offset));
    assert_close(out, &hf["output_at_offset"], what, &from);
}

pub fn gpt2_pytorch_bin_matches_transformers(device: &Device) {
    let hf = json("gpt2.json");
    let from = source(&hf);
    let mut embed = learned_embedding(&hf, device);
    let loaded = pretrained::gpt2(&mut embed, fixture("gpt2_model.bin")).unwrap();
    let keys: Vec<_> = loaded.tensors.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(
        keys,
        ["wte.weight", "wpe.weight"],
        "GPT2Model's keys, no prefix"
    );
    let what = "GPT-2 wte(ids) + wpe(pos) from gpt2_model.bin (PytorchStore)";
    let out = embed.forward(ids(&hf["ids"], device));
    assert_close(out, &hf["output"], what, &from);
}

pub fn bert_matches_transformers(device: &Device) {
    let hf = json("bert.json");
    let from = source(&hf);
    let mut embed = learned_embedding(&hf, device);
    let loaded = pretrained::bert(&mut embed, fixture("bert.safetensors")).unwrap();
    assert_eq!(
        loaded.tensors[1].key,
        "embeddings.position_embeddings.weight"
    );
    assert_eq!(loaded.unused, ["embeddings.token_type_embeddings.weight"]);
    let what = "BERT word_embeddings(ids) + position_embeddings(pos)";
    let out = embed.forward(ids(&hf["ids"], device));
    assert_close(out, &hf["output"], what, &from);
}

fn t5_bias(hf: &Value, device: &Device) -> T5Bias {
    T5BiasConfig::new(usize_of(&hf["n_heads"]))
        .with_num_buckets(usize_of(&hf["num_buckets"]))
        .with_max_distance(usize_of(&hf["max_distance"]))
        .init(device)
}

pub fn t5_compute_bias_matches_transformers(device: &Device) {
    let hf = json("t5.json");
    let from = source(&hf);
    for (stack, name) in [(T5Stack::Encoder, "encoder"), (T5Stack::Decoder, "decoder")] {
        let mut bias = t5_bias(&hf, device);
        pretrained::t5(&mut bias, stack, fixture("t5.safetensors")).unwrap();
        for case in hf[name].as_array().unwrap() {
            let [q_len, k_len, offset] = ["q_len", "k_len", "offset"].map(|k| usize_of(&case[k]));
            let what =
                format!("T5 {name} compute_bias({q_len}, {k_len}, past_seen_tokens={offset})");
            let out = bias.bias(offset, q_len, k_len, stack.causal());
            assert_eq!(out.dims(), [1, usize_of(&hf["n_heads"]), q_len, k_len]);
            assert_close(out, &case["bias"], &what, &from);
        }
    }
}

/// Our bucket function against `T5Attention._relative_position_bucket` itself, for every
/// relative position in -200..=200, both directions, five (num_buckets, max_distance).
#[test]
fn t5_bucket_matches_transformers() {
    let hf = json("t5_buckets.json");
    let from = source(&hf);
    for config in hf["configs"].as_array().unwrap() {
        let num_buckets = usize_of(&config["num_buckets"]);
        let max_distance = usize_of(&config["max_distance"]);
        for (name, bidirectional) in [("bidirectional", true), ("causal", false)] {
            let expected = config[name].as_array().unwrap();
            for (i, want) in expected.iter().enumerate() {
                let relative = i as i64 - 200;
                let ours = t5_bucket(relative, bidirectional, num_buckets, max_distance);
                assert_eq!(
                    ours as u64,
                    want.as_u64().unwrap(),
                    "t5_bucket({relative}, {name}, {num_buckets}, {max_distance}) vs {from}"
                );
            }
        }
    }
}

pub fn a_table_of_another_shape_is_refused_and_nothing_loads(device: &Device) {
    // The token table fits, the position table (64 rows, not 32) does not: nothing may load.
    let mut embed = EmbeddingWithPositionConfig::new(50, 16)
        .with_scheme(LearnedConfig::new(64).into())
        .init(device);
    let before = snapshot(&embed);
    let err = pretrained::gpt2(&mut embed, fixture("gpt2.safetensors")).unwrap_err();
    let PretrainedError::ShapeMismatch {
        key,
        module_path,
        expected,
        found,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(key, "transformer.wpe.weight");
    assert_eq!(*module_path, "position.Learned.table");
    assert_eq!(
        (expected.as_slice(), found.as_slice()),
        (&[64, 16][..], &[32, 16][..])
    );
    let msg = err.to_string();
    assert!(
        msg.contains("LearnedConfig::new(32)") && msg.contains("Fix"),
        "{msg}"
    );
    assert_eq!(
        snapshot(&embed),
        before,
        "a refused load changed the module"
    );

    // T5: 8 heads where the checkpoint has 4.
    let mut bias = T5BiasConfig::new(8).with_max_distance(64).init(device);
    let before = bias.table.val().into_data();
    let err = pretrained::t5(&mut bias, T5Stack::Encoder, fixture("t5.safetensors")).unwrap_err();
    assert!(err.to_string().contains("T5BiasConfig::new(4)"), "{err}");
    assert_eq!(bias.table.val().into_data(), before);
}

/// A safetensors file of tensors `(key, dtype, shape)`, written by hand (the format is a JSON
/// header and the bytes): F16 tensors hold 1.5 everywhere (bytes `00 3e`), the others zeros.
fn write_safetensors(path: &Path, tensors: &[(&str, &str, [usize; 2])]) {
    let mut header = serde_json::Map::new();
    let mut offset = 0;
    let mut data = Vec::new();
    for (key, dtype, shape) in tensors {
        let width = match *dtype {
            "F32" | "I32" => 4,
            "I64" => 8,
            _ => 2,
        };
        let size = shape[0] * shape[1] * width;
        header.insert(
            key.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}),
        );
        offset += size;
        if *dtype == "F16" {
            data.extend([0x00u8, 0x3e].repeat(size / 2));
        } else {
            data.extend(vec![0u8; size]);
        }
    }
    let header = serde_json::to_vec(&header).unwrap();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header);
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

/// A float table of another float dtype (a half-precision checkpoint, an f32 module) is
/// converted to the module's dtype on the host, as PyTorch's `load_state_dict` copies into a
/// parameter of another dtype; the module keeps its dtype. A table that is not float is
/// refused, naming both dtypes, and leaves the module as it was.
pub fn a_table_of_another_dtype_is_converted_or_refused(device: &Device) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("half.safetensors");
    write_safetensors(
        &path,
        &[
            ("wte.weight", "F16", [50, 16]),
            ("wpe.weight", "F16", [32, 16]),
        ],
    );
    let mut embed = EmbeddingWithPositionConfig::new(50, 16)
        .with_scheme(LearnedConfig::new(32).into())
        .init(device);
    let dtype = embed.tokens.val().dtype();
    let loaded = pretrained::gpt2(&mut embed, &path).unwrap();
    assert_eq!(loaded.tensors[0].dtype, "F16");
    assert_eq!(
        embed.tokens.val().dtype(),
        dtype,
        "the module keeps its dtype"
    );
    let values: Vec<f32> = embed
        .tokens
        .val()
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .unwrap();
    assert!(values.iter().all(|&v| v == 1.5), "{:?}", &values[..4]);

    let path = dir.path().join("ints.safetensors");
    write_safetensors(
        &path,
        &[
            ("wte.weight", "I32", [50, 16]),
            ("wpe.weight", "F16", [32, 16]),
        ],
    );
    let before = snapshot(&embed);
    let err = pretrained::gpt2(&mut embed, &path).unwrap_err();
    let PretrainedError::DTypeMismatch {
        key,
        expected,
        found,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!((key.as_str(), found.as_str()), ("wte.weight", "I32"));
    assert_eq!(expected, &format!("{:?}", embed.tokens.val().dtype()));
    assert_eq!(snapshot(&embed), before);
}

pub fn a_file_without_the_tensors_is_refused(device: &Device) {
    let dir = tempfile::tempdir().unwrap();
    let mut embed = EmbeddingWithPositionConfig::new(50, 16)
        .with_scheme(LearnedConfig::new(32).into())
        .init(device);
    let before = snapshot(&embed);

    // Another model's checkpoint: burn's store alone would report "0 applied" and succeed.
    let err = pretrained::gpt2(&mut embed, fixture("t5.safetensors")).unwrap_err();
    assert!(
        matches!(err, PretrainedError::MissingTensors { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("has no transformer.wte.weight or wte.weight and no transformer.wpe.weight")
            && msg.contains("3 tensors"),
        "{msg}"
    );
    // An empty file.
    let empty = dir.path().join("empty.safetensors");
    write_safetensors(&empty, &[]);
    let err = pretrained::bert(&mut embed, &empty).unwrap_err();
    assert!(err.to_string().contains("0 tensors"), "{err}");
    // Half a checkpoint: the token table alone, which would fit, must not load alone.
    let half = dir.path().join("half.safetensors");
    write_safetensors(&half, &[("wte.weight", "F32", [50, 16])]);
    let err = pretrained::gpt2(&mut embed, &half).unwrap_err();
    let PretrainedError::MissingTensors { missing, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(missing, &["transformer.wpe.weight or wpe.weight"]);
    assert_eq!(snapshot(&embed), before);

    // The other T5 stack's table is not this one's.
    let dir_file = dir.path().join("decoder_only.safetensors");
    write_safetensors(
        &dir_file,
        &[(
            "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            "F32",
            [32, 4],
        )],
    );
    let mut bias = T5BiasConfig::new(4).with_max_distance(64).init(device);
    let err = pretrained::t5(&mut bias, T5Stack::Encoder, &dir_file).unwrap_err();
    assert!(err.to_string().contains("(T5 encoder tensors)"), "{err}");
    pretrained::t5(&mut bias, T5Stack::Decoder, &dir_file).unwrap();
}

pub fn a_missing_or_unknown_file_is_refused(device: &Device) {
    let dir = tempfile::tempdir().unwrap();
    let mut embed = EmbeddingWithPositionConfig::new(50, 16)
        .with_scheme(LearnedConfig::new(32).into())
        .init(device);
    let missing = dir.path().join("no_such_model.safetensors");
    let err = pretrained::gpt2(&mut embed, &missing).unwrap_err();
    assert!(
        matches!(err, PretrainedError::FileNotFound { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("no_such_model.safetensors"),
        "{err}"
    );

    let onnx = dir.path().join("model.onnx");
    std::fs::write(&onnx, b"not a checkpoint").unwrap();
    let err = pretrained::gpt2(&mut embed, &onnx).unwrap_err();
    assert!(
        matches!(err, PretrainedError::UnknownFormat { .. }),
        "{err:?}"
    );

    let garbage = dir.path().join("garbage.safetensors");
    std::fs::write(&garbage, b"not a checkpoint").unwrap();
    let err = pretrained::gpt2(&mut embed, &garbage).unwrap_err();
    assert!(matches!(err, PretrainedError::Unreadable { .. }), "{err:?}");
    assert!(err.to_string().contains("garbage.safetensors"), "{err}");
}

pub fn an_embedding_that_computes_something_else_is_refused(device: &Device) {
    // Sinusoidal positions: GPT-2's wpe has nowhere to go.
    let mut embed = EmbeddingWithPositionConfig::new(50, 16).init(device);
    let err = pretrained::gpt2(&mut embed, fixture("gpt2.safetensors")).unwrap_err();
    assert!(
        matches!(err, PretrainedError::ModuleMismatch { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("LearnedConfig::new(n_positions)"),
        "{err}"
    );
    // Scaled token vectors: not what BERT computes.
    let mut embed = EmbeddingWithPositionConfig::new(50, 32)
        .with_scheme(LearnedConfig::new(64).into())
        .with_scale_tokens(true)
        .init(device);
    let err = pretrained::bert(&mut embed, fixture("bert.safetensors")).unwrap_err();
    assert!(err.to_string().contains("scale_tokens"), "{err}");
}

on_every_device!(
    gpt2_safetensors_matches_transformers,
    gpt2_pytorch_bin_matches_transformers,
    bert_matches_transformers,
    t5_compute_bias_matches_transformers,
    a_table_of_another_shape_is_refused_and_nothing_loads,
    a_table_of_another_dtype_is_converted_or_refused,
    a_file_without_the_tensors_is_refused,
    a_missing_or_unknown_file_is_refused,
    an_embedding_that_computes_something_else_is_refused,
);

/// Fine-tuning: the loaded tables are trainable parameters, and gradients reach both.
mod fine_tuning {
    use super::*;

    pub fn loaded_tables_get_gradients(device: &Device) {
        let mut embed = learned_embedding(&json("gpt2.json"), device);
        pretrained::gpt2(&mut embed, fixture("gpt2.safetensors")).unwrap();
        let x = Tensor::<2, Int>::from_data([[3, 17, 42]], device);
        let grads = embed.forward(x).sum().backward();
        let tokens = embed
            .tokens
            .grad(&grads)
            .expect("the loaded token table trains");
        assert!(tokens.abs().sum().into_scalar::<f32>() > 0.0);
        let AbsolutePosition::Learned(table) = &embed.position else {
            unreachable!()
        };
        let rows = table
            .table
            .grad(&grads)
            .expect("the loaded position table trains");
        assert!(rows.abs().sum().into_scalar::<f32>() > 0.0);
        let mut bias = t5_bias(&json("t5.json"), device);
        pretrained::t5(&mut bias, T5Stack::Encoder, fixture("t5.safetensors")).unwrap();
        let grads = bias.bias(0, 4, 4, false).sum().backward();
        assert!(
            bias.table.grad(&grads).is_some(),
            "the loaded T5 table trains"
        );
    }

    on_every_autodiff_device!(loaded_tables_get_gradients);
}
