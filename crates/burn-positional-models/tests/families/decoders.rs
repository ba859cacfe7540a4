//! The rotary decoders (Llama, Qwen 2 and 3, Phi-3, Mistral, Gemma 2 and 3, GPT-NeoX, Llama 3.2)
//! and, through the same checks, every
//! decoder-only port: logits of a left-padded batch, a padded row against its prompt alone,
//! greedy generation with the cache, and the cached steps against one forward without it.

use burn::tensor::{Device, Tensor};
use burn_positional_models::{Batch, CausalLm, Step, generate, load_causal_lm};

use crate::fixture::{Fixture, max_relative_error};

/// Relative tolerance against transformers (float32 on both sides).
const TOLERANCE: f64 = 1e-4;

/// The forward of a decoder-only fixture: the logits of its left-padded batch, and each row
/// against its prompt alone.
pub fn decoder_logits_match(name: &str, device: &Device) {
    let fx = Fixture::open(name);
    let source = fx.source();
    let model = load_causal_lm(&fx.dir, device).unwrap_or_else(|e| panic!("{source}: {e}"));
    let batch = fx.batch();

    // The padded batch in one forward, at transformers' position ids.
    let logits = model.forward(&fx.prompt_step(device), None);
    let err = max_relative_error(logits.clone(), fx.tensor("logits", device), &batch.mask);
    assert!(
        err < TOLERANCE,
        "{source}: logits differ by {err:.2e} (relative)"
    );

    // Each padded row equals its prompt run alone, at its real positions.
    let prompts = fx.prompts();
    let [_, len, vocab] = logits.dims();
    for (row, prompt) in prompts.iter().enumerate() {
        let alone = Batch::left_padded(std::slice::from_ref(prompt), 0);
        let step = Step::new(&alone.ids, &alone.positions(), &alone.mask, 0, device);
        let ours_alone = model.forward(&step, None);
        let n = prompt.len();
        let padded = logits.clone().slice([row..row + 1, len - n..len, 0..vocab]);
        let err = max_relative_error(ours_alone, padded, &[vec![true; n]]);
        assert!(
            err < TOLERANCE,
            "{source}: row {row} padded differs from alone by {err:.2e}"
        );
    }
}

/// Greedy generation with the cache: transformers' tokens and its logits at every step, and
/// the cached steps against one forward without a cache.
pub fn decoder_generates_as_transformers(name: &str, device: &Device) {
    let fx = Fixture::open(name);
    let source = fx.source();
    let model = load_causal_lm(&fx.dir, device).unwrap_or_else(|e| panic!("{source}: {e}"));
    let batch = fx.batch();
    let prompts = fx.prompts();
    let len = batch.ids[0].len();
    let expected = fx.rows("generated");
    let new = expected[0].len() - len;
    let generated = generate(&model, &prompts, 0, new, device);
    for (row, tokens) in generated.tokens.iter().enumerate() {
        assert_eq!(
            tokens,
            &expected[row][len..].to_vec(),
            "{source}: row {row} generates other tokens"
        );
    }
    let steps = Tensor::stack::<3>(generated.step_logits.clone(), 0);
    let all = vec![vec![true; prompts.len()]; new];
    let err = max_relative_error(steps, fx.tensor("step_logits", device), &all);
    assert!(err < TOLERANCE, "{source}: step logits differ by {err:.2e}");

    // Cached decoding equals one forward over the sequence (from the step where a longrope
    // switch has put every key on the long factors).
    let first = fx.json["longrope_switch_step"].as_u64().unwrap_or(0) as usize;
    let mut ids = batch.ids.clone();
    let mut mask = batch.mask.clone();
    for (row, tokens) in generated.tokens.iter().enumerate() {
        ids[row].extend(&tokens[..new - 1]);
        mask[row].extend(std::iter::repeat_n(true, new - 1));
    }
    let full = Batch::new(ids, mask);
    let step = Step::new(&full.ids, &full.positions(), &full.mask, 0, device);
    let full_logits = model.forward(&step, None);
    let vocab = full_logits.dims()[2];
    let b = prompts.len();
    for (i, cached) in generated.step_logits.iter().enumerate().skip(first) {
        let at = len - 1 + i;
        let one = full_logits.clone().slice([0..b, at..at + 1, 0..vocab]);
        let err = max_relative_error(
            cached.clone().reshape([b, 1, vocab]),
            one,
            &vec![vec![true]; b],
        );
        assert!(
            err < TOLERANCE,
            "{source}: cached step {i} differs from the full forward by {err:.2e}"
        );
    }
}

mod logits {
    use super::*;

    fn llama(device: &Device) {
        decoder_logits_match("llama", device);
    }

    fn qwen2(device: &Device) {
        decoder_logits_match("qwen2", device);
    }

    fn phi3(device: &Device) {
        decoder_logits_match("phi3", device);
    }

    fn phi3_partial(device: &Device) {
        decoder_logits_match("phi3_partial", device);
    }

    fn mistral(device: &Device) {
        decoder_logits_match("mistral", device);
    }

    fn qwen3(device: &Device) {
        decoder_logits_match("qwen3", device);
    }

    fn gemma2(device: &Device) {
        decoder_logits_match("gemma2", device);
    }

    fn gemma3(device: &Device) {
        decoder_logits_match("gemma3", device);
    }

    fn gpt_neox(device: &Device) {
        decoder_logits_match("gpt_neox", device);
    }

    fn gpt_neox_sequential(device: &Device) {
        decoder_logits_match("gpt_neox_sequential", device);
    }

    fn llama3_2(device: &Device) {
        decoder_logits_match("llama3_2", device);
    }

    on_every_device!(
        llama,
        qwen2,
        phi3,
        phi3_partial,
        mistral,
        qwen3,
        gemma2,
        gemma3,
        gpt_neox,
        gpt_neox_sequential,
        llama3_2,
    );
}

mod generation {
    use super::*;

    fn llama(device: &Device) {
        decoder_generates_as_transformers("llama", device);
    }

    fn qwen2(device: &Device) {
        decoder_generates_as_transformers("qwen2", device);
    }

    fn phi3(device: &Device) {
        decoder_generates_as_transformers("phi3", device);
    }

    fn phi3_partial(device: &Device) {
        decoder_generates_as_transformers("phi3_partial", device);
    }

    fn mistral(device: &Device) {
        decoder_generates_as_transformers("mistral", device);
    }

    fn qwen3(device: &Device) {
        decoder_generates_as_transformers("qwen3", device);
    }

    fn gemma2(device: &Device) {
        decoder_generates_as_transformers("gemma2", device);
    }

    fn gemma3(device: &Device) {
        decoder_generates_as_transformers("gemma3", device);
    }

    fn gpt_neox(device: &Device) {
        decoder_generates_as_transformers("gpt_neox", device);
    }

    fn gpt_neox_sequential(device: &Device) {
        decoder_generates_as_transformers("gpt_neox_sequential", device);
    }

    fn llama3_2(device: &Device) {
        decoder_generates_as_transformers("llama3_2", device);
    }

    on_every_inference_device!(
        llama,
        qwen2,
        phi3,
        phi3_partial,
        mistral,
        qwen3,
        gemma2,
        gemma3,
        gpt_neox,
        gpt_neox_sequential,
        llama3_2,
    );
}
