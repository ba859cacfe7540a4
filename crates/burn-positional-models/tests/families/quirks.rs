//! The checkpoints people download now (Qwen 3, Gemma 2 and 3, GPT-NeoX / Pythia, Llama 3.2 /
//! SmolLM): what each reads from its `config.json`, the bad values refused by name, and
//! generation as the folder's `generation_config.json` says (an eos list), against
//! transformers' own run. Their logits and greedy tokens are checked with the other decoders
//! (`decoders.rs`), their eos handling in `generation.rs`.

use burn::tensor::Device;
use burn_positional::RopeScaling;
use burn_positional_models::decoder::DecoderSpec;
use burn_positional_models::{
    Checkpoint, GenerateOptions, GenerationConfig, ModelError, gemma, gpt_neox, qwen3, try_generate,
};

use crate::fixture::Fixture;

/// A copy of fixture `name`'s folder with its config.json edited by `edit` (the weights are
/// not needed to read a config).
fn edited(
    name: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> (tempfile::TempDir, Checkpoint) {
    let fx = Fixture::open(name);
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fx.dir.join("config.json")).unwrap())
            .unwrap();
    edit(&mut json);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        serde_json::to_string_pretty(&json).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.path().join("model.safetensors"), b"").unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    (dir, checkpoint)
}

fn refused(result: Result<DecoderSpec, ModelError>, parts: &[&str]) {
    let message = match result {
        Ok(spec) => panic!("accepted: {spec:?}"),
        Err(e) => e.to_string(),
    };
    // Shown with --nocapture: the messages as a user reads them.
    println!("refused: {message}");
    for part in parts {
        assert!(message.contains(part), "`{part}` not in: {message}");
    }
}

#[test]
fn qwen3_reads_head_dim_and_head_norms() {
    let spec = qwen3::spec(&Fixture::open("qwen3").checkpoint()).unwrap();
    // head_dim 32 with hidden 64 and 4 heads: not hidden / heads.
    assert_eq!((spec.hidden_size, spec.n_heads, spec.head_dim), (64, 4, 32));
    assert!(spec.qk_norm && spec.tie_word_embeddings);
    assert_eq!(spec.rope.d_head, 32);
    // Without `head_dim` in the file, the class default 128, not 64 / 4.
    let (_dir, c) = edited("qwen3", |j| {
        j.as_object_mut().unwrap().remove("head_dim");
    });
    assert_eq!(qwen3::spec(&c).unwrap().head_dim, 128);
}

#[test]
fn qwen3_refuses_a_field_it_does_not_read() {
    let (_dir, c) = edited("qwen3", |j| {
        j["rope_parameters"]["mrope_section"] = serde_json::json!([4, 6, 6]);
    });
    refused(qwen3::spec(&c), &["mrope_section"]);
}

#[test]
fn gemma2_reads_its_quirks() {
    let spec = gemma::gemma2_spec(&Fixture::open("gemma2").checkpoint()).unwrap();
    assert_eq!(spec.attention_scale, Some(24f64.powf(-0.5)));
    assert_eq!(
        (spec.attention_softcap, spec.final_softcap),
        (Some(4.0), Some(5.0))
    );
    // Sliding, full, sliding, full.
    assert_eq!(spec.windows, vec![Some(16), None, Some(16), None]);
    assert!(spec.embed_scale && spec.sandwich_norms && !spec.qk_norm);
    // transformers' class defaults when the file leaves them out: caps 30 and 50, a window
    // on every other layer from the first.
    let (_dir, c) = edited("gemma2", |j| {
        let o = j.as_object_mut().unwrap();
        for key in [
            "final_logit_softcapping",
            "attn_logit_softcapping",
            "layer_types",
        ] {
            o.remove(key);
        }
    });
    let spec = gemma::gemma2_spec(&c).unwrap();
    assert_eq!(
        (spec.attention_softcap, spec.final_softcap),
        (Some(50.0), Some(30.0))
    );
    assert_eq!(spec.windows, vec![Some(16), None, Some(16), None]);
    // null: no cap.
    let (_dir, c) = edited("gemma2", |j| {
        j["final_logit_softcapping"] = serde_json::Value::Null;
    });
    assert_eq!(gemma::gemma2_spec(&c).unwrap().final_softcap, None);
}

