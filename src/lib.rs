//! The positional layer of a transformer for burn. This facade re-exports
//! [`burn_positional_layer`] and adds [`device`], a way to choose a device by name.

pub mod device;

pub use burn_positional_layer::*;
