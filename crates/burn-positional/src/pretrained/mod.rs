//! Pretrained position weights from Hugging Face checkpoints (the `pretrained` feature): GPT-2's
//! and BERT's token and position tables into an [`EmbeddingWithPosition`], T5's relative
//! attention bias into a [`T5Bias`], from the `.safetensors`, `.bin`, `.pt` or `.pth` files
//! transformers writes.
//!
//! The loading is burn's own (`burn::store::SafetensorsStore`, `burn::store::PytorchStore`, with
//! key remapping onto our field paths); what this module adds is the names, so a caller never
//! needs our field paths, and a load that is all or nothing:
//!
//! - every tensor is checked (present, shape, dtype) before anything is applied (a float
//!   tensor of a safetensors file in another float dtype is converted to the module's on the
//!   host, as PyTorch's `load_state_dict` does; any other dtype is refused), and the
//!   tensors are applied to a clone that replaces the module only when all of them loaded: a
//!   failed load leaves the module as it was;
//! - a file that holds none of the expected tensors is an error (burn's store reports "0
//!   applied" and succeeds when nothing matches);
//! - a missing file is an error naming the path;
//! - a sharded checkpoint is read through its index (`model.safetensors.index.json`, passed
//!   as the path): each tensor from the shard its `weight_map` names.
//!
//! | checkpoint | transformers key | our module and field | call |
//! | --- | --- | --- | --- |
//! | GPT-2 | `transformer.wte.weight` or `wte.weight` | [`EmbeddingWithPosition`] `tokens` | [`gpt2`] |
//! | GPT-2 | `transformer.wpe.weight` or `wpe.weight` | [`EmbeddingWithPosition`] `position.Learned.table` | [`gpt2`] |
//! | BERT | `bert.embeddings.word_embeddings.weight` or `embeddings.word_embeddings.weight` | [`EmbeddingWithPosition`] `tokens` | [`bert`] |
//! | BERT | `bert.embeddings.position_embeddings.weight` or `embeddings.position_embeddings.weight` | [`EmbeddingWithPosition`] `position.Learned.table` | [`bert`] |
//! | T5 encoder | `encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight` | [`T5Bias`] `table` | [`t5`] with [`T5Stack::Encoder`] |
//! | T5 decoder | `decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight` | [`T5Bias`] `table` | [`t5`] with [`T5Stack::Decoder`] |
//!
//! The same tables are public as [`GPT2_KEYS`], [`BERT_KEYS`] and [`T5Stack::keys`], for a
//! caller who drives burn's stores directly.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use burn::store::{
    FloatCastAdapter, ModuleSnapshot, ModuleStore, PathFilter, PytorchStore, SafetensorsStore,
};
mod error;

pub use error::PretrainedError;

use crate::{AbsolutePosition, Combine, EmbeddingWithPosition, T5Bias};

/// One tensor a loader looks for: the keys a checkpoint may store it under (tried in order),
/// and the path of the field it goes to in our module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyMapping {
    /// The keys transformers writes for this tensor, the first found wins.
    pub checkpoint_keys: &'static [&'static str],
    /// The field's path in our module, as burn's stores name it (enum variants included).
    pub module_path: &'static str,
}

/// GPT-2's token table (`wte`) and learned position table (`wpe`), with the prefix
/// `GPT2LMHeadModel` and friends write (`transformer.`) or without it (`GPT2Model`).
pub const GPT2_KEYS: [KeyMapping; 2] = [
    KeyMapping {
        checkpoint_keys: &["transformer.wte.weight", "wte.weight"],
        module_path: "tokens",
    },
    KeyMapping {
        checkpoint_keys: &["transformer.wpe.weight", "wpe.weight"],
        module_path: "position.Learned.table",
    },
];

/// BERT's word and position embeddings, with the prefix the task models write (`bert.`) or
/// without it (`BertModel`). BERT's token-type embeddings and its LayerNorm are not part of the
/// positional layer and are left in the file.
pub const BERT_KEYS: [KeyMapping; 2] = [
    KeyMapping {
        checkpoint_keys: &[
            "bert.embeddings.word_embeddings.weight",
            "embeddings.word_embeddings.weight",
        ],
        module_path: "tokens",
    },
    KeyMapping {
        checkpoint_keys: &[
            "bert.embeddings.position_embeddings.weight",
            "embeddings.position_embeddings.weight",
        ],
        module_path: "position.Learned.table",
    },
];

