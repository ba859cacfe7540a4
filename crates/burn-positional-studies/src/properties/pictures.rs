//! The pictures of the properties example (`examples/properties.rs`), and the rows they draw:
//! the signatures and similarity of every scheme, the collisions of (token, position) pairs,
//! and add versus concatenate.

use std::path::Path;

use burn::prelude::*;
use burn_positional::absolute::sinusoid_rows;
use burn_positional_plots::{Chart, Heatmap, Series, draw_charts, draw_heatmaps};
use serde::Serialize;

use super::{PropertiesConfig, SchemeProbe, closest_combination, number};
use crate::schemes::Scheme;
use crate::training::Metrics;

/// One training run's history: train metrics every step, validation every `valid_every`.
#[derive(Serialize)]
pub struct History {
    pub name: String,
    pub seconds: f64,
    pub steps: Vec<(usize, Metrics, Option<Metrics>)>,
}

/// One row of the collisions table: the closest (token, position) pairs of one scheme at one
/// width.
#[derive(Serialize)]
pub struct CollisionRow {
    pub scheme: String,
    pub d_model: usize,
    pub vocab: usize,
    pub positions: usize,
    pub distance: f64,
    pub first: (usize, usize),
    pub second: (usize, usize),
    pub different_tokens: f64,
    pub different_first: (usize, usize),
    pub different_second: (usize, usize),
    pub mean_distance: f64,
    pub closest_tokens: f64,
    pub closest_positions: f64,
}

/// Searches the closest (token, position) pairs of `scheme` ([`closest_combination`]) and
/// makes a table row of them.
pub fn collision_row(
    scheme: Scheme,
    vocab: usize,
    config: &PropertiesConfig,
    device: &Device,
) -> CollisionRow {
    let found = closest_combination(scheme, vocab, config, device).expect("even widths");
    CollisionRow {
        scheme: scheme.to_string(),
        d_model: config.d_model,
        vocab,
        positions: config.length,
        distance: found.distance,
        first: found.first,
        second: found.second,
        different_tokens: found.different_tokens.0,
        different_first: found.different_tokens.1,
        different_second: found.different_tokens.2,
        mean_distance: found.mean_distance,
        closest_tokens: found.closest_tokens,
        closest_positions: found.closest_positions,
    }
}

