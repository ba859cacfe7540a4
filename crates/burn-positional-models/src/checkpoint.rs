//! [`Checkpoint`]: a Hugging Face checkpoint folder (`config.json` + `model.safetensors`, or the
//! shards a `model.safetensors.index.json` names), its configuration, and its weights loaded into
//! a port with burn's own store, in the compute dtype of one's choice.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, Param};
use burn::store::{
    FloatCastAdapter, ModuleAdapter, ModuleSnapshot, ModuleStore, PyTorchToBurnAdapter,
    SafetensorsStore,
};
use burn::tensor::{DType, Device, FloatDType, Tensor};
use serde::de::DeserializeOwned;

use crate::ModelError;

// The compute dtype's choice (the device, the files' dtype, the memory), apart from the folder
// and the load.
mod compute_dtype;

/// The float dtype a port computes in, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ComputeDtype {
    /// The dtype every float weight is cast to at load.
    pub dtype: FloatDType,
    /// One line for the user when the choice is not what they or the file asked for (the file's
    /// dtype is one the device cannot compute in, so f32 is used instead).
    pub notice: Option<String>,
}

/// A dtype's name as transformers writes it in config.json (`dtype`, `torch_dtype`).
pub fn dtype_name(dtype: FloatDType) -> &'static str {
    match dtype {
        FloatDType::F64 => "float64",
        FloatDType::F32 | FloatDType::Flex32 => "float32",
        FloatDType::F16 => "float16",
        FloatDType::BF16 => "bfloat16",
    }
}

/// A dtype from its name: transformers' (`bfloat16`, `float16`, `float32`) or short (`bf16`,
/// `f16`, `f32`).
///
/// # Errors
///
/// A message naming the value and the accepted names.
pub fn parse_dtype(name: &str) -> Result<FloatDType, String> {
    Ok(match name {
        "f32" | "float32" | "float" => FloatDType::F32,
        "f16" | "float16" | "half" => FloatDType::F16,
        "bf16" | "bfloat16" => FloatDType::BF16,
        "f64" | "float64" => FloatDType::F64,
        other => {
            return Err(format!(
                "dtype \"{other}\" is not a float dtype; expected f32, f16 or bf16 (or \
                 transformers' float32, float16, bfloat16)"
            ));
        }
    })
}

/// Where a tensor of the checkpoint goes in a port: transformers' key prefix and the port's
/// field path, each with at most one `{}` standing for a layer index (the rest of the key,
/// `.weight` or `.bias`, is kept). For example `("model.layers.{}.self_attn.q_proj",
/// "layers.{}.attention.query")`.
pub type Remap = (&'static str, &'static str);

/// A checkpoint folder as transformers' `save_pretrained` writes it.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// `config.json`.
    pub config_path: PathBuf,
    /// `model.safetensors`, or `model.safetensors.index.json` for a sharded checkpoint.
    pub weights_path: PathBuf,
    /// The weights files: `model.safetensors`, or every shard the index names, in order.
    pub shards: Vec<PathBuf>,
    /// The text of `config.json`.
    pub config_text: String,
    config: serde_json::Value,
    dtype: Option<FloatDType>,
}

