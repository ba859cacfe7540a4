//! Seed 002's table of desirable properties (unique, bounded, deterministic, generalizable,
//! smooth, relative-aware), measured with numbers for every scheme, on any device.
//!
//! Each scheme is probed through the vectors that carry its positions, its *signatures*:
//!
//! | family | signature of position `p` | scores between positions `p` and `q` |
//! | --- | --- | --- |
//! | absolute (none, sinusoidal, learned) | the position vector `PE(p)`, `d_model` wide | `PE(p)·PE(q)` |
//! | rotary (RoPE) | `R(p)u` for a fixed unit probe `u` per head, heads side by side | `Σ_h (R(p)u_h)·(R(q)w_h)`, probes `u ≠ w` |
//! | score bias (ALiBi, T5) | the bias of distance `r = p` over the heads, `n_heads` wide | the bias of query `p` and key `q`, averaged over heads |
//!
//! The measurements themselves are host code in [`burn_positional_analysis`]; this module gets
//! the signatures and scores off the device and assembles a [`PropertyRow`] per scheme.
//! [`pictures`] draws them (and the collisions and add-versus-concatenate pictures) for the
//! properties example.

pub mod pictures;

use std::ops::Range;

use burn::config::Config;
use burn::module::Param;
use burn::prelude::*;
use burn_positional_analysis as analysis;
use serde::Serialize;

use crate::encoder::Encoder;
use crate::schemes::Scheme;
use crate::{AbsolutePosition, PositionError, Rope, ScoreBias};

/// Sizes of the properties report.
#[derive(Config, Debug, PartialEq)]
pub struct PropertiesConfig {
    /// Width of the embedding. 64 by default, as the training example.
    #[config(default = 64)]
    pub d_model: usize,
    /// Heads of the attention blocks (RoPE, ALiBi and T5 act per head). 4 by default.
    #[config(default = 4)]
    pub n_heads: usize,
    /// The trained or tabled length `N`: learned tables have `N` rows and most measurements
    /// use positions `0..N`. 32 by default, the training example's sequence length.
    #[config(default = 32)]
    pub length: usize,
    /// How far past `N` generalization is probed: positions `N..reach·N`. 4 by default.
    #[config(default = 4)]
    pub reach: usize,
    /// Seed of every random init. 42 by default.
    #[config(default = 42)]
    pub seed: u64,
}

impl PropertiesConfig {
    /// Positions at least this far apart count as "far" for smoothness: `N / 4`.
    pub fn far(&self) -> usize {
        (self.length / 4).max(1)
    }
}

/// Where a scheme keeps its positions, built on one device.
#[derive(Debug, Clone)]
pub enum Probe {
    /// An embedding scheme (none, sinusoidal, learned).
    Absolute(AbsolutePosition),
    /// Rotary positions on queries and keys.
    Rope(Rope),
    /// A score bias (ALiBi, T5).
    Bias(ScoreBias),
}

/// A scheme under measurement: its name, how it was obtained, and its modules.
#[derive(Debug, Clone)]
pub struct SchemeProbe {
    /// The scheme.
    pub scheme: Scheme,
    /// Shown in the table: the scheme's name, and "trained" for trained modules.
    pub label: String,
    /// Whether the modules come from a fresh init (rather than from training).
    pub fresh: bool,
    /// The modules.
    pub probe: Probe,
    config: PropertiesConfig,
    device: Device,
}

fn to_host(tensor: Tensor<2>) -> Vec<Vec<f32>> {
    let [_, cols] = tensor.dims();
    let values: Vec<f32> = tensor.into_data().iter::<f32>().collect();
    values.chunks(cols.max(1)).map(<[f32]>::to_vec).collect()
}

/// A unit vector per head, `[n_heads][d_head]`, from a fixed 64-bit LCG stream.
fn probe_vectors(n_heads: usize, d_head: usize, stream: u64) -> Vec<Vec<f32>> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ stream;
    (0..n_heads)
        .map(|_| {
            let v: Vec<f64> = (0..d_head)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
                })
                .collect();
            let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
            v.iter().map(|x| (x / norm) as f32).collect()
        })
        .collect()
}

