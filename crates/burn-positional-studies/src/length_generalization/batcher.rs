//! Teacher-forcing batches: [`LmBatch`] and [`LmBatcher`].

use burn::data::dataloader::batcher::Batcher;
use burn::prelude::*;

use super::{Example, PAD};

/// A batch for teacher forcing: `inputs` `[batch, seq]` are the examples' tokens but the last,
/// right-padded with [`PAD`]; `targets` `[batch, seq]` are the next tokens where they are
/// answer tokens, [`PAD`] elsewhere (the prompt is given, not predicted).
#[derive(Debug, Clone)]
pub struct LmBatch {
    /// `[batch, seq]`.
    pub inputs: Tensor<2, Int>,
    /// `[batch, seq]`.
    pub targets: Tensor<2, Int>,
}

/// Pads examples into an [`LmBatch`]. Padding sits after every real token, so in causal blocks
/// no real token sees it, and its targets are [`PAD`], which the loss skips.
#[derive(Debug, Clone, Copy, Default)]
pub struct LmBatcher;

impl LmBatcher {
    /// The inputs and targets of `items`, row-major, and the padded length.
    pub fn rows(items: &[Example]) -> (Vec<i64>, Vec<i64>, usize) {
        let seq = items
            .iter()
            .map(|e| e.prompt.len() + e.answer.len() - 1)
            .max()
            .unwrap_or(0);
        let (mut inputs, mut targets) = (Vec::new(), Vec::new());
        for example in items {
            let tokens: Vec<i64> = example
                .prompt
                .iter()
                .chain(&example.answer)
                .copied()
                .collect();
            let answer_from = example.prompt.len(); // index of the first answer token
            for i in 0..seq {
                inputs.push(if i + 1 < tokens.len() { tokens[i] } else { PAD });
                let next = i + 1;
                targets.push(if next >= answer_from && next < tokens.len() {
                    tokens[next]
                } else {
                    PAD
                });
            }
        }
        (inputs, targets, seq)
    }
}

impl Batcher<Example, LmBatch> for LmBatcher {
    fn batch(&self, items: Vec<Example>, device: &Device) -> LmBatch {
        let (inputs, targets, seq) = Self::rows(&items);
        let shape = [items.len(), seq];
        LmBatch {
            inputs: Tensor::from_data(TensorData::new(inputs, shape), device),
            targets: Tensor::from_data(TensorData::new(targets, shape), device),
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::length_generalization::{Task, TaskDataset};
    use burn::data::dataset::Dataset;

    #[test]
    fn the_dataset_draws_lengths_up_to_l_and_the_batcher_trains_only_answers() {
        let dataset = TaskDataset {
            task: Task::Reverse,
            max_n: 5,
            len: 400,
            seed: 9,
        };
        let items: Vec<Example> = (0..400).map(|i| dataset.get(i).unwrap()).collect();
        let lengths: Vec<usize> = items.iter().map(|e| e.prompt.len() - 2).collect();
        for n in 1..=5 {
            assert!(lengths.contains(&n), "length {n} drawn");
        }
        assert!(lengths.iter().all(|n| (1..=5).contains(n)));
        assert_eq!(
            items[7],
            dataset.get(7).unwrap(),
            "an item is a function of its index"
        );

        let (inputs, targets, seq) = LmBatcher::rows(&items[..3]);
        for (row, e) in items[..3].iter().enumerate() {
            let tokens: Vec<i64> = e.prompt.iter().chain(&e.answer).copied().collect();
            let input = &inputs[row * seq..(row + 1) * seq];
            let target = &targets[row * seq..(row + 1) * seq];
            assert_eq!(&input[..tokens.len() - 1], &tokens[..tokens.len() - 1]);
            assert!(input[tokens.len() - 1..].iter().all(|t| *t == PAD));
            // The trained targets are exactly the answer, predicted from `=` on.
            let trained: Vec<i64> = target.iter().copied().filter(|t| *t != PAD).collect();
            assert_eq!(trained, e.answer);
            assert_eq!(target[e.prompt.len() - 1], e.answer[0]);
        }
    }
}