impl Checkpoint {
    /// Opens `dir`: reads and parses its `config.json` and finds the weights:
    /// `model.safetensors`, or else the shards `model.safetensors.index.json` names in its
    /// `weight_map` (each must be there).
    ///
    /// # Errors
    ///
    /// [`ModelError::Io`] for a missing or unreadable file, [`ModelError::Config`] for a
    /// `config.json` or an index that is not JSON, or an index whose `weight_map` is missing,
    /// empty or names a file outside the folder.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, ModelError> {
        let dir = dir.as_ref();
        let config_path = dir.join("config.json");
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        let io = |path: &Path, err: std::io::Error| ModelError::Io {
            path: path.display().to_string(),
            detail: err.to_string(),
        };
        let config_text = std::fs::read_to_string(&config_path).map_err(|e| io(&config_path, e))?;
        let (weights_path, shards) = if single.exists() || !index.exists() {
            std::fs::metadata(&single).map_err(|e| io(&single, e))?;
            (single.clone(), vec![single])
        } else {
            let shards = read_index(&index)?;
            for shard in &shards {
                std::fs::metadata(shard).map_err(|e| io(shard, e))?;
            }
            (index, shards)
        };
        let config = serde_json::from_str(&config_text).map_err(|e| ModelError::Config {
            path: config_path.display().to_string(),
            detail: e.to_string(),
        })?;
        Ok(Self {
            config_path,
            weights_path,
            shards,
            config_text,
            config,
            dtype: None,
        })
    }

    /// `module` with every float parameter cast to the [`compute_dtype`](Self::compute_dtype)
    /// on `device`: for parts loaded by other means than [`load`](Self::load) (the layer's
    /// `pretrained` loaders), so the whole model computes in one dtype.
    ///
    /// # Errors
    ///
    /// As [`compute_dtype`](Self::compute_dtype).
    pub fn cast<M: Module>(&self, module: M, device: &Device) -> Result<M, ModelError> {
        let dtype = self.compute_dtype(device)?.dtype;
        Ok(module.map(&mut CastFloats(dtype)))
    }

    /// The same checkpoint, to be loaded in `dtype` whatever its files hold (the compute
    /// dtype: every float weight is cast to it at load).
    pub fn with_dtype(mut self, dtype: FloatDType) -> Self {
        self.dtype = Some(dtype);
        self
    }

    /// The float dtype of the weights files: the dtype most of their float tensors have, read
    /// from the safetensors headers (no tensor data is read). `None` if they hold no float.
    ///
    /// # Errors
    ///
    /// [`ModelError::Io`] if a file cannot be read, [`ModelError::Store`] for a header that is
    /// not a safetensors header.
    pub fn file_dtype(&self) -> Result<Option<FloatDType>, ModelError> {
        let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
        for shard in &self.shards {
            for (dtype, _) in header_tensors(shard)? {
                let name = match dtype.as_str() {
                    "F32" => "f32",
                    "F16" => "f16",
                    "BF16" => "bf16",
                    "F64" => "f64",
                    _ => continue,
                };
                *counts.entry(name).or_default() += 1;
            }
        }
        Ok(counts
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .map(|(name, _)| parse_dtype(name).expect("a dtype name of ours")))
    }

    /// `model_type` of `config.json`.
    ///
    /// # Errors
    ///
    /// [`ModelError::Config`] if it has none.
    pub fn model_type(&self) -> Result<&str, ModelError> {
        self.config
            .get("model_type")
            .and_then(|t| t.as_str())
            .ok_or_else(|| ModelError::Config {
                path: self.config_path.display().to_string(),
                detail: "no `model_type` (a string, e.g. \"llama\")".into(),
            })
    }

    /// `config.json` read into a family's configuration (missing fields take transformers'
    /// defaults, as the family's `serde` defaults say).
    ///
    /// # Errors
    ///
    /// [`ModelError::Config`] naming the field that does not fit.
    pub fn config<T: DeserializeOwned>(&self) -> Result<T, ModelError> {
        serde_json::from_value(self.config.clone()).map_err(|e| ModelError::Config {
            path: self.config_path.display().to_string(),
            detail: e.to_string(),
        })
    }

    /// Loads the weights (`model.safetensors`, or each shard in turn) into `module` with burn's
    /// `SafetensorsStore`: keys renamed by `remaps`, linear weights transposed and norm
    /// parameters renamed by burn's `PyTorchToBurnAdapter`, then every float weight cast to the
    /// [`compute_dtype`](Self::compute_dtype) on `module`'s device. Every field of `module` must
    /// be found in some file; keys that no field takes are left (buffers such as `inv_freq`, a
    /// tied `lm_head.weight`).
    ///
    /// # Errors
    ///
    /// [`ModelError::MissingTensor`] naming the transformers key and the port's field,
    /// [`ModelError::ShapeMismatch`] with both shapes, [`ModelError::Store`] if burn cannot
    /// read a file, [`ModelError::Dtype`] as [`compute_dtype`](Self::compute_dtype). The module
    /// is left as it was.
    pub fn load<M: ModuleSnapshot + Clone>(
        &self,
        module: &mut M,
        remaps: &[Remap],
        device: &Device,
    ) -> Result<(), ModelError> {
        let dtype = self.compute_dtype(device)?.dtype;
        let mut loaded = module.clone();
        let mut applied = BTreeSet::new();
        let mut unused = BTreeSet::new();
        let mut missing = Vec::new();
        for shard in &self.shards {
            let file = shard.display().to_string();
            // Converted to the compute dtype on the host, before anything reaches the device
            // (a bf16 tensor on a device without bf16 would fail in its first kernel).
            let mut store = SafetensorsStore::from_file(shard)
                .with_from_adapter(
                    BlockedPyTorchToBurn.chain(FloatCastAdapter::to(DType::from(dtype))),
                )
                .skip_enum_variants(true)
                .allow_partial(true)
                .validate(false);
            for (hf, ours) in remaps {
                let (from, to) = remap_pattern(hf, ours);
                store = store.with_key_remapping(from, to);
            }
            let result = store.apply_to(&mut loaded).map_err(|e| ModelError::Store {
                file: file.clone(),
                detail: e.to_string(),
            })?;
            self.refuse(&result, remaps, &file)?;
            applied.extend(result.applied);
            unused.extend(result.unused);
            missing = result.missing;
        }
        let file = self.weights_path.display().to_string();
        missing.retain(|(path, _)| !applied.contains(path));
        unused.retain(|key| !applied.contains(key));
        if let Some((path, _)) = missing.first() {
            let unused: Vec<&String> = unused.iter().take(4).collect();
            let near = if unused.is_empty() {
                String::new()
            } else {
                format!(
                    " (keys of the file no field took: {})",
                    unused
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(ModelError::MissingTensor {
                key: hf_key(path, remaps),
                module_path: path.clone(),
                file,
                near,
            });
        }
        *module = loaded.map(&mut CastFloats(dtype));
        Ok(())
    }

    /// The first error of one file's load.
    fn refuse(
        &self,
        result: &burn::store::ApplyResult,
        remaps: &[Remap],
        file: &str,
    ) -> Result<(), ModelError> {
        let file = file.to_string();
        if let Some(error) = result.errors.first() {
            return Err(match error {
                burn::store::ApplyError::ShapeMismatch {
                    path,
                    expected,
                    found,
                } => ModelError::ShapeMismatch {
                    key: hf_key(path, remaps),
                    module_path: path.clone(),
                    file,
                    expected: expected.to_vec(),
                    found: found.to_vec(),
                },
                other => ModelError::Store {
                    file,
                    detail: other.to_string(),
                },
            });
        }
        Ok(())
    }
}

/// burn's `PyTorchToBurnAdapter` (transposes `Linear` weights from PyTorch's `[out, in]`,
/// finds norm parameters under PyTorch's names) with the transpose done in cache-sized blocks:
/// burn's copies element by element with a stride of a whole row on one side, which took 40 s
/// of a Llama-3.2-1B-shaped load. The bytes move the same way; only the order of the copies
/// changes.
#[derive(Debug, Clone, Copy)]
struct BlockedPyTorchToBurn;

impl ModuleAdapter for BlockedPyTorchToBurn {
    fn adapt(
        &self,
        tensor: burn::store::burn_pack::Tensor,
        ctx: burn::store::ModuleContext<'_>,
    ) -> burn::store::burn_pack::Tensor {
        let param = tensor.name.rsplit('.').next().unwrap_or("");
        let linear_weight = ctx.module_type() == Some("Struct:Linear")
            && param == "weight"
            && tensor.shape.len() == 2
            && matches!(tensor.dtype.size(), 1 | 2 | 4 | 8)
            && !matches!(tensor.dtype, DType::QFloat(_));
        if !linear_weight {
            return PyTorchToBurnAdapter.adapt(tensor, ctx);
        }
        let (rows, cols) = (tensor.shape[0], tensor.shape[1]);
        let (name, dtype) = (tensor.name.clone(), tensor.dtype);
        let shape = burn::tensor::Shape::from(vec![cols, rows]);
        burn::store::bridge::map_data(tensor, name, dtype, shape.clone(), move |data| {
            let bytes = data.as_bytes();
            let out = match dtype.size() {
                1 => transpose_blocked::<1>(bytes, rows, cols),
                2 => transpose_blocked::<2>(bytes, rows, cols),
                4 => transpose_blocked::<4>(bytes, rows, cols),
                _ => transpose_blocked::<8>(bytes, rows, cols),
            };
            burn::tensor::TensorData::from_bytes_vec(out, shape.clone(), dtype)
        })
    }

    fn get_alternative_param_name(&self, param_name: &str, container_type: &str) -> Option<String> {
        PyTorchToBurnAdapter.get_alternative_param_name(param_name, container_type)
    }

    fn clone_box(&self) -> Box<dyn ModuleAdapter> {
        Box::new(*self)
    }
}

/// The transpose of a row-major `[rows, cols]` matrix of `N`-byte elements, copied in
/// 32 x 32 blocks so both sides stay in cache.
fn transpose_blocked<const N: usize>(src: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    const BLOCK: usize = 32;
    let mut dst = vec![0u8; src.len()];
    for i0 in (0..rows).step_by(BLOCK) {
        for j0 in (0..cols).step_by(BLOCK) {
            for i in i0..(i0 + BLOCK).min(rows) {
                for j in j0..(j0 + BLOCK).min(cols) {
                    let from = (i * cols + j) * N;
                    let to = (j * rows + i) * N;
                    dst[to..to + N].copy_from_slice(&src[from..from + N]);
                }
            }
        }
    }
    dst
}

/// Casts every float parameter to one dtype (those already in it are kept as they are). A
/// parameter not yet initialized (burn's lazy init: a random weight the load will replace) is
/// left lazy when the device's default dtype is already the target: casting would draw its
/// random values, a whole model's worth of sampling and memory for nothing.
struct CastFloats(FloatDType);

impl ModuleMapper for CastFloats {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let dtype = self.0;
        if !param.is_initialized() && param.lazy_device().settings().float_dtype == dtype {
            return param;
        }
        param.map(|t| {
            if t.dtype() == dtype.into() {
                t
            } else {
                t.cast(dtype)
            }
        })
    }
}

