//! The `tokenizers` feature (on by default, so built and run here): a `tokenizer.json` written
//! by Python's `tokenizers` (`tools/tokenizer_fixture.py`), read by the Rust crate, encodes and
//! decodes exactly as Python did; generated text streamed one token at a time equals the text
//! decoded at the end.

use burn::tensor::Device;
use burn_positional_models::text::Text;
use burn_positional_models::{GenerateOptions, load_causal_lm, try_generate_streaming};

use crate::fixture::Fixture;

fn fixture() -> (Text, serde_json::Value) {
    let dir = crate::package_dir().join("tests/fixtures/tokenizer");
    let text = Text::from_file(dir.join("tokenizer.json")).unwrap();
    let expected =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    (text, expected)
}

fn ids(value: &serde_json::Value) -> Vec<i64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect()
}

#[test]
fn encodes_and_decodes_as_python_tokenizers() {
    let (text, expected) = fixture();
    assert_eq!(text.vocab_size(), 256);
    for case in expected["encode"].as_array().unwrap() {
        let source = case["text"].as_str().unwrap();
        assert_eq!(text.encode(source).unwrap(), ids(&case["ids"]), "{source}");
        assert_eq!(
            text.decode(&ids(&case["ids"])).unwrap(),
            case["decoded"].as_str().unwrap()
        );
    }
    for case in expected["decode"].as_array().unwrap() {
        let ids = ids(&case["ids"]);
        assert_eq!(
            text.decode(&ids).unwrap(),
            case["text"].as_str().unwrap(),
            "{ids:?}"
        );
        // Streamed one id at a time, the same text.
        let mut stream = text.stream();
        let streamed: String = ids
            .iter()
            .map(|&id| stream.step(id).unwrap().unwrap_or_default())
            .collect();
        assert_eq!(streamed, case["text"].as_str().unwrap(), "{ids:?}");
    }
    for bad in [256, -1] {
        let message = text.decode(&[5, bad]).unwrap_err().to_string();
        assert!(
            message.contains(&format!("id {bad} is outside")),
            "{message}"
        );
        assert!(
            message.contains("0..256") && message.contains("Fix:"),
            "{message}"
        );
    }
    let message = Text::from_file("no/such/tokenizer.json")
        .unwrap_err()
        .to_string();
    assert!(message.contains("no/such/tokenizer.json"), "{message}");
}

/// A prompt as text through the Llama fixture, each new token decoded as it comes: the
/// streamed pieces, one callback per step, add up to the decoded tokens.
fn streams_generated_text(device: &Device) {
    let (text, _) = fixture();
    let fx = Fixture::open("llama");
    let model = load_causal_lm(&fx.dir, device).unwrap();
    let prompt = text.encode("The dog bites the").unwrap();
    let mut stream = text.stream();
    let mut pieces = String::new();
    let mut calls = 0;
    let options = GenerateOptions::greedy(16, 0);
    let out = try_generate_streaming(&model, &[prompt], &options, device, |tokens| {
        calls += 1;
        pieces.push_str(&stream.step(tokens[0]).unwrap().unwrap_or_default());
    })
    .unwrap();
    assert_eq!(calls, out.tokens[0].len());
    assert_eq!(pieces, text.decode(&out.tokens[0]).unwrap());
    assert!(!pieces.is_empty());
}

on_every_inference_device!(streams_generated_text);
