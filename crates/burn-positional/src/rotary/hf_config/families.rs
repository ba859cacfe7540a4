//! What some transformers config classes and modeling files do their own way: Gemma 3's and
//! Gemma 4's rope per attention kind, Phi-3's rope types, the head width of each class (its own
//! default, DeepSeek's `qk_rope_head_dim`), each class's `attribute_map` and size defaults, and
//! the pairs each family rotates (Cohere's adjacent pairs). Each function cites the transformers
//! code it follows.

use serde_json::{Map, Value};

use super::{Fields, HfConfigError, rotation, sizes};
use crate::rotary::RopeAxes;

/// The layer types of models with one rope per attention kind.
pub(super) const ATTENTION_KINDS: [&str; 2] = ["full_attention", "sliding_attention"];

fn entry(rope_type: &str, theta: Option<f64>) -> Value {
    let mut m = Map::new();
    m.insert("rope_type".into(), Value::from(rope_type));
    if let Some(theta) = theta {
        m.insert("rope_theta".into(), Value::from(theta));
    }
    Value::Object(m)
}

fn refused(field: &str, value: String, rule: &str, fix: &str) -> HfConfigError {
    HfConfigError::Inconsistent {
        field: field.into(),
        value,
        rule: rule.into(),
        fix: fix.into(),
    }
}

/// The rope parameters Gemma 3's and Gemma 4's config classes build from the file, nested per
/// attention kind; `None` for every other model type.
///
/// Gemma 3 (`Gemma3TextConfig.convert_rope_params_to_dict`): `rope_parameters` (default: a
/// `"default"` entry per kind) with `rope_scaling` merged into its `"full_attention"` entry
/// (`dict.update`, so an old-spelling `type` beside the default entry's `rope_type` changes
/// nothing), then `rope_theta` (default 1 000 000) and `rope_local_base_freq` (default 10 000)
/// as the two entries' bases where they have none. A flat `rope_parameters` gains the two
/// entries, which then are all that is read.
///
/// Gemma 4 (`Gemma4TextConfig.__post_init__`): `rope_scaling` replaces `rope_parameters` (the
/// deprecated setter), and with neither the defaults are `proportional` 0.25 at 1 000 000 for
/// the global layers and `default` at 10 000 for the sliding ones; nothing is filled in.
pub(super) fn gemma_params(
    root: &Fields<'_>,
    model_type: &str,
) -> Result<Option<Map<String, Value>>, HfConfigError> {
    let object = |key: &str| -> Result<Option<Map<String, Value>>, HfConfigError> {
        match root.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m.clone())),
            Some(v) => Err(root.wrong(key, "an object", v)),
        }
    };
    if matches!(model_type, "gemma3" | "gemma3_text") {
        let mut params = object("rope_parameters")?.unwrap_or_else(|| {
            ATTENTION_KINDS
                .iter()
                .map(|kind| (kind.to_string(), entry("default", None)))
                .collect()
        });
        if let Some(scaling) = object("rope_scaling")? {
            match params.get_mut("full_attention") {
                Some(Value::Object(full)) => full.extend(scaling),
                _ => {
                    return Err(refused(
                        "rope_parameters",
                        "without a \"full_attention\" entry beside rope_scaling".into(),
                        "Gemma 3 merges rope_scaling into rope_parameters[\"full_attention\"] \
                         (transformers raises here)",
                        "nest rope_parameters per layer type, or drop one of the two",
                    ));
                }
            }
        }
        for (kind, key, default) in [
            ("full_attention", "rope_theta", 1_000_000.0),
            ("sliding_attention", "rope_local_base_freq", 10_000.0),
        ] {
            let theta = root.f64(key)?.unwrap_or(default);
            let slot = params
                .entry(kind)
                .and_modify(|v| {
                    if v.is_null() {
                        *v = entry("default", None);
                    }
                })
                .or_insert_with(|| entry("default", None));
            let Value::Object(m) = slot else {
                return Err(root.wrong(&format!("rope_parameters.{kind}"), "an object", slot));
            };
            m.entry("rope_theta").or_insert(Value::from(theta));
        }
        return Ok(Some(params));
    }
    if model_type.starts_with("gemma4") {
        let params = match object("rope_scaling")? {
            Some(scaling) => Some(scaling),
            None => object("rope_parameters")?,
        };
        let Some(params) = params else {
            let mut full = entry("proportional", Some(1_000_000.0));
            full["partial_rotary_factor"] = Value::from(0.25);
            let sliding = entry("default", Some(10_000.0));
            return Ok(Some(
                [("full_attention", full), ("sliding_attention", sliding)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            ));
        };
        if !params.keys().any(|k| ATTENTION_KINDS.contains(&k.as_str())) {
            return Err(refused(
                "rope_parameters",
                "one flat entry".into(),
                "Gemma 4 reads one entry per layer type (transformers raises a KeyError)",
                "nest it: {\"full_attention\": {...}, \"sliding_attention\": {...}}",
            ));
        }
        return Ok(Some(params));
    }
    Ok(None)
}