const T5_ENCODER_KEYS: [KeyMapping; 1] = [KeyMapping {
    checkpoint_keys: &["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
    module_path: "table",
}];

const T5_DECODER_KEYS: [KeyMapping; 1] = [KeyMapping {
    checkpoint_keys: &["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
    module_path: "table",
}];

/// Which of T5's two relative-bias tables to load: T5 learns one for the encoder (used with
/// bidirectional buckets, `causal = false`) and one for the decoder's self-attention (causal
/// buckets, `causal = true`), each in the first block and shared by the stack's other blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum T5Stack {
    /// `encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight`.
    Encoder,
    /// `decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight`.
    Decoder,
}

impl T5Stack {
    /// The key of this stack's table and the field it goes to ([`T5Bias`]'s `table`).
    pub fn keys(self) -> &'static [KeyMapping] {
        match self {
            Self::Encoder => &T5_ENCODER_KEYS,
            Self::Decoder => &T5_DECODER_KEYS,
        }
    }

    /// The `causal` flag a block using this stack's table passes to [`T5Bias::bias`]: `false`
    /// for the encoder, `true` for the decoder.
    pub fn causal(self) -> bool {
        self == Self::Decoder
    }

    fn name(self) -> &'static str {
        match self {
            Self::Encoder => "T5 encoder",
            Self::Decoder => "T5 decoder",
        }
    }
}

/// What a load did: which checkpoint key went to which field, and the tensors of the file left
/// unused (the rest of the model).
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The file read.
    pub path: PathBuf,
    /// One entry per field loaded.
    pub tensors: Vec<LoadedTensor>,
    /// Keys in the file that were not loaded, in the file's (sorted) order.
    pub unused: Vec<String>,
}

/// One tensor loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedTensor {
    /// Its key in the checkpoint.
    pub key: String,
    /// The field it went to.
    pub module_path: &'static str,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its dtype, as burn names it (`F32`, `F16`, ...).
    pub dtype: String,
}

impl fmt::Display for Loaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}:", self.path.display())?;
        for t in &self.tensors {
            writeln!(
                f,
                "  {} {:?} {} -> {}",
                t.key, t.shape, t.dtype, t.module_path
            )?;
        }
        let n = self.unused.len();
        let s = if n == 1 { "" } else { "s" };
        write!(f, "  {n} other tensor{s} left in the file")
    }
}

/// Loads GPT-2's token table (`wte`) and position table (`wpe`) into `embedding`, from a
/// `.safetensors`, `.bin`, `.pt` or `.pth` file written by transformers (`GPT2Model`,
/// `GPT2LMHeadModel`, ...). All or nothing: on any error the module is unchanged.
///
/// Build the embedding as GPT-2 computes it: `vocab_size` and `d_model` from the checkpoint's
/// config (`vocab_size`, `n_embd`), a learned table of `n_positions` rows, [`Combine::Add`],
/// no token scaling. Its forward then equals transformers' `wte(ids) + wpe(positions)`.
///
/// # Shapes
///
/// - `transformer.wte.weight`: `[vocab_size, d_model]`
/// - `transformer.wpe.weight`: `[max_len, d_model]`
///
/// # Errors
///
/// [`PretrainedError`]: a missing file, an unknown extension, a file burn cannot read, a file
/// that lacks either table, a table of another shape than the module's or of a dtype that is
/// not float (a float table of another float dtype is converted to the module's on the host),
/// or a module that is not a learned, additive, unscaled embedding.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::pretrained;
/// use burn_positional::{EmbeddingWithPositionConfig, LearnedConfig};
///
/// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hf/pretrained/gpt2.safetensors");
/// let device = Device::flex();
/// // The tiny test checkpoint: vocab_size 50, n_embd 16, n_positions 32.
/// let mut embed = EmbeddingWithPositionConfig::new(50, 16)
///     .with_scheme(LearnedConfig::new(32).into())
///     .init(&device);
/// let loaded = pretrained::gpt2(&mut embed, path).unwrap();
/// assert_eq!(loaded.tensors[0].key, "transformer.wte.weight");
/// let ids = Tensor::<2, Int>::from_data([[3, 17, 42]], &device);
/// assert_eq!(embed.forward(ids).dims(), [1, 3, 16]);
/// ```
pub fn gpt2(
    embedding: &mut EmbeddingWithPosition,
    path: impl AsRef<Path>,
) -> Result<Loaded, PretrainedError> {
    check_embedding(embedding, "GPT-2", "n_positions")?;
    load(embedding, path.as_ref(), "GPT-2", &GPT2_KEYS)
}

