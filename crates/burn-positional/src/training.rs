//! What a training loop needs beside the layer: every parameter drawn inside `init`
//! ([`materialize`]), and saved records read up front ([`read_record`]).
//!
//! # Drawing every parameter inside `init`
//!
//! burn's initializers are lazy: `Initializer::init` returns a `Param` whose values are drawn
//! from the device's random generator the first time it is read, not when it is built. So
//! `device.seed(s); let a = config.init(&device); device.seed(s); let b = config.init(&device);`
//! gives `a` and `b` different tables as soon as anything is read out of order. Our `init`s
//! call [`materialize`] before returning, so the draw happens in `init`, in field order, and a
//! seed followed by `init` fixes every parameter whatever draws random numbers afterwards.

use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;

/// Draws every lazily initialized parameter of `module` now, in the module's field order, and
/// returns it. Nothing is read back from the device: each draw is queued like any other
/// operation. Already drawn parameters are untouched.
///
/// Our own `init`s already do this; call it on a model of yours right after building it
/// (under the same seed) for the same guarantee about burn's layers (`Linear`, `LayerNorm`...).
///
/// # Shapes
///
/// Unchanged: the module is returned as it was given, every parameter drawn.
///
/// # Panics
///
/// Never.
///
/// # Example
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::prelude::*;
///
/// let device = Device::flex();
/// device.seed(7);
/// let a = burn_positional::training::materialize(LinearConfig::new(4, 3).init(&device));
/// device.seed(7);
/// let b = burn_positional::training::materialize(LinearConfig::new(4, 3).init(&device));
/// // Read in the "wrong" order: b first. Without `materialize`, the two would differ.
/// let (wb, wa) = (b.weight.val(), a.weight.val());
/// assert_eq!(wa.dims(), [4, 3]);
/// assert_eq!(wa.into_data(), wb.into_data());
/// ```
pub fn materialize<M: Module>(module: M) -> M {
    module.visit(&mut Draw);
    module
}

struct Draw;

impl ModuleVisitor for Draw {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let _ = param.base();
    }

    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<D, Int>>) {
        let _ = param.base();
    }

    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<D, Bool>>) {
        let _ = param.base();
    }
}

/// Reads a burnpack record (`.bpk`) into memory.
///
/// burn's `ModuleRecord::load` keeps tensor data file-backed and reads it lazily, on wgpu as
/// queued work: overwrite or delete the file before that work runs (as a training loop does
/// when it resumes from a checkpoint and later writes the next one to the same path) and the
/// load fails later, far from its cause. Reading the bytes up front removes the hazard.
pub fn read_record(
    path: impl AsRef<std::path::Path>,
) -> Result<burn::store::ModuleRecord, burn::store::RecordError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path)
        .map_err(|err| burn::store::RecordError::Io(format!("{}: {err}", path.display())))?;
    burn::store::ModuleRecord::from_bytes(burn::tensor::Bytes::from_bytes_vec(bytes))
}

pub(crate) fn record_detail(err: burn::store::RecordError) -> String {
    match err {
        burn::store::RecordError::Io(msg) | burn::store::RecordError::Validation(msg) => msg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AbsolutePositionConfig, EmbeddingWithPositionConfig, SelfAttentionConfig};

    /// Seed, init A, seed, init B, then read B before A: equal only if `init` drew the values.
    #[test]
    fn seed_then_init_fixes_every_parameter_whatever_is_read_first() {
        let device = Device::flex();
        let build = || {
            EmbeddingWithPositionConfig::new(20, 8)
                .with_scheme(AbsolutePositionConfig::Learned(crate::LearnedConfig::new(
                    12,
                )))
                .init(&device)
        };
        device.seed(42);
        let a = build();
        device.seed(42);
        let b = build();
        let _ = Tensor::<2>::random([5, 5], burn::tensor::Distribution::Default, &device);
        let read = |m: &crate::EmbeddingWithPosition| {
            let mut values = Vec::new();
            m.visit(&mut Collect(&mut values));
            values
        };
        let (vb, va) = (read(&b), read(&a));
        assert_eq!(va.len(), 20 * 8 + 12 * 8);
        assert_eq!(va, vb);

        let build = || {
            SelfAttentionConfig::new(8, 2)
                .with_score_bias(Some(crate::ScoreBiasConfig::T5(crate::T5BiasConfig::new(
                    2,
                ))))
                .init(&device)
        };
        device.seed(3);
        let a = build();
        device.seed(3);
        let b = build();
        let _ = Tensor::<2>::random([5, 5], burn::tensor::Distribution::Default, &device);
        let read = |m: &crate::SelfAttention| {
            let mut values = Vec::new();
            m.visit(&mut Collect(&mut values));
            values
        };
        let (vb, va) = (read(&b), read(&a));
        assert!(va.len() > 4 * 8 * 8, "{}", va.len());
        assert_eq!(va, vb);
    }

    struct Collect<'a>(&'a mut Vec<f32>);

    impl ModuleVisitor for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0.extend(param.val().into_data().iter::<f32>());
        }
    }
}