#[test]
fn gemma_refuses_bad_values_by_name() {
    let cases: [(&str, &str, serde_json::Value, &[&str]); 9] = [
        (
            "gemma2",
            "sliding_window",
            0.into(),
            &["`sliding_window` is 0"],
        ),
        (
            "gemma2",
            "final_logit_softcapping",
            0.0.into(),
            &["`final_logit_softcapping` is 0", "positive"],
        ),
        (
            "gemma2",
            "attn_logit_softcapping",
            (-50.0).into(),
            &["`attn_logit_softcapping` is -50"],
        ),
        (
            "gemma3",
            "final_logit_softcapping",
            (-1.0).into(),
            &["`final_logit_softcapping` is -1"],
        ),
        (
            "gemma2",
            "layer_types",
            serde_json::json!(["sliding_attention", "full_attention"]),
            &["`layer_types` has 2 entries", "`num_hidden_layers` is 4"],
        ),
        (
            "gemma3",
            "layer_types",
            serde_json::json!([
                "sliding_attention",
                "chunked_attention",
                "full_attention",
                "sliding_attention"
            ]),
            &["`layer_types[1]` is \"chunked_attention\""],
        ),
        (
            "gemma3",
            "use_bidirectional_attention",
            true.into(),
            &["`use_bidirectional_attention` is true"],
        ),
        (
            "gemma2",
            "query_pre_attn_scalar",
            0.into(),
            &["`query_pre_attn_scalar` is 0"],
        ),
        (
            "gemma3",
            "sliding_window",
            0.into(),
            &["`sliding_window` is 0"],
        ),
    ];
    for (name, field, value, parts) in cases {
        let (_dir, c) = edited(name, |j| j[field] = value.clone());
        let spec = if name == "gemma2" {
            gemma::gemma2_spec(&c)
        } else {
            gemma::gemma3_spec(&c)
        };
        refused(spec, parts);
    }
    // A pattern of 0 when there are no layer_types to read instead.
    let (_dir, c) = edited("gemma3", |j| {
        j.as_object_mut().unwrap().remove("layer_types");
        j["sliding_window_pattern"] = 0.into();
    });
    refused(gemma::gemma3_spec(&c), &["`sliding_window_pattern` is 0"]);
}

/// Two rotary configs from one file: the sliding layers' base 10 000, the full layers' 10^6
/// with a linear factor 8; and the older way Gemma 3 checkpoints on the Hub write the same
/// thing (`rope_theta`, `rope_local_base_freq`, `rope_scaling`, `sliding_window_pattern`)
/// reads to the same spec.
#[test]
fn gemma3_reads_two_rotary_bases_and_the_layer_pattern() {
    let fx = Fixture::open("gemma3");
    let spec = gemma::gemma3_spec(&fx.checkpoint()).unwrap();
    assert_eq!(spec.local_layers, vec![true, true, false, true]);
    assert_eq!(spec.windows, vec![Some(16), Some(16), None, Some(16)]);
    let local = spec.local_rope.clone().expect("a sliding rope");
    assert_eq!((local.base, &local.scaling), (10_000.0, &RopeScaling::None));
    assert_eq!(spec.rope.base, 1e6);
    assert!(
        matches!(spec.rope.scaling, RopeScaling::Interpolation(f) if f == 8.0),
        "{:?}",
        spec.rope.scaling
    );
    assert!(spec.qk_norm && spec.final_softcap.is_none() && spec.attention_softcap.is_none());

    let (_dir, c) = edited("gemma3", |j| {
        let o = j.as_object_mut().unwrap();
        o.remove("rope_parameters");
        o.remove("layer_types");
        o.insert("rope_theta".into(), 1e6.into());
        o.insert("rope_local_base_freq".into(), 10_000.0.into());
        o.insert(
            "rope_scaling".into(),
            serde_json::json!({"rope_type": "linear", "factor": 8.0}),
        );
        o.insert("sliding_window_pattern".into(), 3.into());
    });
    let old = gemma::gemma3_spec(&c).unwrap();
    assert_eq!(old.local_layers, spec.local_layers);
    assert_eq!(old.windows, spec.windows);
    let old_local = old.local_rope.unwrap();
    assert_eq!(
        (old_local.base, &old_local.scaling),
        (local.base, &local.scaling)
    );
    assert_eq!(
        (old.rope.base, &old.rope.scaling),
        (spec.rope.base, &spec.rope.scaling)
    );
    // gemma-3-1b's own file: `rope_scaling: null`, no `layer_types`, pattern 6.
    let (_dir, c) = edited("gemma3", |j| {
        let o = j.as_object_mut().unwrap();
        o.remove("rope_parameters");
        o.remove("layer_types");
        o.insert("rope_theta".into(), 1e6.into());
        o.insert("rope_local_base_freq".into(), 10_000.0.into());
        o.insert("rope_scaling".into(), serde_json::Value::Null);
        o.insert("sliding_window_pattern".into(), 6.into());
        o.insert("num_hidden_layers".into(), 6.into());
    });
    let one_b = gemma::gemma3_spec(&c).unwrap();
    assert_eq!(
        (one_b.rope.base, &one_b.rope.scaling),
        (1e6, &RopeScaling::None)
    );
    assert_eq!(one_b.local_rope.unwrap().base, 10_000.0);
    assert_eq!(
        one_b.local_layers,
        vec![true, true, true, true, true, false]
    );
    // The fixture's file also holds `sliding_window_pattern: 3` (what the class was given):
    // without `layer_types`, it decides.
    let (_dir, c) = edited("gemma3", |j| {
        j.as_object_mut().unwrap().remove("layer_types");
        j["num_hidden_layers"] = 6.into();
    });
    assert_eq!(
        gemma::gemma3_spec(&c).unwrap().local_layers,
        vec![true, true, false, true, true, false]
    );
    // Without either, Gemma 3's default: five sliding layers, then a full one.
    let (_dir, c) = edited("gemma3", |j| {
        let o = j.as_object_mut().unwrap();
        o.remove("layer_types");
        o.remove("sliding_window_pattern");
        j["num_hidden_layers"] = 12.into();
    });
    let sliding = gemma::gemma3_spec(&c).unwrap().local_layers;
    let full: Vec<usize> = (0..12).filter(|&i| !sliding[i]).collect();
    assert_eq!(full, vec![5, 11]);
}

