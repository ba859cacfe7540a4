//! Sinusoidal positions, from [Attention Is All You Need](https://arxiv.org/abs/1706.03762)
//! (Vaswani et al. 2017, section 3.5):
//!
//! ```text
//! PE(p, 2i)   = sin(p / base^(2i / d))
//! PE(p, 2i+1) = cos(p / base^(2i / d))
//! ```
//!
//! Columns are interleaved (sine in even columns, cosine in odd ones), as in the paper and in
//! burn's `PositionalEncoding`. Values are computed in f64 on the host and rounded once to f32,
//! so they stay accurate far out: at position 100 000 an f32 evaluation of `p * w` would already
//! be off by about 0.004 radians, this one by less than 1e-7. They live on the device as a
//! table (the cache) that the fused embedding reads like a learned one; a forward past the
//! cache grows it once (doubling), on the device, and later calls reuse it, up to
//! [`SinusoidalConfig::max_len`] rows: past it a position is refused with an error naming the
//! position, the limit and the fix, before anything is allocated.

use burn::config::Config;
use burn::module::{Content, DisplaySettings, Module, ModuleDisplay};
use burn::tensor::module::embedding;
use burn::tensor::{DType, Device, Int, Tensor, TensorData};

use crate::cache::{DeviceKey, Grown};
use crate::limits::{GROWN_TABLE_VALUES, device_fits, device_rows, float_bytes, table_fits};
use crate::{PositionError, Positions};
use burn_positional_kernels::Grid;

/// Configuration of the sinusoidal scheme. Its width comes from the embedding it belongs to.
#[derive(Config, Debug, PartialEq)]
pub struct SinusoidalConfig {
    /// The `base` of the wavelengths (the paper's 10 000): wavelengths run from `2π` to
    /// `2π · base`.
    #[config(default = "10_000.0")]
    pub base: f64,
    /// Rows precomputed at `init` and kept on the device. Not a limit: a forward at an offset
    /// past it grows the device table once (doubling; the new rows computed in f64 and
    /// uploaded), and explicit positions past it are grown to by `try_forward`. `forward` with
    /// explicit positions reads nothing back, so it cannot know their maximum: it grows the
    /// table to the sequence length (which holds any left-padded batch), and positions past
    /// the table are bad input there (NaN rows, reported by the check). Raise it to the longest
    /// context the model serves.
    #[config(default = "4096")]
    pub cache_len: usize,
    /// The most rows the device table grows to: positions must lie in `0..max_len`, and past
    /// it a forward is refused with [`PositionError::PositionPastSinusoidLimit`] (naming the
    /// position, this limit and the fix), before anything is allocated. `None` (the default):
    /// as many rows as fit in 2^26 values (256 MiB in f32), that is `2^26 / d_position` rows
    /// (65 536 at width 1024, 1 048 576 at width 64), and no more than one buffer of the device
    /// holds (wgpu on lavapipe: 128 MiB, half of that), and at least `cache_len`. A `max_len`
    /// the device cannot hold is refused by `try_init` with
    /// [`PositionError::TableTooLargeForDevice`].
    #[config(default = "None")]
    pub max_len: Option<usize>,
}

/// The sinusoidal table of one width, with a precomputed cache of its first `cache_len` rows.
///
/// Built by [`SinusoidalConfig::init`]; a constant (not trained, not saved).
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::SinusoidalConfig;
///
/// let device = Device::flex();
/// let table = SinusoidalConfig::new().with_cache_len(64).init(16, &device);
/// // Rows past the cache grow the device table once, up to max_len (2^26 / 16 rows here).
/// assert_eq!(table.rows(100_000, 5).dims(), [5, 16]);
/// assert_eq!(table.max_len(), 1 << 22);
/// assert!(table.check(1 << 22).is_err()); // past the limit: an error, never an allocation
/// let positions = Tensor::<2, Int>::from_data([[0, 7], [3, 200_000]], &device);
/// assert_eq!(table.gather(positions, 200_000).dims(), [2, 2, 16]);
/// ```
///
/// Its fields are private: the grown table is keyed by device and dtype only, so changing the
/// base or the cache in place would mix old rows with new ones. Build another table from a
/// config instead; read them through [`base`](Self::base), [`d_position`](Self::d_position),
/// [`cache`](Self::cache).
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct SinusoidalPosition {
    /// `[cache_len, d_position]`: the first rows of the table.
    cache: Tensor<2>,
    /// The width of one position vector.
    d_position: usize,
    /// The wavelength base.
    base: f64,
    /// The most rows the table grows to (see [`SinusoidalConfig::max_len`]).
    max_len: usize,
    /// The table grown past `cache` (or cast to another dtype), shared by clones of the module.
    /// Not saved: it is recomputed from the formula.
    #[module(skip)]
    grown: Grown<Tensor<2>>,
    /// MAE's 2D table of the last grid asked for, kept on the device.
    #[module(skip)]
    grid_rows: Grown<Tensor<2>, (DeviceKey, Grid)>,
}