/// Gemma 4's config class fills nothing into its nested entries before validating them, so what
/// transformers' validation requires must be in the entry itself: `rope_theta` for
/// `proportional` and `llama3`, `original_max_position_embeddings` for `yarn` and `llama3`;
/// `longrope` fails its validation there (`head_dim` differs per layer). Other entries take a
/// missing `rope_theta` from the top level, which `standardize_rope_params` fills in when a
/// non-`default` entry is built: the `"default"` rotary of the global layers (built first) never
/// sees it, the sliding layers' only after a non-`default` global entry. `full` is the global
/// layers' `rope_type`.
pub(super) fn gemma4_entry_complete(
    rope: &Fields<'_>,
    root: &Fields<'_>,
    rope_type: &str,
    layer_type: &str,
    full: &str,
) -> Result<(), HfConfigError> {
    if rope_type == "longrope" {
        return Err(refused(
            &rope.name("rope_type"),
            "\"longrope\"".into(),
            "transformers' longrope validation reads head_dim, which Gemma 4 sets per layer \
             (it raises)",
            "use yarn, linear or proportional",
        ));
    }
    let theta_from_top = match rope_type {
        "proportional" | "llama3" => false,
        "default" => layer_type != "full_attention" && full != "default",
        _ => true,
    };
    if rope.get("rope_theta").is_none() && !(theta_from_top && root.get("rope_theta").is_some()) {
        rope.required::<f64>(
            "rope_theta",
            None,
            "Gemma 4's nested rope entries need their base",
        )?;
    }
    if matches!(rope_type, "yarn" | "llama3")
        && rope.get("original_max_position_embeddings").is_none()
    {
        rope.required::<usize>(
            "original_max_position_embeddings",
            None,
            "Gemma 4's nested rope entries are validated before any default is filled in",
        )?;
    }
    Ok(())
}

/// Phi-3's `rope_type` (`Phi3Config.convert_rope_params_to_dict` and `validate_rope`): `"su"` and
/// `"yarn"` are read as `"longrope"`, and only `"default"` and `"longrope"` are accepted.
pub(super) fn phi3_rope_type<'a>(
    rope: &Fields<'_>,
    key: &str,
    rope_type: &'a str,
) -> Result<&'a str, HfConfigError> {
    match rope_type {
        "su" | "yarn" => Ok("longrope"),
        "default" | "longrope" => Ok(rope_type),
        other => Err(refused(
            &rope.name(key),
            format!("\"{other}\""),
            "Phi-3's config class accepts only default and longrope (su and yarn are read as \
             longrope)",
            "use longrope with short_factor and long_factor, or model_type llama",
        )),
    }
}

/// Phi-3's `validate_rope`: `short_factor` and `long_factor` have exactly
/// `int(hidden_size // num_attention_heads * partial_rotary_factor) // 2` entries.
pub(super) fn phi3_factor_lengths(
    rope: &Fields<'_>,
    root: &Fields<'_>,
    partial: f64,
    lengths: [usize; 2],
) -> Result<(), HfConfigError> {
    let (Some(hidden), Some(heads)) = (
        root.usize("hidden_size")?,
        root.usize("num_attention_heads")?,
    ) else {
        return Ok(());
    };
    let want = ((hidden / heads.max(1)) as f64 * partial) as usize / 2;
    for (key, len) in ["short_factor", "long_factor"].into_iter().zip(lengths) {
        if len != want {
            return Err(refused(
                &rope.name(key),
                format!("a list of {len}"),
                "Phi-3 needs one factor per rotated pair of hidden_size / num_attention_heads",
                &format!("give {want} factors"),
            ));
        }
    }
    Ok(())
}

