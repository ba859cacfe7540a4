//! Train short, test long: decoder-only models trained with teacher forcing on four synthetic
//! tasks at lengths up to `L`, scored by greedy decoding (exact match) at `L`, `1.5L`, `2L` and
//! `3L`, for every position scheme (and RoPE with a context extension applied at test time).
//!
//! The tasks ([`Task`]) put a string of `n` digits (two for addition) after a start token and
//! ask for an answer after `=`, ended by an end token:
//!
//! | task | prompt | answer | what position has to do |
//! | --- | --- | --- | --- |
//! | copy | `^ 3 1 4 =` | `3 1 4 $` | point at the digit `n + 1` places back |
//! | reverse | `^ 3 1 4 =` | `4 1 3 $` | point at a place mirrored around `=` |
//! | sort | `^ 3 1 4 =` | `1 3 4 $` | count: how many of each digit, and how many written |
//! | addition | `^ 3 1 + 4 5 =` | `7 6 0 $` | align digit `i` of both numbers, carry |
//!
//! Addition writes every number least significant digit first (31 + 45 is 13 + 54 = 67,
//! written `7 6 0`), so the digit of each place depends only on that place and the carry from
//! the one before: the format of Lee et al. 2023 ("Teaching Arithmetic to Small Transformers")
//! that small models learn, and the one Kazemnejad et al. 2023 (appendix) use for addition.
//!
//! A model ([`LanguageModel`]) is this crate's [`Encoder`](crate::encoder::Encoder) with causal
//! blocks and a head over the vocabulary; training is burn-train's `SupervisedTraining` with a
//! checkpoint at every epoch, resumed from the last complete one ([`train_cell`]). Decoding
//! ([`greedy`]) feeds each predicted token back on the device through a
//! [`KvCache`](crate::KvCache) per block, and reads the answers back once at the end. [`run_study`] runs the grid, resumes at the cell it stopped
//! in, and writes the tables ([`StudyResults::markdown`], JSON) and the figure.
//!
//! One file per reason to change: `tasks` (tasks and their data), `batcher`, `model`,
//! `decoding`, `study` (the config and result types), `train` (one cell), `grid` (the study),
//! `report` (tables and files).

mod batcher;
mod decoding;
mod grid;
mod model;
mod report;
mod study;
mod tasks;
mod train;

pub use crate::rng::SplitMix64;
pub use batcher::{LmBatch, LmBatcher};
pub use decoding::{exact_match, greedy, score};
pub use grid::run_study;
pub use model::{LanguageModel, LanguageModelConfig};
pub use report::{mean_and_std, summarize};
pub use study::{
    CellResult, Measurement, Progress, SCHEMES, StudyConfig, StudyResults, Summary, Variant,
};
pub use tasks::{BOS, DIGITS, EOS, Example, PAD, PLUS, SEP, Task, TaskDataset, VOCAB};
pub use train::{run_cell, train_cell};
