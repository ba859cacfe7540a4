//! Pictures beside heatmaps: [`Picture`] (an RGB image with its patch grid drawn over it) and
//! [`draw_panels`], a grid of panels of either kind (a picture, then what a model made of it).

use std::path::Path;

use plotters::prelude::*;

use crate::{Heatmap, PlotError, draw_grid, draw_panel, ensure_font};

/// An RGB picture, pixel for pixel, with lines on its patch boundaries.
#[derive(Debug, Clone, PartialEq)]
pub struct Picture {
    /// Shown above the panel.
    pub title: String,
    /// `pixels[y][x]` = `[red, green, blue]`, each in `0..=1` (clamped), row 0 at the top.
    pub pixels: Vec<Vec<[f32; 3]>>,
    /// Patch size in pixels: a grey line every `patch` pixels on both axes; 0 for none.
    pub patch: usize,
}

impl Picture {
    /// A picture from channel-first values `[3, height, width]`, row-major (the layout of an
    /// image tensor), with lines every `patch` pixels (0 for none).
    ///
    /// # Panics
    ///
    /// If `values` does not hold `3 * height * width` numbers.
    pub fn from_channels(
        title: impl Into<String>,
        values: &[f32],
        [height, width]: [usize; 2],
        patch: usize,
    ) -> Self {
        assert_eq!(
            values.len(),
            3 * height * width,
            "a {height} x {width} RGB picture has {} values, got {}",
            3 * height * width,
            values.len()
        );
        let at = |c: usize, y: usize, x: usize| values[(c * height + y) * width + x];
        Self {
            title: title.into(),
            pixels: (0..height)
                .map(|y| {
                    (0..width)
                        .map(|x| [at(0, y, x), at(1, y, x), at(2, y, x)])
                        .collect()
                })
                .collect(),
            patch,
        }
    }

    fn check(&self) -> Result<(), PlotError> {
        let height = self.pixels.len();
        let width = self.pixels.first().map_or(0, Vec::len);
        if height == 0 || width == 0 || self.pixels.iter().any(|row| row.len() != width) {
            return Err(PlotError::Data {
                title: self.title.clone(),
                series: String::new(),
                detail: format!(
                    "a picture needs rows of equal, nonzero width; got {height} rows of widths \
                     {:?}",
                    self.pixels.iter().map(Vec::len).collect::<Vec<_>>()
                ),
            });
        }
        Ok(())
    }
}

/// One panel of [`draw_panels`].
#[derive(Debug, Clone)]
pub enum Panel {
    /// A heatmap, drawn as [`draw_heatmaps`](crate::draw_heatmaps) draws it.
    Heatmap(Heatmap),
    /// A picture.
    Picture(Picture),
}

/// Draws `panels` (pictures and heatmaps) in a grid `columns` wide into a PNG at `path`, each
/// panel `panel_size` pixels square, under an overall `title`.
///
/// # Errors
///
/// [`PlotError::Shape`] or [`PlotError::Data`] (before anything is written) for a heatmap whose
/// values do not fit its labels or a picture with ragged or empty rows; [`PlotError::Draw`]
/// when plotters fails, for example because the output folder does not exist.
///
/// ```
/// use burn_positional_plots::{Heatmap, Panel, Picture, draw_panels};
///
/// // A 4 x 4 picture in patches of 2: red top left, blue bottom right, white elsewhere.
/// let mut pixels = vec![vec![[1.0; 3]; 4]; 4];
/// pixels[0][0] = [1.0, 0.0, 0.0];
/// pixels[3][3] = [0.0, 0.0, 1.0];
/// let picture = Picture { title: "picture".into(), pixels, patch: 2 };
/// let heatmap = Heatmap::new("attention", vec![vec![0.7, 0.1], vec![0.1, 0.1]]);
/// let path = std::env::temp_dir().join(format!("panels-doc-{}.png", std::process::id()));
/// draw_panels(&path, "a picture and a map", &[Panel::Picture(picture), Panel::Heatmap(heatmap)], 2, 240)?;
/// assert!(path.exists());
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), burn_positional_plots::PlotError>(())
/// ```
pub fn draw_panels(
    path: impl AsRef<Path>,
    title: &str,
    panels: &[Panel],
    columns: usize,
    panel_size: u32,
) -> Result<(), PlotError> {
    ensure_font();
    for panel in panels {
        match panel {
            Panel::Heatmap(heatmap) => heatmap.check()?,
            Panel::Picture(picture) => picture.check()?,
        }
    }
    draw_grid(
        path.as_ref(),
        title,
        panels,
        columns,
        (panel_size, panel_size),
        |area, panel| match panel {
            Panel::Heatmap(heatmap) => draw_panel(area, heatmap),
            Panel::Picture(picture) => draw_picture(area, picture),
        },
    )
}

/// Grey of the patch boundaries.
const GRID_LINE: RGBColor = RGBColor(150, 150, 150);

fn draw_picture<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    picture: &Picture,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let height = picture.pixels.len() as i32;
    let width = picture.pixels[0].len() as i32;
    let mut chart = ChartBuilder::on(area)
        .caption(&picture.title, ("sans-serif", 16))
        .margin(10)
        .margin_left(20)
        .margin_bottom(38)
        .build_cartesian_2d(0..width, 0..height)?;
    // Row 0 at the top: pixel (x, y) covers x..x + 1 and height - y - 1..height - y.
    let channel = |v: f32| (v.clamp(0.0, 1.0) * 255.0).round() as u8;
    chart.draw_series(picture.pixels.iter().enumerate().flat_map(|(y, row)| {
        row.iter().enumerate().map(move |(x, &[r, g, b])| {
            let (x, y) = (x as i32, y as i32);
            Rectangle::new(
                [(x, height - y - 1), (x + 1, height - y)],
                RGBColor(channel(r), channel(g), channel(b)).filled(),
            )
        })
    }))?;
    if picture.patch > 0 {
        let step = picture.patch;
        let vertical = (0..=width as usize)
            .step_by(step)
            .map(|x| vec![(x as i32, 0), (x as i32, height)]);
        let horizontal = (0..=height as usize)
            .step_by(step)
            .map(|y| vec![(0, y as i32), (width, y as i32)]);
        for line in vertical.chain(horizontal) {
            chart.draw_series(std::iter::once(PathElement::new(line, GRID_LINE)))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pictures_from_channels_and_ragged_ones_refused() {
        // 2 x 3 pixels: red channel 0..6, green 10.., blue 20.. (clamped when drawn).
        let values: Vec<f32> = (0..3)
            .flat_map(|c| (0..6).map(move |i| (c * 10 + i) as f32))
            .collect();
        let picture = Picture::from_channels("p", &values, [2, 3], 1);
        assert_eq!(picture.pixels[1][2], [5.0, 15.0, 25.0]);
        let dir = std::env::temp_dir().join(format!("plots-picture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        draw_panels(
            dir.join("ok.png"),
            "t",
            &[Panel::Picture(picture.clone())],
            1,
            200,
        )
        .unwrap();
        let ragged = Picture {
            pixels: vec![vec![[0.0; 3]; 3], vec![[0.0; 3]; 2]],
            ..picture
        };
        assert!(matches!(
            draw_panels(dir.join("bad.png"), "t", &[Panel::Picture(ragged)], 1, 200),
            Err(PlotError::Data { .. })
        ));
    }
}