#[test]
fn gpt_neox_refuses_heads_that_do_not_divide() {
    let (_dir, c) = edited("gpt_neox", |j| j["num_attention_heads"] = 5.into());
    let message = gpt_neox::init(&c, &crate::devices::flex())
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("`hidden_size` 64") && message.contains("`num_attention_heads` 5"),
        "{message}"
    );
}

/// Llama 3.2 / SmolLM as downloaded: shards, a `generation_config.json` with an eos list. The
/// folder's settings as transformers' `generate` used them: row 0 meets the first eos and
/// pads, and the tokens equal transformers'.
fn llama3_2_generates_with_the_folders_eos_list(device: &Device) {
    let fx = Fixture::open("llama3_2");
    let source = fx.source();
    let checkpoint = fx.checkpoint();
    assert!(
        checkpoint.shards.len() >= 2,
        "{source}: {} shard(s)",
        checkpoint.shards.len()
    );
    let config = GenerationConfig::for_checkpoint(&checkpoint).unwrap();
    let want_eos: Vec<i64> = fx.json["eos_token_id"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(config.eos_token_ids(), want_eos, "{source}");
    let len = fx.rows("input_ids")[0].len();
    let expected: Vec<Vec<i64>> = fx
        .rows("generated_eos")
        .into_iter()
        .map(|row| row[len..].to_vec())
        .collect();
    let model = burn_positional_models::load_checkpoint(&checkpoint, device)
        .unwrap_or_else(|e| panic!("{source}: {e}"));
    let options = GenerateOptions::from_config(&config).with_max_new_tokens(16);
    let generated = try_generate(&model, &fx.prompts(), &options, device).unwrap();
    assert_eq!(generated.tokens, expected, "{source}");
}

mod eos_list {
    use super::*;

    fn llama3_2(device: &Device) {
        llama3_2_generates_with_the_folders_eos_list(device);
    }

    on_every_inference_device!(llama3_2);
}

/// A sliding layer without a window (issue 71): transformers 5.24 fails at the first forward
/// (Qwen 2 and 3: a layer marked sliding while `sliding_window` is null or
/// `use_sliding_window` false; Gemma 2 and 3: a null window whatever the layers, as their
/// models build the sliding mask on every forward), so the port refuses at load by name
/// instead of running full attention on those layers.
#[test]
fn a_sliding_layer_without_a_window_is_refused_by_name() {
    let sliding = serde_json::json!(["sliding_attention", "full_attention"]);
    for (use_window, window) in [(true, serde_json::Value::Null), (false, 8.into())] {
        let (_dir, c) = edited("qwen3", |j| {
            j["layer_types"] = sliding.clone();
            j["use_sliding_window"] = use_window.into();
            j["sliding_window"] = window.clone();
        });
        refused(
            qwen3::spec(&c),
            &[
                "`sliding_window` is null (or `use_sliding_window` is false",
                "layer 0 is a sliding layer",
                "set `sliding_window`",
                "\"full_attention\"",
            ],
        );
    }
    let (_dir, c) = edited("qwen2", |j| {
        j["layer_types"] = sliding.clone();
        j["use_sliding_window"] = true.into();
    });
    refused(
        burn_positional_models::qwen2::spec(&c),
        &["`sliding_window` is null", "layer 0 is a sliding layer"],
    );
    // Qwen 3 with its window turned off and every layer full still loads, as it runs there.
    assert!(qwen3::spec(&Fixture::open("qwen3").checkpoint()).is_ok());
    for (name, layers) in [
        ("gemma2", serde_json::Value::Null),
        (
            "gemma2",
            serde_json::json!([
                "full_attention",
                "full_attention",
                "full_attention",
                "full_attention"
            ]),
        ),
        ("gemma3", serde_json::Value::Null),
    ] {
        let (_dir, c) = edited(name, |j| {
            j["sliding_window"] = serde_json::Value::Null;
            if !layers.is_null() {
                j["layer_types"] = layers.clone();
            }
        });
        let spec = if name == "gemma2" {
            gemma::gemma2_spec(&c)
        } else {
            gemma::gemma3_spec(&c)
        };
        let all_full = !layers.is_null();
        refused(
            spec,
            &[
                "`sliding_window` is null",
                if all_full {
                    "builds its sliding-window mask on every forward"
                } else {
                    "layer 0 is a sliding layer"
                },
                "set `sliding_window` to the window the checkpoint was trained with",
            ],
        );
    }
}

/// Head counts and widths transformers fails on are refused as the field they are, not as a
/// weight shape (issue 71: `head_dim` 0 read "the config.json implies [64, 0]"); Mistral, whose
/// attention reads `head_dim or hidden_size // num_attention_heads`, takes the quotient.
#[test]
fn head_counts_and_widths_of_zero_are_named() {
    let zero_width = [
        "`head_dim` is 0",
        "head_dim^-0.5",
        "q_proj.weight has num_attention_heads x head_dim rows",
    ];
    let (_dir, c) = edited("qwen3", |j| j["head_dim"] = 0.into());
    refused(qwen3::spec(&c), &zero_width);
    let (_dir, c) = edited("llama", |j| j["head_dim"] = 0.into());
    refused(burn_positional_models::llama::spec(&c), &zero_width);
    let (_dir, c) = edited("gemma2", |j| j["head_dim"] = 0.into());
    refused(gemma::gemma2_spec(&c), &zero_width);
    let (_dir, c) = edited("mistral", |j| j["head_dim"] = 0.into());
    let spec = burn_positional_models::mistral::spec(&c).unwrap();
    assert_eq!(spec.head_dim, spec.hidden_size / spec.n_heads);
    // No head_dim and fewer dimensions than heads: the quotient is named.
    let (_dir, c) = edited("llama", |j| {
        j.as_object_mut().unwrap().remove("head_dim");
        j["hidden_size"] = 2.into();
    });
    refused(
        burn_positional_models::llama::spec(&c),
        &[
            "`hidden_size` / `num_attention_heads` is 2 / 4 = 0",
            "set `head_dim`",
        ],
    );
    for (name, kv, rule) in [
        ("llama", 0, "`num_key_value_heads` is 0"),
        ("qwen3", 0, "`num_key_value_heads` is 0"),
        ("gemma3", 0, "`num_key_value_heads` is 0"),
        ("qwen2", 3, "`num_key_value_heads` is 3"),
    ] {
        let (_dir, c) = edited(name, |j| j["num_key_value_heads"] = kv.into());
        let spec = match name {
            "llama" => burn_positional_models::llama::spec(&c),
            "qwen3" => qwen3::spec(&c),
            "gemma3" => gemma::gemma3_spec(&c),
            _ => burn_positional_models::qwen2::spec(&c),
        };
        refused(
            spec,
            &[rule, "divide `num_attention_heads` (4)", "leave it out"],
        );
    }
    let (_dir, c) = edited("llama", |j| j["num_attention_heads"] = 0.into());
    refused(
        burn_positional_models::llama::spec(&c),
        &["`num_attention_heads` is 0"],
    );
}