impl SchemeProbe {
    /// A fresh init of `scheme` at `config`'s sizes on `device`, seeded with `config.seed`.
    pub fn init(scheme: Scheme, config: &PropertiesConfig, device: &Device) -> Self {
        device.seed(config.seed);
        let d_head = config.d_model / config.n_heads;
        let parts = scheme.parts(config.length, config.n_heads, d_head);
        let probe = if let Some(rope) = parts.rope {
            Probe::Rope(rope.init(device))
        } else if let Some(bias) = parts.score_bias {
            Probe::Bias(bias.init(device))
        } else {
            Probe::Absolute(parts.embedding.init(config.d_model, device))
        };
        Self {
            scheme,
            label: scheme.to_string(),
            fresh: true,
            probe,
            config: config.clone(),
            device: device.clone(),
        }
    }

    /// The scheme as a trained encoder holds it: the embedding's positions, the first block's
    /// rotary positions, or the score bias the blocks share.
    pub fn from_encoder(
        scheme: Scheme,
        label: impl Into<String>,
        encoder: &Encoder,
        config: &PropertiesConfig,
    ) -> Self {
        let block = encoder.blocks.first();
        let probe = if let Some(rope) = block.and_then(|b| b.rope.clone()) {
            Probe::Rope(rope)
        } else if let Some(bias) = encoder.score_bias.clone() {
            Probe::Bias(bias)
        } else {
            Probe::Absolute(encoder.embed.position.clone())
        };
        Self {
            scheme,
            label: label.into(),
            fresh: false,
            probe,
            config: config.clone(),
            device: encoder.embed.tokens.val().device(),
        }
    }

    /// The same modules on another device: constants rebuilt there from the config,
    /// trained values copied through the host.
    pub fn to_device(&self, device: &Device) -> Self {
        let mut moved = Self::init(self.scheme, &self.config, device);
        let copy = |table: &Param<Tensor<2>>| Param::from_data(table.val().into_data(), device);
        match (&self.probe, &mut moved.probe) {
            (
                Probe::Absolute(AbsolutePosition::Learned(from)),
                Probe::Absolute(AbsolutePosition::Learned(to)),
            ) => {
                to.table = copy(&from.table);
            }
            (Probe::Bias(ScoreBias::T5(from)), Probe::Bias(ScoreBias::T5(to))) => {
                to.table = copy(&from.table);
            }
            _ => {}
        }
        moved.label = self.label.clone();
        moved.fresh = self.fresh;
        moved
    }