impl ModuleDisplay for SinusoidalPosition {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new()
            .with_new_line_after_attribute(false)
            .optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        content
            .add("d_position", &self.d_position)
            .add("base", &self.base)
            .add("cache_len", &self.cache.dims()[0])
            .add("max_len", &self.max_len)
            .optional()
    }
}

impl SinusoidalConfig {
    /// Checks the config for a table of width `d_position`.
    pub fn validate(&self, d_position: usize) -> Result<(), PositionError> {
        if d_position % 2 == 1 {
            return Err(PositionError::odd("the sinusoidal width", d_position));
        }
        if !(self.base > 1.0 && self.base.is_finite()) {
            return Err(PositionError::InvalidConfig {
                field: "SinusoidalConfig::base",
                value: self.base.to_string(),
                rule: "the base must be a finite number above 1",
                fix: "use the paper's 10000, or another base above 1".into(),
            });
        }
        let fix = || "lower it to the longest context the model serves".to_string();
        table_fits(
            "SinusoidalConfig::cache_len",
            self.cache_len,
            d_position,
            fix,
        )?;
        if let Some(max_len) = self.max_len {
            table_fits("SinusoidalConfig::max_len", max_len, d_position, fix)?;
            if max_len < self.cache_len.max(1) {
                return Err(PositionError::InvalidConfig {
                    field: "SinusoidalConfig::max_len",
                    value: format!("Some({max_len})"),
                    rule: "the table cannot be limited below its precomputed cache_len rows (or \
                           to zero rows)",
                    fix: format!(
                        "set max_len to at least cache_len = {}, or lower cache_len",
                        self.cache_len
                    ),
                });
            }
        }
        Ok(())
    }

    /// The most rows a table `d_position` wide grows to on `device` (see [`Self::max_len`]),
    /// at most `i32::MAX` (the kernels' positions are 32-bit). The default also stays within
    /// the device's largest buffer.
    fn limit(&self, d_position: usize, device: &Device) -> usize {
        let limit = self.max_len.unwrap_or_else(|| {
            let rows = GROWN_TABLE_VALUES / d_position.max(1);
            let fits = device_rows(device, d_position, float_bytes(device)).unwrap_or(rows);
            rows.min(fits).max(self.cache_len)
        });
        limit.min(i32::MAX as usize)
    }

    /// Checks the config ([`validate`](Self::validate)) and that `device` can hold the table
    /// at its largest (`max_len` rows, and the `cache_len` rows built now), then builds it.
    pub fn try_init(
        &self,
        d_position: usize,
        device: &Device,
    ) -> Result<SinusoidalPosition, PositionError> {
        self.validate(d_position)?;
        device_fits(
            device,
            "SinusoidalConfig::cache_len",
            self.cache_len,
            d_position,
            |most| format!("lower cache_len to at most {most} rows on this device"),
        )?;
        device_fits(
            device,
            "SinusoidalConfig::max_len",
            self.limit(d_position, device),
            d_position,
            |most| {
                format!(
                    "set max_len to at most Some({most}) on this device (positions past it are \
                     refused with a clear error), or leave it None, which fits the device"
                )
            },
        )?;
        let rows = sinusoid_rows(0..self.cache_len as u64, d_position, self.base);
        Ok(SinusoidalPosition {
            cache: Tensor::from_data(TensorData::new(rows, [self.cache_len, d_position]), device),
            d_position,
            base: self.base,
            max_len: self.limit(d_position, device),
            grown: Grown::default(),
            grid_rows: Grown::default(),
        })
    }