/// The head width transformers' config class gives the rotary module (`config.head_dim`, else
/// `hidden_size // num_attention_heads`): Gemma 4's global layers' `global_head_dim` (default
/// 512); for the DeepSeek-style classes `qk_rope_head_dim` (their `__post_init__` sets
/// `head_dim` from it; in some the file's `head_dim` is set after and wins); the file's
/// `head_dim`; the class's own default (Gemma's 256, Qwen 3's 128, ...). `None`: derive it.
pub(super) fn head_dim(
    root: &Fields<'_>,
    model_type: &str,
    gemma4_global: bool,
) -> Result<Option<usize>, HfConfigError> {
    if gemma4_global {
        return Ok(Some(root.usize("global_head_dim")?.unwrap_or(512)));
    }
    let file = root.usize("head_dim")?.filter(|&d| d > 0);
    if let Some(&(_, default, file_wins)) = sizes::HEAD_DIM_IS_QK_ROPE
        .iter()
        .find(|(name, ..)| *name == model_type)
    {
        if let (true, Some(d)) = (file_wins, file) {
            return Ok(Some(d));
        }
        return Ok(Some(root.usize("qk_rope_head_dim")?.unwrap_or(default)));
    }
    if sizes::HEAD_DIM_IGNORED.contains(&model_type) {
        // A read-only property there: `hidden_size // num_attention_heads`.
        return Ok(None);
    }
    if file.is_some() || root.map.contains_key("head_dim") {
        // `head_dim: null` or 0 replaces the class's default: derived.
        return Ok(file);
    }
    Ok(sizes::HEAD_DIM_DEFAULTS
        .iter()
        .find(|(name, _)| *name == model_type)
        .map(|&(_, d)| d))
}

/// `max_position_embeddings`, else the config class's default.
pub(super) fn max_positions(
    root: &Fields<'_>,
    model_type: &str,
) -> Result<Option<usize>, HfConfigError> {
    Ok(root.usize("max_position_embeddings")?.or_else(|| {
        sizes::MAX_POSITION_DEFAULTS
            .iter()
            .find(|(name, _)| *name == model_type)
            .map(|&(_, n)| n)
    }))
}

/// The config class's `attribute_map` applied to the file (`PreTrainedConfig.__setattr__`): a key
/// this reader reads that the class stores under another name (DBRX's `d_model` for
/// `hidden_size`, Jetmoe's `kv_channels` for `head_dim`) is read from that name when the file
/// has no value under the key itself (the key wins when it has both, as in transformers).
/// `None` when nothing changes.
pub(super) fn apply_attribute_map(
    root: &Map<String, Value>,
    model_type: &str,
) -> Option<Map<String, Value>> {
    let (_, map) = sizes::ATTRIBUTE_MAPS
        .iter()
        .find(|(name, _)| *name == model_type)?;
    let mut mapped: Option<Map<String, Value>> = None;
    for &(key, alias) in map.iter() {
        let absent = root.get(key).is_none_or(Value::is_null);
        if let (true, Some(value)) = (absent, root.get(alias).filter(|v| !v.is_null())) {
            mapped
                .get_or_insert_with(|| root.clone())
                .insert(key.to_string(), value.clone());
        }
    }
    mapped
}

/// `[hidden_size, num_attention_heads]`: the file's (after the class's `attribute_map`), else the
/// config class's defaults (Falcon's 4544 and 71). A name that other classes read as one of them
/// but this class ignores (Falcon's `n_head`: `FalconConfig` has no `attribute_map` in
/// transformers 5) is refused when it differs from what transformers uses instead, since then
/// the file means one head width and transformers builds another.
pub(super) fn sizes(
    root: &Fields<'_>,
    model_type: &str,
) -> Result<[Option<usize>; 2], HfConfigError> {
    let class = sizes::SIZE_DEFAULTS
        .iter()
        .find(|(name, ..)| *name == model_type)
        .map(|&(_, hidden, heads)| [hidden, heads]);
    let mut out = [None; 2];
    for (i, key) in ["hidden_size", "num_attention_heads"]
        .into_iter()
        .enumerate()
    {
        if let Some(value) = root.usize(key)? {
            out[i] = Some(value);
            continue;
        }
        let default = class.map(|c| c[i]);
        for &(alias, _) in sizes::KNOWN_ALIASES.iter().filter(|(_, k)| *k == key) {
            let Some(found) = root.get(alias) else {
                continue;
            };
            if found.as_u64().map(|n| n as usize) == default {
                continue;
            }
            let instead = match default {
                Some(d) => format!("uses its default {key} {d} instead"),
                None => format!("has no {key} at all"),
            };
            return Err(refused(
                alias,
                found.to_string(),
                &format!(
                    "transformers' config class for model_type \"{model_type}\" does not read \
                     `{alias}` (its attribute_map has no entry for it), so it ignores it and \
                     {instead}"
                ),
                &format!("rename `{alias}` to `{key}`, the name transformers reads"),
            ));
        }
        out[i] = default;
    }
    Ok(out)
}

