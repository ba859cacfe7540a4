//! Reading a Hugging Face `config.json` into a [`RopeConfig`], as transformers reads it
//! (`RotaryEmbeddingConfigMixin` and `modeling_rope_utils.py`, v5).
//!
//! Past 700 lines for one reason to change: the order in which transformers resolves each field
//! (nested, top level, class default) and the ranges it needs are one sequence, read top to
//! bottom here; the per-family tables live in `families.rs`, `defaults.rs` and `sizes.rs`.
//!
//! What is read:
//!
//! | key | where | used for |
//! | --- | --- | --- |
//! | `rope_parameters`, or the older `rope_scaling` (which wins when both are set) | top level | the variant (`rope_type`, or the older `type`; `"default"` when absent) and its parameters |
//! | `rope_theta` | `rope_parameters`, else top level, else 10 000 | the base |
//! | `partial_rotary_factor` | `rope_parameters`, else top level, else 1 | `rotary_dims = int(head_dim * factor)` |
//! | `head_dim`, else the config class's default (Gemma 256, Qwen 3 128, ...), else `hidden_size / num_attention_heads` | top level | the head width |
//! | `max_position_embeddings`, else the config class's default | top level | `dynamic`'s limit; the default `original_max_position_embeddings` and `factor` |
//! | `original_max_position_embeddings` | top level (wins), else `rope_parameters`, else `max_position_embeddings`; a nested entry (Gemma): its own, else `max_position_embeddings` | `llama3`, `yarn`, `longrope` |
//! | `layer_types` | top level | `rope_parameters` nested per layer type (Gemma 3/4): pick one with [`RopeConfig::from_hf_config_layer`] |
//! | `qk_rope_head_dim` | top level | the head width of the 13 DeepSeek-style config classes (default 64 or 32; DeepSeek V3's class lets a `head_dim` in the file win) |
//! | `rope_interleave` | top level | interleaved pairs ([`RopeLayout::Interleaved`]); default true for DeepSeek V3 and kin, always for DeepSeek V2 |
//! | `model_type` | top level | the config class (defaults, `attribute_map`) and the family's own rotation: Cohere 1/2, GLM 1/4, Helium, ERNIE 4.5, Llama 4 and the others in `rotation.rs` rotate adjacent pairs ([`RopeLayout::Interleaved`]) whatever the file says |
//! | `text_config` | top level | a multimodal config's language model, read instead of the top level |
//!
//! Gemma 3's `rope_scaling`, `rope_theta` and `rope_local_base_freq` become one rope per
//! attention kind (`"full_attention"`, `"sliding_attention"`), and Gemma 4's global layers use
//! `global_head_dim` (default 512), as their transformers config classes do; so does Phi-3's
//! reading of `su` and `yarn` as `longrope` (its class refuses the other types). Every layer
//! type's entry is read, as transformers builds them all: one it refuses refuses the config.
//! The class defaults of `head_dim`, `max_position_embeddings`, `hidden_size` and
//! `num_attention_heads`, and each class's `attribute_map` for the keys read here (DBRX's
//! `d_model`, `n_heads`, `max_seq_len`; the key itself wins when a file has both), come from
//! tables written by `tools/hf_rope_fixtures.py --defaults` (`sizes.rs`), as does the list of
//! families whose modeling code rotates adjacent pairs (`rotation.rs`). A name another class
//! maps but this one ignores (Falcon's `n_head`: transformers 5's `FalconConfig` has no
//! `attribute_map`) is ignored as transformers ignores it, and refused when it differs from the
//! value transformers uses instead.
//!
//! A key left out takes the default of the model type's transformers config class (`model_type`
//! names it): `rope_theta` 500 000 for `bitnet`, `partial_rotary_factor` 0.5 for `phi`, a
//! top-level `original_max_position_embeddings` of 4096 for `phi3`, and so on, from a table
//! written by `tools/hf_rope_fixtures.py` (82 model types of transformers 5.24); other types
//! take the generic 10 000, 1 and none. With `rope_type: "default"`, the model types whose own
//! rotary module ignores `partial_rotary_factor` (Llama, Qwen 2, Mistral and 240 others, listed
//! by the same script) rotate the whole head, as they do in transformers. GPT-NeoX reads its own keys, `rotary_emb_base` and
//! `rotary_pct`, instead of `rope_theta` / `partial_rotary_factor`. Anything missing, of the wrong type, unknown (an
//! unknown `rope_type` included) or inconsistent is a [`HfConfigError`] naming the field; a
//! missing optional field takes transformers' default, never a guess of ours.