    /// What a signature is, for the table's legend.
    pub fn signature_kind(&self) -> &'static str {
        match self.probe {
            Probe::Absolute(_) => "PE(p)",
            Probe::Rope(_) => "R(p)u",
            Probe::Bias(_) => "bias(r)",
        }
    }

    /// The largest position (or distance) this scheme has a signature for, if any.
    pub fn limit(&self) -> Option<usize> {
        match &self.probe {
            Probe::Absolute(AbsolutePosition::Learned(table)) => Some(table.max_len()),
            _ => None,
        }
    }

    /// The signatures of `positions` (of distances, for score biases), read back to the host.
    ///
    /// # Errors
    ///
    /// The scheme's error for positions it has no vector for (past a learned table).
    pub fn signatures(&self, positions: Range<usize>) -> Result<Vec<Vec<f32>>, PositionError> {
        let len = positions.len();
        match &self.probe {
            Probe::Absolute(position) => Ok(match position.vectors(positions.clone())? {
                Some(rows) => to_host(rows),
                None => vec![vec![0.0; self.config.d_model]; len],
            }),
            Probe::Rope(rope) => {
                let heads = self.rotated(rope, positions.start, len, 0);
                Ok((0..len)
                    .map(|p| heads.iter().flat_map(|h| h[p].iter().copied()).collect())
                    .collect())
            }
            Probe::Bias(bias) => {
                // One query at position 0, keys at 0..end: key r is at distance r.
                let rows = bias
                    .bias(0, 1, positions.end, false) // as a bidirectional block sees it
                    .reshape([self.config.n_heads as i32, -1]); // [n_heads, end]
                let rows = to_host(rows);
                Ok(positions
                    .map(|r| rows.iter().map(|head| head[r]).collect())
                    .collect())
            }
        }
    }

    /// `R(p)` times the probe vectors of stream `stream`, for `offset..offset + len`:
    /// `[n_heads][len][d_head]`.
    fn rotated(&self, rope: &Rope, offset: usize, len: usize, stream: u64) -> Vec<Vec<Vec<f32>>> {
        let n_heads = self.config.n_heads;
        let d_head = rope.d_head;
        let probes = probe_vectors(n_heads, d_head, stream);
        let values: Vec<f32> = probes
            .iter()
            .flat_map(|u| std::iter::repeat_n(u.iter().copied(), len).flatten())
            .collect();
        let x = Tensor::<4>::from_data(
            TensorData::new(values, [1, n_heads, len, d_head]),
            &self.device,
        );
        let out: Vec<f32> = rope.apply(x, offset).into_data().iter::<f32>().collect();
        out.chunks(len * d_head)
            .map(|head| head.chunks(d_head).map(<[f32]>::to_vec).collect())
            .collect()
    }

    /// Scores between the positions `offset..offset + n`, `[n][n]` (see the [module docs](self)).
    ///
    /// # Errors
    ///
    /// As [`Self::signatures`].
    pub fn scores(&self, offset: usize, n: usize) -> Result<Vec<Vec<f64>>, PositionError> {
        let dot = |a: &[f32], b: &[f32]| -> f64 {
            a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
        };
        match &self.probe {
            Probe::Absolute(_) => {
                let rows = self.signatures(offset..offset + n)?;
                Ok(rows
                    .iter()
                    .map(|a| rows.iter().map(|b| dot(a, b)).collect())
                    .collect())
            }
            Probe::Rope(rope) => {
                let (q, k) = (
                    self.rotated(rope, offset, n, 0),
                    self.rotated(rope, offset, n, 1),
                );
                Ok((0..n)
                    .map(|p| {
                        (0..n)
                            .map(|j| q.iter().zip(&k).map(|(qh, kh)| dot(&qh[p], &kh[j])).sum())
                            .collect()
                    })
                    .collect())
            }
            Probe::Bias(bias) => {
                let heads = self.config.n_heads as f64;
                let all = bias
                    .bias(offset, n, offset + n, false) // as a bidirectional block sees it
                    .sum_dim(1)
                    .reshape([n as i32, -1]);
                Ok(to_host(all)
                    .into_iter()
                    .map(|row| row[offset..].iter().map(|&v| v as f64 / heads).collect())
                    .collect())
            }
        }
    }
}

/// The largest absolute difference between two tables of the same shape (`f64::INFINITY` if
/// the shapes differ).
fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    if a.len() != b.len() || a.iter().zip(b).any(|(x, y)| x.len() != y.len()) {
        return f64::INFINITY;
    }
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(&x, &y)| (x as f64 - y as f64).abs())
        .fold(0.0, f64::max)
}

/// The same signatures computed on another device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceAgreement {
    /// The other device.
    pub device: String,
    /// Largest absolute difference from the main device's signatures (0 = same bits up to
    /// the sign of zero).
    pub max_abs_diff: Option<f64>,
    /// Why the other device could not be used.
    pub error: Option<String>,
}

/// Generalization: what the scheme gives past the trained or tabled length.
#[derive(Debug, Clone, Serialize)]
pub struct PastLength {
    /// Positions (or distances) probed: `N..reach·N`.
    pub probed: (usize, usize),
    /// The closest two signatures among them (0: two positions the scheme cannot tell apart).
    pub min_distance: Option<f64>,
    /// How many of the `reach·N` signatures of `0..reach·N` are distinct (bitwise).
    pub distinct: Option<usize>,
    /// The largest signature norm among `0..reach·N`.
    pub max_norm: Option<f64>,
    /// The scheme's error, where it has no vectors past `N`.
    pub error: Option<String>,
}

