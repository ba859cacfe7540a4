//! The positional layer of a transformer for burn. This facade re-exports
//! [`burn_positional_layer`] and adds what the examples share: [`device`] (choosing a device by
//! name), [`who_bites_whom`] (a task only order can solve) and [`classifier`] (a tiny model for
//! it).

pub mod classifier;
pub mod device;
pub mod who_bites_whom;

pub use burn_positional_layer::*;
