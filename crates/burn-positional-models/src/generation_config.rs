//! [`GenerationConfig`]: the fields of a checkpoint's `generation_config.json` that generation
//! reads, with transformers 5.24's defaults and its refusals.
//!
//! transformers 5.24 (`GenerationMixin.from_pretrained`) reads `generation_config.json` when the
//! folder has one and nothing of `config.json` then; without one it builds the generation config
//! from `config.json`'s fields of the same names (`eos_token_id`, `pad_token_id`, ...). Every
//! field left unset takes `GenerationConfig._get_default_generation_params()` at `generate`:
//! greedy, `max_length` 20 (20 new tokens), temperature 1, `top_k` 50, `top_p` 1, repetition
//! penalty 1.

use std::path::Path;

use serde::Deserialize;

use crate::Checkpoint;
use crate::error::{GenerateError, ModelError};
use crate::sampling::Sampling;

/// `eos_token_id`: one id or a list of them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum TokenIds {
    /// One id.
    One(i64),
    /// Several ids, any of which ends a row.
    Many(Vec<i64>),
}

impl TokenIds {
    /// The ids as a list.
    pub fn to_vec(&self) -> Vec<i64> {
        match self {
            Self::One(id) => vec![*id],
            Self::Many(ids) => ids.clone(),
        }
    }
}

/// The generation settings of a checkpoint folder, each `None` where the file leaves it unset
/// (transformers 5.24 keeps `None` too and fills defaults at `generate`; the accessors give the
/// value generation uses).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct GenerationConfig {
    /// `do_sample` (default false: greedy).
    pub do_sample: Option<bool>,
    /// `temperature` (default 1).
    pub temperature: Option<f64>,
    /// `top_k` (default 50; 0 turns it off).
    pub top_k: Option<i64>,
    /// `top_p` (default 1: off).
    pub top_p: Option<f64>,
    /// `min_p` (default none: off).
    pub min_p: Option<f64>,
    /// `repetition_penalty` (default 1: off).
    pub repetition_penalty: Option<f64>,
    /// `eos_token_id`: one id or a list (default none: no stop token).
    pub eos_token_id: Option<TokenIds>,
    /// `pad_token_id` (default: the first eos id).
    pub pad_token_id: Option<i64>,
    /// `bos_token_id`.
    pub bos_token_id: Option<i64>,
    /// `max_new_tokens` (wins over `max_length`).
    pub max_new_tokens: Option<i64>,
    /// `max_length`: prompt and new tokens together (default: 20 new tokens).
    pub max_length: Option<i64>,
    /// `decoder_start_token_id` (encoder-decoder models; default `bos_token_id`).
    pub decoder_start_token_id: Option<i64>,
    /// The file the settings came from, for messages.
    #[serde(skip)]
    pub source_name: String,
}

/// transformers' default number of new tokens when neither `max_new_tokens` nor `max_length`
/// is set (`max_length` 20 counted from the prompt's end).
pub const DEFAULT_NEW_TOKENS: usize = 20;

impl GenerationConfig {
    /// The settings of `checkpoint`'s folder: its `generation_config.json`, or without one the
    /// same fields of its `config.json` (as transformers 5.24), checked.
    ///
    /// # Errors
    ///
    /// [`GenerateError::Model`] for an unreadable file or a field of the wrong type,
    /// [`GenerateError::Setting`] for a value transformers refuses (see [`check`](Self::check)).
    pub fn for_checkpoint(checkpoint: &Checkpoint) -> Result<Self, GenerateError> {
        let dir = checkpoint
            .config_path
            .parent()
            .unwrap_or_else(|| Path::new("."));
        let path = dir.join("generation_config.json");
        let mut config = if path.exists() {
            Self::from_file(&path)?
        } else {
            let mut config: Self = checkpoint.config()?;
            config.source_name = checkpoint.config_path.display().to_string();
            config
        };
        if config.source_name.is_empty() {
            config.source_name = path.display().to_string();
        }
        config.check()?;
        Ok(config)
    }

