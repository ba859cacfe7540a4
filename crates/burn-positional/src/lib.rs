#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub use burn_positional_layer::*;
