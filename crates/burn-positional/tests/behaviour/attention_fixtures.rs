//! `attend` against PyTorch itself: outputs and gradients.
//!
//! The expected values in `tests/fixtures/torch/attention/<case>.json` were written by
//! `tools/attention_fixtures.py` with torch 2.6.0 (each file's `source` field names the version
//! and the function): `torch.nn.attention.flex_attention.flex_attention`, run eagerly on the
//! CPU in float64, with a `score_mod` (softcap, then ALiBi or a bias per distance) and a
//! `block_mask` from `create_block_mask` (causal, window, key padding, segments). The script
//! also computes every case spelled out in plain float64 tensor ops and, where it can express
//! the case (no softcap), with `scaled_dot_product_attention` and a dense bias, and asserts all
//! agree to 1e-6 before writing (`cross_checks` in each file). Inputs are float32 values; the
//! results are rounded to float32.
//!
//! The cases: ALiBi, causal, GQA; a bias per distance with a two-sided window, not causal,
//! padded; packed sequences (segments, positions restarting in each segment) with one kv head,
//! with and without ALiBi; a softcap with an explicit scale, queries at an offset; Hugging
//! Face's sliding window; rows that see no key (output and query gradient exactly zero). Each
//! runs with tiles of 2 rows (lengths that are not multiples of the tile) and the default tile.
//!
//! To regenerate (by hand, never in CI), from the repository root:
//!
//! ```text
//! pip install torch==2.6.0 numpy
//! python3 tools/attention_fixtures.py
//! ```

use std::path::PathBuf;

use burn::prelude::*;
use burn::tensor::Tolerance;
use burn_positional::{AttendOptions, AttentionBias, Window, attend};
use serde_json::Value;

/// Absolute tolerance against PyTorch's float64 values rounded to float32.
const TOLERANCE: f32 = 1e-4;

/// Two rows (the lengths, 3 to 11, are mostly not multiples of it) and the default tile.
const TILES: [Option<usize>; 2] = [Some(2), None];

/// Every fixture, `(case, json)`, sorted by name.
fn fixtures() -> Vec<(String, Value)> {
    let dir = crate::package_dir().join("tests/fixtures/torch/attention");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 7,
        "{}: fixtures missing (run tools/attention_fixtures.py)",
        dir.display()
    );
    paths
        .into_iter()
        .map(|path| {
            let text =
                std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
            let fixture: Value =
                serde_json::from_str(&text).unwrap_or_else(|err| panic!("{path:?}: {err}"));
            let case = fixture["case"].as_str().expect("a case name").to_string();
            (case, fixture)
        })
        .collect()
}

/// `{"shape": [...], "data": [...]}`'s shape.
fn shape(value: &Value) -> Vec<usize> {
    value["shape"]
        .as_array()
        .unwrap_or_else(|| panic!("no shape in {value}"))
        .iter()
        .map(|d| d.as_u64().expect("a dimension") as usize)
        .collect()
}

fn floats(value: &Value) -> Vec<f32> {
    value["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect()
}

fn tensor<const D: usize>(value: &Value, device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(floats(value), shape(value)), device)
}