/// The pairs a model family's own modeling code rotates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pairs {
    /// Llama's `rotate_half`: `(x[j], x[j + d/2])`, unless the file says `rope_interleave`.
    Halves,
    /// Cohere's `rotate_half`: `(x[2j], x[2j + 1])` in place, whatever the file says; with
    /// `partial`, `apply_rotary_pos_emb` rotates the first `rotary_dim` dimensions (GLM), else
    /// the whole head.
    Adjacent {
        /// Whether a part of the head may rotate.
        partial: bool,
    },
}

/// The pairs `model_type`'s modeling code rotates (`rotation.rs`, written from transformers'
/// `rotate_half` of each family); a rotation no [`RopeLayout`](crate::RopeLayout) gives (NanoChat
/// turns the other way) is refused.
pub(super) fn layout(model_type: &str) -> Result<Pairs, HfConfigError> {
    if let Some((_, why)) = rotation::OTHER_ROTATION
        .iter()
        .find(|(name, _)| *name == model_type)
    {
        return Err(refused(
            "model_type",
            format!("\"{model_type}\""),
            &format!("{why}; no RopeLayout turns that way"),
            "swap the two halves of each head of q and k (turning by minus the angle is the \
             half-split rotation of the swapped halves, swapped back), then read the file with \
             model_type \"llama\"",
        ));
    }
    Ok(rotation::INTERLEAVED_ROTATION
        .iter()
        .find(|(name, _)| *name == model_type)
        .map_or(Pairs::Halves, |&(_, partial)| Pairs::Adjacent { partial }))
}

/// The axes of the multimodal Qwen text models' rotation, from `mrope_section` (each
/// `Qwen*VLTextRotaryEmbedding.__init__`: `config.rope_parameters.get("mrope_section", default)`):
/// contiguous sections for Qwen2-VL and Qwen2.5-VL (default `[16, 24, 24]`), interleaved for
/// Qwen3-VL (default `[24, 20, 20]`). Any other model type with an `mrope_section` is refused:
/// its modeling code is not one this reader follows.
pub(super) fn mrope_axes(rope: &Fields, model_type: &str) -> Result<RopeAxes, HfConfigError> {
    let sections = match rope.list("mrope_section")? {
        Some(list) => {
            let whole: Option<Vec<usize>> = list
                .iter()
                .map(|&v| (v >= 0.0 && v.fract() == 0.0).then_some(v as usize))
                .collect();
            Some(whole.ok_or_else(|| {
                refused(
                    &rope.name("mrope_section"),
                    format!("{list:?}"),
                    "M-RoPE sections are whole numbers of rotary pairs",
                    "use the checkpoint's sections, such as [16, 24, 24]",
                )
            })?)
        }
        None => None,
    };
    let family = model_type.trim_end_matches("_text");
    Ok(match family {
        "qwen2_vl" | "qwen2_5_vl" => RopeAxes::MRope(sections.unwrap_or(vec![16, 24, 24])),
        "qwen3_vl" | "qwen3_vl_moe" => {
            RopeAxes::MRopeInterleaved(sections.unwrap_or(vec![24, 20, 20]))
        }
        _ if sections.is_some() => {
            return Err(refused(
                &rope.name("mrope_section"),
                format!(
                    "{:?} (model_type \"{model_type}\")",
                    sections.unwrap_or_default()
                ),
                "M-RoPE sections are read for qwen2_vl, qwen2_5_vl and qwen3_vl, whose modeling \
                 code this reader follows",
                "read this model's rotation by its own code, or set model_type to the family \
                 it comes from",
            ));
        }
        _ => RopeAxes::Sequence,
    })
}

/// The axial rotation of a vision encoder's config class (`default_rope_type = "axial"` and its
/// `compute_axial_rope_parameters`): Qwen2-VL's and Qwen2.5-VL's rows and columns in blocks of a
/// rotation half as wide, Pixtral's frequencies dealt alternately (`cat([inv_freq[0::2],
/// inv_freq[1::2]])`). `None` for every other model type, where `"axial"` is refused.
pub(super) fn vision_axes(model_type: &str) -> Option<RopeAxes> {
    match model_type {
        "qwen2_vl_vision" | "qwen2_5_vl_vision" => Some(RopeAxes::Axial(2)),
        "pixtral" => Some(RopeAxes::AxialAlternate(2)),
        _ => None,
    }
}
