//! Studies of `burn-positional`'s schemes (not published): the training example's task, model,
//! config and run on burn-train ([`copy_back`], [`tagger`], [`training`], [`learner`], with
//! crash-safe checkpoints in [`checkpoint`]), the measured properties of every scheme
//! ([`properties`]), and the length-generalization study of decoder-only models
//! ([`length_generalization`]).
//!
//! Built on the demo crate's shared parts (`burn_positional_examples`: devices, schemes by
//! name, the encoder every example model shares).

pub mod checkpoint;
pub mod copy_back;
pub mod learner;
pub mod length_generalization;
pub mod properties;
pub mod tagger;
pub mod training;

// The library's items and the shared parts, for the modules above (`crate::PositionError`,
// `crate::encoder::Encoder`, ...).
use burn_positional::*;
use burn_positional_examples::{encoder, rng, schemes};

/// The guide's pages on the studies (`docs/*.md`), their Rust blocks compiled and run as
/// doc-tests.
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../../../docs/training.md")]
    pub struct Training;
    #[doc = include_str!("../../../docs/measurements.md")]
    pub struct Measurements;
    #[doc = include_str!("../../../docs/length-generalization.md")]
    pub struct LengthGeneralization;
}

/// Compile-time: the study models can be shared by threads and cloned into burn-train's
/// workers.
const _: () = {
    const fn shared<T: Send + Sync + Clone + 'static>() {}
    shared::<length_generalization::LanguageModel>();
    shared::<tagger::TokenTagger>();
};
