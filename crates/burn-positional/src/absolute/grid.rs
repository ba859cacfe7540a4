//! Absolute positions on grids: the vectors of an image's patches (rows, columns) or a video's
//! (frames, rows, columns).
//!
//! | scheme | on a grid | used by |
//! | --- | --- | --- |
//! | [`Sinusoidal`](super::SinusoidalPosition::on_grid) | MAE's 2D sin-cos: half the width for the column, half for the row, each `[sin | cos]` | MAE, I-JEPA |
//! | [`Learned`](super::LearnedPosition::on_grid) | the trained grid resized to the asked one, as `torch.nn.functional.interpolate` resizes it | ViT, DeiT, DINOv2, CLIP, SigLIP |
//!
//! # Resizing, exactly as PyTorch
//!
//! A resize is separable: each axis is a matrix of weights `[out, in]` ([`resize_weights`]),
//! and the resized table is the trained one multiplied by each axis's matrix in turn. The
//! matrices depend on the sizes only: built on the host once (a few hundred values), kept on
//! the device, and the products run on the device, so the backward reaches the trained table
//! through burn's own matmul (fine-tuning at a new resolution trains the table it was loaded
//! from). The weights follow PyTorch's CPU kernels (`aten/src/ATen/native/UpSample.h`,
//! `UpSampleKernel.cpp`) in f32, as PyTorch computes them for an f32 input: `bicubic` with
//! `A = -0.75` and border rows repeated, its antialiased twin with Keys' `a = -0.5` and a support
//! stretched by the scale, `bilinear` and its antialiased twin. burn's own `interpolate` has
//! neither antialiasing nor PyTorch's bicubic coefficient; this is why the layer has its own.

use burn::config::Config;
use burn::tensor::{Device, Tensor, TensorData};
use burn_positional_kernels::Grid;

use crate::PositionError;

/// Which filter a resize uses (`torch.nn.functional.interpolate`'s `mode`).
#[derive(Config, Debug, PartialEq, Copy)]
pub enum ResizeMode {
    /// `mode="bicubic"`: 4 taps, `A = -0.75` (Keys' `a = -0.5` when antialiased).
    Bicubic,
    /// `mode="bilinear"`: 2 taps (a triangle stretched by the scale when antialiased).
    Bilinear,
}

/// How a trained grid of positions is resized to another grid, as the family's
/// `interpolate_pos_encoding` calls `torch.nn.functional.interpolate`. The defaults are what
/// ViT, DeiT, DINOv2, CLIP and SigLIP call in transformers 5: bicubic, `align_corners=False`,
/// no antialiasing, to a size.
#[derive(Config, Debug, PartialEq)]
pub struct GridResize {
    /// The filter. Bicubic by default.
    #[config(default = "ResizeMode::Bicubic")]
    pub mode: ResizeMode,
    /// `align_corners`. False by default.
    #[config(default = false)]
    pub align_corners: bool,
    /// `antialias`. False by default.
    #[config(default = false)]
    pub antialias: bool,
}

/// A learned table laid out as the vision families lay theirs: `prefix` rows (a class token,
/// DeiT's distillation token) then one row per patch of the `trained` grid, row-major.
#[derive(Config, Debug, PartialEq)]
pub struct PatchGridConfig {
    /// The grid the table was trained on: `[rows, columns]` (`image_size / patch_size` each:
    /// `[14, 14]` for ViT-B/16 at 224), or `[frames, rows, columns]`.
    pub trained: Vec<usize>,
    /// Rows before the grid's, never resized: 1 for a class token (ViT, DINOv2, CLIP), 2 for
    /// DeiT (class and distillation), 0 for SigLIP. 1 by default.
    #[config(default = 1)]
    pub prefix: usize,
    /// How the grid is resized to another. transformers' bicubic by default.
    #[config(default = "GridResize::new()")]
    pub resize: GridResize,
}

impl PatchGridConfig {
    /// The trained grid, checked.
    pub fn grid(&self) -> Result<Grid, PositionError> {
        Ok(Grid::try_new(&self.trained)?)
    }

