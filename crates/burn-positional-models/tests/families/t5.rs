//! T5 (`T5ForConditionalGeneration`, `t5` with a relu MLP and a tied, scaled output, `t5_v1_1`
//! with a gated-gelu MLP and its own unscaled `lm_head`) against transformers: the encoder's
//! output and the teacher-forced logits of a right-padded batch, each padded row against its
//! prompt alone, greedy generation with the cache, and every cached step against one
//! teacher-forced forward.

use burn::tensor::{Device, Tensor};
use burn_positional_models::t5;

use crate::fixture::{Fixture, ints, max_relative_error, padding};

/// Relative tolerance against transformers (float32 on both sides).
const TOLERANCE: f64 = 1e-4;

/// Every check of a T5 fixture.
pub fn t5_matches_transformers(name: &str, device: &Device) {
    let fx = Fixture::open(name);
    let source = fx.source();
    let model = t5::load(&fx.checkpoint(), device).unwrap_or_else(|e| panic!("{source}: {e}"));
    let batch = fx.batch();
    let (ids, padding) = (ints(&batch.ids, device), padding(&batch.mask, device));
    let decoder_ids = fx.rows("decoder_input_ids");

    // The encoder over the right-padded batch (padded queries are computed as transformers
    // does, so every position is compared), then the teacher-forced decoder.
    let encoded = model.encode(ids, padding.clone());
    let every = |rows: usize, len: usize| vec![vec![true; len]; rows];
    let [b, len, d_model] = encoded.dims();
    let err = max_relative_error(
        encoded.clone(),
        fx.tensor("encoder_hidden", device),
        &every(b, len),
    );
    assert!(
        err < TOLERANCE,
        "{source}: encoder output differs by {err:.2e} (relative)"
    );
    let logits = model.decode(ints(&decoder_ids, device), encoded.clone(), padding.clone());
    let [_, seq, vocab] = logits.dims();
    let err = max_relative_error(logits.clone(), fx.tensor("logits", device), &every(b, seq));
    assert!(
        err < TOLERANCE,
        "{source}: logits differ by {err:.2e} (relative)"
    );

    // Each padded row equals its prompt run alone: padding never leaks.
    let prompts = fx.prompts();
    for (row, prompt) in prompts.iter().enumerate() {
        let n = prompt.len();
        let (ids, padding) = t5::inputs(std::slice::from_ref(prompt), 0, device);
        let alone = model.encode(ids, padding.clone());
        let padded = encoded.clone().slice([row..row + 1, 0..n, 0..d_model]);
        let err = max_relative_error(alone.clone(), padded, &every(1, n));
        assert!(
            err < TOLERANCE,
            "{source}: row {row}'s encoder output differs alone by {err:.2e}"
        );
        let alone = model.decode(ints(&decoder_ids[row..row + 1], device), alone, padding);
        let padded = logits.clone().slice([row..row + 1, 0..seq, 0..vocab]);
        let err = max_relative_error(alone, padded, &every(1, seq));
        assert!(
            err < TOLERANCE,
            "{source}: row {row}'s logits differ alone by {err:.2e}"
        );
    }

    // Greedy generation with the cache: transformers' tokens (after the start token 0), and
    // its logits at every step.
    let expected = fx.rows("generated");
    let new = expected[0].len() - 1;
    let generated = t5::generate(&model, &prompts, 0, new, device);
    for (row, tokens) in generated.tokens.iter().enumerate() {
        assert_eq!(
            tokens,
            &expected[row][1..].to_vec(),
            "{source}: row {row} generates other tokens"
        );
    }
    let steps = Tensor::stack::<3>(generated.step_logits.clone(), 0);
    let err = max_relative_error(steps, fx.tensor("step_logits", device), &every(new, b));
    assert!(err < TOLERANCE, "{source}: step logits differ by {err:.2e}");

    // Every cached step equals one teacher-forced forward over the tokens before it.
    let full = model.decode(
        ints(
            &expected
                .iter()
                .map(|r| r[..new].to_vec())
                .collect::<Vec<_>>(),
            device,
        ),
        encoded,
        padding,
    );
    for (i, cached) in generated.step_logits.iter().enumerate() {
        let one = full.clone().slice([0..b, i..i + 1, 0..vocab]);
        let err = max_relative_error(cached.clone().reshape([b, 1, vocab]), one, &every(b, 1));
        assert!(
            err < TOLERANCE,
            "{source}: cached step {i} differs from the full forward by {err:.2e}"
        );
    }
}

fn t5(device: &Device) {
    t5_matches_transformers("t5", device);
}

fn t5_v1_1(device: &Device) {
    t5_matches_transformers("t5_v1_1", device);
}

on_every_device!(t5, t5_v1_1);

/// `T5Config.__post_init__` (transformers 5.24): the MLP from `feed_forward_proj`, the output
/// scale from `tie_word_embeddings`, and saved derived fields winning over both.
#[test]
fn config_follows_post_init() {
    use burn_positional_models::decoder::Activation;
    let config = |json: &str| serde_json::from_str::<t5::T5Config>(json).expect("config");
    let read = |json: &str| {
        let c = config(json);
        (
            c.activation("config.json").unwrap(),
            c.gated(),
            c.scales_output(),
        )
    };
    assert_eq!(read("{}"), (Activation::Relu, false, true));
    let v1_1 = r#"{"feed_forward_proj": "gated-gelu", "tie_word_embeddings": false}"#;
    assert_eq!(read(v1_1), (Activation::GeluTanh, true, false));
    assert_eq!(
        read(r#"{"feed_forward_proj": "gated-silu"}"#),
        (Activation::Silu, true, true)
    );
    let saved = r#"{"tie_word_embeddings": true, "scale_decoder_outputs": false,
                    "dense_act_fn": "gelu", "is_gated_act": true}"#;
    assert_eq!(read(saved), (Activation::Gelu, true, false));
    for bad in ["a-b-c", "fast-gelu"] {
        let json = format!(r#"{{"feed_forward_proj": "{bad}"}}"#);
        assert!(config(&json).activation("config.json").is_err(), "{bad}");
    }
}

/// `from_pretrained`'s tying: each table of the file is used where it is, the first present
/// of `shared`, `encoder.embed_tokens`, `decoder.embed_tokens`, `lm_head` where it is not.
#[test]
fn tables_follow_tying() {
    let tables = |keys: &[&str]| {
        let t = t5::Tables::of(&keys.iter().map(|k| format!("{k}.weight")).collect());
        (t.shared, t.encoder, t.decoder, t.lm_head)
    };
    assert_eq!(tables(&["shared"]), ("shared", false, false, false));
    assert_eq!(
        tables(&["shared", "lm_head"]),
        ("shared", false, false, true)
    );
    let both = tables(&["encoder.embed_tokens", "decoder.embed_tokens"]);
    assert_eq!(both, ("encoder.embed_tokens", false, true, false));
}
