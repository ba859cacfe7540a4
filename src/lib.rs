//! What the examples, benches and tests of `burn-positional` share (not published): choosing a
//! device by name ([`device`]), every scheme by name ([`schemes`]), a task only order can
//! solve ([`who_bites_whom`]) and a tiny model for it ([`classifier`]), the body both models
//! share ([`encoder`]), the training example's task, model, config and run on burn-train
//! ([`copy_back`], [`tagger`], [`training`], [`learner`], with crash-safe checkpoints in
//! [`checkpoint`]), the measured properties ([`properties`]), and the length-generalization
//! study of decoder-only models ([`length_generalization`]).
//!
//! The library itself is the `burn-positional` crate; these modules use it exactly as a user's
//! crate would.

pub mod checkpoint;
pub mod classifier;
pub mod copy_back;
pub mod device;
pub mod encoder;
pub mod learner;
pub mod length_generalization;
pub mod properties;
pub mod rng;
pub mod schemes;
pub mod tagger;
pub mod training;
pub mod who_bites_whom;

// The library's items, for the modules above (`crate::EmbeddingWithPosition`, ...).
use burn_positional::*;

/// The README's Rust blocks, compiled and run as doc-tests: a snippet that stops compiling or
/// panics fails `cargo test`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guide's Rust blocks (`docs/*.md`), compiled and run as doc-tests, one page each.
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../docs/dog-bites-man.md")]
    pub struct DogBitesMan;
    #[doc = include_str!("../docs/schemes.md")]
    pub struct Schemes;
    #[doc = include_str!("../docs/attention.md")]
    pub struct Attention;
    #[doc = include_str!("../docs/bad-input.md")]
    pub struct BadInput;
    #[doc = include_str!("../docs/reliability.md")]
    pub struct Reliability;
    #[doc = include_str!("../docs/performance.md")]
    pub struct Performance;
    #[doc = include_str!("../docs/training.md")]
    pub struct Training;
    #[doc = include_str!("../docs/measurements.md")]
    pub struct Measurements;
    #[doc = include_str!("../docs/length-generalization.md")]
    pub struct LengthGeneralization;
    #[doc = include_str!("../docs/layout.md")]
    pub struct Layout;
}

/// Compile-time: the example models can be shared by threads and cloned into burn-train's
/// workers.
const _: () = {
    const fn shared<T: Send + Sync + Clone + 'static>() {}
    shared::<classifier::SequenceClassifier>();
    shared::<encoder::Encoder>();
    shared::<length_generalization::LanguageModel>();
    shared::<tagger::TokenTagger>();
};
