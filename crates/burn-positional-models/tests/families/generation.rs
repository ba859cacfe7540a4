//! `try_generate` beyond greedy: rows that stop at their eos token, seeded sampling that gives
//! the same tokens on every device, prompts checked against the vocabulary, and the
//! generation settings of a checkpoint folder. The expected greedy tokens are transformers'
//! (the fixtures' `generated`, from `tools/model_fixtures.py`); what eos changes follows from
//! them (transformers' `_sample` pads a row after its eos and stops when every row has one).

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::tensor::Device;
use burn_positional_models::sampling::Sampling;
use burn_positional_models::{
    GenerateError, GenerateOptions, Generated, GenerationConfig, generate, load_causal_lm, t5,
    try_generate,
};

use crate::fixture::Fixture;

/// The pad token of the options here (the fixtures pad with 0).
const PAD: i64 = 0;

fn is_t5(name: &str) -> bool {
    name.starts_with("t5")
}

/// transformers' greedy new tokens of each row (T5: after the decoder's start token).
fn expected_new(fx: &Fixture) -> Vec<Vec<i64>> {
    let skip = if is_t5(&fx.name) {
        1
    } else {
        fx.rows("input_ids")[0].len()
    };
    fx.rows("generated")
        .into_iter()
        .map(|row| row[skip..].to_vec())
        .collect()
}

fn run(
    fx: &Fixture,
    prompts: &[Vec<i64>],
    options: &GenerateOptions,
    device: &Device,
) -> Result<Generated, GenerateError> {
    let source = fx.source();
    if is_t5(&fx.name) {
        let model = t5::load(&fx.checkpoint(), device).unwrap_or_else(|e| panic!("{source}: {e}"));
        t5::try_generate(&model, prompts, options, device)
    } else {
        let model = load_causal_lm(&fx.dir, device).unwrap_or_else(|e| panic!("{source}: {e}"));
        try_generate(&model, prompts, options, device)
    }
}

/// An eos token one row generates (its first time at step `k`, before the last step) and no
/// other row does: that row keeps its tokens up to and with it, then pads; the others are
/// transformers' greedy tokens, to the full length.
fn eos_ends_its_row_and_pads_it(name: &str, device: &Device) {
    let fx = Fixture::open(name);
    let source = fx.source();
    let expected = expected_new(&fx);
    let new = expected[0].len();
    let (row, k, eos) = expected
        .iter()
        .enumerate()
        .flat_map(|(row, tokens)| tokens.iter().enumerate().map(move |(k, &t)| (row, k, t)))
        .find(|&(row, k, t)| {
            k + 1 < new
                && !expected[row][..k].contains(&t)
                && expected
                    .iter()
                    .enumerate()
                    .all(|(other, tokens)| other == row || !tokens.contains(&t))
        })
        .unwrap_or_else(|| panic!("{source}: no token only one row generates"));
    let options = GenerateOptions::greedy(new, PAD).with_eos(vec![eos]);
    let generated = run(&fx, &fx.prompts(), &options, device).unwrap();
    for (r, tokens) in generated.tokens.iter().enumerate() {
        let want: Vec<i64> = if r == row {
            let mut want = expected[r][..=k].to_vec();
            want.resize(new, PAD);
            want
        } else {
            expected[r].clone()
        };
        assert_eq!(
            tokens, &want,
            "{source}: eos {eos} (row {row}, step {k}): row {r}"
        );
    }
}

/// Each row's second greedy token as eos: every row ends by its second step, so the loop stops
/// there, every row with transformers' tokens to its first eos and pads after.
fn generation_stops_when_every_row_has_ended(name: &str, device: &Device) {
    let fx = Fixture::open(name);
    let source = fx.source();
    let expected = expected_new(&fx);
    let new = expected[0].len();
    let eos: Vec<i64> = expected.iter().map(|tokens| tokens[1]).collect();
    let ends: Vec<usize> = expected
        .iter()
        .map(|tokens| tokens.iter().position(|t| eos.contains(t)).unwrap())
        .collect();
    let steps = ends.iter().max().unwrap() + 1;
    assert!(steps < new, "{source}: the test needs an early end");
    let options = GenerateOptions::greedy(new, PAD).with_eos(eos.clone());
    let generated = run(&fx, &fx.prompts(), &options, device).unwrap();
    assert_eq!(
        generated.step_logits.len(),
        steps,
        "{source}: eos {eos:?} ends every row by step {}",
        steps - 1
    );
    for (r, tokens) in generated.tokens.iter().enumerate() {
        let mut want = expected[r][..=ends[r]].to_vec();
        want.resize(steps, PAD);
        assert_eq!(tokens, &want, "{source}: eos {eos:?}: row {r}");
    }
}