/// One row of seed 002's table: every property of one scheme, as numbers.
#[derive(Debug, Clone, Serialize)]
pub struct PropertyRow {
    /// Scheme name (and "trained" for trained modules).
    pub scheme: String,
    /// What a signature is: `PE(p)`, `R(p)u` or `bias(r)`.
    pub signature: String,
    /// Width of a signature.
    pub width: usize,
    /// Unique: the closest two signatures among positions `0..N`, and which.
    pub unique_min_distance: f64,
    /// The pair that is closest.
    pub unique_closest_pair: (usize, usize),
    /// Bounded: the largest signature norm among `0..N`.
    pub bounded_max_norm: f64,
    /// Deterministic: largest difference between two fresh inits with the same seed on the
    /// same device (`None` for trained modules).
    pub deterministic_two_inits: Option<f64>,
    /// Deterministic: the same modules evaluated on other devices.
    pub deterministic_devices: Vec<DeviceAgreement>,
    /// Generalizable: past `N`.
    pub generalizable: PastLength,
    /// Smooth: mean distance between neighbouring positions.
    pub smooth_neighbour_distance: f64,
    /// Smooth: mean distance between positions at least `N / 4` apart.
    pub smooth_far_distance: f64,
    /// Relative-aware: residual of the best fixed linear map from `sig(p)` to `sig(p + 1)`
    /// over `0..reach·N` (`0..N` for learned tables), or `None` with the reason in
    /// [`Self::relative_shift_note`].
    pub relative_shift_residual: Option<f64>,
    /// Why there is no shift-map residual: score biases are per distance already, "none" has
    /// no vectors, and a table with no more rows than columns fits any map
    /// ([`analysis::shift_map_residual`]).
    pub relative_shift_note: Option<String>,
    /// Relative-aware: how much scores over `0..N` depend on absolute position rather than on
    /// the offset alone ([`analysis::toeplitz_deviation`]; 0 = only the offset matters).
    pub relative_score_dependence: f64,
}

/// Measures every property of `probe`; `others` are further devices for the determinism
/// check (each a name and a device, or the reason it could not be opened).
///
/// # Errors
///
/// The scheme's error if it cannot give signatures for `0..N` (a learned table shorter than
/// the config's length).
pub fn measure(
    probe: &SchemeProbe,
    others: &[(String, Result<Device, String>)],
) -> Result<PropertyRow, PositionError> {
    let config = &probe.config;
    let n = config.length;
    let within = probe.signatures(0..n)?;
    let (unique_min_distance, unique_closest_pair) = analysis::min_pairwise_distance(&within);
    let deterministic_two_inits = probe.fresh.then(|| {
        let again = SchemeProbe::init(probe.scheme, config, &probe.device);
        again
            .signatures(0..n)
            .map_or(f64::INFINITY, |rows| max_abs_diff(&within, &rows))
    });
    let deterministic_devices = others
        .iter()
        .map(|(name, other)| match other {
            Ok(other) => DeviceAgreement {
                device: name.clone(),
                max_abs_diff: probe
                    .to_device(other)
                    .signatures(0..n)
                    .ok()
                    .map(|rows| max_abs_diff(&within, &rows)),
                error: None,
            },
            Err(error) => DeviceAgreement {
                device: name.clone(),
                max_abs_diff: None,
                error: Some(error.clone()),
            },
        })
        .collect();
    let reach = n * config.reach;
    let generalizable = match probe.signatures(0..reach) {
        Ok(all) => {
            let past = &all[n..];
            let mut distinct: Vec<Vec<u32>> = all
                .iter()
                .map(|row| row.iter().map(|v| (v + 0.0).to_bits()).collect())
                .collect();
            distinct.sort();
            distinct.dedup();
            PastLength {
                probed: (n, reach),
                min_distance: (past.len() >= 2).then(|| analysis::min_pairwise_distance(past).0),
                distinct: Some(distinct.len()),
                max_norm: Some(analysis::max_norm(&all)),
                error: None,
            }
        }
        Err(error) => PastLength {
            probed: (n, reach),
            min_distance: None,
            distinct: None,
            max_norm: None,
            error: Some(error.to_string()),
        },
    };
    let (smooth_neighbour_distance, smooth_far_distance) =
        analysis::neighbour_and_far_distance(&within, config.far());
    let shift_rows = probe
        .signatures(0..reach)
        .unwrap_or_else(|_| within.clone());
    let width = within[0].len();
    let (relative_shift_residual, relative_shift_note) = if matches!(probe.probe, Probe::Bias(_)) {
        (
            None,
            Some("score bias: its signatures are per distance".to_string()),
        )
    } else if within.iter().flatten().all(|&v| v == 0.0) {
        (None, Some("no position vectors".to_string()))
    } else if shift_rows.len() - 1 <= width {
        let note = format!("{} rows ≤ {width} wide: any table fits", shift_rows.len());
        (None, Some(note))
    } else {
        (Some(analysis::shift_map_residual(&shift_rows, 1)), None)
    };
    Ok(PropertyRow {
        scheme: probe.label.clone(),
        signature: probe.signature_kind().to_string(),
        width: within[0].len(),
        unique_min_distance,
        unique_closest_pair,
        bounded_max_norm: analysis::max_norm(&within),
        deterministic_two_inits,
        deterministic_devices,
        generalizable,
        smooth_neighbour_distance,
        smooth_far_distance,
        relative_shift_residual,
        relative_shift_note,
        relative_score_dependence: analysis::toeplitz_deviation(&probe.scores(0, n)?),
    })
}

