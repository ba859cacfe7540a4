//! Line, point and arrow charts: grids of panels with axes, labels, legends and an optional
//! logarithmic y axis (training curves, learned positions in two dimensions, drift of a point
//! from one state to another).

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::{PlotError, ensure_font};

/// Line series with at most this many points also get a marker at each point.
const MARKER_LIMIT: usize = 40;

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

/// Colour of the per-point text labels.
const LABEL_COLOUR: RGBColor = RGBColor(40, 40, 40);

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
    fn check(&self) -> Result<(), PlotError> {
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
    fn ranges(&self) -> ((f64, f64), (f64, f64)) {
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
    fn display_name(&self, index: usize) -> String {
        if self.name.is_empty() {
            format!("#{index} (unnamed)")
        } else {
            self.name.clone()
        }
    }

    fn colour(&self) -> RGBColor {
        PALETTE[self.colour % PALETTE.len()]
    }
}

/// Draws `panels` in a grid `columns` wide into a PNG at `path`, each panel `panel_size` =
/// `(width, height)` pixels, under an overall `title`.
///
/// The picture is `columns * width` pixels wide (`columns` is at least 1) and
/// `rows * height + 40` high, where `rows` is the number of grid rows needed and the 40
/// pixels hold the title.
///
/// # Errors
///
/// [`PlotError::Data`] (before anything is written) when there are no panels, a side of
/// `panel_size` is zero, a panel has no points at all, a coordinate is not finite, a y or
/// the low end of `y_range` is not above 0 on a logarithmic axis, a series has labels but
/// not one per point, an arrow series has an odd number of points, or a given range is
/// empty, inverted or not finite. [`PlotError::Draw`] when plotters fails, for example
/// because the output folder does not exist.
///
/// # Example
///
/// ```
/// use burn_positional_plots::{Chart, Series, draw_charts};
///
/// let loss: Vec<(f64, f64)> = (1..=50).map(|s| (s as f64, 2.0 / s as f64)).collect();
/// let panels = [
///     Chart::new("loss", "step", "loss")
///         .with_log_y(true)
///         .with_series(Series::line("train", loss, 0)),
///     Chart::new("positions", "x", "y")
///         .with_series(Series::points("", [(0.0, 0.0), (1.0, 1.0)], 1).with_labels(["a", "b"]))
///         .with_series(Series::arrows("drift", [(0.0, 0.0), (0.5, 0.8)], 3)),
/// ];
/// let path = std::env::temp_dir().join(format!("charts-doc-{}.png", std::process::id()));
/// draw_charts(&path, "training", &panels, 2, (400, 300))?;
/// assert!(path.exists());
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), burn_positional_plots::PlotError>(())
/// ```
pub fn draw_charts(
    path: impl AsRef<Path>,
    title: &str,
    panels: &[Chart],
    columns: usize,
    panel_size: (u32, u32),
) -> Result<(), PlotError> {
    ensure_font();
    if panels.is_empty() {
        return Err(PlotError::Data {
            title: title.to_string(),
            series: String::new(),
            detail: "no panels to draw; pass at least one Chart".to_string(),
        });
    }
    if panel_size.0 == 0 || panel_size.1 == 0 {
        return Err(PlotError::Data {
            title: title.to_string(),
            series: String::new(),
            detail: format!(
                "panel_size {panel_size:?} has a zero side; give each panel at least about 200x150 pixels"
            ),
        });
    }
    for panel in panels {
        panel.check()?;
    }
    crate::draw_grid(
        path.as_ref(),
        title,
        panels,
        columns,
        panel_size,
        draw_panel,
    )
}

/// Most bold ticks (labelled) put on a logarithmic axis.
const MAX_LOG_TICKS: usize = 8;