/// The shards of a sharded checkpoint: the distinct files of `weight_map` in
/// `model.safetensors.index.json`, in the order they first appear.
fn read_index(index: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let path = index.display().to_string();
    let bad = |detail: String| ModelError::Config {
        path: path.clone(),
        detail,
    };
    let text = std::fs::read_to_string(index).map_err(|e| ModelError::Io {
        path: path.clone(),
        detail: e.to_string(),
    })?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .filter(|m| !m.is_empty())
        .ok_or_else(|| {
            bad(
                "no `weight_map` (an object from tensor names to shard files, as \
                 save_pretrained writes it)"
                    .into(),
            )
        })?;
    let dir = index.parent().unwrap_or(Path::new("."));
    let mut shards: Vec<PathBuf> = Vec::new();
    for (key, file) in map {
        let name = file.as_str().ok_or_else(|| {
            bad(format!(
                "`weight_map` maps `{key}` to {file}, not to a file name"
            ))
        })?;
        let plain = Path::new(name);
        if name.is_empty() || plain.is_absolute() || plain.components().count() != 1 || name == ".."
        {
            return Err(bad(format!(
                "`weight_map` maps `{key}` to \"{name}\", which is not a file of this folder"
            )));
        }
        let shard = dir.join(name);
        if !shards.contains(&shard) {
            shards.push(shard);
        }
    }
    Ok(shards)
}

