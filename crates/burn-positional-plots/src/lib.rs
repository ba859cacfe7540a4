//! PNG pictures of what position schemes do, drawn with [plotters](https://docs.rs/plotters):
//! grids of labelled heatmaps (attention weights, position tables, similarity matrices), grids
//! of line, point and arrow charts ([`draw_charts`]), and RGB pictures beside heatmaps
//! ([`draw_panels`]).
//!
//! Text uses DejaVu Sans, embedded in the binary, so drawing needs no system fonts.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, register_font};

mod charts;
mod picture;

pub use charts::{Chart, Series, SeriesKind, draw_charts};
pub use picture::{Panel, Picture, draw_panels};

/// Why a picture could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// plotters failed (for example, the output folder does not exist).
    #[error("cannot draw {path}: {detail}")]
    Draw {
        /// The file being drawn.
        path: String,
        /// What plotters reported.
        detail: String,
    },
    /// A panel's values do not match its labels.
    #[error(
        "panel {title:?}: {rows}x{cols} values for {row_labels} row and {col_labels} column labels"
    )]
    Shape {
        /// The panel.
        title: String,
        /// Rows of values.
        rows: usize,
        /// Columns of values (of the first row).
        cols: usize,
        /// Row labels given.
        row_labels: usize,
        /// Column labels given.
        col_labels: usize,
    },
    /// A chart's data or layout cannot be drawn (see [`draw_charts`]); nothing was written.
    #[error("{}", describe_data(.title, .series, .detail))]
    Data {
        /// The panel's title (the overall title when the problem is not one panel's).
        title: String,
        /// The series' name (`#index (unnamed)` when it has none); empty when the problem is
        /// not one series'.
        series: String,
        /// What is wrong, with the offending value and how to fix it.
        detail: String,
    },
}

fn describe_data(title: &str, series: &str, detail: &str) -> String {
    if series.is_empty() {
        format!("chart {title:?}: {detail}")
    } else {
        format!("chart {title:?}, series {series:?}: {detail}")
    }
}

/// One heatmap: a title, labels, and `values[row][col]`.
#[derive(Debug, Clone)]
pub struct Heatmap {
    /// Shown above the panel.
    pub title: String,
    /// One label per row (shown left), or empty for none.
    pub row_labels: Vec<String>,
    /// One label per column (shown below), or empty for none.
    pub col_labels: Vec<String>,
    /// The values, row-major.
    pub values: Vec<Vec<f32>>,
    /// Value mapped to the darkest and brightest colour; `None` uses the panel's min and max.
    pub range: Option<(f32, f32)>,
    /// Print each value in its cell (for small grids).
    pub annotate: bool,
}

fn ensure_font() {
    static FONT: Once = Once::new();
    FONT.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            let bytes = match style {
                FontStyle::Bold => dejavu::sans::bold(),
                _ => dejavu::sans::regular(),
            };
            if register_font("sans-serif", style, bytes).is_err() {
                panic!("the embedded DejaVu font failed to load");
            }
        }
    });
}

impl Heatmap {
    /// A panel of `values` with no labels, coloured over its own min and max.
    pub fn new(title: impl Into<String>, values: Vec<Vec<f32>>) -> Self {
        Self {
            title: title.into(),
            row_labels: vec![],
            col_labels: vec![],
            values,
            range: None,
            annotate: false,
        }
    }

    /// The same panel, coloured over `range` (`None`: its own min and max).
    #[must_use]
    pub fn with_range(mut self, range: Option<(f32, f32)>) -> Self {
        self.range = range;
        self
    }

    fn check(&self) -> Result<(), PlotError> {
        let rows = self.values.len();
        let cols = self.values.first().map_or(0, Vec::len);
        let ragged = self.values.iter().any(|r| r.len() != cols);
        let bad_rows = !self.row_labels.is_empty() && self.row_labels.len() != rows;
        let bad_cols = !self.col_labels.is_empty() && self.col_labels.len() != cols;
        if rows == 0 || cols == 0 || ragged || bad_rows || bad_cols {
            return Err(PlotError::Shape {
                title: self.title.clone(),
                rows,
                cols,
                row_labels: self.row_labels.len(),
                col_labels: self.col_labels.len(),
            });
        }
        Ok(())
    }
}

/// Draws `panels` in a grid `columns` wide into a PNG at `path`, each panel `panel_size`
/// pixels square, under an overall `title`.
pub fn draw_heatmaps(
    path: impl AsRef<Path>,
    title: &str,
    panels: &[Heatmap],
    columns: usize,
    panel_size: u32,
) -> Result<(), PlotError> {
    ensure_font();
    for panel in panels {
        panel.check()?;
    }
    draw_grid(
        path.as_ref(),
        title,
        panels,
        columns,
        (panel_size, panel_size),
        draw_panel,
    )
}