/// Tick values for a logarithmic axis over `lo..hi` (both > 0): the labelled (bold) ticks and
/// the light grid lines. Plotters' own log ticks start at the first power of ten in the
/// range, leaving e.g. `0.2..4` with the single label `1`; these are the first of the 1..9,
/// 1-2-5, powers-of-ten and every-n-decades sets to fit [`MAX_LOG_TICKS`], or linear ticks
/// when the range is too narrow for any of them to give 3.
fn log_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let (k0, k1) = (lo.log10().floor() as i32 - 1, hi.log10().ceil() as i32 + 1);
    let inside = |v: f64| v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9);
    let ticks = |mantissas: &[f64], every: i32| -> Vec<f64> {
        (k0..=k1)
            .filter(|k| k.rem_euclid(every) == 0)
            .flat_map(|k| mantissas.iter().map(move |m| m * 10f64.powi(k)))
            .filter(|&v| inside(v))
            .collect()
    };
    const ALL: [f64; 9] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
    let candidates: [(&[f64], i32); 9] = [
        (&ALL, 1),
        (&[1.0, 2.0, 5.0], 1),
        (&[1.0], 1),
        (&[1.0], 2),
        (&[1.0], 3),
        (&[1.0], 5),
        (&[1.0], 10),
        (&[1.0], 20),
        (&[1.0], 50),
    ];
    let mut bold = Vec::new();
    for (mantissas, every) in candidates {
        bold = ticks(mantissas, every);
        if bold.len() <= MAX_LOG_TICKS {
            break;
        }
    }
    if bold.len() < 3 && hi / lo < 10.0 {
        bold = RangedCoordf64::from(lo..hi).key_points(6);
    }
    let light = [ticks(&ALL, 1), ticks(&[1.0], 1)]
        .into_iter()
        .find(|t| t.len() <= 200)
        .unwrap_or_default();
    (bold, light)
}

/// Trims trailing zeros after a decimal point, and the point itself (`"2.50"` to `"2.5"`,
/// `"-0.00"` to `"0"`).
fn trim_number(s: &str) -> String {
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    };
    if s == "-0" { "0".into() } else { s.into() }
}

/// Tick labels for a linear axis spanning `span`: enough decimals to tell ticks apart, with
/// trailing zeros dropped (`20` rather than plotters' `20.0`).
fn linear_tick(span: f64) -> impl Fn(&f64) -> String {
    let decimals = (3 - span.log10().floor() as i32).clamp(0, 15) as usize;
    move |v| trim_number(&format!("{v:.decimals$}"))
}

/// Tick labels for a logarithmic axis: plain numbers in `[0.001, 10000)`, else `2e-5` style.
fn log_tick(v: &f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e4).contains(&a) {
        let s = format!("{v:.5e}");
        let (mantissa, exponent) = s.split_once('e').unwrap_or((&s, "0"));
        format!("{}e{exponent}", trim_number(mantissa))
    } else {
        let decimals = (8 - a.log10().floor() as i32).clamp(0, 12) as usize;
        trim_number(&format!("{v:.decimals$}"))
    }
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Chart,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let ((x0, x1), (y0, y1)) = panel.ranges();
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&panel.title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(if panel.x_label.is_empty() { 28 } else { 44 })
        .y_label_area_size(if panel.y_label.is_empty() { 48 } else { 64 });
    let x_ticks = linear_tick(x1 - x0);
    if panel.log_y {
        let (bold, light) = log_ticks(y0, y1);
        let y = (y0..y1)
            .log_scale()
            .with_key_points(bold)
            .with_light_points(light);
        let mut chart = builder.build_cartesian_2d(x0..x1, y)?;
        fill_chart(&mut chart, panel, &x_ticks, &log_tick)
    } else {
        let mut chart = builder.build_cartesian_2d(x0..x1, y0..y1)?;
        fill_chart(&mut chart, panel, &x_ticks, &linear_tick(y1 - y0))
    }
}