use serde_json::{Map, Value};

use crate::PositionError;
use crate::rotary::{
    DynamicScaling, Llama3Scaling, LongRopeScaling, ProportionalScaling, RopeArithmetic, RopeAxes,
    RopeConfig, RopeLayout, RopeScaling, YarnScaling,
};

mod defaults;
mod families;
mod fields;
mod rotation;
mod sizes;

use fields::Fields;

use families::ATTENTION_KINDS;

/// The `rope_type`s transformers knows and this reader follows.
pub const HF_ROPE_TYPES: [&str; 7] = [
    "default",
    "linear",
    "dynamic",
    "yarn",
    "longrope",
    "llama3",
    "proportional",
];

/// Precomputed rows of a config read from a checkpoint: `max_position_embeddings`, at most
/// this many (longer sequences grow the tables on demand).
const HF_CACHE_LEN: usize = 4096;

/// Why a `config.json` could not be read into a [`RopeConfig`].
#[derive(Debug, thiserror::Error)]
pub enum HfConfigError {
    /// The file could not be read.
    #[error("could not read {path}: {message}. Fix: pass the path of the checkpoint's config.json")]
    Io {
        /// The path given.
        path: String,
        /// What the system said.
        message: String,
    },
    /// The text is not a JSON object.
    #[error(
        "config.json is not a JSON object: {message}. Fix: pass the text of the checkpoint's config.json"
    )]
    Json {
        /// What the parser said.
        message: String,
    },
    /// A field transformers requires is absent.
    #[error("config.json: `{field}` is missing; {needed_for}. Fix: {fix}")]
    Missing {
        /// The field, with its path (`rope_parameters.factor`).
        field: String,
        /// What needs it.
        needed_for: String,
        /// How to fix it.
        fix: String,
    },
    /// A field holds a value of the wrong type.
    #[error("config.json: `{field}` is {found}, expected {expected}. Fix: write it as {expected}")]
    WrongType {
        /// The field, with its path.
        field: String,
        /// What was expected.
        expected: &'static str,
        /// What was found (the JSON value).
        found: String,
    },
    /// A `rope_type` transformers has no formula for here.
    #[error(
        "config.json: `{field}` is \"{found}\", which is not a rope_type this reader knows \
         (known: {known}). Fix: use one of them, or build the RopeConfig by hand",
        known = HF_ROPE_TYPES.join(", ")
    )]
    UnknownRopeType {
        /// `rope_parameters.rope_type` or `rope_scaling.type`.
        field: String,
        /// The value found.
        found: String,
    },
    /// `rope_parameters` is nested per layer type and no (or an unknown) layer type was asked for.
    #[error(
        "config.json: `rope_parameters` holds one entry per layer type ({available}); {asked}. \
         Fix: read it with RopeConfig::from_hf_config_layer(json, \"<layer type>\"), one of: \
         {available}"
    )]
    LayerType {
        /// The layer types present.
        available: String,
        /// What was asked.
        asked: String,
    },
    /// Values that cannot go together, or a value out of range.
    #[error("config.json: `{field}` is {value}: {rule}. Fix: {fix}")]
    Inconsistent {
        /// The field, with its path.
        field: String,
        /// The value found.
        value: String,
        /// The rule it breaks.
        rule: String,
        /// How to fix it.
        fix: String,
    },
    /// The config read is refused by [`RopeConfig::validate`].
    #[error("config.json gives a rope the layer refuses: {0}")]
    Invalid(#[from] PositionError),
}

