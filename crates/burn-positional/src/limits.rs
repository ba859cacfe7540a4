//! The sizes a config may ask for, checked before anything is allocated.
//!
//! A size that cannot exist (its product overflows) or that no model needs is a typo or a
//! corrupt config, and is refused by `try_init` as [`PositionError::InvalidConfig`] naming the
//! field, instead of being handed to the allocator (which aborts the process when it fails).

use crate::PositionError;

/// The most values one table (token table, learned position table, precomputed cache, weight
/// matrix) may hold: 2^32, 16 GiB in f32. The largest tables of released models are far below
/// it (a 256 000-token vocabulary at width 8192 is 2^31 values).
pub const MAX_TABLE_VALUES: usize = 1 << 32;

/// The most values a table that the layer grows by itself on demand (the sinusoid rows past
/// the cache, RoPE's angles past theirs) may reach when its config sets no limit: 2^26, 256
/// MiB in f32, the largest buffer wgpu guarantees on every adapter. For the sinusoidal table
/// of width `d_position` that is `2^26 / d_position` rows (65 536 at width 1024).
pub const GROWN_TABLE_VALUES: usize = 1 << 26;

/// Refuses a `rows x cols` table whose size overflows or passes [`MAX_TABLE_VALUES`].
pub(crate) fn table_fits(
    field: &'static str,
    rows: usize,
    cols: usize,
    fix: impl FnOnce() -> String,
) -> Result<(), PositionError> {
    match rows.checked_mul(cols) {
        Some(values) if values <= MAX_TABLE_VALUES => Ok(()),
        values => Err(PositionError::InvalidConfig {
            field,
            value: rows.to_string(),
            rule: match values {
                None => "the table it sizes would hold more values than a usize can count",
                Some(_) => {
                    "the table it sizes would hold more than MAX_TABLE_VALUES = 2^32 values \
                     (16 GiB in f32), the ceiling this crate accepts"
                }
            },
            fix: format!("{} (the table is {rows} x {cols})", fix()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_and_ceiling_are_refused_naming_the_field() {
        assert!(table_fits("f", 1 << 16, 1 << 16, String::new).is_ok());
        for (rows, cols) in [(usize::MAX, 2), (1 << 40, 64), ((1 << 32) + 1, 1)] {
            let err = table_fits("LearnedConfig::max_len", rows, cols, || "lower it".into())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("`LearnedConfig::max_len`") && err.contains(&rows.to_string()),
                "{err}"
            );
        }
    }
}