/// Draws the mesh, the series, the labels and the legend of `panel` on `chart`, whose y axis
/// is linear or logarithmic.
fn fill_chart<'a, DB, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>,
    panel: &Chart,
    x_ticks: &dyn Fn(&f64) -> String,
    y_ticks: &dyn Fn(&f64) -> String,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let clip = Clip::new(chart.x_range(), chart.y_range(), panel.log_y);
    {
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(panel.x_label.as_str())
            .y_desc(panel.y_label.as_str())
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .light_line_style(RGBColor(235, 235, 235))
            .x_label_formatter(x_ticks)
            .y_label_formatter(y_ticks)
            .draw()?;
    }
    for series in &panel.series {
        let colour = series.colour();
        let stroke = colour.stroke_width(2);
        if !series.name.is_empty() {
            let kind = series.kind;
            // An empty series only registers the legend entry.
            let entry = chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
                .label(series.name.as_str());
            // (A closure returning a `DynElement` would need a 'static backend.)
            match kind {
                SeriesKind::Points => {
                    entry.legend(move |(x, y)| Circle::new((x + 10, y), 4, colour.filled()))
                }
                SeriesKind::Line | SeriesKind::Arrows => {
                    entry.legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], stroke))
                }
            };
        }
        match series.kind {
            SeriesKind::Line => {
                for run in clip.polyline(&series.points) {
                    chart.draw_series(LineSeries::new(run, stroke))?;
                }
                if series.points.len() <= MARKER_LIMIT {
                    chart.draw_series(
                        series
                            .points
                            .iter()
                            .filter(|p| clip.contains(**p))
                            .map(|&p| Circle::new(p, 3, colour.filled())),
                    )?;
                }
            }
            SeriesKind::Points => {
                chart.draw_series(
                    series
                        .points
                        .iter()
                        .filter(|p| clip.contains(**p))
                        .map(|&p| Circle::new(p, 4, colour.filled())),
                )?;
            }
            SeriesKind::Arrows => {
                for pair in series.points.chunks_exact(2) {
                    let (from, to) = (pair[0], pair[1]);
                    let Some((a, b)) = clip.segment(from, to) else {
                        continue;
                    };
                    chart.draw_series(std::iter::once(PathElement::new(vec![a, b], stroke)))?;
                    if clip.contains(to) {
                        // The head is built in pixels so that it points along the arrow as
                        // drawn, whatever the axis scales.
                        let (fx, fy) = chart.backend_coord(&from);
                        let (tx, ty) = chart.backend_coord(&to);
                        let (dx, dy) = (f64::from(tx - fx), f64::from(ty - fy));
                        let length = dx.hypot(dy);
                        if length >= 1.0 {
                            let (ux, uy) = (dx / length, dy / length);
                            let (back, half) = (11.0f64.min(length), 4.5);
                            let corner = |side: f64| {
                                (
                                    (-ux * back - uy * half * side).round() as i32,
                                    (-uy * back + ux * half * side).round() as i32,
                                )
                            };
                            chart.draw_series(std::iter::once(
                                EmptyElement::at(to)
                                    + Polygon::new(
                                        vec![(0, 0), corner(1.0), corner(-1.0)],
                                        colour.filled(),
                                    ),
                            ))?;
                        }
                    }
                }
            }
        }
        if !series.labels.is_empty() {
            let style = ("sans-serif", 13)
                .into_font()
                .color(&LABEL_COLOUR)
                .pos(Pos::new(HPos::Left, VPos::Bottom));
            chart.draw_series(
                series
                    .points
                    .iter()
                    .zip(&series.labels)
                    .filter(|(p, label)| !label.is_empty() && clip.contains(**p))
                    .map(|(&p, label)| {
                        EmptyElement::at(p) + Text::new(label.clone(), (5, -4), style.clone())
                    }),
            )?;
        }
    }
    if panel.series.iter().any(|s| !s.name.is_empty()) {
        chart
            .configure_series_labels()
            .position(legend_corner(panel, &clip))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(160, 160, 160))
            .label_font(("sans-serif", 13))
            .draw()?;
    }
    Ok(())
}