/// Each tensor's dtype and element count in a safetensors file's header (8 bytes of length,
/// then JSON).
pub(crate) fn header_tensors(path: &Path) -> Result<Vec<(String, u64)>, ModelError> {
    use std::io::Read;
    let file = path.display().to_string();
    let io = |e: std::io::Error| ModelError::Io {
        path: file.clone(),
        detail: e.to_string(),
    };
    let bad = |detail: String| ModelError::Store {
        file: file.clone(),
        detail,
    };
    let mut handle = std::fs::File::open(path).map_err(io)?;
    let size = handle.metadata().map_err(io)?.len();
    let mut len = [0u8; 8];
    handle
        .read_exact(&mut len)
        .map_err(|_| bad(format!("{size} bytes, too short for a safetensors header")))?;
    let len = u64::from_le_bytes(len);
    // safetensors' own limit on a header.
    const MAX_HEADER: u64 = 100_000_000;
    if len > MAX_HEADER || len > size - 8 {
        return Err(bad(format!(
            "the header claims {len} bytes, the file has {} after the length (and a header \
             is at most {MAX_HEADER})",
            size - 8
        )));
    }
    let mut header = vec![0u8; len as usize];
    handle.read_exact(&mut header).map_err(io)?;
    let json: serde_json::Value =
        serde_json::from_slice(&header).map_err(|e| bad(format!("the header is not JSON: {e}")))?;
    let map = json
        .as_object()
        .ok_or_else(|| bad("the header is not a JSON object".into()))?;
    Ok(map
        .iter()
        .filter(|(key, _)| key.as_str() != "__metadata__")
        .filter_map(|(_, info)| {
            let dtype = info.get("dtype")?.as_str()?.to_string();
            let values = info
                .get("shape")?
                .as_array()?
                .iter()
                .map(|d| d.as_u64().unwrap_or(0))
                .product();
            Some((dtype, values))
        })
        .collect())
}