    /// A `generation_config.json` read as it is (unchecked).
    ///
    /// # Errors
    ///
    /// [`GenerateError::Model`] for an unreadable file or a field of the wrong type.
    pub fn from_file(path: &Path) -> Result<Self, GenerateError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::Io {
            path: name.clone(),
            detail: e.to_string(),
        })?;
        let mut config: Self = serde_json::from_str(&text).map_err(|e| ModelError::Config {
            path: name.clone(),
            detail: e.to_string(),
        })?;
        config.source_name = name;
        Ok(config)
    }

    /// Refuses what transformers 5.24 refuses: `max_new_tokens` below 1
    /// (`GenerationConfig.validate`), a `repetition_penalty` not above 0 (its processor), and
    /// when sampling a `temperature` not above 0, a negative `top_k`, a `top_p` below 0 (the
    /// warpers). A `top_p` above 1, which transformers skips without a word, is refused too:
    /// it is a typo for something. Sampling-only values are not checked when `do_sample` is
    /// false: transformers ignores them then.
    ///
    /// # Errors
    ///
    /// [`GenerateError::Setting`] naming the field, the value, the range and the fix.
    pub fn check(&self) -> Result<(), GenerateError> {
        let source = &self.source_name;
        if let Some(n) = self.max_new_tokens.filter(|&n| n < 1) {
            return Err(setting(
                source,
                "max_new_tokens",
                n,
                "at least 1",
                "remove it (20 new tokens by default) or set a positive count",
            ));
        }
        if let Some(n) = self.max_length.filter(|&n| n < 1) {
            return Err(setting(
                source,
                "max_length",
                n,
                "at least 1 (prompt and new tokens together)",
                "remove it and set max_new_tokens",
            ));
        }
        if let Some(k) = self.top_k.filter(|&k| k < 0 && self.do_sample()) {
            return Err(setting(
                source,
                "top_k",
                k,
                "0 (off) or a positive count",
                "set top_k to 0 to keep every token, or to the number of tokens to keep",
            ));
        }
        check_sampling(&self.sampling(), source)
    }

    /// `do_sample`, false when unset.
    pub fn do_sample(&self) -> bool {
        self.do_sample.unwrap_or(false)
    }

    /// The sampling settings with transformers' defaults (`top_k` 50). A negative `top_k`
    /// (refused by [`check`](Self::check)) reads as 0.
    pub fn sampling(&self) -> Sampling {
        Sampling {
            do_sample: self.do_sample(),
            temperature: self.temperature.unwrap_or(1.0),
            top_k: self.top_k.unwrap_or(50).max(0) as usize,
            top_p: self.top_p.unwrap_or(1.0),
            min_p: self.min_p,
            repetition_penalty: self.repetition_penalty.unwrap_or(1.0),
        }
    }

    /// The ids that end a row (none when unset).
    pub fn eos_token_ids(&self) -> Vec<i64> {
        self.eos_token_id
            .as_ref()
            .map(TokenIds::to_vec)
            .unwrap_or_default()
    }

    /// `pad_token_id`, else the first eos id (transformers' `_prepare_special_tokens`), else
    /// none.
    pub fn pad_token_id(&self) -> Option<i64> {
        self.pad_token_id
            .or_else(|| self.eos_token_ids().first().copied())
    }

    /// `decoder_start_token_id`, else `bos_token_id` (transformers' `_prepare_special_tokens`).
    pub fn decoder_start_token_id(&self) -> Option<i64> {
        self.decoder_start_token_id.or(self.bos_token_id)
    }
}

/// A [`GenerateError::Setting`].
pub(crate) fn setting(
    source: &str,
    field: &'static str,
    value: impl std::fmt::Display,
    allowed: &str,
    fix: &'static str,
) -> GenerateError {
    GenerateError::Setting {
        source_name: source.to_string(),
        field,
        value: value.to_string(),
        allowed: allowed.to_string(),
        fix,
    }
}

