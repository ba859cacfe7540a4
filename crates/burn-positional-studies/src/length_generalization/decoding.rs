//! Greedy decoding and its score: [`greedy`], [`exact_match`], [`score`].

use burn::prelude::*;

use super::{Example, LanguageModel};
use crate::PositionError;

/// Greedy decoding: `steps` tokens after each prompt, each the argmax of the last logits fed
/// back as the next input, on the device. With `cached`, each step runs the new token alone
/// through a [`KvCache`](crate::KvCache) per block; without, each step runs the whole sequence
/// again (the reference the cache must equal). The positions the decoding will use (`0..prompt + steps -
/// 1`) are checked against the embedding's table before the first forward, on the host (a
/// position past a learned table is an error naming the whole window, not an answer made of
/// NaN); the embedding's check of the ids runs every 32 forwards and at the end (one small
/// read each).
///
/// # Shapes
///
/// - prompts: `[batch, prompt]`; output: `[batch, steps]`
///
/// # Errors
///
/// The embedding's error (a token id outside the vocabulary, a position past a learned table).
pub fn greedy(
    model: &LanguageModel,
    prompts: Tensor<2, Int>,
    steps: usize,
    cached: bool,
) -> Result<Tensor<2, Int>, PositionError> {
    let [batch, prompt] = prompts.dims();
    let device = prompts.device();
    model.body.embed.check_inputs()?; // earlier forwards are not ours to report
    // The last answer token is predicted, never read: the model reads prompt + steps - 1.
    let read = prompt + steps.saturating_sub(1);
    model.body.embed.position.vectors(0..read)?;
    let argmax_last = |logits: Tensor<3>| {
        let [b, s, v] = logits.dims();
        logits
            .slice([0..b, s - 1..s, 0..v])
            .argmax(2)
            .reshape([b, 1])
    };
    let mut out: Vec<Tensor<2, Int>> = Vec::with_capacity(steps);
    let mut caches = model.caches();
    let mut sequence = prompts.clone();
    for step in 0..steps {
        let logits = if cached {
            let input = if step == 0 {
                prompts.clone()
            } else {
                out[step - 1].clone()
            };
            model.forward_cache(input, &mut caches)
        } else {
            model.forward(sequence.clone())
        };
        let next = argmax_last(logits);
        if !cached {
            sequence = Tensor::cat(vec![sequence, next.clone()], 1);
        }
        out.push(next);
        if (step + 1) % 32 == 0 {
            model.body.embed.check_inputs()?;
        }
    }
    model.body.embed.check_inputs()?;
    if out.is_empty() {
        return Ok(Tensor::zeros([batch, 0], &device));
    }
    Ok(Tensor::cat(out, 1))
}

/// The fraction of rows of `predicted` that equal the row of `expected` in every token.
///
/// # Panics
///
/// If the two hold different numbers of rows, or a pair of rows differs in length.
pub fn exact_match(predicted: &[Vec<i64>], expected: &[Vec<i64>]) -> f64 {
    assert_eq!(
        predicted.len(),
        expected.len(),
        "one prediction per example"
    );
    if expected.is_empty() {
        return 0.0;
    }
    let correct = predicted
        .iter()
        .zip(expected)
        .filter(|(p, e)| {
            assert_eq!(p.len(), e.len(), "a prediction as long as its answer");
            p == e
        })
        .count();
    correct as f64 / expected.len() as f64
}

/// Exact match of `model` on `examples` (all of one length) by cached greedy decoding: one
/// read of the answers. `Err` with the embedding's error when the model refuses the length.
///
/// # Panics
///
/// If the examples' prompts or answers differ in length (they form one batch).
pub fn score(
    model: &LanguageModel,
    examples: &[Example],
    device: &Device,
) -> Result<f64, PositionError> {
    let Some(first) = examples.first() else {
        return Ok(0.0);
    };
    let (prompt_len, answer_len) = (first.prompt.len(), first.answer.len());
    assert!(
        examples
            .iter()
            .all(|e| e.prompt.len() == prompt_len && e.answer.len() == answer_len),
        "score takes examples of one length (one batch): the first has a {prompt_len}-token \
         prompt and a {answer_len}-token answer, and another differs; score each length apart"
    );
    let prompts: Vec<i64> = examples.iter().flat_map(|e| e.prompt.clone()).collect();
    let prompts = Tensor::<2, Int>::from_data(
        TensorData::new(prompts, [examples.len(), prompt_len]),
        device,
    );
    let answers = greedy(model, prompts, answer_len, true)?;
    let flat: Vec<i64> = answers.into_data().iter::<i64>().collect();
    let predicted: Vec<Vec<i64>> = flat.chunks(answer_len).map(<[i64]>::to_vec).collect();
    let expected: Vec<Vec<i64>> = examples.iter().map(|e| e.answer.clone()).collect();
    Ok(exact_match(&predicted, &expected))
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::length_generalization::{EOS, SplitMix64, StudyConfig, Task};
    use crate::schemes::Scheme;

    #[test]
    fn exact_match_counts_whole_rows() {
        let expected = vec![
            vec![1, 2, EOS],
            vec![3, 4, EOS],
            vec![5, 6, EOS],
            vec![7, 8, EOS],
        ];
        let mut predicted = expected.clone();
        assert_eq!(exact_match(&predicted, &expected), 1.0);
        predicted[1][2] = 0; // no end token: wrong
        predicted[3][0] = 8;
        assert_eq!(exact_match(&predicted, &expected), 0.5);
        assert_eq!(exact_match(&[], &[]), 0.0);
    }

    #[test]
    #[should_panic(expected = "score takes examples of one length")]
    fn score_refuses_a_batch_of_mixed_lengths() {
        let device = Device::flex();
        let model = StudyConfig::new()
            .with_d_model(16)
            .with_n_blocks(1)
            .model_config(Task::Copy, Scheme::Alibi)
            .init(&device);
        let mut rng = SplitMix64::new(1);
        let examples = [
            Task::Copy.example(2, &mut rng),
            Task::Copy.example(3, &mut rng),
        ];
        let _ = score(&model, &examples, &device);
    }
}