/// Loads BERT's word embeddings and position embeddings into `embedding`, from a file written
/// by transformers (`BertModel`, or a task model whose keys start with `bert.`). All or
/// nothing: on any error the module is unchanged.
///
/// Build the embedding from the checkpoint's config: `vocab_size`, `hidden_size` as `d_model`,
/// a learned table of `max_position_embeddings` rows, [`Combine::Add`], no token scaling. Its
/// forward then equals `word_embeddings(ids) + position_embeddings(positions)`; BERT's
/// token-type embeddings and LayerNorm come after that sum and are not loaded.
///
/// # Shapes
///
/// - `embeddings.word_embeddings.weight`: `[vocab_size, d_model]`
/// - `embeddings.position_embeddings.weight`: `[max_len, d_model]`
///
/// # Errors
///
/// As [`gpt2`].
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::pretrained::{self, PretrainedError};
/// use burn_positional::{EmbeddingWithPositionConfig, LearnedConfig};
///
/// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hf/pretrained/bert.safetensors");
/// let device = Device::flex();
/// // The tiny test checkpoint has max_position_embeddings 64: a table of 512 rows does not fit.
/// let mut embed = EmbeddingWithPositionConfig::new(50, 32)
///     .with_scheme(LearnedConfig::new(512).into())
///     .init(&device);
/// let err = pretrained::bert(&mut embed, path).unwrap_err();
/// assert!(matches!(err, PretrainedError::ShapeMismatch { .. }));
/// assert!(err.to_string().contains("LearnedConfig::new(64)"));
/// ```
pub fn bert(
    embedding: &mut EmbeddingWithPosition,
    path: impl AsRef<Path>,
) -> Result<Loaded, PretrainedError> {
    check_embedding(embedding, "BERT", "max_position_embeddings")?;
    load(embedding, path.as_ref(), "BERT", &BERT_KEYS)
}

/// Loads one of T5's relative attention bias tables (the encoder's or the decoder's) into
/// `bias`. All or nothing: on any error the module is unchanged.
///
/// Build the table from the checkpoint's config: `T5BiasConfig::new(num_heads)` with
/// `relative_attention_num_buckets` and `relative_attention_max_distance`. The file holds no
/// `max_distance`, so a wrong one cannot be detected here: take it from `config.json`. Then
/// `bias.bias(offset, q_len, k_len, stack.causal())` equals transformers'
/// `compute_bias(q_len, k_len, past_seen_tokens=offset)`.
///
/// # Shapes
///
/// - `*.relative_attention_bias.weight`: `[num_buckets, n_heads]`
///
/// # Errors
///
/// [`PretrainedError`]: a missing file, an unknown extension, a file burn cannot read, a file
/// without this stack's table, a table of another shape, or of a dtype that is not float (a
/// float table is converted to the module's dtype on the host).
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::pretrained::{self, T5Stack};
/// use burn_positional::T5BiasConfig;
///
/// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hf/pretrained/t5.safetensors");
/// let device = Device::flex();
/// // The tiny test checkpoint: 4 heads, 32 buckets, max_distance 64.
/// let mut bias = T5BiasConfig::new(4).with_max_distance(64).init(&device);
/// pretrained::t5(&mut bias, T5Stack::Decoder, path).unwrap();
/// let causal = T5Stack::Decoder.causal();
/// assert_eq!(bias.bias(0, 5, 5, causal).dims(), [1, 4, 5, 5]);
/// ```
pub fn t5(
    bias: &mut T5Bias,
    stack: T5Stack,
    path: impl AsRef<Path>,
) -> Result<Loaded, PretrainedError> {
    load(bias, path.as_ref(), stack.name(), stack.keys())
}