    /// Builds the table and its device cache.
    ///
    /// # Panics
    ///
    /// If [`validate`](Self::validate) fails: `d_position` is odd, `base` is not above 1, or a
    /// size is past its ceiling.
    pub fn init(&self, d_position: usize, device: &Device) -> SinusoidalPosition {
        self.try_init(d_position, device)
            .unwrap_or_else(|err| panic!("{err}"))
    }
}

/// `w_i = base^(-2i/d)` for `i in 0..d/2`, in f64: the frequencies of the sinusoidal table and
/// of RoPE's rotations.
pub fn sinusoid_frequencies(d: usize, base: f64) -> Vec<f64> {
    (0..d / 2)
        .map(|i| base.powf(-((2 * i) as f64) / d as f64))
        .collect()
}

/// Rows of the sinusoidal table for the given positions, row-major `[positions, d]`, evaluated
/// in f64 and rounded once to f32.
pub fn sinusoid_rows(positions: impl IntoIterator<Item = u64>, d: usize, base: f64) -> Vec<f32> {
    // w_i = base^(-2i/d), computed once per column pair.
    let frequencies = sinusoid_frequencies(d, base);
    let mut out = Vec::new();
    for p in positions {
        for &w in &frequencies {
            let (sin, cos) = (p as f64 * w).sin_cos();
            out.push(sin as f32);
            out.push(cos as f32);
        }
    }
    out
}

impl SinusoidalPosition {
    /// The device table with at least `len` rows, in `dtype`: the longest table built so far
    /// (the cache, or a grown or cast copy shared by every later call and clone), grown when
    /// it is too short. Growth doubles the table (up to [`max_len`](Self::max_len) rows),
    /// computes only the new rows (in f64, on the host) and joins them on the device. No
    /// device-to-host read.
    ///
    /// # Shapes
    ///
    /// - output: `[at least len, d_position]`
    ///
    /// # Panics
    ///
    /// If `len` passes [`max_len`](Self::max_len) (call [`check`](Self::check) first).
    pub(crate) fn table(&self, len: usize, dtype: DType) -> Tensor<2> {
        if let Err(err) = self.check(len.saturating_sub(1) as i64) {
            panic!("{err}");
        }
        let [cache_len, d_position] = self.cache.dims();
        let device = self.cache.device();
        self.grown.with(&DeviceKey::new(&device, dtype), |grown| {
            // The longest table of this dtype on this device: the grown one if any, else the
            // cache (cast once if needed).
            let current = match grown.as_ref() {
                Some(table) => table.clone(),
                None if self.cache.dtype() == dtype => self.cache.clone(),
                None => {
                    let cast = self.cache.clone().cast(dtype);
                    *grown = Some(cast.clone());
                    cast
                }
            };
            let have = current.dims()[0];
            if len <= have {
                return current;
            }
            let new_len = len.max(2 * have).max(cache_len).min(self.max_len);
            let rows = sinusoid_rows(have as u64..new_len as u64, d_position, self.base);
            let extra = Tensor::<2>::from_data(
                TensorData::new(rows, [new_len - have, d_position]),
                &device,
            )
            .cast(dtype);
            let table = Tensor::cat(vec![current, extra], 0);
            *grown = Some(table.clone());
            table
        })
    }

    /// Rows that explicit positions see in a forward that does not read them back: the
    /// precomputed `cache_len`, or `seq` if longer (which holds every left-padded batch), up to
    /// [`max_len`](Self::max_len). Never what earlier calls grew the device table to, so that the
    /// same positions get the same answer whatever came before (and on whichever device).
    pub(crate) fn unread_rows(&self, seq: usize) -> usize {
        self.cache.dims()[0].max(seq).min(self.max_len)
    }

