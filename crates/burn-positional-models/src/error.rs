//! [`ModelError`]: what can go wrong between a checkpoint folder and a model, each naming the
//! file, the key or value, and the fix.

use burn_positional::pretrained::PretrainedError;
use burn_positional::{HfConfigError, PositionError};

/// Why a checkpoint could not be opened, read or loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A file of the checkpoint folder could not be read.
    #[error(
        "cannot read {path}: {detail}. Fix: point at a folder holding the checkpoint's config.json and model.safetensors"
    )]
    Io {
        /// The file.
        path: String,
        /// The system's reason.
        detail: String,
    },
    /// `config.json` is not valid JSON or a field has the wrong type.
    #[error("{path}: {detail}. Fix: use the config.json transformers wrote for this checkpoint")]
    Config {
        /// The file.
        path: String,
        /// What is wrong, with the field.
        detail: String,
    },
    /// A `model_type` this crate has no port for.
    #[error(
        "model_type \"{model_type}\" in {path} has no port here; supported: {supported}. Fix: convert the checkpoint to one of these families, or port it on burn-positional as docs/porting.md shows"
    )]
    Unsupported {
        /// The model type found.
        model_type: String,
        /// The file.
        path: String,
        /// The supported model types.
        supported: String,
    },
    /// A tensor the model needs is not in the weights file.
    #[error(
        "{file} has no tensor `{key}` (for the port's `{module_path}`). Fix: use the model.safetensors saved with this config.json{near}"
    )]
    MissingTensor {
        /// The transformers key looked for.
        key: String,
        /// The port's field it goes to.
        module_path: String,
        /// The weights file.
        file: String,
        /// Keys of the file that look close, if any.
        near: String,
    },
    /// A tensor has another shape than the config implies.
    #[error(
        "{file}: tensor `{key}` has shape {found:?}, the config.json implies {expected:?} (the port's `{module_path}`, in transformers' layout). Fix: the config.json and model.safetensors must come from the same checkpoint"
    )]
    ShapeMismatch {
        /// The transformers key.
        key: String,
        /// The port's field.
        module_path: String,
        /// The weights file.
        file: String,
        /// The shape the config implies, in the file's layout.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// burn's store failed to read the weights file.
    #[error(
        "{file}: {detail}. Fix: the file must be a safetensors file (model.safetensors) written by transformers"
    )]
    Store {
        /// The weights file.
        file: String,
        /// burn's message.
        detail: String,
    },
    /// A token type id (BERT's `token_type_ids`) outside the model's table.
    #[error(
        "token type id {id} at [batch {}, index {}] is outside 0..{type_vocab_size} (type_vocab_size in config.json). Fix: use segment ids the model was trained with (0 and 1 for BERT), as its tokenizer writes them",
        at[0], at[1]
    )]
    TokenType {
        /// The id.
        id: i64,
        /// Its place: `[batch, index along seq]`.
        at: [usize; 2],
        /// Rows of the token type table.
        type_vocab_size: usize,
    },
    /// A compute dtype the device cannot run.
    #[error(
        "{device} cannot compute in {dtype} (loading {file}): it lacks {dtype} arithmetic or matrix products. Fix: load in float32 (`--dtype f32`, `Checkpoint::with_dtype(FloatDType::F32)`), or use a device that has {dtype} (flex on the CPU; a GPU with {dtype} through CUDA)"
    )]
    Dtype {
        /// The dtype asked for.
        dtype: String,
        /// The device.
        device: String,
        /// The weights file.
        file: String,
    },
    /// The rotary settings of config.json.
    #[error(transparent)]
    Rope(#[from] HfConfigError),
    /// A positional setting the layer refuses.
    #[error(transparent)]
    Position(#[from] PositionError),
    /// Position weights through the layer's `pretrained` loaders.
    #[error(transparent)]
    Pretrained(#[from] PretrainedError),
}