impl RopeConfig {
    /// Reads the rotary settings of a Hugging Face `config.json` (its text) as transformers
    /// does: the variant and its parameters, the base, the head width, partial rotation. The
    /// result uses the layout of the family's modeling code (half-split as Llama's `rotate_half`;
    /// interleaved for Cohere, GLM and the others that pair adjacent dimensions, and for
    /// `rope_interleave`) and [`RopeArithmetic::Transformers`], so it rotates exactly as the
    /// checkpoint was trained.
    /// See the [module docs](crate::rotary::hf_config) for every key read and its default.
    ///
    /// ```
    /// use burn_positional::{RopeConfig, RopeScaling};
    ///
    /// // Llama 3.1 8B's config.json (the rotary part).
    /// let json = r#"{
    ///     "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
    ///     "max_position_embeddings": 131072, "rope_theta": 500000.0,
    ///     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    ///                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    /// }"#;
    /// let config = RopeConfig::from_hf_config(json).unwrap();
    /// assert_eq!((config.d_head, config.base), (128, 500000.0));
    /// assert!(matches!(config.scaling, RopeScaling::Llama3(_)));
    /// ```
    ///
    /// # Errors
    ///
    /// A [`HfConfigError`] naming the field: not JSON, a required field missing (`factor` of
    /// `linear`, `dynamic`, `yarn`, `llama3`; `short_factor`/`long_factor` of `longrope`; the
    /// head width), a field of the wrong type, an unknown `rope_type`, parameters nested per
    /// layer type (use [`from_hf_config_layer`](Self::from_hf_config_layer)), or a config
    /// [`validate`](Self::validate) refuses.
    pub fn from_hf_config(json: &str) -> Result<RopeConfig, HfConfigError> {
        read(json, None)
    }

    /// As [`from_hf_config`](Self::from_hf_config), for configs whose `rope_parameters` hold one
    /// entry per layer type (`"full_attention"`, `"sliding_attention"` in Gemma 3 and 4): the
    /// entry of `layer_type`. A config with one flat entry gives it for every layer type.
    ///
    /// # Errors
    ///
    /// As [`from_hf_config`](Self::from_hf_config); an unknown layer type, or one whose entry
    /// is `null` (no rotation in those layers), is [`HfConfigError::LayerType`].
    pub fn from_hf_config_layer(json: &str, layer_type: &str) -> Result<RopeConfig, HfConfigError> {
        read(json, Some(layer_type))
    }

    /// [`from_hf_config`](Self::from_hf_config) of a file: the checkpoint's `config.json`.
    ///
    /// # Errors
    ///
    /// [`HfConfigError::Io`] naming the path if it cannot be read; then as
    /// [`from_hf_config`](Self::from_hf_config).
    pub fn from_hf_config_file(
        path: impl AsRef<std::path::Path>,
    ) -> Result<RopeConfig, HfConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|err| HfConfigError::Io {
            path: path.display().to_string(),
            message: err.to_string(),
        })?;
        Self::from_hf_config(&text)
    }
}

fn read(json: &str, layer_type: Option<&str>) -> Result<RopeConfig, HfConfigError> {
    read_layer(json, layer_type, true)
}