    /// Checks the layout against a table of `max_len` rows: `prefix + trained patches` rows.
    pub fn validate(&self, max_len: usize) -> Result<(), PositionError> {
        let grid = self.grid()?;
        let rows = self.prefix + grid.len();
        if rows != max_len {
            return Err(PositionError::InvalidConfig {
                field: "LearnedConfig::max_len",
                value: max_len.to_string(),
                rule: "a learned patch grid has prefix + rows x columns rows",
                fix: format!(
                    "set max_len to {rows} ({} prefix rows + the {grid} grid), or the grid to \
                     the one the table was trained on",
                    self.prefix
                ),
            });
        }
        Ok(())
    }
}

/// The weights of a 1D resize from `input` to `output` samples, row-major `[output, input]`:
/// output `i` is `sum_j w[i * input + j] * x[j]`, exactly as PyTorch's CPU kernel weighs and
/// clamps the taps (border samples repeated; antialiased filters normalized to sum 1). `scale`
/// is `interpolate`'s `scale_factor` on this axis when it was given (then the kernel maps
/// coordinates by `1 / scale`, not `input / output`), `None` for a `size`.
///
/// # Panics
///
/// If `input` or `output` is 0.
///
/// ```
/// use burn_positional::absolute::{GridResize, resize_weights};
///
/// // Same size, no corners aligned: the identity, exactly.
/// let w = resize_weights(3, 3, None, &GridResize::new());
/// assert_eq!(w, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]);
/// // Every row of weights sums to 1.
/// let w = resize_weights(4, 7, None, &GridResize::new());
/// for row in w.chunks(4) {
///     assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
/// }
/// ```
pub fn resize_weights(
    input: usize,
    output: usize,
    scale: Option<f64>,
    resize: &GridResize,
) -> Vec<f32> {
    assert!(
        input > 0 && output > 0,
        "resize_weights: {input} -> {output} samples; both need at least one"
    );
    let mut w = vec![0f32; output * input];
    let area_scale = pixel_scale(input, output, resize.align_corners, scale);
    for i in 0..output {
        let row = &mut w[i * input..(i + 1) * input];
        if resize.antialias {
            antialiased_row(row, i, area_scale, resize.mode);
        } else {
            match resize.mode {
                ResizeMode::Bicubic => bicubic_row(row, i, area_scale, resize.align_corners),
                ResizeMode::Bilinear => bilinear_row(row, i, area_scale, resize.align_corners),
            }
        }
    }
    w
}

/// `area_pixel_compute_scale<float>`: input samples per output sample.
fn pixel_scale(input: usize, output: usize, align_corners: bool, scale: Option<f64>) -> f32 {
    if align_corners {
        if output > 1 {
            (input as f32 - 1.0) / (output as f32 - 1.0)
        } else {
            0.0
        }
    } else {
        match scale {
            Some(s) if s > 0.0 => (1.0 / s) as f32,
            _ => input as f32 / output as f32,
        }
    }
}

/// `area_pixel_compute_source_index<float>`: where output `i` samples the input.
fn source_index(scale: f32, i: usize, align_corners: bool, cubic: bool) -> f32 {
    if align_corners {
        return scale * i as f32;
    }
    let src = scale * (i as f32 + 0.5) - 0.5;
    if !cubic && src < 0.0 { 0.0 } else { src }
}

/// `guard_index_and_lambda`: the tap below `real` (at most `input - 1`) and the fraction past it.
fn guard(real: f32, input: usize) -> (i64, f32) {
    let index = (real.floor() as i64).min(input as i64 - 1);
    let lambda = (real - index as f32).clamp(0.0, 1.0);
    (index, lambda)
}

/// Adds `weight` at tap `j`, clamped to the input (border samples repeated).
fn add_tap(row: &mut [f32], j: i64, weight: f32) {
    let last = row.len() as i64 - 1;
    row[j.clamp(0, last) as usize] += weight;
}

/// `cubic_convolution1`: `|x| <= 1`.
fn cubic1(x: f32, a: f32) -> f32 {
    ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
}

/// `cubic_convolution2`: `1 < |x| < 2`.
fn cubic2(x: f32, a: f32) -> f32 {
    ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
}