    /// The device table a fused pass reads, in `dtype`: rows up to an offset window's end
    /// (grown if needed; checked beforehand), or for explicit positions exactly `explicit_rows`
    /// rows (`None`: [`unread_rows`](Self::unread_rows)), a slice of the grown table if it is
    /// longer. No read.
    ///
    /// # Shapes
    ///
    /// - output: `[rows, d_position]`
    pub(crate) fn fused_table(
        &self,
        positions: &Positions,
        seq: usize,
        dtype: DType,
        explicit_rows: Option<usize>,
    ) -> Tensor<2> {
        let len = match positions {
            Positions::Offset(offset) => offset + seq,
            Positions::Explicit(_) => explicit_rows.unwrap_or_else(|| self.unread_rows(seq)),
            // The embedding keeps one-axis positions only (`Positions::on_sequence`).
            Positions::Grid(_) | Positions::Axes(_) => unreachable!("positions on a grid"),
        };
        let table = self.table(len, dtype);
        match positions {
            Positions::Explicit(_) if table.dims()[0] > len => {
                table.slice([0..len, 0..self.d_position])
            }
            _ => table,
        }
    }

    /// The vectors of a grid's tokens, row-major: MAE's 2D sin-cos
    /// ([`sincos_grid_rows`](super::sincos_grid_rows): half the width for the column, half for
    /// the row) with this table's base, in f64 rounded once, built once per grid and kept on the
    /// device. A 1-axis grid gets MAE's 1D layout. MAE's class token takes a row of zeros
    /// (`add_cls_token`), which is the caller's to prepend.
    ///
    /// # Shapes
    ///
    /// - output: `[grid.len(), d_position]`
    ///
    /// # Errors
    ///
    /// A grid of 3 axes (no family defines a 3D sin-cos), or a width not divisible by 4 (by 2
    /// for one axis).
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{Grid, SinusoidalConfig};
    ///
    /// let device = Device::flex();
    /// let table = SinusoidalConfig::new().init(16, &device);
    /// assert_eq!(table.on_grid(&Grid::new([4, 6])).unwrap().dims(), [24, 16]);
    /// assert!(table.on_grid(&Grid::new([2, 2, 2])).is_err());
    /// ```
    pub fn on_grid(&self, grid: &Grid) -> Result<Tensor<2>, PositionError> {
        let axes = grid.axes();
        if axes > 2 {
            return Err(PositionError::GridAxes {
                scheme: "the 2D sin-cos table (MAE)".into(),
                expected: 2,
                got: axes,
                fix: "give a grid of rows and columns (or one axis); for video, a learned grid \
                      or an axial rope",
            });
        }
        if self.d_position % (2 * axes) != 0 {
            return Err(PositionError::InvalidConfig {
                field: "d_position",
                value: self.d_position.to_string(),
                rule: "MAE's sin-cos gives each axis half the width, each half sines and cosines",
                fix: format!("choose a width divisible by {}", 2 * axes),
            });
        }
        let device = self.cache.device();
        let dtype = self.cache.dtype();
        let key = (DeviceKey::new(&device, dtype), grid.clone());
        Ok(self.grid_rows.with(&key, |slot| {
            slot.get_or_insert_with(|| {
                crate::cache::count_host_table();
                let rows = super::sincos_grid_rows(grid, self.d_position, self.base);
                Tensor::<2>::from_data(
                    TensorData::new(rows, [grid.len(), self.d_position]),
                    &device,
                )
                .cast(dtype)
            })
            .clone()
        }))
    }

    /// The wavelength base.
    pub fn base(&self) -> f64 {
        self.base
    }

    /// The width of one position vector.
    pub fn d_position(&self) -> usize {
        self.d_position
    }

    /// The precomputed first rows, `[cache_len, d_position]`: a constant (not trained, not
    /// saved).
    pub fn cache(&self) -> &Tensor<2> {
        &self.cache
    }