fn ints(value: &Value, device: &Device) -> Tensor<2, Int> {
    let data: Vec<i64> = value["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|x| x.as_i64().expect("an integer"))
        .collect();
    Tensor::from_data(TensorData::new(data, shape(value)), device)
}

fn bools(value: &Value, device: &Device) -> Tensor<2, Bool> {
    let data: Vec<bool> = value["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|x| x.as_bool().expect("a bool"))
        .collect();
    Tensor::from_data(TensorData::new(data, shape(value)), device)
}

/// The bias parameter, kept so that its gradient can be read after the backward.
enum BiasParam {
    None,
    Slopes(Tensor<1>),
    Table { table: Tensor<2>, reach: usize },
}

impl BiasParam {
    fn load(fixture: &Value, device: &Device) -> Self {
        let bias = &fixture["bias"];
        match bias["kind"].as_str().expect("a bias kind") {
            "none" => BiasParam::None,
            "alibi" => BiasParam::Slopes(tensor(&bias["slopes"], device)),
            "by_distance" => BiasParam::Table {
                table: tensor(&bias["table"], device),
                reach: bias["reach"].as_u64().expect("a reach") as usize,
            },
            other => panic!("unknown bias kind {other}"),
        }
    }

    fn require_grad(self) -> Self {
        match self {
            BiasParam::None => BiasParam::None,
            BiasParam::Slopes(slopes) => BiasParam::Slopes(slopes.require_grad()),
            BiasParam::Table { table, reach } => BiasParam::Table {
                table: table.require_grad(),
                reach,
            },
        }
    }

    /// The bias `attend` takes; a clone shares the parameter's autodiff node.
    fn bias(&self) -> AttentionBias {
        match self {
            BiasParam::None => AttentionBias::None,
            BiasParam::Slopes(slopes) => AttentionBias::Alibi(slopes.clone()),
            BiasParam::Table { table, reach } => AttentionBias::ByDistance {
                bias: table.clone(),
                reach: *reach,
            },
        }
    }
}

/// The fixture's options, with `tile_rows` when given.
fn options(
    fixture: &Value,
    bias: &BiasParam,
    tile_rows: Option<usize>,
    device: &Device,
) -> AttendOptions {
    let mut options = AttendOptions::new()
        .bias(bias.bias())
        .causal(fixture["causal"].as_bool().expect("causal"));
    if let Some(scale) = fixture["scale"].as_f64() {
        options = options.scale(scale);
    }
    if let Some(softcap) = fixture["softcap"].as_f64() {
        options = options.softcap(softcap);
    }
    let window = &fixture["window"];
    if !window.is_null() {
        options = options.window(Window {
            before: window["before"].as_u64().expect("before") as usize,
            after: window["after"].as_u64().expect("after") as usize,
        });
    }
    if !fixture["key_padding"].is_null() {
        options = options.key_padding(bools(&fixture["key_padding"], device));
    }
    let segments = &fixture["segments"];
    if !segments.is_null() {
        options = options.segments(
            ints(&segments["query"], device),
            ints(&segments["key"], device),
        );
    }
    let positions = &fixture["positions"];
    if positions.is_null() {
        options = options.offset(fixture["offset"].as_u64().expect("an offset") as usize);
    } else {
        options = options.positions(
            ints(&positions["query"], device),
            ints(&positions["key"], device),
        );
    }
    if let Some(rows) = tile_rows {
        options = options.tile_rows(rows);
    }
    options
}

/// `got` is PyTorch's `want` to [`TOLERANCE`], with no NaN or infinity.
fn check<const D: usize>(got: Tensor<D>, want: &Value, what: &str) {
    assert_eq!(got.dims().to_vec(), shape(want), "{what}: shape");
    let got = got.into_data();
    assert!(
        got.iter::<f32>().all(f32::is_finite),
        "{what}: NaN or infinity"
    );
    let want = TensorData::new(floats(want), shape(want));
    if let Err(message) =
        crate::try_panic(|| got.assert_approx_eq::<f32>(&want, Tolerance::absolute(TOLERANCE)))
    {
        panic!("{what}: differs from PyTorch: {message}");
    }
}

/// The rows (last dimension) where PyTorch's output is exactly zero are the queries that see
/// no key; there `got` must be exactly zero too, not merely within the tolerance.
fn check_empty_rows<const D: usize>(got: Tensor<D>, out: &Value, what: &str) {
    let d_head = *shape(out).last().unwrap();
    let got: Vec<f32> = got.into_data().iter::<f32>().collect();
    let empty = floats(out)
        .chunks(d_head)
        .map(|row| row.iter().all(|&x| x == 0.0))
        .collect::<Vec<_>>();
    for (row, (values, empty)) in got.chunks(d_head).zip(empty).enumerate() {
        if empty {
            assert!(
                values.iter().all(|&x| x == 0.0),
                "{what}: row {row} sees no key, so it must be exactly zero, got {values:?}"
            );
        }
    }
}

/// The output of every case, for both tile sizes.
pub fn attend_matches_torch(device: &Device) {
    for (case, fixture) in fixtures() {
        let source = fixture["source"].as_str().unwrap_or("?");
        let bias = BiasParam::load(&fixture, device);
        for tile in TILES {
            let what = format!("{case}, tile_rows {tile:?} ({source})");
            let out = attend(
                tensor(&fixture["q"], device),
                tensor(&fixture["k"], device),
                tensor(&fixture["v"], device),
                &options(&fixture, &bias, tile, device),
            );
            check(out.clone(), &fixture["out"], &format!("{what}: output"));
            check_empty_rows(out, &fixture["out"], &format!("{what}: output"));
        }
    }
}

/// The gradients of `sum(out * w)` on q, k, v and the bias parameter (ALiBi's slopes, the table
/// per distance), for every case and both tile sizes.
pub fn attend_gradients_match_torch(device: &Device) {
    for (case, fixture) in fixtures() {
        let source = fixture["source"].as_str().unwrap_or("?");
        let w = tensor::<4>(&fixture["w"], device);
        for tile in TILES {
            let what = format!("{case}, tile_rows {tile:?} ({source})");
            // Fresh leaves each time: a backward consumes the graph.
            let q = tensor::<4>(&fixture["q"], device).require_grad();
            let k = tensor::<4>(&fixture["k"], device).require_grad();
            let v = tensor::<4>(&fixture["v"], device).require_grad();
            let bias = BiasParam::load(&fixture, device).require_grad();
            let out = attend(
                q.clone(),
                k.clone(),
                v.clone(),
                &options(&fixture, &bias, tile, device),
            );
            let grads = (out * w.clone()).sum().backward();
            let grad = |g: Option<Tensor<4>>, name: &str| {
                g.unwrap_or_else(|| panic!("{what}: no gradient on {name}"))
            };
            let dq = grad(q.grad(&grads), "q");
            check(dq.clone(), &fixture["dq"], &format!("{what}: dq"));
            // A query that sees no key gets no gradient at all.
            check_empty_rows(dq, &fixture["out"], &format!("{what}: dq"));
            check(
                grad(k.grad(&grads), "k"),
                &fixture["dk"],
                &format!("{what}: dk"),
            );
            check(
                grad(v.grad(&grads), "v"),
                &fixture["dv"],
                &format!("{what}: dv"),
            );
            let dbias = &fixture["dbias"];
            match &bias {
                BiasParam::None => {
                    assert!(dbias.is_null(), "{what}: a bias gradient without a bias")
                }
                BiasParam::Slopes(slopes) => check(
                    slopes
                        .grad(&grads)
                        .unwrap_or_else(|| panic!("{what}: no gradient on the slopes")),
                    dbias,
                    &format!("{what}: ALiBi slopes gradient"),
                ),
                BiasParam::Table { table, .. } => check(
                    table
                        .grad(&grads)
                        .unwrap_or_else(|| panic!("{what}: no gradient on the table")),
                    dbias,
                    &format!("{what}: bias-per-distance table gradient"),
                ),
            }
        }
    }
}

on_every_device!(attend_matches_torch);
mod backward {
    use super::attend_gradients_match_torch;
    on_every_autodiff_device!(attend_gradients_match_torch);
}