/// An id equal to the vocabulary size, and -1, are refused before the model runs with the id,
/// its row and column and the vocabulary; `generate` panics with that message.
fn prompt_ids_outside_the_vocabulary_are_refused(name: &str, device: &Device) {
    let fx = Fixture::open(name);
    let source = fx.source();
    let vocab = fx.checkpoint().config::<serde_json::Value>().unwrap()["vocab_size"]
        .as_u64()
        .unwrap() as usize;
    let options = GenerateOptions::greedy(3, PAD);
    for (row, column, id) in [(1, 2, vocab as i64), (0, 1, -1)] {
        let mut prompts = fx.prompts();
        prompts[row][column] = id;
        let err = run(&fx, &prompts, &options, device).expect_err(&source);
        let message = err.to_string();
        assert!(
            matches!(err, GenerateError::PromptToken { id: i, row: r, column: c, vocab_size: v }
                if (i, r, c, v) == (id, row, column, vocab)),
            "{source}: {message}"
        );
        for part in [
            format!("token id {id} "),
            format!("row {row}, column {column}"),
            format!("{vocab} ids"),
            "tokenizer".to_string(),
        ] {
            assert!(
                message.contains(&part),
                "{source}: `{part}` not in: {message}"
            );
        }
        // The panicking entry points say the same.
        let panicked = catch_unwind(AssertUnwindSafe(|| {
            if is_t5(name) {
                let model = t5::load(&fx.checkpoint(), device).unwrap();
                t5::generate(&model, &prompts, PAD, 3, device);
            } else {
                let model = load_causal_lm(&fx.dir, device).unwrap();
                generate(&model, &prompts, PAD, 3, device);
            }
        }))
        .expect_err("generate must panic");
        let text = panicked
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert_eq!(text, message, "{source}: generate's panic");
    }
}

mod eos {
    use super::*;

    fn llama(device: &Device) {
        eos_ends_its_row_and_pads_it("llama", device);
        generation_stops_when_every_row_has_ended("llama", device);
    }

    fn gpt2(device: &Device) {
        eos_ends_its_row_and_pads_it("gpt2", device);
        generation_stops_when_every_row_has_ended("gpt2", device);
    }

    fn t5(device: &Device) {
        eos_ends_its_row_and_pads_it("t5", device);
        generation_stops_when_every_row_has_ended("t5", device);
    }

    fn qwen3(device: &Device) {
        eos_ends_its_row_and_pads_it("qwen3", device);
        generation_stops_when_every_row_has_ended("qwen3", device);
    }

    fn gemma2(device: &Device) {
        eos_ends_its_row_and_pads_it("gemma2", device);
        generation_stops_when_every_row_has_ended("gemma2", device);
    }

    fn gemma3(device: &Device) {
        eos_ends_its_row_and_pads_it("gemma3", device);
        generation_stops_when_every_row_has_ended("gemma3", device);
    }

    fn gpt_neox(device: &Device) {
        eos_ends_its_row_and_pads_it("gpt_neox", device);
        generation_stops_when_every_row_has_ended("gpt_neox", device);
    }

    on_every_inference_device!(llama, gpt2, t5, qwen3, gemma2, gemma3, gpt_neox);
}

mod checked_prompts {
    use super::*;

    fn llama(device: &Device) {
        prompt_ids_outside_the_vocabulary_are_refused("llama", device);
    }

    fn gpt2(device: &Device) {
        prompt_ids_outside_the_vocabulary_are_refused("gpt2", device);
    }

    fn t5(device: &Device) {
        prompt_ids_outside_the_vocabulary_are_refused("t5", device);
    }

    on_every_inference_device!(llama, gpt2, t5);
}

fn hot() -> Sampling {
    Sampling::greedy()
        .with_do_sample(true)
        .with_temperature(2.0)
}

/// A seed gives the same tokens on every run and on flex, ndarray and wgpu (the draw is on the
/// host, from each device's logits); another seed gives other tokens (temperature 2 over 256
/// ids, 2 rows of 12 draws: equal by chance with a negligible probability).
#[test]
fn a_seed_gives_the_same_tokens_on_every_device() {
    sampling_is_seeded("llama");
}