    /// The most rows the table grows to: positions must lie in `0..max_len`.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Refuses a largest position past [`max_len`](Self::max_len), with no allocation.
    pub fn check(&self, max_position: i64) -> Result<(), PositionError> {
        if max_position >= self.max_len as i64 {
            return Err(PositionError::PositionPastSinusoidLimit {
                position: max_position,
                max_len: self.max_len,
                needed: (max_position as usize).saturating_add(1),
            });
        }
        Ok(())
    }

    /// Rows `offset..offset + seq` of the table (past the cache, the device table grows once;
    /// at most to `max_len` rows).
    ///
    /// # Shapes
    ///
    /// - output: `[seq, d_position]`
    ///
    /// # Panics
    ///
    /// If `offset + seq` passes [`max_len`](Self::max_len) (call [`check`](Self::check) first).
    pub fn rows(&self, offset: usize, seq: usize) -> Tensor<2> {
        let d_position = self.d_position;
        let end = offset.checked_add(seq).unwrap_or(usize::MAX);
        self.table(end, self.cache.dtype())
            .slice([offset..end, 0..d_position])
    }

    /// The table at explicit positions, already checked to lie in `0..=max_position`, where
    /// `max_position` is their largest value (the table grows to it once).
    ///
    /// # Panics
    ///
    /// If `max_position` is at or past [`max_len`](Self::max_len).
    ///
    /// # Shapes
    ///
    /// - positions: `[batch, seq]`
    /// - output: `[batch, seq, d_position]`
    pub fn gather(&self, positions: Tensor<2, Int>, max_position: usize) -> Tensor<3> {
        embedding(self.table(max_position + 1, self.cache.dtype()), positions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of the question "can two (token, position) pairs collide?": d_model = 2, positions 0 and 1 give
    /// `[[0.0000, 1.0000], [0.8415, 0.5403]]`.
    #[test]
    fn seed_000_worked_example() {
        let rows = sinusoid_rows(0..2, 2, 10_000.0);
        let expected = [0.0, 1.0, 0.841_470_98, 0.540_302_3];
        for (got, want) in rows.iter().zip(expected) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
    }

    proptest::proptest! {
        /// Bounded: every row has norm sqrt(d / 2), since each (sin, cos) pair has norm 1.
        #[test]
        fn rows_have_constant_norm(p in 0u64..1_000_000_000, half in 1usize..64) {
            let d = 2 * half;
            let row = sinusoid_rows([p], d, 10_000.0);
            let norm = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
            proptest::prop_assert!((norm - (d as f64 / 2.0).sqrt()).abs() < 1e-5);
        }

        /// Relative-aware (Vaswani et al. 2017, section 3.5): PE(p + k) is PE(p) rotated pair
        /// by pair by the angle k * w_i, a map that depends on k alone.
        #[test]
        fn shift_is_a_rotation_that_depends_on_the_offset_only(p in 0u64..100_000, k in 0u64..1_000) {
            let d = 32;
            let base = 10_000.0f64;
            let (a, b) = (sinusoid_rows([p], d, base), sinusoid_rows([p + k], d, base));
            for i in 0..d / 2 {
                let w = base.powf(-((2 * i) as f64) / d as f64);
                let (s, c) = ((k as f64) * w).sin_cos();
                let (sin_p, cos_p) = (a[2 * i] as f64, a[2 * i + 1] as f64);
                // sin(x + y) = sin x cos y + cos x sin y; cos(x + y) = cos x cos y - sin x sin y.
                proptest::prop_assert!((b[2 * i] as f64 - (sin_p * c + cos_p * s)).abs() < 1e-6);
                proptest::prop_assert!((b[2 * i + 1] as f64 - (cos_p * c - sin_p * s)).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn odd_width_is_refused_with_the_fix() {
        let err = SinusoidalConfig::new().validate(7).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("is 7") && msg.contains("use 6 or 8"), "{msg}");
    }

    #[test]
    fn rows_past_the_cache_match_the_cache() {
        let device = Device::flex();
        let table = SinusoidalConfig::new().with_cache_len(8).init(4, &device);
        let inside = table.rows(4, 4).into_data();
        let outside = table.rows(4, 6).slice([0..4, 0..4]).into_data();
        assert_eq!(inside, outside);
    }
}
