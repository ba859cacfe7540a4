//! The dog-bites-man demo of `burn-positional` (its measurements in [`dog_bites_man`], printed by
//! `examples/dog_bites_man.rs` and checked by the top-level `tests/dog_bites_man.rs`), its
//! picture version (measurements in [`pictures`], printed by
//! `examples/dog_bites_man_pictures.rs`, checked by `tests/dog_bites_man_pictures.rs`; the task
//! is [`red_left_of_blue`], the model a tiny [`vit`]) and what the other examples, benches and
//! tests share: choosing a device by name ([`device`]), every
//! scheme by name ([`schemes`]), a task only order can solve ([`who_bites_whom`]) and a tiny
//! model for it ([`classifier`]), the body every example model shares ([`encoder`]), and a
//! seeded generator ([`rng`]). Not published.
//!
//! The library itself is the `burn-positional` crate; these modules use it exactly as a user's
//! crate would. The studies (training on burn-train, the properties report, length
//! generalization) are the `burn-positional-studies` crate.

pub mod classifier;
pub mod device;
pub mod dog_bites_man;
pub mod encoder;
pub mod pictures;
pub mod red_left_of_blue;
pub mod rng;
pub mod schemes;
pub mod vit;
pub mod who_bites_whom;

// The library's items, for the modules above (`crate::EmbeddingWithPosition`, ...).
use burn_positional::*;

/// The README's Rust blocks, compiled and run as doc-tests: a snippet that stops compiling or
/// panics fails `cargo test`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guide's Rust blocks (`docs/*.md`) that use the library and this crate, compiled and run
/// as doc-tests, one page each. The studies' pages are doc-tested by `burn-positional-studies`.
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
    #[doc = include_str!("../docs/layout.md")]
    pub struct Layout;
    #[doc = include_str!("../docs/hf-rope.md")]
    pub struct HfRope;
    #[doc = include_str!("../docs/images.md")]
    pub struct Images;
}

/// The guide's page on pretrained weights, doc-tested with the `pretrained` feature
/// (`cargo test -p burn-positional-examples --doc --features pretrained`).
#[cfg(all(doctest, feature = "pretrained"))]
#[doc = include_str!("../docs/pretrained.md")]
pub struct PretrainedDoctests;

/// Compile-time: the example models can be shared by threads and cloned into burn-train's
/// workers.
const _: () = {
    const fn shared<T: Send + Sync + Clone + 'static>() {}
    shared::<classifier::SequenceClassifier>();
    shared::<encoder::Encoder>();
    shared::<vit::Vit>();
};
