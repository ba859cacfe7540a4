//! [`PretrainedError`]: why a checkpoint was not loaded.

use thiserror::Error;

use super::shape_fix;

/// Why a checkpoint was not loaded. The module is unchanged whenever one is returned.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum PretrainedError {
    /// The file cannot be opened.
    #[error(
        "cannot open the checkpoint {path}: {detail}. Fix: check the path (transformers saves \
         `model.safetensors` or `pytorch_model.bin` in the model's folder)"
    )]
    FileNotFound {
        /// The path given.
        path: String,
        /// The operating system's reason.
        detail: String,
    },

    /// The extension names no format burn's stores read.
    #[error(
        "cannot tell the format of the checkpoint {path} from its extension: expected \
         .safetensors (SafetensorsStore) or .bin, .pt, .pth (PytorchStore). Fix: give the file \
         its format's extension"
    )]
    UnknownFormat {
        /// The path given.
        path: String,
    },

    /// burn's store could not read the file.
    #[error(
        "cannot read the checkpoint {path} as {format}: {detail}. Fix: check that the file is \
         complete and of that format (a Git LFS pointer is not the file: run `git lfs pull`)"
    )]
    Unreadable {
        /// The path given.
        path: String,
        /// The format tried: `safetensors` or `PyTorch`.
        format: &'static str,
        /// burn's message.
        detail: String,
    },

    /// Tensors the checkpoint must hold are not in the file. When none of them is, the file is
    /// probably another model's (or the other T5 stack's).
    #[error(
        "the checkpoint {path} has no {missing} ({checkpoint} tensors); it has {found_count} \
         tensors{found}. Fix: give a {checkpoint} checkpoint, or the loader of the model this \
         file is from",
        missing = missing.join(" and no "),
        found = found_names(.found, *.found_count)
    )]
    MissingTensors {
        /// The checkpoint kind asked for (`GPT-2`, `BERT`, `T5 encoder`, `T5 decoder`).
        checkpoint: &'static str,
        /// The path given.
        path: String,
        /// One entry per tensor not found: the keys looked for, joined by ` or `.
        missing: Vec<String>,
        /// The first keys the file does hold (at most 8).
        found: Vec<String>,
        /// How many tensors the file holds.
        found_count: usize,
    },

    /// A tensor's shape differs from the module's field.
    #[error(
        "the tensor {key} in {path} has shape {found:?}, but the module's `{module_path}` has \
         shape {expected:?}. Fix: {fix}",
        fix = shape_fix(module_path, found)
    )]
    ShapeMismatch {
        /// The path given.
        path: String,
        /// The tensor's key in the checkpoint.
        key: String,
        /// The field it was to load into.
        module_path: &'static str,
        /// The field's shape.
        expected: Vec<usize>,
        /// The tensor's shape.
        found: Vec<usize>,
    },

    /// A tensor's dtype differs from the module's field and is not a float the loader
    /// converts (burn's store would load it as it is, leaving a module of two dtypes).
    #[error(
        "the tensor {key} in {path} is {found}, but the module's `{module_path}` is {expected}. \
         Fix: build the module in {found} (set the device's default float dtype), or convert \
         the checkpoint to {expected}"
    )]
    DTypeMismatch {
        /// The path given.
        path: String,
        /// The tensor's key in the checkpoint.
        key: String,
        /// The field it was to load into.
        module_path: &'static str,
        /// The field's dtype.
        expected: String,
        /// The tensor's dtype.
        found: String,
    },

    /// The module has no field for a tensor of this checkpoint, or computes something else.
    #[error("{checkpoint} cannot load into this module: {detail}. Fix: {fix}")]
    ModuleMismatch {
        /// The checkpoint kind.
        checkpoint: &'static str,
        /// What the module lacks.
        detail: String,
        /// The config that fits.
        fix: String,
    },

    /// burn's store refused the load after the checks passed (a read error midway).
    #[error("loading {path} failed: {detail}. Fix: check that the file is complete")]
    LoadFailed {
        /// The path given.
        path: String,
        /// burn's message.
        detail: String,
    },
}

fn found_names(found: &[String], count: usize) -> String {
    if found.is_empty() {
        return String::new();
    }
    let more = if count > found.len() { ", ..." } else { "" };
    format!(": {}{more}", found.join(", "))
}