/// Draws `encodings.png` (each scheme's signatures) and `similarity.png` (score against
/// distance) into `out`.
///
/// # Panics
///
/// When a picture cannot be drawn.
pub fn draw_report_pictures(probes: &[SchemeProbe], config: &PropertiesConfig, out: &Path) {
    let (n, reach) = (config.length, config.length * config.reach);
    let mut maps = Vec::new();
    let mut charts = Vec::new();
    for (i, probe) in probes.iter().enumerate() {
        let span = if probe.limit().is_some() { n } else { reach };
        let bias = probe.signature_kind() == "bias(r)";
        if bias {
            let scores = probe.scores(0, n).expect("positions 0..N");
            maps.push(Heatmap::new(
                format!("{}: bias(q, k), head mean", probe.label),
                scores
                    .iter()
                    .map(|r| r.iter().map(|&v| v as f32).collect())
                    .collect(),
            ));
        } else {
            maps.push(Heatmap::new(
                format!("{}: {}, p < {span}", probe.label, probe.signature_kind()),
                probe.signatures(0..span).expect("positions in range"),
            ));
        }
        // Score between p and p + k against k: mean over p, and the range over p.
        let scores = probe.scores(0, span).expect("positions in range");
        let per_offset: Vec<Vec<f64>> = (0..span)
            .map(|k| (0..span - k).map(|p| scores[p][p + k]).collect())
            .collect();
        let line = |f: &dyn Fn(&[f64]) -> f64| -> Vec<(f64, f64)> {
            per_offset
                .iter()
                .enumerate()
                .map(|(k, v)| (k as f64, f(v)))
                .collect()
        };
        charts.push(
            Chart::new(
                probe.label.clone(),
                "distance k = q - p".to_string(),
                if bias {
                    "bias".to_string()
                } else {
                    "dot product".to_string()
                },
            )
            .with_series(Series::line(
                "mean over p",
                line(&|v| v.iter().sum::<f64>() / v.len() as f64),
                i % 10,
            ))
            .with_series(Series::line(
                "min over p",
                line(&|v| v.iter().copied().fold(f64::INFINITY, f64::min)),
                9,
            ))
            .with_series(Series::line(
                "max over p",
                line(&|v| v.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
                7,
            )),
        );
    }
    draw_heatmaps(
        out.join("encodings.png"),
        "What each scheme puts where (rows: positions)",
        &maps,
        4,
        360,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    draw_charts(
        out.join("similarity.png"),
        "Similarity against distance: score(p, p + k) for every p",
        &charts,
        4,
        (420, 320),
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Draws `collisions.png` into `out`: the seed's construction, every combination at
/// `d_model` 2 with the closest pair marked, and the closest pair against width (`sweep`).
///
/// # Panics
///
/// When the picture cannot be drawn.
pub fn draw_collisions(
    tokens: &[Vec<f32>],
    made_up: &[Vec<f32>],
    sweep: &[CollisionRow],
    device: &Device,
    out: &Path,
) {
    let point = |v: &[f32]| (v[0] as f64, v[1] as f64);
    let add = |a: &[f32], b: &[f32]| vec![a[0] + b[0], a[1] + b[1]];
    let seed_chart = Chart::new(
        "Seed 000's construction: A + PE(1) = B + PE(2)".to_string(),
        "dim 0".to_string(),
        "dim 1".to_string(),
    )
    .with_series(
        Series::points("tokens", vec![point(&tokens[0]), point(&tokens[1])], 0)
            .with_labels(["A", "B"]),
    )
    .with_series(Series::arrows(
        "+ position",
        vec![
            point(&tokens[0]),
            point(&add(&tokens[0], &made_up[1])),
            point(&tokens[1]),
            point(&add(&tokens[1], &made_up[2])),
        ],
        1,
    ))
    .with_series(
        Series::points(
            "combinations",
            vec![point(&add(&tokens[0], &made_up[1]))],
            3,
        )
        .with_labels(["A+PE(1) = B+PE(2)"]),
    );
    // Every combination at d_model = 2 with sinusoidal positions, closest pair marked.
    let config = PropertiesConfig::new().with_d_model(2).with_n_heads(1);
    let two = &sweep[0];
    device.seed(config.seed);
    let embed = burn_positional::EmbeddingWithPositionConfig::new(two.vocab, 2).init(device);
    let table: Vec<f32> = embed.tokens.val().into_data().iter::<f32>().collect();
    let pe = sinusoid_rows(0..config.length as u64, 2, 10_000.0);
    let combo = |t: usize, p: usize| {
        (
            table[2 * t] as f64 + pe[2 * p] as f64,
            table[2 * t + 1] as f64 + pe[2 * p + 1] as f64,
        )
    };
    let all: Vec<(f64, f64)> = (0..two.vocab)
        .flat_map(|t| (0..config.length).map(move |p| (t, p)))
        .map(|(t, p)| combo(t, p))
        .collect();
    let scatter = Chart::new(
        format!(
            "d_model 2: {} tokens x {} sinusoidal positions",
            two.vocab, config.length
        ),
        "dim 0".to_string(),
        "dim 1".to_string(),
    )
    .with_series(Series::points("token + PE(p)", all, 0))
    .with_series(
        Series::points(
            "closest pair",
            vec![
                combo(two.first.0, two.first.1),
                combo(two.second.0, two.second.1),
            ],
            3,
        )
        .with_labels(vec![
            String::new(),
            format!(
                "({}, {}) and ({}, {}): {} apart",
                two.first.0,
                two.first.1,
                two.second.0,
                two.second.1,
                number(two.distance)
            ),
        ]),
    );
    let curve = |scheme: &str, f: &dyn Fn(&CollisionRow) -> f64| -> Vec<(f64, f64)> {
        sweep
            .iter()
            .filter(|r| r.scheme == scheme)
            .map(|r| (r.d_model as f64, f(r)))
            .collect()
    };
    let widths = Chart::new(
        "Closest pair against width".to_string(),
        "d_model".to_string(),
        "distance".to_string(),
    )
    .with_log_y(true)
    .with_series(Series::line(
        "closest, sinusoidal",
        curve("sinusoidal", &|r| r.distance),
        0,
    ))
    .with_series(Series::line(
        "closest, learned",
        curve("learned", &|r| r.distance),
        1,
    ))
    .with_series(Series::line(
        "mean, sinusoidal",
        curve("sinusoidal", &|r| r.mean_distance),
        2,
    ));
    draw_charts(
        out.join("collisions.png"),
        "Seed 000: do different (token, position) combinations collide?",
        &[seed_chart, scatter, widths],
        3,
        (480, 420),
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Draws `add_vs_concat.png` into `out`: validation accuracy and loss of every run.
///
/// # Panics
///
/// When the picture cannot be drawn.
pub fn draw_add_vs_concat(histories: &[History], out: &Path) {
    let chart = |title: &str, y: &str, log: bool, f: &dyn Fn(&Metrics) -> f64| {
        let mut chart = Chart::new(title.to_string(), "step".to_string(), y.to_string());
        if log {
            chart = chart.with_log_y(true);
        }
        for (i, h) in histories.iter().enumerate() {
            let points: Vec<(f64, f64)> = h
                .steps
                .iter()
                .filter_map(|(s, _, v)| v.map(|v| (*s as f64, f(&v))))
                .collect();
            chart = chart.with_series(Series::line(h.name.clone(), points, i));
        }
        chart
    };
    draw_charts(
        out.join("add_vs_concat.png"),
        "Seed 001: add versus concatenate (validation, every 50 steps)",
        &[
            chart("validation accuracy", "accuracy", false, &|m| {
                m.accuracy as f64
            }),
            chart("validation loss", "cross-entropy", true, &|m| {
                (m.loss as f64).max(1e-6)
            }),
        ],
        2,
        (620, 440),
    )
    .unwrap_or_else(|e| panic!("{e}"));
}