/// The corner of the plot the legend covers least data in (upper right on a tie): counts
/// points, and samples along lines and arrows, that fall in the outer 40% of each axis.
fn legend_corner(panel: &Chart, clip: &Clip) -> SeriesLabelPosition {
    let mut counts = [0usize; 4]; // upper right, upper left, lower left, lower right
    let mut add = |p: (f64, f64)| {
        let (x, y) = clip.normalized(p);
        let (left, right) = ((0.0..0.4).contains(&x), (0.6..=1.0).contains(&x));
        let (low, high) = ((0.0..0.4).contains(&y), (0.6..=1.0).contains(&y));
        for (corner, inside) in [high && right, high && left, low && left, low && right]
            .into_iter()
            .enumerate()
        {
            counts[corner] += usize::from(inside);
        }
    };
    for series in &panel.series {
        let joined = match series.kind {
            SeriesKind::Line => series.points.windows(2).collect::<Vec<_>>(),
            SeriesKind::Arrows => series.points.chunks_exact(2).collect(),
            SeriesKind::Points => Vec::new(),
        };
        series.points.iter().for_each(|&p| add(p));
        for pair in joined {
            let (a, b) = (clip.normalized(pair[0]), clip.normalized(pair[1]));
            for i in 1..8 {
                let t = f64::from(i) / 8.0;
                add(clip.denormalized((a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t)));
            }
        }
    }
    let best = (0..4).min_by_key(|&c| counts[c]).unwrap_or(0);
    [
        SeriesLabelPosition::UpperRight,
        SeriesLabelPosition::UpperLeft,
        SeriesLabelPosition::LowerLeft,
        SeriesLabelPosition::LowerRight,
    ][best]
        .clone()
}

/// Cuts points and segments to the axis ranges, so nothing is drawn outside the plot (plotters
/// would otherwise pile outside points up on its edge). Works in axis space: y is `log10(y)` on
/// a logarithmic axis, so a cut line keeps the direction it has on the picture.
struct Clip {
    x: (f64, f64),
    y: (f64, f64),
    log_y: bool,
}

impl Clip {
    fn new(x: std::ops::Range<f64>, y: std::ops::Range<f64>, log_y: bool) -> Self {
        let mut clip = Self {
            x: (x.start, x.end),
            y: (0.0, 0.0),
            log_y,
        };
        clip.y = (clip.value_to_axis(y.start), clip.value_to_axis(y.end));
        clip
    }

    fn value_to_axis(&self, y: f64) -> f64 {
        if self.log_y { y.log10() } else { y }
    }

    fn axis_to_value(&self, y: f64) -> f64 {
        if self.log_y { 10f64.powf(y) } else { y }
    }

    /// Where `p` lies on the plot, from `(0, 0)` at the lower left to `(1, 1)` at the upper
    /// right.
    fn normalized(&self, (x, y): (f64, f64)) -> (f64, f64) {
        (
            (x - self.x.0) / (self.x.1 - self.x.0),
            (self.value_to_axis(y) - self.y.0) / (self.y.1 - self.y.0),
        )
    }

    /// The inverse of [`Clip::normalized`].
    fn denormalized(&self, (u, v): (f64, f64)) -> (f64, f64) {
        (
            self.x.0 + u * (self.x.1 - self.x.0),
            self.axis_to_value(self.y.0 + v * (self.y.1 - self.y.0)),
        )
    }

    fn contains(&self, (x, y): (f64, f64)) -> bool {
        let y = self.value_to_axis(y);
        (self.x.0..=self.x.1).contains(&x) && (self.y.0..=self.y.1).contains(&y)
    }

    /// The part of the segment inside the ranges as parameters `0 <= t0 <= t1 <= 1`
    /// (Liang–Barsky), or `None` when none of it is.
    fn params(&self, a: (f64, f64), b: (f64, f64)) -> Option<(f64, f64)> {
        let (ay, by) = (self.value_to_axis(a.1), self.value_to_axis(b.1));
        let (dx, dy) = (b.0 - a.0, by - ay);
        let (mut t0, mut t1) = (0.0f64, 1.0f64);
        for (p, q) in [
            (-dx, a.0 - self.x.0),
            (dx, self.x.1 - a.0),
            (-dy, ay - self.y.0),
            (dy, self.y.1 - ay),
        ] {
            if p == 0.0 {
                if q < 0.0 {
                    return None;
                }
            } else {
                let t = q / p;
                if p < 0.0 {
                    t0 = t0.max(t);
                } else {
                    t1 = t1.min(t);
                }
            }
        }
        (t0 <= t1).then_some((t0, t1))
    }

