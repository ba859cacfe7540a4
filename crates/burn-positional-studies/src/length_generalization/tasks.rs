//! The four tasks, their tokens and their examples: [`Task`], [`Example`], [`TaskDataset`].

use burn::data::dataset::{Dataset, DatasetError};
use serde::{Deserialize, Serialize};

use crate::rng::SplitMix64;

/// Digits are tokens `0..=9`.
pub const DIGITS: i64 = 10;
/// Starts every sequence (`^`).
pub const BOS: i64 = 10;
/// Ends the prompt (`=`).
pub const SEP: i64 = 11;
/// Between the two numbers of an addition (`+`).
pub const PLUS: i64 = 12;
/// Ends the answer (`$`).
pub const EOS: i64 = 13;
/// Pads a batch's shorter sequences, and marks the targets that are not trained.
pub const PAD: i64 = 14;
/// Token ids lie in `0..VOCAB`.
pub const VOCAB: usize = 15;

/// A synthetic task; see the [module docs](super).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Task {
    /// Repeat the digits.
    Copy,
    /// The digits in reverse order.
    Reverse,
    /// The digits in ascending order.
    Sort,
    /// The sum of two `n`-digit numbers, least significant digit first, `n + 1` digits.
    Addition,
}

/// One example: the prompt (from `^` to `=`) and the answer (ended by `$`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// `^ digits... =`.
    pub prompt: Vec<i64>,
    /// `answer digits... $`.
    pub answer: Vec<i64>,
}

impl Task {
    /// Every task.
    pub const ALL: [Task; 4] = [Task::Copy, Task::Reverse, Task::Sort, Task::Addition];

    /// The task's name, as in the tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Copy => "copy",
            Self::Reverse => "reverse",
            Self::Sort => "sort",
            Self::Addition => "addition",
        }
    }

    /// Tokens of the prompt for length `n`, `^` and `=` included.
    pub fn prompt_len(self, n: usize) -> usize {
        match self {
            Self::Addition => 2 * n + 3,
            _ => n + 2,
        }
    }

    /// Tokens of the answer for length `n`, `$` included.
    pub fn answer_len(self, n: usize) -> usize {
        match self {
            Self::Addition => n + 2,
            _ => n + 1,
        }
    }

    /// Tokens a model reads for length `n`: the prompt and the answer but its last token (`$`
    /// is predicted, never read). A learned table needs this many rows.
    pub fn model_len(self, n: usize) -> usize {
        self.prompt_len(n) + self.answer_len(n) - 1
    }

    /// An example of length `n` (digits per number) drawn from `rng`.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn example(self, n: usize, rng: &mut SplitMix64) -> Example {
        assert!(n > 0, "a task needs at least one digit");
        let mut digits = |count: usize| -> Vec<i64> {
            (0..count)
                .map(|_| rng.below(DIGITS as u64) as i64)
                .collect()
        };
        let (prompt_digits, mut answer) = match self {
            Self::Copy => {
                let x = digits(n);
                (x.clone(), x)
            }
            Self::Reverse => {
                let x = digits(n);
                (x.clone(), x.iter().rev().copied().collect())
            }
            Self::Sort => {
                let x = digits(n);
                let mut sorted = x.clone();
                sorted.sort_unstable();
                (x, sorted)
            }
            Self::Addition => {
                let (a, b) = (digits(n), digits(n));
                // Least significant digit first: place i of both, plus the carry.
                let mut sum = Vec::with_capacity(n + 1);
                let mut carry = 0;
                for i in 0..n {
                    let s = a[i] + b[i] + carry;
                    sum.push(s % 10);
                    carry = s / 10;
                }
                sum.push(carry);
                let mut prompt = a;
                prompt.push(PLUS);
                prompt.extend(b);
                (prompt, sum)
            }
        };
        let mut prompt = vec![BOS];
        prompt.extend(prompt_digits);
        prompt.push(SEP);
        answer.push(EOS);
        Example { prompt, answer }
    }

    /// `count` examples of length `n`, drawn from `seed`.
    pub fn examples(self, n: usize, count: usize, seed: u64) -> Vec<Example> {
        let mut rng = SplitMix64::new(seed);
        (0..count).map(|_| self.example(n, &mut rng)).collect()
    }
}

impl std::str::FromStr for Task {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == name.to_ascii_lowercase())
            .ok_or_else(|| {
                format!("unknown task {name:?}: choose one of copy, reverse, sort, addition")
            })
    }
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The training set of a task: item `i` has a length drawn uniformly from `1..=max_n` and its
/// digits, all from `seed` and `i` alone.
#[derive(Debug, Clone)]
pub struct TaskDataset {
    /// The task.
    pub task: Task,
    /// Longest length drawn (the training length `L`).
    pub max_n: usize,
    /// Examples.
    pub len: usize,
    /// Seed of the whole set.
    pub seed: u64,
}

impl Dataset<Example> for TaskDataset {
    /// # Panics
    ///
    /// If `index >= len` (burn's `Dataset` convention).
    fn get(&self, index: usize) -> Result<Example, DatasetError> {
        assert!(
            index < self.len,
            "index {index} is past the dataset's {} examples",
            self.len
        );
        let mut rng = SplitMix64::new(
            self.seed
                .wrapping_mul(0x2545_F491_4F6C_DD1D)
                .wrapping_add(index as u64),
        );
        let n = 1 + rng.below(self.max_n as u64) as usize;
        Ok(self.task.example(n, &mut rng))
    }

    fn len(&self) -> usize {
        self.len
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn digits_of(tokens: &[i64]) -> Vec<i64> {
        tokens.iter().copied().filter(|t| *t < DIGITS).collect()
    }

    #[test]
    fn every_example_is_right_and_as_long_as_asked() {
        let mut rng = SplitMix64::new(3);
        for task in Task::ALL {
            for n in 1..=24 {
                for _ in 0..20 {
                    let e = task.example(n, &mut rng);
                    assert_eq!(e.prompt.len(), task.prompt_len(n), "{task} n {n}");
                    assert_eq!(e.answer.len(), task.answer_len(n), "{task} n {n}");
                    assert_eq!((e.prompt[0], *e.prompt.last().unwrap()), (BOS, SEP));
                    assert_eq!(*e.answer.last().unwrap(), EOS);
                    let x = digits_of(&e.prompt);
                    let y = digits_of(&e.answer);
                    match task {
                        Task::Copy => assert_eq!(y, x),
                        Task::Reverse => assert_eq!(y, x.iter().rev().copied().collect::<Vec<_>>()),
                        Task::Sort => {
                            let mut sorted = x.clone();
                            sorted.sort();
                            assert_eq!(y, sorted);
                        }
                        Task::Addition => {
                            // Both numbers and the sum read least significant digit first;
                            // checked with u128 arithmetic on the numbers themselves.
                            assert_eq!(e.prompt[n + 1], PLUS);
                            let value = |d: &[i64]| {
                                d.iter().rev().fold(0u128, |acc, &d| acc * 10 + d as u128)
                            };
                            let (a, b) = x.split_at(n);
                            assert_eq!(value(&y), value(a) + value(b), "{e:?}");
                        }
                    }
                }
            }
        }
    }
}