/// Reads the rope of `layer_type`; with `check_others`, the entries of the other layer types
/// too, as transformers builds (and validates) all of them: one it refuses refuses the config.
fn read_layer(
    json: &str,
    layer_type: Option<&str>,
    check_others: bool,
) -> Result<RopeConfig, HfConfigError> {
    let value: Value = serde_json::from_str(json).map_err(|err| HfConfigError::Json {
        message: err.to_string(),
    })?;
    let root_map = value.as_object().ok_or_else(|| HfConfigError::Json {
        message: format!("found {}", kind(&value)),
    })?;
    // Multimodal checkpoints (Gemma 3, Qwen 2.5 VL, ...) keep the language model's settings
    // under `text_config`.
    let root_map = match root_map.get("text_config") {
        Some(Value::Object(text)) if !root_map.contains_key("num_attention_heads") => text,
        _ => root_map,
    };
    let model_type = root_map
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("");
    // The config class's `attribute_map`: a key the file spells its own way (DBRX's `d_model`).
    let mapped = families::apply_attribute_map(root_map, model_type);
    let root = Fields {
        map: mapped.as_ref().unwrap_or(root_map),
        path: "",
    };

    // Gemma 3 and 4 build theirs per attention kind.
    let converted = families::gemma_params(&root, model_type)?;
    // `rope_scaling or rope_parameters`: the older spelling wins when it is a non-empty object.
    let (params_key, params) = match (root.get("rope_scaling"), root.get("rope_parameters")) {
        _ if converted.is_some() => ("rope_parameters", converted.as_ref()),
        (Some(Value::Object(m)), _) if !m.is_empty() => ("rope_scaling", Some(m)),
        (Some(v @ (Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Array(_))), _) => {
            return Err(root.wrong("rope_scaling", "an object", v));
        }
        (_, Some(Value::Object(m))) => ("rope_parameters", Some(m)),
        (_, Some(v)) => return Err(root.wrong("rope_parameters", "an object", v)),
        _ => ("rope_parameters", None),
    };
    let empty = Map::new();
    let mut params = params.unwrap_or(&empty);

    // Nested per layer type: keys that are among `layer_types` (the attention kinds when the
    // file lists none: transformers' config classes fill them in).
    let layer_types: Vec<&str> = root
        .get("layer_types")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_else(|| ATTENTION_KINDS.to_vec());
    let nested: Vec<&String> = params
        .keys()
        .filter(|k| layer_types.contains(&k.as_str()))
        .collect();
    let is_nested = !nested.is_empty();
    if is_nested {
        let available = nested
            .iter()
            .map(|k| format!("\"{k}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let Some(layer) = layer_type else {
            return Err(HfConfigError::LayerType {
                available,
                asked: "no layer type was given".into(),
            });
        };
        if check_others {
            for other in nested.iter().filter(|k| k.as_str() != layer) {
                if params.get(other.as_str()).is_some_and(Value::is_object) {
                    read_layer(json, Some(other), false)?;
                }
            }
        }
        params = match params.get(layer) {
            Some(Value::Object(m)) => m,
            Some(Value::Null) => {
                return Err(HfConfigError::LayerType {
                    available,
                    asked: format!("\"{layer}\" is null there: those layers do not rotate"),
                });
            }
            Some(v) => return Err(root.wrong(&format!("{params_key}.{layer}"), "an object", v)),
            None => {
                return Err(HfConfigError::LayerType {
                    available,
                    asked: format!("\"{layer}\" is not one of them"),
                });
            }
        };
    }
    let params_of_full = match &converted {
        Some(c) => c.get("full_attention").and_then(Value::as_object),
        None => None,
    };
    let rope = Fields {
        map: params,
        path: if params_key == "rope_scaling" {
            "rope_scaling"
        } else {
            "rope_parameters"
        },
    };

    // The base: GPT-NeoX's `rotary_emb_base`, else `rope_theta` (nested, then top level).
    let top_theta = if model_type == "gpt_neox" {
        root.f64("rotary_emb_base")?
    } else {
        root.f64("rope_theta")?
    };
    // The config class's defaults for what the file leaves out.
    let (default_theta, default_partial, default_original) = defaults::MODEL_DEFAULTS
        .iter()
        .find(|(name, ..)| *name == model_type)
        .map_or((10_000.0, None, None), |&(_, theta, partial, original)| {
            (theta, partial, original)
        });
    let base = rope
        .f64("rope_theta")?
        .or(top_theta)
        .unwrap_or(default_theta);
    // Partial rotation: GPT-NeoX's `rotary_pct`, else `partial_rotary_factor`.
    let top_partial = if model_type == "gpt_neox" {
        root.f64("rotary_pct")?
    } else {
        root.f64("partial_rotary_factor")?
    };
    let partial = rope
        .f64("partial_rotary_factor")?
        .or(top_partial)
        .or(default_partial)
        .unwrap_or(1.0);
    // Named as the file spells it: nested, else GPT-NeoX's `rotary_pct`, else top level.
    let partial_field = if rope.get("partial_rotary_factor").is_some() {
        rope.name("partial_rotary_factor")
    } else if model_type == "gpt_neox" {
        "rotary_pct".into()
    } else {
        "partial_rotary_factor".into()
    };

    let rope_type_key = if rope.get("rope_type").is_some() {
        "rope_type"
    } else {
        "type"
    };
    let rope_type = match rope.get(rope_type_key) {
        // The vision encoders' config classes default to their own axial rotation.
        None if families::vision_axes(model_type).is_some() => "axial",
        None => "default",
        Some(Value::String(s)) => s.as_str(),
        Some(v) => return Err(rope.wrong(rope_type_key, "a string", v)),
    };
    let rope_type = match model_type {
        "phi3" => families::phi3_rope_type(&rope, rope_type_key, rope_type)?,
        _ => rope_type,
    };
    // Qwen2-VL's and Qwen2.5-VL's config classes read the older `"mrope"` as `"default"`; the
    // sections go to the rope's axes.
    let axes = match families::vision_axes(model_type) {
        Some(axes) => axes,
        None => families::mrope_axes(&rope, model_type)?,
    };
    let rope_type = match (rope_type, &axes) {
        ("mrope", RopeAxes::MRope(_)) => "default",
        (other, _) => other,
    };
    if let (true, Some(layer)) = (model_type.starts_with("gemma4"), layer_type) {
        let full = match params_of_full.and_then(|m| m.get("rope_type").or(m.get("type"))) {
            Some(Value::String(s)) => s.as_str(),
            _ => "default",
        };
        families::gemma4_entry_complete(&rope, &root, rope_type, layer, full)?;
    }

    let gemma4_global = model_type.starts_with("gemma4") && layer_type == Some("full_attention");
    let head_dim = families::head_dim(&root, model_type, gemma4_global)?;
    let d_head = match head_dim {
        Some(d) if d > 0 => d,
        _ => {
            let needed = "the head width is head_dim, or hidden_size / num_attention_heads";
            let [hidden, heads] = families::sizes(&root, model_type)?;
            // Qwen2-VL's vision encoder divides `embed_dim` (its `hidden_size` is the merger's).
            let hidden = match model_type {
                "qwen2_vl_vision" => Some(root.usize("embed_dim")?.unwrap_or(1280)),
                _ => hidden,
            };
            let hidden = root.required("hidden_size", hidden, needed)?;
            let heads = root.required("num_attention_heads", heads, needed)?;
            if heads == 0 {
                return Err(HfConfigError::Inconsistent {
                    field: "num_attention_heads".into(),
                    value: "0".into(),
                    rule: "the head width hidden_size / num_attention_heads needs a head".into(),
                    fix: "set num_attention_heads, or head_dim".into(),
                });
            }
            hidden / heads
        }
    };
    if !(partial.is_finite() && partial > 0.0 && partial <= 1.0) {
        return Err(HfConfigError::Inconsistent {
            field: partial_field.clone(),
            value: partial.to_string(),
            rule: "the share of each head that rotates lies in (0, 1]".into(),
            fix: "use a value such as 0.25, 0.5 or 1.0".into(),
        });
    }
    // `int(head_dim * partial_rotary_factor)`.
    let rotary_dims = (d_head as f64 * partial) as usize;
    let max_positions = families::max_positions(&root, model_type)?;
    let needs_max = |what: &str| {
        root.required(
            "max_position_embeddings",
            max_positions,
            &format!("{rope_type} needs it for {what}"),
        )
    };
    // `standardize_rope_params`: for one flat entry the top level wins (Phi-3 keeps it there;
    // its class defaults it to 4096), then rope_parameters, then max_position_embeddings; a
    // nested entry (Gemma) takes its own or max_position_embeddings.
    let original = || -> Result<usize, HfConfigError> {
        let top = match is_nested {
            true => None,
            false => root
                .usize("original_max_position_embeddings")?
                .or(default_original),
        };
        match top {
            Some(n) => Ok(n),
            None => match rope.usize("original_max_position_embeddings")? {
                Some(n) => Ok(n),
                None => needs_max("the default original_max_position_embeddings"),
            },
        }
    };
    let factor = |needed_for: &str| rope.required("factor", rope.f64("factor")?, needed_for);

    let scaling = match rope_type {
        "default" => RopeScaling::None,
        // `compute_axial_rope_parameters`: the trained angles, the pairs dealt to rows and
        // columns (the axes below).
        "axial" if families::vision_axes(model_type).is_some() => RopeScaling::None,
        "linear" => RopeScaling::Interpolation(factor("linear divides the frequencies by it")?),
        "dynamic" => RopeScaling::Dynamic(DynamicScaling {
            factor: factor("dynamic scales the base by it")?,
            max_position_embeddings: needs_max("the length past which the base grows")?,
        }),
        "yarn" => {
            let original = original()?;
            // `factor` is required; `null` means max_position_embeddings / original.
            if !rope.map.contains_key("factor") {
                rope.required::<f64>("factor", None, "yarn's ramp and attention factor use it")?;
            }
            let factor = match rope.f64("factor")? {
                Some(f) => f,
                None => needs_max("the default factor")? as f64 / original as f64,
            };
            // `config.rope_parameters.get("truncate", True)`: absent is true, `null` is false. It
            // reads the top-level dict, so a nested entry's own `truncate` is never seen.
            let truncate = match rope.map.get("truncate") {
                _ if is_nested => true,
                None => true,
                Some(_) => rope.bool("truncate")?.unwrap_or(false),
            };
            RopeScaling::Yarn(YarnScaling {
                factor,
                original_max_position_embeddings: original,
                attention_factor: rope.f64("attention_factor")?,
                beta_fast: rope.f64("beta_fast")?,
                beta_slow: rope.f64("beta_slow")?,
                mscale: rope.f64("mscale")?,
                mscale_all_dim: rope.f64("mscale_all_dim")?,
                truncate,
            })
        }
        "longrope" => {
            let original = original()?;
            let needed = "longrope scales each frequency by it";
            let short_factor = rope.required("short_factor", rope.list("short_factor")?, needed)?;
            let long_factor = rope.required("long_factor", rope.list("long_factor")?, needed)?;
            if model_type == "phi3" {
                let lengths = [short_factor.len(), long_factor.len()];
                families::phi3_factor_lengths(&rope, &root, partial, lengths)?;
            }
            let factor = match rope.f64("factor")? {
                Some(f) => f,
                None => needs_max("the default factor")? as f64 / original as f64,
            };
            RopeScaling::LongRope(LongRopeScaling {
                short_factor,
                long_factor,
                original_max_position_embeddings: original,
                factor,
                attention_factor: rope.f64("attention_factor")?,
            })
        }
        "llama3" => {
            let needed = "llama3's wavelength bands use it";
            RopeScaling::Llama3(Llama3Scaling {
                factor: factor(needed)?,
                low_freq_factor: rope.required(
                    "low_freq_factor",
                    rope.f64("low_freq_factor")?,
                    needed,
                )?,
                high_freq_factor: rope.required(
                    "high_freq_factor",
                    rope.f64("high_freq_factor")?,
                    needed,
                )?,
                original_max_position_embeddings: original()?,
            })
        }
        "proportional" => RopeScaling::Proportional(ProportionalScaling {
            partial_rotary_factor: partial,
            factor: rope.f64("factor")?.unwrap_or(1.0),
        }),
        other => {
            return Err(HfConfigError::UnknownRopeType {
                field: rope.name(rope_type_key),
                found: other.to_string(),
            });
        }
    };
    let rotary_dims = match scaling {
        RopeScaling::Proportional(_) => d_head,
        // Llama, Qwen 2, Mistral, ...: their own default ignores partial_rotary_factor.
        RopeScaling::None if defaults::DEFAULT_IGNORES_PARTIAL.contains(&model_type) => d_head,
        _ => rotary_dims,
    };
    // Llama's `rotate_half` pairs halves. Cohere's, GLM's and a few others' pair adjacent
    // dimensions in place (their modeling code, whatever the file says); DeepSeek-style
    // checkpoints store interleaved pairs (`rope_interleave`, true by default for DeepSeek V3 and
    // kin; V2 multiplies complex numbers made of adjacent pairs).
    let layout = families::layout(model_type)?;
    let interleaved = match layout {
        families::Pairs::Adjacent { .. } => true,
        families::Pairs::Halves => match root.bool("rope_interleave")? {
            Some(interleaved) => interleaved,
            None => {
                defaults::INTERLEAVED_BY_DEFAULT.contains(&model_type)
                    || model_type == "deepseek_v2"
            }
        },
    };
    if interleaved && rotary_dims < d_head {
        let (rule, fix) = match layout {
            // GLM's `apply_rotary_pos_emb` slices the first `rotary_dim` dimensions.
            families::Pairs::Adjacent { partial: true } => (None, ""),
            families::Pairs::Adjacent { partial: false } => (
                Some(format!(
                    "{model_type}'s apply_rotary_pos_emb multiplies all {d_head} dimensions by \
                     cos and sin, which transformers builds {} wide here: it fails",
                    2 * RopeScaling::pairs(rotary_dims)
                )),
                "leave partial_rotary_factor out (or at 1.0)",
            ),
            // DeepSeek's `apply_rotary_pos_emb_interleave` rotates the whole (rope part of the) head.
            families::Pairs::Halves => (
                Some(format!(
                    "interleaved pairs (rope_interleave) rotate all {d_head} dimensions; \
                     transformers' apply_rotary_pos_emb_interleave fails on {rotary_dims}"
                )),
                "leave partial_rotary_factor out, or set rope_interleave to false",
            ),
        };
        if let Some(rule) = rule {
            return Err(HfConfigError::Inconsistent {
                field: partial_field.clone(),
                value: partial.to_string(),
                rule,
                fix: fix.into(),
            });
        }
    }
    let layout = if interleaved {
        RopeLayout::Interleaved
    } else {
        RopeLayout::HalfSplit
    };
    let base_field = if rope.get("rope_theta").is_some() {
        rope.name("rope_theta")
    } else if model_type == "gpt_neox" {
        "rotary_emb_base".into()
    } else {
        "rope_theta".into()
    };
    check_ranges(&rope, &base_field, base, &scaling)?;
    let config = RopeConfig::new(d_head)
        .with_base(base)
        .with_rotary_dims(Some(rotary_dims))
        .with_layout(layout)
        .with_cache_len(max_positions.unwrap_or(HF_CACHE_LEN).clamp(1, HF_CACHE_LEN))
        .with_scaling(scaling)
        .with_arithmetic(RopeArithmetic::Transformers)
        .with_axes(axes);
    config.validate()?;
    Ok(config)
}

/// Every number of the rotary settings in the range its formula needs (transformers reads them
/// without checks and would compute NaN or infinite angles), named by its field in config.json.
fn check_ranges(
    rope: &Fields,
    base_field: &str,
    base: f64,
    scaling: &RopeScaling,
) -> Result<(), HfConfigError> {
    let refuse = |field: String, value: f64, rule: &str, fix: &str| {
        Err(HfConfigError::Inconsistent {
            field,
            value: value.to_string(),
            rule: rule.into(),
            fix: fix.into(),
        })
    };
    let positive = |key: &str, value: Option<f64>, rule: &str, fix: &str| match value {
        Some(v) if !(v.is_finite() && v > 0.0) => refuse(rope.name(key), v, rule, fix),
        _ => Ok(()),
    };
    if !(base.is_finite() && base > 0.0) {
        return refuse(
            base_field.into(),
            base,
            "the wavelength base is a finite number above 0 (the angles are \
             position / base^(2i/d): a base of 0 or below gives NaN or infinite angles)",
            "use the checkpoint's value, such as 10000.0 (Llama 2) or 500000.0 (Llama 3)",
        );
    }
    let factor_rule = "a scaling factor is a finite number above 0 (the frequencies are \
                       divided by it)";
    let factor_fix = "use the checkpoint's value, such as 8.0 (Llama 3.1) or 4.0";
    match scaling {
        RopeScaling::Interpolation(factor) => {
            positive("factor", Some(*factor), factor_rule, factor_fix)?
        }
        RopeScaling::Dynamic(d) => positive("factor", Some(d.factor), factor_rule, factor_fix)?,
        RopeScaling::Llama3(l) => {
            positive("factor", Some(l.factor), factor_rule, factor_fix)?;
            let band = "llama3's band factors are finite numbers above 0 (the band edges are \
                        original_max_position_embeddings divided by them)";
            let fix = "use Llama 3.1's values: low_freq_factor 1.0, high_freq_factor 4.0";
            positive("low_freq_factor", Some(l.low_freq_factor), band, fix)?;
            positive("high_freq_factor", Some(l.high_freq_factor), band, fix)?;
        }
        RopeScaling::Yarn(y) => {
            positive("factor", Some(y.factor), factor_rule, factor_fix)?;
            positive(
                "attention_factor",
                y.attention_factor,
                "yarn's attention factor scales cos and sin: a finite number above 0",
                "leave it out (transformers then derives it from factor)",
            )?;
            // transformers takes a beta of 0 (its logarithm is -inf, the ramp's edge clamps to
            // 0); a negative one makes `math.floor(nan)` fail there.
            for (key, value) in [("beta_fast", y.beta_fast), ("beta_slow", y.beta_slow)] {
                if let Some(v) = value.filter(|v| !(v.is_finite() && *v >= 0.0)) {
                    return refuse(
                        rope.name(key),
                        v,
                        "yarn's beta_fast and beta_slow are rotation counts, finite and not \
                         negative (their logarithm sets the ramp)",
                        "leave them out for transformers' defaults (32 and 1)",
                    );
                }
            }
            for (key, value) in [("mscale", y.mscale), ("mscale_all_dim", y.mscale_all_dim)] {
                if let Some(v) = value.filter(|v| !v.is_finite()) {
                    return refuse(
                        rope.name(key),
                        v,
                        "yarn's mscale values are finite numbers",
                        "leave them out, or use the checkpoint's value",
                    );
                }
            }
        }
        RopeScaling::LongRope(l) => {
            positive("factor", Some(l.factor), factor_rule, factor_fix)?;
            positive(
                "attention_factor",
                l.attention_factor,
                "longrope's attention factor scales cos and sin: a finite number above 0",
                "leave it out (transformers then derives it from factor)",
            )?;
            for (key, list) in [
                ("short_factor", &l.short_factor),
                ("long_factor", &l.long_factor),
            ] {
                if let Some((i, v)) = list
                    .iter()
                    .enumerate()
                    .find(|(_, v)| !(v.is_finite() && **v > 0.0))
                {
                    return refuse(
                        format!("{}[{i}]", rope.name(key)),
                        *v,
                        "longrope's per-pair factors are finite numbers above 0 (each \
                         frequency is divided by its factor)",
                        "use the checkpoint's lists, each entry 1.0 or more",
                    );
                }
            }
        }
        RopeScaling::Proportional(p) => {
            positive("factor", Some(p.factor), factor_rule, factor_fix)?
        }
        _ => {}
    }
    Ok(())
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
