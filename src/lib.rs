//! The positional layer of a transformer for burn. This facade re-exports
//! [`burn_positional_layer`] and adds what the examples share: [`device`] (choosing a device by
//! name), [`who_bites_whom`] (a task only order can solve) [`classifier`] (a tiny model for
//! it), and the training example's task, model and loop: [`copy_back`], [`tagger`], [`training`].

pub mod classifier;
pub mod copy_back;
pub mod device;
pub mod encoder;
pub mod properties;
pub mod schemes;
pub mod tagger;
pub mod training;
pub mod who_bites_whom;

pub use burn_positional_layer::*;