/// The ranges transformers' processors accept: `repetition_penalty > 0` always; when
/// sampling, `temperature > 0`, `top_p` and `min_p` in `[0, 1]`.
///
/// # Errors
///
/// [`GenerateError::Setting`] for the first value out of range.
pub(crate) fn check_sampling(sampling: &Sampling, source: &str) -> Result<(), GenerateError> {
    let penalty = sampling.repetition_penalty;
    if !(penalty > 0.0 && penalty.is_finite()) {
        return Err(setting(
            source,
            "repetition_penalty",
            penalty,
            "a finite number above 0 (1 is off, above 1 penalises repeats)",
            "use 1.0 for no penalty, or a value such as 1.2",
        ));
    }
    if !sampling.do_sample {
        return Ok(());
    }
    let temperature = sampling.temperature;
    if !(temperature > 0.0 && temperature.is_finite()) {
        return Err(setting(
            source,
            "temperature",
            temperature,
            "a finite number above 0 when do_sample is true",
            "for greedy decoding set do_sample to false; to sample, use a temperature such as \
             0.7 or 1.0",
        ));
    }
    let top_p = sampling.top_p;
    if !(0.0..=1.0).contains(&top_p) {
        return Err(setting(
            source,
            "top_p",
            top_p,
            "[0, 1] (1 is off)",
            "use 1.0 to keep every token, or the probability mass to keep such as 0.9",
        ));
    }
    if let Some(min_p) = sampling.min_p.filter(|p| !(0.0..=1.0).contains(p)) {
        return Err(setting(
            source,
            "min_p",
            min_p,
            "[0, 1] (a fraction of the largest token's probability)",
            "remove min_p to keep every token, or use a fraction such as 0.05 or 0.1",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> GenerationConfig {
        let mut config: GenerationConfig = serde_json::from_str(json).unwrap();
        config.source_name = "generation_config.json".into();
        config
    }

    #[test]
    fn unset_fields_take_transformers_defaults() {
        let config = parse("{}");
        assert_eq!(
            config.sampling(),
            Sampling {
                top_k: 50,
                ..Sampling::greedy()
            }
        );
        assert_eq!(config.eos_token_ids(), Vec::<i64>::new());
        assert_eq!(config.pad_token_id(), None);
        config.check().unwrap();
    }

    #[test]
    fn eos_is_one_id_or_a_list_and_pad_falls_back_to_the_first() {
        let config = parse(r#"{"eos_token_id": [7, 3], "bos_token_id": 1}"#);
        assert_eq!(config.eos_token_ids(), vec![7, 3]);
        assert_eq!(config.pad_token_id(), Some(7));
        assert_eq!(config.decoder_start_token_id(), Some(1));
        let config = parse(r#"{"eos_token_id": 5, "pad_token_id": 0}"#);
        assert_eq!(
            (config.eos_token_ids(), config.pad_token_id()),
            (vec![5], Some(0))
        );
    }

    #[test]
    fn refusals_name_field_value_and_range() {
        let refused = |json: &str, field: &str, value: &str| {
            let err = parse(json).check().unwrap_err();
            let message = err.to_string();
            assert!(
                matches!(&err, GenerateError::Setting { field: f, value: v, .. }
                    if *f == field && v == value),
                "{json}: {message}"
            );
            assert!(message.contains("Fix:"), "{message}");
        };
        refused(
            r#"{"do_sample": true, "temperature": 0.0}"#,
            "temperature",
            "0",
        );
        refused(
            r#"{"do_sample": true, "temperature": -1}"#,
            "temperature",
            "-1",
        );
        refused(r#"{"do_sample": true, "top_p": 1.5}"#, "top_p", "1.5");
        refused(r#"{"do_sample": true, "top_p": -0.1}"#, "top_p", "-0.1");
        refused(r#"{"do_sample": true, "top_k": -2}"#, "top_k", "-2");
        refused(r#"{"do_sample": true, "min_p": 1.5}"#, "min_p", "1.5");
        refused(r#"{"do_sample": true, "min_p": -0.1}"#, "min_p", "-0.1");
        refused(r#"{"repetition_penalty": 0.0}"#, "repetition_penalty", "0");
        refused(r#"{"max_new_tokens": 0}"#, "max_new_tokens", "0");
    }

    #[test]
    fn sampling_values_are_ignored_when_greedy() {
        // transformers only warns: the warpers are not built without do_sample.
        parse(r#"{"temperature": 0.0, "top_p": 7, "top_k": -1, "min_p": 3}"#)
            .check()
            .unwrap();
    }
}