/// The store's regex and replacement for one remap: `{}` matches a layer index, the rest of
/// the key (`.weight`, `.bias`, ...) follows; a remap may also name a whole key.
fn remap_pattern(hf: &str, ours: &str) -> (String, String) {
    let escaped = regex_escape(hf).replace(r"\{\}", r"(\d+)");
    let has_index = hf.contains("{}");
    let rest = if has_index { "${2}" } else { "${1}" };
    (
        format!(r"^{escaped}(\..+)?$"),
        format!("{}{rest}", ours.replace("{}", "${1}")),
    )
}

/// The transformers key of a port's field path, through the remaps (the path itself if none
/// applies).
fn hf_key(path: &str, remaps: &[Remap]) -> String {
    for (hf, ours) in remaps {
        let (prefix, suffix) = ours.split_once("{}").unwrap_or((ours, ""));
        let Some(rest) = path.strip_prefix(prefix) else {
            continue;
        };
        if ours.contains("{}") {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if digits.is_empty() {
                continue;
            }
            if let Some(tail) = rest[digits.len()..].strip_prefix(suffix) {
                if tail.starts_with('.') {
                    return format!("{}{tail}", hf.replace("{}", &digits));
                }
            }
        } else if rest.is_empty() || rest.starts_with('.') {
            return format!("{hf}{rest}");
        }
    }
    path.to_string()
}

fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if "\\.+*?()|[]^$#&-~".contains(c) || c == '{' || c == '}' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_transpose_is_the_transpose() {
        // 37 x 70 (not multiples of the block) of 4-byte elements numbered in order.
        let (rows, cols) = (37, 70);
        let src: Vec<u8> = (0..rows * cols as u32)
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let out = transpose_blocked::<4>(&src, rows as usize, cols as usize);
        for i in 0..rows as usize {
            for j in 0..cols as usize {
                let at = (j * rows as usize + i) * 4;
                let v = u32::from_le_bytes(out[at..at + 4].try_into().unwrap());
                assert_eq!(v as usize, i * cols as usize + j);
            }
        }
    }

    #[test]
    fn remaps_go_both_ways() {
        let remaps: &[Remap] = &[
            (
                "model.layers.{}.self_attn.q_proj",
                "layers.{}.attention.query",
            ),
            ("lm_head", "lm_head"),
        ];
        let (from, to) = remap_pattern(remaps[0].0, remaps[0].1);
        assert_eq!(from, r"^model\.layers\.(\d+)\.self_attn\.q_proj(\..+)?$");
        assert_eq!(to, "layers.${1}.attention.query${2}");
        assert_eq!(
            hf_key("layers.12.attention.query.weight", remaps),
            "model.layers.12.self_attn.q_proj.weight"
        );
        assert_eq!(hf_key("lm_head.weight", remaps), "lm_head.weight");
        assert_eq!(hf_key("other.weight", remaps), "other.weight");
    }
}