/// A number for a table: 0 as `0`, tiny values in scientific notation, others to 3 decimals.
pub fn number(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.is_infinite() {
        "∞".into()
    } else if x.abs() < 1e-3 || x.abs() >= 1e5 {
        format!("{x:.1e}")
    } else {
        format!("{x:.3}")
    }
}

/// Seed 002's table as Markdown: one row per scheme, one column per property, with a legend
/// saying what each number is.
pub fn markdown(rows: &[PropertyRow], config: &PropertiesConfig) -> String {
    let n = config.length;
    let reach = n * config.reach;
    let mut out = String::new();
    out.push_str(&format!(
        "| scheme | signature | unique: closest two in 0..{n} | bounded: largest norm 0..{n} / 0..{reach} | deterministic: two inits / other devices | generalizable: past {n} | smooth: neighbour vs far distance | relative: shift-map residual | relative: score dependence on absolute position |\n"
    ));
    out.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for row in rows {
        let inits = row
            .deterministic_two_inits
            .map_or("trained".to_string(), number);
        let devices: Vec<String> = row
            .deterministic_devices
            .iter()
            .map(|d| match (&d.max_abs_diff, &d.error) {
                (Some(diff), _) => format!("{} {}", d.device, number(*diff)),
                (None, Some(_)) => format!("{} unavailable", d.device),
                (None, None) => format!("{} error", d.device),
            })
            .collect();
        let g = &row.generalizable;
        let past = match &g.error {
            Some(error) => format!("error: {}", error.split(". Fix").next().unwrap_or(error)),
            None => format!(
                "{} of {reach} distinct; closest past {n}: {}",
                g.distinct.unwrap_or(0),
                g.min_distance.map_or("-".into(), number)
            ),
        };
        let bounded = format!(
            "{} / {}",
            number(row.bounded_max_norm),
            g.max_norm.map_or("error".into(), number)
        );
        out.push_str(&format!(
            "| {} | {} ({} wide) | {} ({}, {}) | {} | {} / {} | {} | {} vs {} | {} | {} |\n",
            row.scheme,
            row.signature,
            row.width,
            number(row.unique_min_distance),
            row.unique_closest_pair.0,
            row.unique_closest_pair.1,
            bounded,
            inits,
            devices.join(", "),
            past,
            number(row.smooth_neighbour_distance),
            number(row.smooth_far_distance),
            row.relative_shift_residual.map_or_else(
                || format!("n/a ({})", row.relative_shift_note.as_deref().unwrap_or("")),
                number
            ),
            number(row.relative_score_dependence),
        ));
    }
    out
}

/// Seed 000's question on a fresh embedding of `scheme`: a token table of `vocab` rows
/// (burn's `N(0, 1)` init, seeded) plus the positions `0..N`, `d_model` wide, searched
/// exhaustively for the closest two distinct (token, position) combinations.
///
/// Schemes that act in attention put nothing in the embedding, so they answer as "none" does:
/// the same token at two positions is the same vector.
///
/// # Errors
///
/// The embedding's config error (for example, an odd `d_model` with sinusoidal positions).
pub fn closest_combination(
    scheme: Scheme,
    vocab: usize,
    config: &PropertiesConfig,
    device: &Device,
) -> Result<analysis::Collision, PositionError> {
    device.seed(config.seed);
    let parts = scheme.parts(
        config.length,
        config.n_heads,
        config.d_model / config.n_heads,
    );
    let embed = crate::EmbeddingWithPositionConfig::new(vocab, config.d_model)
        .with_scheme(parts.embedding)
        .try_init(device)?;
    let tokens = to_host(embed.tokens.val());
    let positions = match embed.position.vectors(0..config.length)? {
        Some(rows) => to_host(rows),
        None => vec![vec![0.0; config.d_model]; config.length],
    };
    Ok(analysis::closest_combination(&tokens, &positions))
}
