//! The sizes a config may ask for, checked before anything is allocated.
//!
//! A size that cannot exist (its product overflows) or that no model needs is a typo or a
//! corrupt config, and is refused by `try_init` as [`PositionError::InvalidConfig`] naming the
//! field, instead of being handed to the allocator (which aborts the process when it fails).

use burn::tensor::{DType, Device};

use crate::PositionError;

/// The most values one table (token table, learned position table, precomputed cache, weight
/// matrix) may hold: 2^32, 16 GiB in f32. The largest tables of released models are far below
/// it (a 256 000-token vocabulary at width 8192 is 2^31 values).
pub const MAX_TABLE_VALUES: usize = 1 << 32;

/// The most values a table that the layer grows by itself on demand (the sinusoid rows past
/// the cache, RoPE's angles past theirs) may reach when its config sets no limit: 2^26, 256
/// MiB in f32. For the sinusoidal table of width `d_position` that is `2^26 / d_position` rows
/// (65 536 at width 1024), fewer where one buffer of the device holds less ([`device_rows`]).
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

/// The bytes of one value of the device's default float dtype (what `init` builds tables in).
pub(crate) fn float_bytes(device: &Device) -> usize {
    DType::from(device.settings().float_dtype).size()
}

/// The most rows of `cols` values of `value_bytes` each that one buffer of `device` holds, or
/// `None` where the device states no limit (the CPU backends).
pub(crate) fn device_rows(device: &Device, cols: usize, value_bytes: usize) -> Option<usize> {
    let limit = burn_positional_kernels::max_buffer_bytes(device)?;
    let row = (cols.max(1) * value_bytes) as u64;
    Some(usize::try_from(limit / row).unwrap_or(usize::MAX))
}

/// Refuses a `rows x cols` table of the device's float dtype that `device` cannot allocate in
/// one buffer (a wgpu adapter's storage-buffer limit, 256 MiB on many), naming the size, the
/// limit and the fix; `fix` gets the most rows that fit.
pub(crate) fn device_fits(
    device: &Device,
    field: &'static str,
    rows: usize,
    cols: usize,
    fix: impl FnOnce(usize) -> String,
) -> Result<(), PositionError> {
    let value_bytes = float_bytes(device);
    match (
        device_rows(device, cols, value_bytes),
        burn_positional_kernels::max_buffer_bytes(device),
    ) {
        (Some(most), Some(limit)) if rows > most => Err(PositionError::TableTooLargeForDevice {
            field,
            rows,
            cols,
            bytes: (rows as u128 * cols as u128 * value_bytes as u128) as u64,
            limit,
            fix: fix(most),
        }),
        _ => Ok(()),
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