/// `upsample_bicubic2d`: 4 taps around the source index, `get_cubic_upsample_coefficients`.
fn bicubic_row(row: &mut [f32], i: usize, scale: f32, align_corners: bool) {
    const A: f32 = -0.75;
    let real = source_index(scale, i, align_corners, true);
    let (x, t) = guard(real, row.len());
    let coefficients = [
        cubic2(t + 1.0, A),
        cubic1(t, A),
        cubic1(1.0 - t, A),
        cubic2(2.0 - t, A),
    ];
    for (k, c) in coefficients.into_iter().enumerate() {
        add_tap(row, x - 1 + k as i64, c);
    }
}

/// `upsample_bilinear2d`: 2 taps, the second one past the last sample falling back on it.
fn bilinear_row(row: &mut [f32], i: usize, scale: f32, align_corners: bool) {
    let real = source_index(scale, i, align_corners, false);
    let (x, lambda) = guard(real, row.len());
    let next = if x < row.len() as i64 - 1 { 1 } else { 0 };
    add_tap(row, x, 1.0 - lambda);
    add_tap(row, x + next, lambda);
}

/// `_compute_weights_aa` (antialias, float input, `align_corners_delta = 0`): a filter centred
/// on the output sample, stretched by the scale when shrinking, cut at the input, normalized.
fn antialiased_row(row: &mut [f32], i: usize, scale: f32, mode: ResizeMode) {
    let (taps, filter): (f32, fn(f32) -> f32) = match mode {
        ResizeMode::Bicubic => (4.0, |x| {
            let x = x.abs();
            if x < 1.0 {
                cubic1(x, -0.5)
            } else if x < 2.0 {
                cubic2(x, -0.5)
            } else {
                0.0
            }
        }),
        ResizeMode::Bilinear => (2.0, |x| {
            let x = x.abs();
            if x < 1.0 { 1.0 - x } else { 0.0 }
        }),
    };
    let support = if scale >= 1.0 {
        taps * 0.5 * scale
    } else {
        taps * 0.5
    };
    let center = scale * (i as f32 + 0.5);
    let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    let input = row.len() as i64;
    let xmin = ((center - support + 0.5) as i64).max(0);
    let xsize = ((center + support + 0.5) as i64).min(input) - xmin;
    let weights: Vec<f32> = (0..xsize.max(0))
        .map(|j| filter((j as f32 + xmin as f32 - center + 0.5) * invscale))
        .collect();
    let total: f32 = weights.iter().sum();
    for (j, w) in weights.into_iter().enumerate() {
        let w = if total != 0.0 { w / total } else { w };
        row[xmin as usize + j] = w;
    }
}

/// The resize matrices of each axis, `[out, in]` on `device`, from `trained` to `target`.
pub(crate) fn resize_matrices(
    trained: &Grid,
    target: &Grid,
    resize: &GridResize,
    device: &Device,
) -> Vec<Tensor<2>> {
    trained
        .sizes()
        .iter()
        .zip(target.sizes())
        .map(|(&input, &output)| {
            let w = resize_weights(input, output, None, resize);
            Tensor::from_data(TensorData::new(w, [output, input]), device)
        })
        .collect()
}

/// `table` `[trained.len(), d]` (row-major over `trained`) resized to `[target.len(), d]` by
/// one matrix product per axis, in f32 (as DINOv2 casts before interpolating), cast back to the
/// table's dtype.
pub(crate) fn resize_table(table: Tensor<2>, trained: &Grid, matrices: &[Tensor<2>]) -> Tensor<2> {
    let [_, d] = table.dims();
    let dtype = table.dtype();
    let mut sizes: Vec<usize> = trained.sizes().to_vec();
    let mut x = table.cast(burn::tensor::DType::F32);
    for (axis, weights) in matrices.iter().enumerate() {
        let [out, input] = weights.dims();
        let before: usize = sizes[..axis].iter().product();
        let after: usize = sizes[axis + 1..].iter().product::<usize>() * d;
        // [before, input, after] -> [before, out, after]: out[b, i, r] = sum_j w[i, j] x[b, j, r].
        let x3 = x.reshape([before, input, after]);
        let w = weights
            .clone()
            .unsqueeze::<3>()
            .expand([before, out, input]);
        x = w.matmul(x3).reshape([before * out * after / d, d]);
        sizes[axis] = out;
    }
    x.cast(dtype)
}

