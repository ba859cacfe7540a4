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
    /// A `config.json` setting transformers accepts that a port does not take (DINOv2's
    /// SwiGLU feed-forward, a patch grid that is not square).
    #[error("{path}: `{field}` = {value}: {reason}. Fix: {fix}")]
    UnportedSetting {
        /// The file.
        path: String,
        /// The field, as transformers names it.
        field: &'static str,
        /// The value found.
        value: String,
        /// Why the port does not take it.
        reason: String,
        /// What to do.
        fix: String,
    },
    /// Images a vision port cannot read (another number of channels than the model's, an image
    /// smaller than one patch), refused by their shape before anything runs.
    #[error(
        "pixel_values of shape {shape:?} ([batch, channels, height, width]): {problem}. Fix: {fix}"
    )]
    PixelValues {
        /// The shape given.
        shape: [usize; 4],
        /// What does not fit, with the value and the limit.
        problem: String,
        /// What to do.
        fix: String,
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
    /// A `tokenizer.json` that cannot be read, or text or ids it refuses.
    #[error(
        "{path}: {detail}. Fix: use the tokenizer.json saved with this checkpoint (tokenizers' format)"
    )]
    Tokenizer {
        /// The file.
        path: String,
        /// The tokenizer's reason.
        detail: String,
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

/// Why generation refused to start: a setting out of range, or a prompt the model cannot read.
/// Checked on the host before anything runs on the device.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// A generation setting outside the range transformers accepts.
    #[error("{source_name}: `{field}` = {value} is out of range: {allowed}. Fix: {fix}")]
    Setting {
        /// Where the value came from (a generation_config.json, config.json, or "options").
        source_name: String,
        /// The field, as transformers names it.
        field: &'static str,
        /// The value found.
        value: String,
        /// The values allowed.
        allowed: String,
        /// What to do.
        fix: &'static str,
    },
    /// A prompt token the model's token table has no row for.
    #[error(
        "prompt row {row}, column {column}: token id {id} is outside the vocabulary of \
         {vocab_size} ids (0..={}). Fix: encode the prompt with this checkpoint's tokenizer",
        vocab_size.saturating_sub(1)
    )]
    PromptToken {
        /// The id.
        id: i64,
        /// The prompt (its index in the batch).
        row: usize,
        /// The place in that prompt (before padding).
        column: usize,
        /// The model's vocabulary size.
        vocab_size: usize,
    },
    /// A special token the model would be fed (padding, the decoder's start) outside the
    /// vocabulary.
    #[error(
        "`{field}` = {id} is outside the vocabulary of {vocab_size} ids (0..={}): the model \
         would read it as input. Fix: set `{field}` to an id of this checkpoint's tokenizer \
         (its generation_config.json or config.json has it)",
        vocab_size.saturating_sub(1)
    )]
    SpecialToken {
        /// The setting (`pad_token_id`, `decoder_start_token_id`).
        field: &'static str,
        /// The id.
        id: i64,
        /// The model's vocabulary size.
        vocab_size: usize,
    },
    /// An empty batch or an empty prompt.
    #[error(
        "generate: every prompt needs at least one token, got lengths {lengths:?}. Fix: drop \
         empty prompts (or start them with the model's BOS token)"
    )]
    EmptyPrompt {
        /// The prompts' lengths.
        lengths: Vec<usize>,
    },
    /// The prompt and the new tokens need positions the model has no weights for.
    #[error(
        "generate: the longest prompt ({longest} tokens) and {max_new_tokens} new tokens need \
         positions up to {}, the model has weights for {limit} (n_positions). Fix: at most {} \
         new tokens, or a shorter prompt",
        needed - 1,
        (limit + 1).saturating_sub(*longest)
    )]
    PositionLimit {
        /// The longest prompt's length.
        longest: usize,
        /// The new tokens asked for.
        max_new_tokens: usize,
        /// Positions needed.
        needed: usize,
        /// Positions the model has.
        limit: usize,
    },
    /// generation_config.json (or config.json) could not be read (boxed: a reading error is
    /// large and rare).
    #[error(transparent)]
    Model(Box<ModelError>),
}

impl From<ModelError> for GenerateError {
    fn from(err: ModelError) -> Self {
        Self::Model(Box::new(err))
    }
}