    fn at(&self, a: (f64, f64), b: (f64, f64), t: f64) -> (f64, f64) {
        if t == 0.0 {
            return a;
        }
        if t == 1.0 {
            return b;
        }
        let (ay, by) = (self.value_to_axis(a.1), self.value_to_axis(b.1));
        (
            a.0 + (b.0 - a.0) * t,
            self.axis_to_value(ay + (by - ay) * t),
        )
    }

    /// The part of the segment `a`–`b` inside the ranges.
    fn segment(&self, a: (f64, f64), b: (f64, f64)) -> Option<((f64, f64), (f64, f64))> {
        let (t0, t1) = self.params(a, b)?;
        Some((self.at(a, b, t0), self.at(a, b, t1)))
    }

    /// The visible runs of the polyline through `points`.
    fn polyline(&self, points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
        let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
        let mut open = false;
        for pair in points.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            match self.params(a, b) {
                Some((t0, t1)) => {
                    if !(open && t0 == 0.0) {
                        runs.push(vec![self.at(a, b, t0)]);
                    }
                    if let Some(run) = runs.last_mut() {
                        run.push(self.at(a, b, t1));
                    }
                    open = t1 == 1.0;
                }
                None => open = false,
            }
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_png(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    /// (width, height) read from the IHDR chunk, after checking the PNG signature.
    fn png_size(bytes: &[u8]) -> (u32, u32) {
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
        assert_eq!(&bytes[12..16], b"IHDR");
        let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        (be(&bytes[16..20]), be(&bytes[20..24]))
    }

    fn example_panels() -> Vec<Chart> {
        let loss = |scale: f64| -> Vec<(f64, f64)> {
            (1..=200)
                .map(|s| (s as f64, scale * 3.0 / (s as f64).sqrt() + 0.01))
                .collect()
        };
        let start = [(0.0, 0.0), (1.0, 0.2), (0.3, 1.0), (-0.5, 0.4)];
        let end = [(0.2, 0.3), (0.8, 0.6), (0.1, 0.7), (-0.9, 0.9)];
        let arrows: Vec<(f64, f64)> = start.iter().zip(&end).flat_map(|(a, b)| [*a, *b]).collect();
        vec![
            Chart::new("loss", "step", "cross-entropy")
                .with_log_y(true)
                .with_series(Series::line("train", loss(1.0), 0))
                .with_series(Series::line("valid", loss(1.3), 1))
                .with_series(Series::line(
                    "",
                    (0..10).map(|i| (20.0 * i as f64 + 1.0, 0.5)),
                    7,
                )),
            Chart::new("positions", "dim 0", "dim 1")
                .with_series(
                    Series::points("before", start, 2).with_labels(["p0", "p1", "p2", "p3"]),
                )
                .with_series(Series::arrows("drift", arrows, 3))
                .with_series(Series::points("", end, 3)),
        ]
    }

    #[test]
    fn draws_a_two_panel_png_of_the_right_size() {
        let path = temp_png("two.png");
        draw_charts(&path, "charts", &example_panels(), 2, (420, 300)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(png_size(&bytes), (2 * 420, 300 + crate::TITLE_BAND));
        // One column: two rows.
        draw_charts(&path, "charts", &example_panels(), 1, (300, 250)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(png_size(&bytes), (300, 2 * 250 + crate::TITLE_BAND));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn draws_with_fixed_ranges_that_cut_the_data() {
        let path = temp_png("ranges.png");
        let panels = [
            Chart::new("cut", "x", "y")
                .with_x_range(0.5, 1.5)
                .with_y_range(0.1, 0.9)
                .with_series(Series::line("l", [(0.0, 0.0), (1.0, 1.0), (2.0, 0.0)], 0))
                .with_series(Series::arrows("a", [(0.0, 0.5), (1.0, 0.5)], 1))
                .with_series(Series::points("", [(5.0, 5.0)], 2).with_labels(["far"])),
            Chart::new("single", "x", "y")
                .with_log_y(true)
                .with_series(Series::points("", [(1.0, 1.0)], 4)),
        ];
        draw_charts(&path, "ranges", &panels, 2, (300, 200)).unwrap();
        assert!(path.exists());
        std::fs::remove_file(&path).unwrap();
    }

    fn data_error(panels: &[Chart]) -> (String, String, String, String) {
        match draw_charts(temp_png("never.png"), "t", panels, 1, (300, 200)) {
            Err(e @ PlotError::Data { .. }) => {
                let message = e.to_string();
                let PlotError::Data {
                    title,
                    series,
                    detail,
                } = e
                else {
                    unreachable!()
                };
                (title, series, detail, message)
            }
            other => panic!("expected PlotError::Data, got {other:?}"),
        }
    }

    #[test]
    fn refuses_bad_data_naming_panel_and_series() {
        let one = |series: Series| Chart::new("panel A", "x", "y").with_series(series);
        let cases = [
            (
                one(Series::line("curve", [(1.0, 1.0), (2.0, 0.0)], 0)).with_log_y(true),
                "y = 0",
            ),
            (one(Series::points("dots", [(f64::NAN, 1.0)], 0)), "NaN"),
            (
                one(Series::arrows(
                    "moves",
                    [(0.0, 0.0), (1.0, 1.0), (2.0, 2.0)],
                    0,
                )),
                "3 points",
            ),
            (
                one(Series::points("dots", [(0.0, 0.0), (1.0, 1.0)], 0).with_labels(["a"])),
                "1 labels for 2 points",
            ),
        ];
        for (panel, needle) in cases {
            let (title, series, detail, message) = data_error(std::slice::from_ref(&panel));
            assert_eq!(title, "panel A");
            assert_eq!(series, panel.series[0].name);
            assert!(detail.contains(needle), "{detail:?} lacks {needle:?}");
            assert!(
                message.contains("panel A") && message.contains(&panel.series[0].name),
                "{message}"
            );
        }
        assert!(!temp_png("never.png").exists());
    }

    #[test]
    fn refuses_bad_panels_and_ranges() {
        let ok = Chart::new("B", "x", "y").with_series(Series::line("s", [(0.0, 1.0)], 0));
        let (title, _, detail, _) = data_error(&[]);
        assert_eq!(title, "t");
        assert!(detail.contains("no panels"));
        let (title, series, detail, _) =
            data_error(&[Chart::new("B", "x", "y").with_series(Series::line("s", [], 0))]);
        assert_eq!((title.as_str(), series.as_str()), ("B", ""));
        assert!(detail.contains("no points"));
        let (_, _, detail, _) = data_error(&[ok.clone().with_x_range(1.0, 1.0)]);
        assert!(detail.contains("x_range (1, 1)"), "{detail}");
        let (_, _, detail, _) = data_error(&[ok.clone().with_y_range(2.0, -1.0)]);
        assert!(detail.contains("inverted"), "{detail}");
        let (_, _, detail, _) = data_error(&[ok.clone().with_log_y(true).with_y_range(0.0, 1.0)]);
        assert!(detail.contains("logarithmic"), "{detail}");
        let unnamed =
            Chart::new("B", "x", "y").with_series(Series::points("", [(0.0, f64::INFINITY)], 0));
        let (_, series, _, message) = data_error(&[unnamed]);
        assert_eq!(series, "#0 (unnamed)");
        assert!(message.contains("#0 (unnamed)"), "{message}");
    }

    #[test]
    fn clips_lines_at_the_range_edges() {
        let clip = Clip::new(0.0..1.0, 0.0..1.0, false);
        let runs = clip.polyline(&[(-1.0, 0.5), (0.5, 0.5), (2.0, 0.5), (3.0, 0.5), (0.5, 0.25)]);
        let near = |a: &[(f64, f64)], b: &[(f64, f64)]| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(p, q)| (p.0 - q.0).abs() < 1e-12 && (p.1 - q.1).abs() < 1e-12)
        };
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert!(
            near(&runs[0], &[(0.0, 0.5), (0.5, 0.5), (1.0, 0.5)]),
            "{runs:?}"
        );
        assert!(near(&runs[1], &[(1.0, 0.3), (0.5, 0.25)]), "{runs:?}");
        assert_eq!(clip.segment((2.0, 2.0), (3.0, 3.0)), None);
        let log = Clip::new(0.0..1.0, 1.0..100.0, true);
        let (a, b) = log.segment((0.0, 1.0), (1.0, 10_000.0)).unwrap();
        assert_eq!(a, (0.0, 1.0));
        assert!(
            (b.0 - 0.5).abs() < 1e-12 && (b.1 - 100.0).abs() < 1e-9,
            "{b:?}"
        );
    }

    #[test]
    fn formats_log_ticks() {
        assert_eq!(log_tick(&0.01), "0.01");
        assert_eq!(log_tick(&1.0), "1");
        assert_eq!(log_tick(&200.0), "200");
        assert_eq!(log_tick(&1e-5), "1e-5");
        assert_eq!(log_tick(&1e6), "1e6");
        assert_eq!(log_tick(&(2.0 * 10f64.powi(-5))), "2e-5");
        assert_eq!(log_tick(&0.0015), "0.0015");
        assert_eq!(log_tick(&(3.0 * 0.1)), "0.3");
        let ticks = linear_tick(200.0);
        assert_eq!(
            (ticks(&20.0), ticks(&-0.0), ticks(&12.5)),
            ("20".into(), "0".into(), "12.5".into())
        );
        assert_eq!(linear_tick(0.02)(&0.0150000001), "0.015");
    }

    #[test]
    fn picks_readable_log_ticks() {
        let (bold, light) = log_ticks(0.2, 4.0);
        assert_eq!(bold.len(), 4, "{bold:?}");
        assert!(
            (bold[0] - 0.2).abs() < 1e-12 && (bold[3] - 2.0).abs() < 1e-12,
            "{bold:?}"
        );
        assert_eq!(light.len(), 12, "{light:?}");
        let (bold, _) = log_ticks(1e-6, 1e6);
        assert_eq!(bold.len(), 7, "{bold:?}");
        // Narrower than a decade and holding at most two 1..9 ticks: linear ticks.
        let (bold, _) = log_ticks(0.95, 1.2);
        assert!(bold.len() >= 3, "{bold:?}");
        assert!(bold.iter().all(|&v| (0.95..=1.2).contains(&v)));
    }

    /// Renders the example picture to `$CHARTS_EXAMPLE` when that is set (for looking at).
    #[test]
    fn renders_example_when_asked() {
        if let Ok(path) = std::env::var("CHARTS_EXAMPLE") {
            let mut panels = example_panels();
            panels.push(
                Chart::new("cut to fixed ranges", "x", "y")
                    .with_x_range(0.5, 1.5)
                    .with_y_range(0.1, 0.9)
                    .with_series(Series::line(
                        "zigzag",
                        [(0.0, 0.0), (1.0, 1.0), (2.0, 0.0)],
                        0,
                    ))
                    .with_series(Series::arrows("arrow", [(0.6, 0.2), (1.4, 0.6)], 4)),
            );
            panels.push(
                Chart::new("many points, no markers", "i", "sin").with_series(Series::line(
                    "",
                    (0..200).map(|i| (i as f64 / 10.0, (i as f64 / 10.0).sin())),
                    5,
                )),
            );
            panels.push(
                Chart::new("many decades", "epoch", "gradient norm")
                    .with_log_y(true)
                    .with_series(Series::line(
                        "grad",
                        (0..60).map(|i| (i as f64, 10f64.powf(2.0 - i as f64 / 8.0))),
                        2,
                    )),
            );
            panels.push(
                Chart::new("narrow log range", "t", "ratio")
                    .with_log_y(true)
                    .with_series(Series::points(
                        "ratio",
                        (0..20).map(|i| (i as f64, 1.0 + 0.01 * i as f64)),
                        6,
                    )),
            );
            draw_charts(path, "draw_charts example", &panels, 2, (480, 340)).unwrap();
        }
    }
}
