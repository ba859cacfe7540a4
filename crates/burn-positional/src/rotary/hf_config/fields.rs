//! The fields of a `config.json` object, read with the path they are reported under.

use serde_json::{Map, Value};

use super::HfConfigError;

/// The fields of one object, with the path they are reported under.
pub(super) struct Fields<'a> {
    pub(super) map: &'a Map<String, Value>,
    pub(super) path: &'static str,
}

impl<'a> Fields<'a> {
    pub(super) fn name(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The value under `key`, `None` when absent or `null`.
    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub(super) fn f64(&self, key: &str) -> Result<Option<f64>, HfConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a number", v)),
        }
    }

    pub(super) fn usize(&self, key: &str) -> Result<Option<usize>, HfConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| self.wrong(key, "a non-negative integer", v)),
        }
    }

    pub(super) fn bool(&self, key: &str) -> Result<Option<bool>, HfConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "true or false", v)),
        }
    }

    pub(super) fn list(&self, key: &str) -> Result<Option<Vec<f64>>, HfConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let wrong = || self.wrong(key, "a list of numbers", v);
        v.as_array()
            .ok_or_else(wrong)?
            .iter()
            .map(|x| x.as_f64().ok_or_else(wrong))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    pub(super) fn required<T>(
        &self,
        key: &str,
        value: Option<T>,
        needed_for: &str,
    ) -> Result<T, HfConfigError> {
        value.ok_or_else(|| HfConfigError::Missing {
            field: self.name(key),
            needed_for: needed_for.to_string(),
            fix: format!("add `{key}` as transformers' config class writes it"),
        })
    }

    pub(super) fn wrong(&self, key: &str, expected: &'static str, found: &Value) -> HfConfigError {
        HfConfigError::WrongType {
            field: self.name(key),
            expected,
            found: found.to_string(),
        }
    }
}
