//! The reader's errors and defaults, message by message.

use super::*;

fn error(json: &str) -> String {
    RopeConfig::from_hf_config(json).unwrap_err().to_string()
}

const HEADS: &str =
    r#""hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 128"#;

#[test]
fn an_unknown_rope_type_is_an_error_naming_it_and_the_known_ones() {
    let message = error(&format!(
        r#"{{{HEADS}, "rope_scaling": {{"type": "su", "factor": 2.0}}}}"#
    ));
    assert!(
        message.contains("`rope_scaling.type` is \"su\""),
        "{message}"
    );
    assert!(message.contains("yarn, longrope, llama3"), "{message}");
    let message = error(&format!(
        r#"{{{HEADS}, "rope_parameters": {{"rope_type": "axial"}}}}"#
    ));
    assert!(
        message.contains("`rope_parameters.rope_type` is \"axial\""),
        "{message}"
    );
}

#[test]
fn missing_fields_are_named_with_what_needs_them() {
    for (params, field) in [
        (r#"{"rope_type": "linear"}"#, "rope_parameters.factor"),
        (r#"{"rope_type": "dynamic"}"#, "rope_parameters.factor"),
        (
            r#"{"rope_type": "yarn", "original_max_position_embeddings": 64}"#,
            "rope_parameters.factor",
        ),
        (
            r#"{"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0}"#,
            "rope_parameters.low_freq_factor",
        ),
        (
            r#"{"rope_type": "longrope", "long_factor": [1, 2, 3, 4, 5, 6, 7, 8]}"#,
            "rope_parameters.short_factor",
        ),
    ] {
        let message = error(&format!(r#"{{{HEADS}, "rope_parameters": {params}}}"#));
        assert!(
            message.contains(&format!("`{field}` is missing")),
            "{params}: {message}"
        );
    }
    let message = error(r#"{"hidden_size": 64}"#);
    assert!(
        message.contains("`num_attention_heads` is missing"),
        "{message}"
    );
    let message = error(
        r#"{"num_attention_heads": 4, "rope_scaling": {"type": "dynamic", "factor": 2}, "hidden_size": 64}"#,
    );
    assert!(
        message.contains("`max_position_embeddings` is missing"),
        "{message}"
    );
}

#[test]
fn wrong_types_and_inconsistent_values_are_named() {
    let message = error(&format!(r#"{{{HEADS}, "rope_theta": "10000"}}"#));
    assert!(
        message.contains("`rope_theta` is \"10000\", expected a number"),
        "{message}"
    );
    let message = error(&format!(
        r#"{{{HEADS}, "rope_parameters": {{"rope_type": "longrope", "short_factor": [1, 2],
            "long_factor": [1, 2], "original_max_position_embeddings": 32}}}}"#
    ));
    assert!(
        message.contains("short_factor of 2") && message.contains("give 8 factors"),
        "{message}"
    );
    // Each share of the head named as the file spells it (issue 71): top level, nested, and
    // GPT-NeoX's `rotary_pct` (a Pythia config.json has no `partial_rotary_factor`).
    for (json, field) in [
        (
            format!(r#"{{{HEADS}, "partial_rotary_factor": 1.5}}"#),
            "`partial_rotary_factor` is 1.5",
        ),
        (
            format!(r#"{{{HEADS}, "rope_parameters": {{"partial_rotary_factor": 1.5}}}}"#),
            "`rope_parameters.partial_rotary_factor` is 1.5",
        ),
        (
            format!(r#"{{{HEADS}, "model_type": "gpt_neox", "rotary_pct": 1.5}}"#),
            "`rotary_pct` is 1.5",
        ),
        (
            format!(r#"{{{HEADS}, "model_type": "gpt_neox", "rotary_pct": 0}}"#),
            "`rotary_pct` is 0",
        ),
    ] {
        let message = error(&json);
        assert!(
            message.contains(field) && message.contains("(0, 1]"),
            "{json}: {message}"
        );
    }
    let message = error("[1, 2]");
    assert!(message.contains("not a JSON object"), "{message}");
    let message = RopeConfig::from_hf_config_file("/nonexistent/config.json")
        .unwrap_err()
        .to_string();
    assert!(message.contains("/nonexistent/config.json"), "{message}");
}

#[test]
fn per_layer_parameters_are_read_by_layer_type() {
    let json = format!(
        r#"{{{HEADS}, "layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {{
                "sliding_attention": {{"rope_type": "default", "rope_theta": 10000.0}},
                "full_attention": {{"rope_type": "proportional", "rope_theta": 1000000.0,
                                    "partial_rotary_factor": 0.25}}}}}}"#
    );
    let message = error(&json);
    assert!(
        message.contains("\"full_attention\", \"sliding_attention\"")
            && message.contains("from_hf_config_layer"),
        "{message}"
    );
    let full = RopeConfig::from_hf_config_layer(&json, "full_attention").unwrap();
    assert_eq!((full.base, full.rotary_dims), (1e6, Some(16)));
    assert!(matches!(full.scaling, RopeScaling::Proportional(_)));
    let sliding = RopeConfig::from_hf_config_layer(&json, "sliding_attention").unwrap();
    assert_eq!(
        (sliding.base, sliding.scaling),
        (10_000.0, RopeScaling::None)
    );
    let message = RopeConfig::from_hf_config_layer(&json, "global")
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("\"global\" is not one of them"),
        "{message}"
    );
}

#[test]
fn transformers_defaults_fill_what_the_file_leaves_out() {
    // Generic: theta 10 000, whole head, half-split, transformers' arithmetic.
    let plain = RopeConfig::from_hf_config(&format!("{{{HEADS}}}")).unwrap();
    assert_eq!(
        (plain.d_head, plain.base, plain.rotary_dims),
        (16, 10_000.0, Some(16))
    );
    assert_eq!(
        (plain.layout, plain.arithmetic),
        (RopeLayout::HalfSplit, RopeArithmetic::Transformers)
    );
    // The model type's class defaults.
    let phi = RopeConfig::from_hf_config(&format!(r#"{{"model_type": "phi", {HEADS}}}"#)).unwrap();
    assert_eq!(phi.rotary_dims, Some(8));
    let neox =
        RopeConfig::from_hf_config(&format!(r#"{{"model_type": "gpt_neox", {HEADS}}}"#)).unwrap();
    assert_eq!(neox.rotary_dims, Some(4));
    let bitnet =
        RopeConfig::from_hf_config(&format!(r#"{{"model_type": "bitnet", {HEADS}}}"#)).unwrap();
    assert_eq!(bitnet.base, 500_000.0);
    // Llama's own default ignores partial_rotary_factor; its linear scaling does not.
    let llama = |params: &str| {
        RopeConfig::from_hf_config(&format!(
            r#"{{"model_type": "llama", {HEADS}, "partial_rotary_factor": 0.5 {params}}}"#
        ))
        .unwrap()
    };
    assert_eq!(llama("").rotary_dims, Some(16));
    assert_eq!(
        llama(r#", "rope_scaling": {"type": "linear", "factor": 2}"#).rotary_dims,
        Some(8)
    );
    // yarn: `truncate` absent is true, null is false; `factor: null` is max / original.
    let yarn = |extra: &str| {
        let json = format!(
            r#"{{{HEADS}, "rope_scaling": {{"type": "yarn", "factor": null,
                "original_max_position_embeddings": 32 {extra}}}}}"#
        );
        match RopeConfig::from_hf_config(&json).unwrap().scaling {
            RopeScaling::Yarn(y) => y,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!((yarn("").truncate, yarn("").factor), (true, 4.0));
    assert!(!yarn(r#", "truncate": null"#).truncate);
    // Phi-3 keeps original_max_position_embeddings at the top level; it wins.
    let phi3 = RopeConfig::from_hf_config(&format!(
        r#"{{"model_type": "phi3", {HEADS}, "original_max_position_embeddings": 16,
            "rope_scaling": {{"type": "longrope", "short_factor": [1,1,1,1,1,1,1,1],
            "long_factor": [2,2,2,2,2,2,2,2], "original_max_position_embeddings": 64}}}}"#
    ))
    .unwrap();
    let RopeScaling::LongRope(long) = phi3.scaling else {
        panic!()
    };
    assert_eq!(
        (long.original_max_position_embeddings, long.factor),
        (16, 8.0)
    );
}

#[test]
fn config_classes_attribute_maps_and_size_defaults_are_followed() {
    // Falcon's published files say `n_head` / `n_layer`. transformers 5's FalconConfig has no
    // attribute_map: it ignores them and keeps its defaults, 4544 wide and 71 heads.
    let falcon = RopeConfig::from_hf_config(
        r#"{"model_type": "falcon", "hidden_size": 4544, "n_head": 71, "n_layer": 32}"#,
    )
    .unwrap();
    assert_eq!((falcon.d_head, falcon.layout), (64, RopeLayout::HalfSplit));
    let defaults = RopeConfig::from_hf_config(r#"{"model_type": "falcon"}"#).unwrap();
    assert_eq!(defaults.d_head, 64);
    // An `n_head` transformers would ignore for another head count is refused, with the fix.
    let message = error(r#"{"model_type": "falcon", "hidden_size": 8192, "n_head": 128}"#);
    assert!(
        message.contains("`n_head` is 128")
            && message.contains("num_attention_heads 71")
            && message.contains("rename `n_head` to `num_attention_heads`"),
        "{message}"
    );
    // DBRX's attribute_map: d_model, n_heads and max_seq_len; the standard key wins.
    let dbrx = RopeConfig::from_hf_config(
        r#"{"model_type": "dbrx", "d_model": 96, "n_heads": 4, "max_seq_len": 64}"#,
    )
    .unwrap();
    assert_eq!((dbrx.d_head, dbrx.cache_len), (24, 64));
    let dbrx = RopeConfig::from_hf_config(
        r#"{"model_type": "dbrx", "d_model": 96, "hidden_size": 48, "n_heads": 4}"#,
    )
    .unwrap();
    assert_eq!(dbrx.d_head, 12);
}

#[test]
fn each_family_rotates_the_pairs_its_modeling_code_rotates() {
    // Cohere's rotate_half pairs adjacent dimensions in place.
    let cohere =
        RopeConfig::from_hf_config(&format!(r#"{{"model_type": "cohere", {HEADS}}}"#)).unwrap();
    assert_eq!(cohere.layout, RopeLayout::Interleaved);
    // Its apply_rotary_pos_emb multiplies the whole head: partial rotation fails there.
    let message = error(&format!(
        r#"{{"model_type": "cohere", {HEADS}, "partial_rotary_factor": 0.5,
            "rope_scaling": {{"type": "linear", "factor": 2}}}}"#
    ));
    assert!(
        message.contains("cohere's apply_rotary_pos_emb multiplies all 16 dimensions")
            && message.contains("leave partial_rotary_factor out"),
        "{message}"
    );
    // GLM's rotates its first rotary_dim dimensions in adjacent pairs (default factor 0.5).
    let glm = RopeConfig::from_hf_config(&format!(
        r#"{{"model_type": "glm", {HEADS}, "head_dim": 16}}"#
    ))
    .unwrap();
    assert_eq!(
        (glm.layout, glm.rotary_dims),
        (RopeLayout::Interleaved, Some(8))
    );
    // NanoChat turns the other way: no layout does, so it is refused with the way round it.
    let message = error(&format!(r#"{{"model_type": "nanochat", {HEADS}}}"#));
    assert!(
        message.contains("cat((x2, -x1))") && message.contains("swap the two halves"),
        "{message}"
    );
}

/// The issue's case: `rope_theta: -10000` loaded without complaint and rotated by NaN angles.
/// Every number of the rotary settings is held to the range its formula needs, named by its
/// field with the value and a fix.
#[test]
fn numbers_outside_their_range_are_refused_by_field() {
    let cases: [(String, &str, &str); 14] = [
        (
            format!(r#"{{{HEADS}, "rope_theta": -10000.0}}"#),
            "`rope_theta`",
            "-10000",
        ),
        (
            format!(r#"{{{HEADS}, "rope_theta": 0}}"#),
            "`rope_theta`",
            "is 0",
        ),
        (
            format!(
                r#"{{{HEADS}, "rope_parameters": {{"rope_type": "default", "rope_theta": -1.0}}}}"#
            ),
            "`rope_parameters.rope_theta`",
            "-1",
        ),
        (
            format!(
                r#"{{{HEADS}, "model_type": "gpt_neox", "rotary_pct": 1.0, "rotary_emb_base": -5.0}}"#
            ),
            "`rotary_emb_base`",
            "-5",
        ),
        (
            format!(r#"{{{HEADS}, "rope_parameters": {{"rope_type": "linear", "factor": -2.0}}}}"#),
            "`rope_parameters.factor`",
            "-2",
        ),
        (
            format!(r#"{{{HEADS}, "rope_parameters": {{"rope_type": "dynamic", "factor": 0.0}}}}"#),
            "`rope_parameters.factor`",
            "is 0",
        ),
        (
            format!(
                r#"{{{HEADS}, "rope_parameters": {{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": -1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}}}"#
            ),
            "`rope_parameters.low_freq_factor`",
            "-1",
        ),
        (
            format!(
                r#"{{{HEADS}, "rope_parameters": {{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 0.0, "original_max_position_embeddings": 32}}}}"#
            ),
            "`rope_parameters.high_freq_factor`",
            "is 0",
        ),
        (
            format!(
                r#"{{{HEADS}, "rope_parameters": {{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "attention_factor": -0.5}}}}"#
            ),
            "`rope_parameters.attention_factor`",
            "-0.5",
        ),
        (
            format!(
                r#"{{{HEADS}, "rope_parameters": {{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": -2}}}}"#
            ),
            "`rope_parameters.beta_fast`",
            "-2",
        ),
        (
            format!(
                r#"{{{HEADS}, "rope_parameters": {{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_slow": -1}}}}"#
            ),
            "`rope_parameters.beta_slow`",
            "-1",
        ),
        (
            format!(
                r#"{{{HEADS}, "rope_parameters": {{"rope_type": "longrope", "original_max_position_embeddings": 32, "short_factor": [1, 1, 1, 1, 1, 1, 1, 1], "long_factor": [1, 2, 0, 1, 1, 1, 1, 1]}}}}"#
            ),
            "`rope_parameters.long_factor[2]`",
            "is 0",
        ),
        (
            format!(
                r#"{{{HEADS}, "rope_parameters": {{"rope_type": "longrope", "original_max_position_embeddings": 32, "short_factor": [1, 1, 1, -3, 1, 1, 1, 1], "long_factor": [1, 1, 1, 1, 1, 1, 1, 1]}}}}"#
            ),
            "`rope_parameters.short_factor[3]`",
            "-3",
        ),
        (
            format!(
                r#"{{{HEADS}, "rope_parameters": {{"rope_type": "longrope", "original_max_position_embeddings": 32, "short_factor": [1, 1, 1, 1, 1, 1, 1, 1], "long_factor": [1, 1, 1, 1, 1, 1, 1, 1], "attention_factor": 0}}}}"#
            ),
            "`rope_parameters.attention_factor`",
            "is 0",
        ),
    ];
    for (json, field, value) in &cases {
        let message = error(json);
        assert!(message.contains(field), "{json}: {message}");
        assert!(message.contains(value), "{json}: {message}");
        assert!(message.contains("Fix:"), "{json}: {message}");
    }
    // Edges transformers computes with stay accepted: a small base, a beta of 0 (the random
    // configs of `hf_rope_fuzz` hold three, matched against transformers).
    assert!(RopeConfig::from_hf_config(&format!(r#"{{{HEADS}, "rope_theta": 1e-3}}"#)).is_ok());
    let zero_beta = format!(
        r#"{{{HEADS}, "rope_parameters": {{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 0}}}}"#
    );
    assert!(RopeConfig::from_hf_config(&zero_beta).is_ok());
}

/// The multimodal Qwen text models' sections, as their rotary modules read them: Qwen2-VL's
/// older `"type": "mrope"` is `"default"` with sections, Qwen3-VL interleaves, a missing
/// `mrope_section` takes the class's default, and another model type's sections are refused.
#[test]
fn mrope_sections_become_the_axes() {
    let read = |json: &str| RopeConfig::from_hf_config(json).unwrap();
    let qwen2 = read(&format!(
        r#"{{{HEADS}, "model_type": "qwen2_vl",
            "rope_scaling": {{"type": "mrope", "mrope_section": [2, 3, 3]}}}}"#
    ));
    assert_eq!(qwen2.axes, RopeAxes::MRope(vec![2, 3, 3]));
    assert_eq!(qwen2.scaling, RopeScaling::None);
    let nested = read(
        r#"{"model_type": "qwen2_5_vl", "text_config": {"model_type": "qwen2_5_vl_text",
            "hidden_size": 1024, "num_attention_heads": 8,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}}"#,
    );
    assert_eq!(nested.axes, RopeAxes::MRope(vec![16, 24, 24]));
    let qwen3 = read(&format!(
        r#"{{{HEADS}, "model_type": "qwen3_vl_text",
            "rope_parameters": {{"rope_type": "default", "mrope_section": [4, 2, 2],
            "mrope_interleaved": true}}}}"#
    ));
    assert_eq!(qwen3.axes, RopeAxes::MRopeInterleaved(vec![4, 2, 2]));
    let message = error(&format!(
        r#"{{{HEADS}, "model_type": "llama", "rope_parameters": {{"mrope_section": [2, 3, 3]}}}}"#
    ));
    assert!(
        message.contains("rope_parameters.mrope_section"),
        "{message}"
    );
    assert!(message.contains("qwen2_vl"), "{message}");
    let message = error(&format!(
        r#"{{{HEADS}, "model_type": "qwen2_vl",
            "rope_scaling": {{"type": "mrope", "mrope_section": [2, 3, 2]}}}}"#
    ));
    assert!(message.contains("sum to 8"), "{message}");
}

/// The vision encoders' own axial rotation (`default_rope_type = "axial"`), and the width each
/// class divides: Qwen2-VL's `embed_dim / num_heads`, Qwen2.5-VL's `hidden_size / num_heads`,
/// Pixtral's `head_dim`. Another model type's `"axial"` stays unknown.
#[test]
fn vision_encoders_rotate_rows_and_columns() {
    let read = |json: &str| RopeConfig::from_hf_config(json).unwrap();
    let qwen2 = read(
        r#"{"model_type": "qwen2_vl_vision", "embed_dim": 1280, "num_heads": 16,
        "hidden_size": 3584}"#,
    );
    assert_eq!((qwen2.d_head, qwen2.axes.clone()), (80, RopeAxes::Axial(2)));
    assert_eq!(qwen2.layout, RopeLayout::HalfSplit);
    let qwen2_5 = read(
        r#"{"model_type": "qwen2_5_vl_vision", "hidden_size": 1280,
        "num_heads": 16, "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0}}"#,
    );
    assert_eq!((qwen2_5.d_head, qwen2_5.axes), (80, RopeAxes::Axial(2)));
    let pixtral = read(
        r#"{"model_type": "pixtral", "hidden_size": 1024,
        "num_attention_heads": 16, "head_dim": 64, "rope_theta": 10000.0}"#,
    );
    assert_eq!(
        (pixtral.d_head, pixtral.axes),
        (64, RopeAxes::AxialAlternate(2))
    );
    let message = error(&format!(
        r#"{{{HEADS}, "model_type": "llama", "rope_parameters": {{"rope_type": "axial"}}}}"#
    ));
    assert!(message.contains("\"axial\""), "{message}");
}