/// MAE's 2D sin-cos table for a `[rows, columns]` grid (transformers' `get_2d_sincos_pos_embed`,
/// in f64 as its numpy code, rounded once to f32): the first half of each vector encodes the
/// token's column, the second its row (numpy's `meshgrid(grid_w, grid_h)` puts the column
/// first), each half `[sin(p w) | cos(p w)]` with `w_k = base^(-k / (d / 4))`, `k < d / 4`.
/// A 1-axis grid gets the 1D layout (`get_1d_sincos_pos_embed_from_grid`) over the whole width.
///
/// # Panics
///
/// If `d` is not a multiple of 4 (of 2 for one axis) or the grid has 3 axes.
pub fn sincos_grid_rows(grid: &Grid, d: usize, base: f64) -> Vec<f32> {
    let coordinates = grid.coordinates();
    let axes = grid.axes();
    assert!(
        axes <= 2 && d % (2 * axes) == 0,
        "sincos_grid_rows: a {grid} grid takes a width divisible by {}, got {d}",
        2 * axes
    );
    let part = d / axes;
    let omega: Vec<f64> = (0..part / 2)
        .map(|k| 1.0 / base.powf(k as f64 / (part as f64 / 2.0)))
        .collect();
    let mut out = Vec::with_capacity(grid.len() * d);
    for token in coordinates.chunks_exact(axes) {
        // MAE's order: the column first, then the row.
        for &p in token.iter().rev() {
            let angles = omega.iter().map(|w| p as f64 * w);
            out.extend(angles.clone().map(|a| a.sin() as f32));
            out.extend(angles.map(|a| a.cos() as f32));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upsampling 2 -> 4 without aligned corners: PyTorch's bicubic weights, worked by hand from
    /// `UpSample.h` (scale 0.5; output 0 samples at -0.25: taps -2..1 clamped to 0).
    #[test]
    fn bicubic_weights_match_the_hand_computed_ones() {
        let w = resize_weights(2, 4, None, &GridResize::new());
        // t = 0.75 at x = -1: [cc2(1.75), cc1(0.75), cc1(0.25), cc2(1.25)] on taps -2, -1, 0, 1.
        let a = -0.75f64;
        let c1 = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
        let c2 = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
        let first = [c2(1.75) + c1(0.75) + c1(0.25), c2(1.25)];
        assert!((w[0] as f64 - first[0]).abs() < 1e-6, "{w:?}");
        assert!((w[1] as f64 - first[1]).abs() < 1e-6, "{w:?}");
    }

    #[test]
    fn antialiased_shrink_averages_a_wider_window() {
        let resize = GridResize::new().with_antialias(true);
        let w = resize_weights(8, 2, None, &resize);
        // Each output sees 4 inputs or more (support 2 * scale = 8 wide, cut at the border).
        assert!(w[..8].iter().filter(|&&v| v != 0.0).count() >= 4, "{w:?}");
        for row in w.chunks(8) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        }
    }

    #[test]
    fn sincos_grid_puts_the_column_first() {
        let rows = sincos_grid_rows(&Grid::new([2, 3]), 8, 10_000.0);
        // Token 5 = row 1, column 2: first half sin/cos of 2 * w, second of 1 * w.
        let token = &rows[5 * 8..6 * 8];
        let w1 = 1.0 / 10_000f64.powf(0.5);
        let expect = [
            2f64.sin(),
            (2.0 * w1).sin(),
            2f64.cos(),
            (2.0 * w1).cos(),
            1f64.sin(),
            w1.sin(),
            1f64.cos(),
            w1.cos(),
        ];
        for (a, b) in token.iter().zip(expect) {
            assert!((*a as f64 - b).abs() < 1e-7, "{token:?}");
        }
    }
}
