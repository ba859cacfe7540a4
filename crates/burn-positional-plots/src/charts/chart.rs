//! What a chart holds: [`Chart`] (a panel's axes, ranges and series), [`Series`] and
//! [`SeriesKind`], with their checks and colours.

use plotters::prelude::*;

use crate::PlotError;

/// The Tableau 10 colours (matplotlib's `tab10`), in order.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),  // blue
    RGBColor(255, 127, 14),  // orange
    RGBColor(44, 160, 44),   // green
    RGBColor(214, 39, 40),   // red
    RGBColor(148, 103, 189), // purple
    RGBColor(140, 86, 75),   // brown
    RGBColor(227, 119, 194), // pink
    RGBColor(127, 127, 127), // grey
    RGBColor(188, 189, 34),  // olive
    RGBColor(23, 190, 207),  // cyan
];

/// One chart panel: axes, labels and series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chart {
    /// Shown above the panel.
    pub title: String,
    /// Description of the x axis, shown below it.
    pub x_label: String,
    /// Description of the y axis, shown left of it.
    pub y_label: String,
    /// Logarithmic (base 10) y axis; every y, and the `y_range` if given, must then be > 0.
    pub log_y: bool,
    /// The x axis range `(low, high)`; `None` fits the data with a small margin.
    /// Points outside it are left out and lines are cut at its edge.
    pub x_range: Option<(f64, f64)>,
    /// The y axis range `(low, high)`; `None` fits the data with a small margin.
    /// Points outside it are left out and lines are cut at its edge.
    pub y_range: Option<(f64, f64)>,
    /// What is drawn, in order (later series on top).
    pub series: Vec<Series>,
}

/// One data series of a [`Chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend name; series with an empty name get no legend entry. A legend box is drawn
    /// when any series of the panel is named.
    pub name: String,
    /// How the points are drawn.
    pub kind: SeriesKind,
    /// The `(x, y)` points; every coordinate must be finite.
    pub points: Vec<(f64, f64)>,
    /// Text drawn beside each point: empty for none, else one per point (an empty string
    /// leaves that point unlabelled).
    pub labels: Vec<String>,
    /// Index into a fixed palette of 10 colours (taken modulo 10): blue, orange, green, red,
    /// purple, brown, pink, grey, olive, cyan (the Tableau 10 colours).
    pub colour: usize,
}

/// How a [`Series`] is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesKind {
    /// Points joined by a line, in order (with a small marker at each point when there are
    /// at most 40).
    Line,
    /// Filled circles only.
    Points,
    /// Arrows: the points are taken in consecutive pairs `(from, to)`, each drawn as a line
    /// with an arrow head at `to`. An odd number of points is an error.
    Arrows,
}