/// The same for Gemma 2: its capped logits through the processors, its sliding layers' cache
/// past the window (12 draws after a 12-token prompt, window 16).
#[test]
fn a_seed_gives_the_same_gemma2_tokens_on_every_device() {
    sampling_is_seeded("gemma2");
}

fn sampling_is_seeded(name: &str) {
    let fx = Fixture::open(name);
    let prompts = fx.prompts();
    let settings = [
        hot(),
        hot()
            .with_top_k(20)
            .with_top_p(0.9)
            .with_repetition_penalty(1.3),
    ];
    for sampling in settings {
        let options = GenerateOptions::greedy(12, PAD)
            .with_sampling(sampling)
            .with_seed(7);
        let tokens = |device: &Device, options: &GenerateOptions| {
            run(&fx, &prompts, options, device).unwrap().tokens
        };
        let flex = tokens(&crate::devices::flex(), &options);
        assert_eq!(
            tokens(&crate::devices::flex(), &options),
            flex,
            "{sampling:?}: a second run"
        );
        assert_eq!(
            tokens(&crate::devices::ndarray(), &options),
            flex,
            "{sampling:?}: ndarray"
        );
        assert_eq!(
            tokens(&crate::devices::wgpu(), &options),
            flex,
            "{sampling:?}: wgpu"
        );
        let other = tokens(&crate::devices::flex(), &options.clone().with_seed(8));
        assert_ne!(other, flex, "{sampling:?}: seeds 7 and 8");
    }
}

/// Sampling from the top token alone (`top_k` 1) is greedy decoding, whatever the seed:
/// transformers' tokens.
#[test]
fn sampling_the_top_token_alone_is_greedy() {
    let fx = Fixture::open("llama");
    let expected = expected_new(&fx);
    let sampling = hot().with_top_k(1);
    for seed in [0, 1] {
        let options = GenerateOptions::greedy(expected[0].len(), PAD)
            .with_sampling(sampling)
            .with_seed(seed);
        let generated = run(&fx, &fx.prompts(), &options, &crate::devices::flex()).unwrap();
        assert_eq!(generated.tokens, expected, "seed {seed}");
    }
}

/// Without a generation_config.json, the settings come from config.json (transformers 5.24's
/// `GenerationConfig.from_pretrained(..., config_file_name="config.json")`); with one, from it
/// alone, checked.
#[test]
fn generation_config_comes_from_the_folder() {
    let fx = Fixture::open("llama");
    let config = GenerationConfig::for_checkpoint(&fx.checkpoint()).unwrap();
    assert_eq!(
        (
            config.eos_token_ids(),
            config.pad_token_id(),
            config.bos_token_id
        ),
        (vec![2], Some(0), Some(1)),
        "llama's config.json"
    );
    let options = GenerateOptions::from_config(&config);
    assert_eq!(options.new_tokens(20).unwrap(), 20, "transformers' default");
    assert!(options.sampling.is_plain_argmax());

    let dir = std::env::temp_dir().join(format!("bpm-generation-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fx.dir.join("config.json"), dir.join("config.json")).unwrap();
    std::fs::write(dir.join("model.safetensors"), b"").unwrap();
    let write = |json: &str| std::fs::write(dir.join("generation_config.json"), json).unwrap();
    let open = || {
        GenerationConfig::for_checkpoint(&burn_positional_models::Checkpoint::open(&dir).unwrap())
    };

    write(r#"{"do_sample": true, "top_k": 7, "eos_token_id": [5, 6], "max_length": 30}"#);
    let config = open().unwrap();
    // config.json's pad (0) is not read: the pad is the first eos.
    assert_eq!(
        (config.eos_token_ids(), config.pad_token_id()),
        (vec![5, 6], Some(5))
    );
    let options = GenerateOptions::from_config(&config);
    assert_eq!(options.sampling.top_k, 7);
    assert_eq!(options.new_tokens(12).unwrap(), 18, "max_length 30");
    assert!(matches!(
        options.new_tokens(30),
        Err(GenerateError::Setting {
            field: "max_length",
            ..
        })
    ));

    write(r#"{"do_sample": true, "temperature": 0.0}"#);
    let message = open().unwrap_err().to_string();
    for part in [
        "generation_config.json",
        "`temperature` = 0",
        "above 0",
        "do_sample",
    ] {
        assert!(message.contains(part), "`{part}` not in: {message}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
