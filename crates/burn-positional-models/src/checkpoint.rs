//! [`Checkpoint`]: a Hugging Face checkpoint folder (`config.json` + `model.safetensors`), its
//! configuration, and its weights loaded into a port with burn's own store.

use std::path::{Path, PathBuf};

use burn::store::{ModuleSnapshot, ModuleStore, PyTorchToBurnAdapter, SafetensorsStore};
use serde::de::DeserializeOwned;

use crate::ModelError;

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
    /// `model.safetensors`.
    pub weights_path: PathBuf,
    /// The text of `config.json`.
    pub config_text: String,
    config: serde_json::Value,
}

impl Checkpoint {
    /// Opens `dir`: reads and parses its `config.json` and checks that `model.safetensors` is
    /// there.
    ///
    /// # Errors
    ///
    /// [`ModelError::Io`] for a missing or unreadable file, [`ModelError::Config`] for a
    /// `config.json` that is not JSON.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, ModelError> {
        let dir = dir.as_ref();
        let config_path = dir.join("config.json");
        let weights_path = dir.join("model.safetensors");
        let io = |path: &Path, err: std::io::Error| ModelError::Io {
            path: path.display().to_string(),
            detail: err.to_string(),
        };
        let config_text = std::fs::read_to_string(&config_path).map_err(|e| io(&config_path, e))?;
        std::fs::metadata(&weights_path).map_err(|e| io(&weights_path, e))?;
        let config = serde_json::from_str(&config_text).map_err(|e| ModelError::Config {
            path: config_path.display().to_string(),
            detail: e.to_string(),
        })?;
        Ok(Self {
            config_path,
            weights_path,
            config_text,
            config,
        })
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

    /// Loads `model.safetensors` into `module` with burn's `SafetensorsStore`: keys renamed by
    /// `remaps`, linear weights transposed and norm parameters renamed by burn's
    /// `PyTorchToBurnAdapter`. Every field of `module` must be found; keys of the file that no
    /// field takes are left (buffers such as `inv_freq`, a tied `lm_head.weight`).
    ///
    /// # Errors
    ///
    /// [`ModelError::MissingTensor`] naming the transformers key and the port's field,
    /// [`ModelError::ShapeMismatch`] with both shapes, [`ModelError::Store`] if burn cannot
    /// read the file. The module is left as it was.
    pub fn load<M: ModuleSnapshot + Clone>(
        &self,
        module: &mut M,
        remaps: &[Remap],
    ) -> Result<(), ModelError> {
        let file = self.weights_path.display().to_string();
        let mut store = SafetensorsStore::from_file(&self.weights_path)
            .with_from_adapter(PyTorchToBurnAdapter)
            .skip_enum_variants(true)
            .allow_partial(true)
            .validate(false);
        for (hf, ours) in remaps {
            let (from, to) = remap_pattern(hf, ours);
            store = store.with_key_remapping(from, to);
        }
        let mut loaded = module.clone();
        let result = store.apply_to(&mut loaded).map_err(|e| ModelError::Store {
            file: file.clone(),
            detail: e.to_string(),
        })?;
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
        if let Some((path, _)) = result.missing.first() {
            let mut unused: Vec<&String> = result.unused.iter().take(4).collect();
            unused.sort();
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
        *module = loaded;
        Ok(())
    }
}

/// The store's regex and replacement for one remap: `{}` matches a layer index, the rest of
/// the key follows.
fn remap_pattern(hf: &str, ours: &str) -> (String, String) {
    let escaped = regex_escape(hf).replace(r"\{\}", r"(\d+)");
    let has_index = hf.contains("{}");
    let rest = if has_index { "${2}" } else { "${1}" };
    (
        format!(r"^{escaped}\.(.+)$"),
        format!("{}.{rest}", ours.replace("{}", "${1}")),
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
        } else if rest.starts_with('.') {
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
    fn remaps_go_both_ways() {
        let remaps: &[Remap] = &[
            (
                "model.layers.{}.self_attn.q_proj",
                "layers.{}.attention.query",
            ),
            ("lm_head", "lm_head"),
        ];
        let (from, to) = remap_pattern(remaps[0].0, remaps[0].1);
        assert_eq!(from, r"^model\.layers\.(\d+)\.self_attn\.q_proj\.(.+)$");
        assert_eq!(to, "layers.${1}.attention.query.${2}");
        assert_eq!(
            hf_key("layers.12.attention.query.weight", remaps),
            "model.layers.12.self_attn.q_proj.weight"
        );
        assert_eq!(hf_key("lm_head.weight", remaps), "lm_head.weight");
        assert_eq!(hf_key("other.weight", remaps), "other.weight");
    }
}