/// Refuses an embedding that cannot compute `tokens[ids] + table[positions]`.
fn check_embedding(
    embedding: &EmbeddingWithPosition,
    checkpoint: &'static str,
    max_len_name: &str,
) -> Result<(), PretrainedError> {
    let mismatch = |detail: &str, fix: String| PretrainedError::ModuleMismatch {
        checkpoint,
        detail: detail.into(),
        fix,
    };
    if !matches!(embedding.position, AbsolutePosition::Learned(_)) {
        return Err(mismatch(
            "its positions are a learned table, and this embedding has none",
            format!(
                "build the embedding with `.with_scheme(LearnedConfig::new({max_len_name}).into())`"
            ),
        ));
    }
    if embedding.combine != Combine::Add {
        return Err(mismatch(
            "it adds token and position vectors, and this embedding concatenates them",
            "build the embedding with `Combine::Add` (the default)".into(),
        ));
    }
    if embedding.token_scale != 1.0 {
        return Err(mismatch(
            "it does not scale token vectors, and this embedding does",
            "build the embedding with `scale_tokens` off (the default)".into(),
        ));
    }
    Ok(())
}

/// The config change that makes the module's field take a tensor of shape `found`.
pub(crate) fn shape_fix(module_path: &str, found: &[usize]) -> String {
    match (module_path, found) {
        ("tokens", [vocab_size, d_model]) => format!(
            "build the embedding with `EmbeddingWithPositionConfig::new({vocab_size}, {d_model})` \
             (the checkpoint's vocabulary size and width)"
        ),
        ("position.Learned.table", [max_len, d_model]) => format!(
            "build the embedding with `LearnedConfig::new({max_len})` and d_model = {d_model} \
             (the checkpoint's number of positions and width)"
        ),
        ("table", [num_buckets, n_heads]) => format!(
            "build the table with `T5BiasConfig::new({n_heads}).with_num_buckets({num_buckets})` \
             (the checkpoint's num_heads and relative_attention_num_buckets)"
        ),
        _ => format!("build the module so that `{module_path}` has shape {found:?}"),
    }
}

/// One of burn's two stores, chosen by extension, set up to match our full field paths.
enum Store {
    Safetensors(SafetensorsStore),
    Pytorch(PytorchStore),
}

impl Store {
    fn open(path: &Path) -> Result<Self, PretrainedError> {
        let shown = path.display().to_string();
        std::fs::metadata(path).map_err(|err| PretrainedError::FileNotFound {
            path: shown.clone(),
            detail: err.to_string(),
        })?;
        let extension = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match extension.as_deref() {
            Some("safetensors") => Ok(Self::Safetensors(
                SafetensorsStore::from_file(path).skip_enum_variants(false),
            )),
            Some("bin" | "pt" | "pth") => Ok(Self::Pytorch(
                PytorchStore::from_file(path)
                    .skip_enum_variants(false)
                    .map_indices_contiguous(false),
            )),
            _ => Err(PretrainedError::UnknownFormat { path: shown }),
        }
    }