impl Chart {
    /// An empty panel with linear axes fitted to the data.
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
    ) -> Self {
        Self {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            ..Self::default()
        }
    }

    /// Adds a series (drawn above the ones added before).
    #[must_use]
    pub fn with_series(mut self, series: Series) -> Self {
        self.series.push(series);
        self
    }

    /// Sets whether the y axis is logarithmic (see [`Chart::log_y`]).
    #[must_use]
    pub fn with_log_y(mut self, log_y: bool) -> Self {
        self.log_y = log_y;
        self
    }

    /// Fixes the x axis to `low..high` instead of fitting the data.
    #[must_use]
    pub fn with_x_range(mut self, low: f64, high: f64) -> Self {
        self.x_range = Some((low, high));
        self
    }

    /// Fixes the y axis to `low..high` instead of fitting the data.
    #[must_use]
    pub fn with_y_range(mut self, low: f64, high: f64) -> Self {
        self.y_range = Some((low, high));
        self
    }

    /// Checks everything [`draw_charts`] checks, for this panel alone.
    pub(super) fn check(&self) -> Result<(), PlotError> {
        let data = |series: &str, detail: String| PlotError::Data {
            title: self.title.clone(),
            series: series.to_string(),
            detail,
        };
        if self.series.iter().all(|s| s.points.is_empty()) {
            return Err(data(
                "",
                format!(
                    "the panel has no points ({} series, all empty); add a series with at least one point",
                    self.series.len()
                ),
            ));
        }
        for (axis, range) in [("x_range", self.x_range), ("y_range", self.y_range)] {
            let Some((lo, hi)) = range else { continue };
            if !lo.is_finite() || !hi.is_finite() {
                return Err(data(
                    "",
                    format!(
                        "{axis} ({lo}, {hi}) is not finite; give finite bounds or None to fit the data"
                    ),
                ));
            }
            if lo >= hi {
                return Err(data(
                    "",
                    format!(
                        "{axis} ({lo}, {hi}) is empty or inverted; give (low, high) with low < high, or None to fit the data"
                    ),
                ));
            }
        }
        if let (true, Some((lo, hi))) = (self.log_y, self.y_range)
            && lo <= 0.0
        {
            return Err(data(
                "",
                format!(
                    "y_range ({lo}, {hi}) starts at {lo}, which a logarithmic y axis cannot show; make the low bound > 0 or set log_y = false"
                ),
            ));
        }
        for (index, series) in self.series.iter().enumerate() {
            let name = series.display_name(index);
            for (i, &(x, y)) in series.points.iter().enumerate() {
                if !x.is_finite() || !y.is_finite() {
                    return Err(data(
                        &name,
                        format!(
                            "point {i} is ({x}, {y}); every coordinate must be finite (drop or replace NaN and infinite values)"
                        ),
                    ));
                }
                if self.log_y && y <= 0.0 {
                    return Err(data(
                        &name,
                        format!(
                            "point {i} is ({x}, {y}): y = {y} cannot be shown on a logarithmic y axis; make every y > 0 (or drop the point) or set log_y = false"
                        ),
                    ));
                }
            }
            if !series.labels.is_empty() && series.labels.len() != series.points.len() {
                return Err(data(
                    &name,
                    format!(
                        "{} labels for {} points; give one label per point, or none",
                        series.labels.len(),
                        series.points.len()
                    ),
                ));
            }
            if series.kind == SeriesKind::Arrows && series.points.len() % 2 == 1 {
                return Err(data(
                    &name,
                    format!(
                        "{} points for arrows; arrows take points in (from, to) pairs, so give an even number",
                        series.points.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The x and y ranges to draw: the given ones, or the data's with a margin.
    pub(super) fn ranges(&self) -> ((f64, f64), (f64, f64)) {
        let all = || self.series.iter().flat_map(|s| s.points.iter().copied());
        let bounds = |values: &mut dyn Iterator<Item = f64>| {
            values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            })
        };
        let x = self
            .x_range
            .unwrap_or_else(|| pad_linear(bounds(&mut all().map(|p| p.0))));
        let y = self.y_range.unwrap_or_else(|| {
            let data = bounds(&mut all().map(|p| p.1));
            if self.log_y {
                pad_log(data)
            } else {
                pad_linear(data)
            }
        });
        (x, y)
    }
}

/// Widens `(lo, hi)` by 5% on each side (or by a unit-ish amount when it is a single value).
fn pad_linear((lo, hi): (f64, f64)) -> (f64, f64) {
    let span = hi - lo;
    let pad = if span > 0.0 {
        span * 0.05
    } else {
        (lo.abs() * 0.1).max(0.5)
    };
    (lo - pad, hi + pad)
}

/// Widens positive `(lo, hi)` by 5% of its decades on each side (or by a factor of 2 when
/// it is a single value).
fn pad_log((lo, hi): (f64, f64)) -> (f64, f64) {
    let decades = (hi / lo).log10();
    let factor = if decades > 0.0 {
        10f64.powf(decades * 0.05)
    } else {
        2.0
    };
    (lo / factor, hi * factor)
}

impl Series {
    fn new(
        name: impl Into<String>,
        kind: SeriesKind,
        points: impl IntoIterator<Item = (f64, f64)>,
        colour: usize,
    ) -> Self {
        Self {
            name: name.into(),
            kind,
            points: points.into_iter().collect(),
            labels: Vec::new(),
            colour,
        }
    }

    /// Points joined by a line ([`SeriesKind::Line`]).
    pub fn line(
        name: impl Into<String>,
        points: impl IntoIterator<Item = (f64, f64)>,
        colour: usize,
    ) -> Self {
        Self::new(name, SeriesKind::Line, points, colour)
    }

    /// Filled circles ([`SeriesKind::Points`]).
    pub fn points(
        name: impl Into<String>,
        points: impl IntoIterator<Item = (f64, f64)>,
        colour: usize,
    ) -> Self {
        Self::new(name, SeriesKind::Points, points, colour)
    }

    /// Arrows from `points[0]` to `points[1]`, `points[2]` to `points[3]`, and so on
    /// ([`SeriesKind::Arrows`]).
    pub fn arrows(
        name: impl Into<String>,
        points: impl IntoIterator<Item = (f64, f64)>,
        colour: usize,
    ) -> Self {
        Self::new(name, SeriesKind::Arrows, points, colour)
    }

    /// Sets the per-point text labels (one per point; an empty string leaves a point
    /// unlabelled).
    #[must_use]
    pub fn with_labels(mut self, labels: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.labels = labels.into_iter().map(Into::into).collect();
        self
    }

    /// The name used in error messages: the legend name, or `#index` when unnamed.
    pub(super) fn display_name(&self, index: usize) -> String {
        if self.name.is_empty() {
            format!("#{index} (unnamed)")
        } else {
            self.name.clone()
        }
    }

    pub(super) fn colour(&self) -> RGBColor {
        PALETTE[self.colour % PALETTE.len()]
    }
}
