//! Drawing: [`draw_charts`] lays panels out in a grid and draws each with its axes, ticks,
//! series, labels and legend.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::clip::Clip;
use super::ticks::{linear_tick, log_tick, log_ticks};
use super::{Chart, SeriesKind};
use crate::{PlotError, ensure_font};

/// Line series with at most this many points also get a marker at each point.
const MARKER_LIMIT: usize = 40;

/// Colour of the per-point text labels.
const LABEL_COLOUR: RGBColor = RGBColor(40, 40, 40);

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Series;

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
