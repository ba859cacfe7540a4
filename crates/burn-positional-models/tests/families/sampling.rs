//! Sampling against transformers: the processors and warpers of `crate::sampling` on rows of
//! logits, and the chains a `GenerationConfig` builds. The expected scores and probabilities
//! were computed by transformers 5.24's own `RepetitionPenaltyLogitsProcessor`,
//! `TemperatureLogitsWarper`, `TopKLogitsWarper`, `TopPLogitsWarper`, `MinPLogitsWarper` and
//! `GenerationMixin._get_logits_processor` (`tools/sampling_fixtures.py`, written to
//! `tests/fixtures/sampling/`). Host code only: no device.

use burn_positional_models::GenerationConfig;
use burn_positional_models::sampling::{
    min_p, repetition_penalty, softmax, temperature, top_k, top_p,
};

use crate::fixture::Fixture;

/// Probabilities within this of transformers' (float32 softmax there, f64 here).
const TOLERANCE: f64 = 1e-6;

fn rows(fx: &Fixture, key: &str) -> Vec<Vec<f64>> {
    let (shape, values) = fx.get(key);
    values.chunks(shape[1]).map(<[f64]>::to_vec).collect()
}

/// One case applied to one row, as the fixture's `expected.json` describes it.
fn apply(case: &serde_json::Value, scores: &mut [f32], ids: &[i64], padding: usize) {
    let f = |key: &str| case[key].as_f64().unwrap();
    let n = |key: &str| case[key].as_u64().unwrap() as usize;
    match case["kind"].as_str().unwrap() {
        "repetition_penalty" => {
            let from = if case["skip_left_padding"].as_bool().unwrap() {
                padding
            } else {
                0
            };
            repetition_penalty(scores, &ids[from..], f("penalty") as f32);
        }
        "temperature" => temperature(scores, f("temperature") as f32),
        "top_k" => top_k(scores, n("top_k"), n("min_tokens_to_keep")),
        "top_p" => top_p(scores, f("top_p"), n("min_tokens_to_keep")),
        "min_p" => min_p(scores, f("min_p"), n("min_tokens_to_keep")),
        "chain" => {
            // transformers' `_get_logits_processor` skips the left padding of
            // the repetition penalty (`prompt_ignore_length`).
            let config: GenerationConfig = serde_json::from_value(case["config"].clone()).unwrap();
            config.check().unwrap();
            config.sampling().process(scores, &ids[padding..]);
        }
        other => panic!("unknown case kind {other}"),
    }
}

#[test]
fn processors_match_transformers() {
    let fx = Fixture::open("sampling");
    let source = fx.source();
    let logits = rows(&fx, "logits");
    let ids = fx.rows("input_ids");
    let padding: Vec<usize> = fx
        .rows("attention_mask")
        .iter()
        .map(|row| row.iter().take_while(|&&m| m == 0).count())
        .collect();
    let cases = fx.json["cases"].as_object().unwrap();
    assert!(cases.len() >= 15, "{source}: cases missing");
    for (name, case) in cases {
        let expected_scores = rows(&fx, &format!("{name}.scores"));
        let expected_probs = rows(&fx, &format!("{name}.probs"));
        for (row, input) in logits.iter().enumerate() {
            let mut scores: Vec<f32> = input.iter().map(|&s| s as f32).collect();
            apply(case, &mut scores, &ids[row], padding[row]);
            let probs = softmax(&scores);
            let theirs = &expected_scores[row];
            // Ties straddling top-p's threshold or min-p's kept tokens: torch sorts with an
            // unstable sort (libstdc++'s introsort on the CPU) and its `topk` keeps any of equal
            // scores, ours keeps the first, so which of several equal scores are removed
            // differs; how many does not. Compared per set of equal input scores.
            let tied = name == "top_p_ties" || name == "min_p_0.6_keep_5_ties";
            let groups: Vec<Vec<usize>> = if tied {
                let mut values: Vec<f64> = input.clone();
                values.sort_by(f64::total_cmp);
                values.dedup();
                values
                    .iter()
                    .map(|v| (0..input.len()).filter(|&i| input[i] == *v).collect())
                    .collect()
            } else {
                (0..input.len()).map(|i| vec![i]).collect()
            };
            for group in groups {
                let removed = |s: &dyn Fn(usize) -> f64| {
                    group.iter().filter(|&&i| s(i) == f64::NEG_INFINITY).count()
                };
                assert_eq!(
                    removed(&|i| scores[i] as f64),
                    removed(&|i| theirs[i]),
                    "{source}: case {name}, row {row}, tokens {group:?}: -inf at other places \
                     (ours {:?}, transformers {:?})",
                    group.iter().map(|&i| scores[i]).collect::<Vec<_>>(),
                    group.iter().map(|&i| theirs[i]).collect::<Vec<_>>(),
                );
                let mut ours: Vec<f64> = group.iter().map(|&i| probs[i]).collect();
                let mut expected: Vec<f64> =
                    group.iter().map(|&i| expected_probs[row][i]).collect();
                ours.sort_by(f64::total_cmp);
                expected.sort_by(f64::total_cmp);
                for (o, e) in ours.iter().zip(&expected) {
                    assert!(
                        (o - e).abs() < TOLERANCE,
                        "{source}: case {name}, row {row}, tokens {group:?}: probability {o} \
                         against transformers' {e}"
                    );
                }
            }
        }
    }
}

/// The fixture's chains are the ones transformers built: the processor list it recorded for
/// each `GenerationConfig` is the one `Sampling::process` documents (penalty, temperature,
/// top-k, top-p, min-p; each skipped at its neutral value, the warpers without `do_sample`).
#[test]
fn chains_follow_transformers_order_and_skips() {
    let fx = Fixture::open("sampling");
    for (name, case) in fx.json["cases"].as_object().unwrap() {
        if case["kind"] != "chain" {
            continue;
        }
        let config: GenerationConfig = serde_json::from_value(case["config"].clone()).unwrap();
        let s = config.sampling();
        let mut ours = Vec::new();
        if s.repetition_penalty != 1.0 {
            ours.push("RepetitionPenaltyLogitsProcessor");
        }
        if s.do_sample && s.temperature != 1.0 {
            ours.push("TemperatureLogitsWarper");
        }
        if s.do_sample && s.top_k != 0 {
            ours.push("TopKLogitsWarper");
        }
        if s.do_sample && s.top_p < 1.0 {
            ours.push("TopPLogitsWarper");
        }
        if s.do_sample && s.min_p.is_some() {
            ours.push("MinPLogitsWarper");
        }
        let theirs: Vec<&str> = case["processors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        assert_eq!(ours, theirs, "case {name}");
    }
}