/// Height of the band above the grid that holds the overall title.
pub(crate) const TITLE_BAND: u32 = 40;

/// Draws `panels` with `draw` in a grid `columns` wide, each panel `panel_size` pixels, under
/// an overall `title`, into a PNG at `path`: what [`draw_heatmaps`] and
/// [`charts::draw_charts`] share.
pub(crate) fn draw_grid<'p, P>(
    path: &'p Path,
    title: &str,
    panels: &[P],
    columns: usize,
    panel_size: (u32, u32),
    draw: impl Fn(
        &DrawingArea<BitMapBackend<'p>, plotters::coord::Shift>,
        &P,
    )
        -> Result<(), DrawingAreaErrorKind<<BitMapBackend<'p> as DrawingBackend>::ErrorType>>,
) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: path.display().to_string(),
        detail: e.to_string(),
    };
    let columns = columns.max(1);
    let grid_rows = panels.len().div_ceil(columns);
    let size = (
        columns as u32 * panel_size.0,
        grid_rows as u32 * panel_size.1 + TITLE_BAND,
    );
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| err(&e))?;
    let areas = root.split_evenly((grid_rows, columns));
    for (area, panel) in areas.iter().zip(panels) {
        draw(area, panel).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Heatmap,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let rows = panel.values.len();
    let cols = panel.values[0].len();
    let (lo, hi) = panel.range.unwrap_or_else(|| {
        let all = panel.values.iter().flatten();
        let lo = all.clone().copied().fold(f32::INFINITY, f32::min);
        let hi = all.copied().fold(f32::NEG_INFINITY, f32::max);
        (lo, hi)
    });
    let span = if hi > lo { hi - lo } else { 1.0 };
    let colour_of = |v: f32| ((v - lo) / span).clamp(0.0, 1.0);
    // Segmented axes put each label at the centre of its cell; row 0 is drawn at the top.
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(28)
        .y_label_area_size(if panel.row_labels.is_empty() { 36 } else { 64 })
        .build_cartesian_2d(
            (0..cols - 1).into_segmented(),
            (0..rows - 1).into_segmented(),
        )?;
    let label =
        |labels: &[String], i: usize| labels.get(i).cloned().unwrap_or_else(|| i.to_string());
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(cols.min(16))
        .y_labels(rows.min(16))
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(c) if *c < cols => label(&panel.col_labels, *c),
            _ => String::new(),
        })
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(r) if *r < rows => label(&panel.row_labels, rows - 1 - *r),
            _ => String::new(),
        })
        .label_style(("sans-serif", 14))
        .draw()?;
    let cell = |r: usize, c: usize| {
        let y = rows - 1 - r;
        [
            (SegmentValue::Exact(c), SegmentValue::Exact(y + 1)),
            (SegmentValue::Exact(c + 1), SegmentValue::Exact(y)),
        ]
    };
    chart.draw_series(panel.values.iter().enumerate().flat_map(|(r, row)| {
        row.iter().enumerate().map(move |(c, &v)| {
            Rectangle::new(cell(r, c), ViridisRGB::get_color(colour_of(v)).filled())
        })
    }))?;
    if panel.annotate {
        let centred = Pos::new(HPos::Center, VPos::Center);
        chart.draw_series(panel.values.iter().enumerate().flat_map(|(r, row)| {
            row.iter().enumerate().map(move |(c, &v)| {
                let colour = if colour_of(v) > 0.6 { BLACK } else { WHITE };
                let style = ("sans-serif", 15).into_font().color(&colour).pos(centred);
                Text::new(
                    format!("{v:.2}"),
                    (
                        SegmentValue::CenterOf(c),
                        SegmentValue::CenterOf(rows - 1 - r),
                    ),
                    style,
                )
            })
        }))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_png_and_refuses_ragged_values() {
        let dir = std::env::temp_dir().join(format!("plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let panel = Heatmap {
            title: "t".into(),
            row_labels: vec!["a".into(), "b".into()],
            col_labels: vec!["x".into(), "y".into()],
            values: vec![vec![0.0, 1.0], vec![0.5, 0.25]],
            range: None,
            annotate: true,
        };
        let path = dir.join("ok.png");
        draw_heatmaps(&path, "test", &[panel.clone(), panel.clone()], 2, 200).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        let ragged = Heatmap {
            values: vec![vec![0.0, 1.0], vec![0.5]],
            ..panel
        };
        assert!(matches!(
            draw_heatmaps(dir.join("bad.png"), "t", &[ragged], 1, 200),
            Err(PlotError::Shape { .. })
        ));
    }
}