    fn format(&self) -> &'static str {
        match self {
            Self::Safetensors(_) => "safetensors",
            Self::Pytorch(_) => "PyTorch",
        }
    }

    /// Each tensor's key, shape and dtype, read from the file's header (no tensor data).
    fn header(&mut self) -> Result<BTreeMap<String, (Vec<usize>, String)>, String> {
        let summarize = |tensors: &BTreeMap<String, burn::store::burn_pack::Tensor>| {
            tensors
                .iter()
                .map(|(k, t)| (k.clone(), (t.shape.to_vec(), format!("{:?}", t.dtype))))
                .collect()
        };
        match self {
            Self::Safetensors(s) => s
                .get_all_tensors()
                .map(summarize)
                .map_err(|e| e.to_string()),
            Self::Pytorch(s) => s
                .get_all_tensors()
                .map(summarize)
                .map_err(|e| e.to_string()),
        }
    }

    /// Remaps `key` to `module_path`, loads only those paths, and applies them to `module`
    /// (partial: a sharded checkpoint applies each shard's part; the caller checks that every
    /// path was applied).
    /// Float tensors of another float dtype are converted to `float_dtype` on the host
    /// (safetensors only).
    fn apply<M: ModuleSnapshot>(
        self,
        module: &mut M,
        remaps: &[(String, &'static str)],
        float_dtype: Option<burn::tensor::DType>,
    ) -> Result<Vec<String>, String> {
        let filter = PathFilter::new().with_full_paths(remaps.iter().map(|(_, p)| *p));
        // Keys hold only [A-Za-z0-9_.]: escaping the dots makes each an exact match.
        let pattern = |key: &str| format!("^{}$", key.replace('.', r"\."));
        let result = match self {
            Self::Safetensors(mut s) => {
                s = s.filter(filter).allow_partial(true).validate(true);
                if let Some(dtype) = float_dtype {
                    s = s.with_from_adapter(FloatCastAdapter::to(dtype));
                }
                for (key, path) in remaps {
                    s = s.with_key_remapping(pattern(key), *path);
                }
                s.apply_to(module).map_err(|e| e.to_string())?
            }
            Self::Pytorch(mut s) => {
                s = s.filter(filter).allow_partial(true).validate(true);
                for (key, path) in remaps {
                    s = s.with_key_remapping(pattern(key), *path);
                }
                s.apply_to(module).map_err(|e| e.to_string())?
            }
        };
        if let Some(err) = result.errors.first() {
            return Err(err.to_string());
        }
        Ok(result.applied)
    }
}

/// The files a path names: itself, or for a sharded checkpoint's `*.index.json` (transformers'
/// `model.safetensors.index.json`) the shards its `weight_map` names, in order.
fn shards_of(path: &Path) -> Result<Vec<PathBuf>, PretrainedError> {
    let shown = path.display().to_string();
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if !name.ends_with(".index.json") {
        return Ok(vec![path.to_path_buf()]);
    }
    let unreadable = |detail: String| PretrainedError::Unreadable {
        path: shown.clone(),
        format: "a sharded checkpoint's index",
        detail,
    };
    let text = std::fs::read_to_string(path).map_err(|err| PretrainedError::FileNotFound {
        path: shown.clone(),
        detail: err.to_string(),
    })?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| unreadable(format!("not JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| unreadable("no `weight_map` object".into()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut shards: Vec<PathBuf> = Vec::new();
    for (key, file) in map {
        let file = file
            .as_str()
            .filter(|f| !f.is_empty() && Path::new(f).components().count() == 1 && *f != "..")
            .ok_or_else(|| {
                unreadable(format!(
                    "`weight_map` maps `{key}` to {file}, not to a file of this folder"
                ))
            })?;
        let shard = dir.join(file);
        if !shards.contains(&shard) {
            shards.push(shard);
        }
    }
    Ok(shards)
}

/// Checks every mapped tensor against `module` (present, shape, dtype), then applies them all
/// to a clone and replaces `module` with it. `path` is a checkpoint file, or a sharded
/// checkpoint's index (each tensor is read from the shard that holds it).
fn load<M: ModuleSnapshot + Clone>(
    module: &mut M,
    path: &Path,
    checkpoint: &'static str,
    keys: &[KeyMapping],
) -> Result<Loaded, PretrainedError> {
    let shown = path.display().to_string();
    // Each file's store and header: key -> (shape, dtype).
    let mut files = Vec::new();
    for file in shards_of(path)? {
        let mut store = Store::open(&file)?;
        let header = store
            .header()
            .map_err(|detail| PretrainedError::Unreadable {
                path: file.display().to_string(),
                format: store.format(),
                detail,
            })?;
        files.push((store, header));
    }
    let holder = |key: &str| files.iter().position(|(_, h)| h.contains_key(key));

    // The module's fields: path -> (shape, dtype), from metadata only (no device read).
    let fields: BTreeMap<String, (Vec<usize>, String)> = module
        .collect(None, None, false)
        .into_iter()
        .map(|t| (t.name.clone(), (t.shape.to_vec(), format!("{:?}", t.dtype))))
        .collect();

    let mut found = Vec::new();
    let mut missing = Vec::new();
    for mapping in keys {
        match mapping
            .checkpoint_keys
            .iter()
            .find_map(|k| holder(k).map(|file| (k, file)))
        {
            Some((key, file)) => found.push((key.to_string(), mapping.module_path, file)),
            None => missing.push(mapping.checkpoint_keys.join(" or ")),
        }
    }
    if !missing.is_empty() {
        let all: Vec<&String> = files.iter().flat_map(|(_, h)| h.keys()).collect();
        return Err(PretrainedError::MissingTensors {
            checkpoint,
            path: shown,
            missing,
            found: all.iter().take(8).map(|k| k.to_string()).collect(),
            found_count: all.len(),
        });
    }

    let mut tensors = Vec::new();
    for (key, module_path, file) in &found {
        let (shape, dtype) = &files[*file].1[key];
        let Some((expected_shape, expected_dtype)) = fields.get(*module_path) else {
            return Err(PretrainedError::ModuleMismatch {
                checkpoint,
                detail: format!("the module has no field `{module_path}` for {key}"),
                fix: shape_fix(module_path, shape),
            });
        };
        if shape != expected_shape {
            return Err(PretrainedError::ShapeMismatch {
                path: shown,
                key: key.clone(),
                module_path,
                expected: expected_shape.clone(),
                found: shape.clone(),
            });
        }
        // A float table of another float dtype is converted on the host to the module's, as
        // PyTorch's `load_state_dict` copies into a parameter of another dtype (safetensors
        // files: burn's PyTorch reader takes no adapter).
        let floats = ["F64", "F32", "F16", "BF16", "Flex32"];
        let converts = floats.contains(&dtype.as_str())
            && floats.contains(&expected_dtype.as_str())
            && matches!(files[*file].0, Store::Safetensors(_));
        if dtype != expected_dtype && !converts {
            return Err(PretrainedError::DTypeMismatch {
                path: shown,
                key: key.clone(),
                module_path,
                expected: expected_dtype.clone(),
                found: dtype.clone(),
            });
        }
        tensors.push(LoadedTensor {
            key: key.clone(),
            module_path,
            shape: shape.clone(),
            dtype: dtype.clone(),
        });
    }

    // Applied to a clone: the caller's module changes only if every tensor loaded.
    let mut loaded = module.clone();
    let float_dtype = module
        .collect(None, None, false)
        .into_iter()
        .map(|t| t.dtype)
        .find(|d| d.is_float());
    let mut applied = Vec::new();
    let mut unused = Vec::new();
    for (index, (store, header)) in files.into_iter().enumerate() {
        let here: Vec<(String, &'static str)> = found
            .iter()
            .filter(|(_, _, file)| *file == index)
            .map(|(key, module_path, _)| (key.clone(), *module_path))
            .collect();
        unused.extend(
            header
                .into_keys()
                .filter(|k| !found.iter().any(|(key, ..)| key == k)),
        );
        if here.is_empty() {
            continue;
        }
        applied.extend(
            store
                .apply(&mut loaded, &here, float_dtype)
                .map_err(|detail| PretrainedError::LoadFailed {
                    path: shown.clone(),
                    detail,
                })?,
        );
    }
    if let Some((_, module_path, _)) = found
        .iter()
        .find(|(_, p, _)| !applied.iter().any(|a| a == p))
    {
        return Err(PretrainedError::LoadFailed {
            path: shown,
            detail: format!("burn's store did not apply `{module_path}`"),
        });
    }
    *module = loaded;
    unused.sort();
    Ok(Loaded {
        path: path.to_path_buf(),
        tensors,
        unused,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mapping_names_a_field_of_our_modules() {
        use crate::{EmbeddingWithPositionConfig, LearnedConfig, T5BiasConfig};
        let device = burn::tensor::Device::flex();
        let embed = EmbeddingWithPositionConfig::new(4, 2)
            .with_scheme(LearnedConfig::new(3).into())
            .init(&device);
        let paths: Vec<String> = embed
            .collect(None, None, false)
            .into_iter()
            .map(|t| t.name)
            .collect();
        for mapping in GPT2_KEYS.iter().chain(&BERT_KEYS) {
            assert!(paths.iter().any(|p| p == mapping.module_path), "{paths:?}");
        }
        let bias = T5BiasConfig::new(2).init(&device);
        let paths: Vec<String> = bias
            .collect(None, None, false)
            .into_iter()
            .map(|t| t.name)
            .collect();
        for stack in [T5Stack::Encoder, T5Stack::Decoder] {
            assert_eq!(paths, [stack.keys()[0].module_path]);
        }
    }

    #[test]
    fn shape_fix_names_the_config_that_fits() {
        assert!(shape_fix("tokens", &[50257, 768]).contains("new(50257, 768)"));
        assert!(shape_fix("position.Learned.table", &[1024, 768]).contains("new(1024)"));
        assert!(shape_fix("table", &[32, 12]).contains("new(12).with_num_buckets(32)"));
    }

    #[test]
    fn missing_tensors_message_lists_what_the_file_holds() {
        let err = PretrainedError::MissingTensors {
            checkpoint: "GPT-2",
            path: "x.safetensors".into(),
            missing: vec!["wte.weight".into()],
            found: vec!["a".into(), "b".into()],
            found_count: 3,
        };
        let text = err.to_string();
        assert!(text.contains("has no wte.weight (GPT-2 tensors)"), "{text}");
        assert!(text.contains("3 tensors: a, b, ..."), "{text}");
    }
}
