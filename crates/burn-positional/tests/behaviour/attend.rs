//! [`attend`] and what the block builds on it: grouped heads, sliding windows, packed rows,
//! explicit positions, scale and softcap.
//!
//! What is checked, and where the expected values come from:
//!
//! - `attend` (output, and the gradients of q, k, v and of the compact bias: ALiBi's slopes, a
//!   table per distance) against the same attention spelled out here in plain tensor ops,
//!   independent of the tiled op: keys and values repeated per query group, `scale q.k`,
//!   `c tanh(s / c)`, the bias gathered from `rel = key position - query position`, every mask
//!   built from positions as a `[batch, 1, seq_q, seq_k]` boolean, softmax with hidden scores
//!   at -1e30 and zeroed after, then `. v`. The cases are a list (not the full product) in
//!   which every bias, mask, grouping, scale and softcap appears at least twice, masks
//!   combined, at lengths that are not multiples of the tile, at an offset, from a rolling
//!   cache's positions and with explicit (packed, shared) positions. A query that sees no key
//!   must give exactly zero, and get exactly zero gradient.
//!
//! The block built on it, refusals and `Rope::apply_at`: `attend_block.rs`.

use burn::prelude::*;
use burn::tensor::activation::softmax;
use burn::tensor::{Distribution, Tolerance};
use burn_positional::{AttendOptions, AttentionBias, Window, attend};

const BATCH: usize = 3;
pub(crate) const N_HEADS: usize = 4;
pub(crate) const D_HEAD: usize = 4;
/// Reach of the bias per distance: small, so that clamped distances show.
const REACH: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Bias {
    None,
    Alibi,
    ByDistance,
}

/// Where the queries and keys sit.
#[derive(Clone, Copy, Debug)]
enum Pos {
    /// Sequential from 0, `seq` queries and keys.
    Whole(usize),
    /// `.offset(5)`: 7 queries after 5 cached keys (`seq_k` 12).
    Offset,
    /// `.sequential(query, key)`: `seq_q` queries from `query` over a rolling cache's keys
    /// from `key` to the last query.
    Rolling {
        query: usize,
        key: usize,
        seq_q: usize,
    },
    /// Explicit `[batch, 7]`: two documents per row (split after 3, 4, 5 tokens), positions
    /// restarting at the second; with their segment ids.
    Packed,
    /// Explicit `[1, 7]` positions with gaps, shared by the batch.
    Shared,
}

const SHARED: [i64; 7] = [0, 1, 2, 5, 6, 9, 10];

#[derive(Clone, Copy, Debug)]
struct Case {
    bias: Bias,
    causal: bool,
    window: Option<Window>,
    /// Key padding: none in the first sequence, the first 2 keys in the second, every key in
    /// the third.
    padded: bool,
    /// Segment ids (the packed documents' for `Pos::Packed`; otherwise a new segment from
    /// position `4 + b` in sequence `b`).
    segments: bool,
    n_kv_heads: usize,
    scale: Option<f64>,
    softcap: Option<f64>,
    pos: Pos,
    tile: Option<usize>,
}

/// A two-sided window for a bidirectional block.
const AROUND: Window = Window {
    before: 2,
    after: 1,
};

/// Every bias, mask, grouping, scale and softcap at least twice; masks combined.
fn cases() -> Vec<Case> {
    let case =
        |bias, causal, window, padded, segments, n_kv_heads, scale, softcap, pos, tile| Case {
            bias,
            causal,
            window,
            padded,
            segments,
            n_kv_heads,
            scale,
            softcap,
            pos,
            tile,
        };
    let (no_bias, alibi, by_distance) = (Bias::None, Bias::Alibi, Bias::ByDistance);
    let hf = Some(Window::hf(3));
    let around = Some(AROUND);
    let (whole, offset, packed, shared) = (Pos::Whole(7), Pos::Offset, Pos::Packed, Pos::Shared);
    let rolling = |query, key, seq_q| Pos::Rolling { query, key, seq_q };
    #[rustfmt::skip]
    let cases = vec![
        // bias, causal, window, padded, segments, kv heads, scale, softcap, positions, tile
        case(no_bias, true, None, false, false, 4, None, None, whole, Some(3)),
        case(alibi, true, hf, true, false, 2, None, None, offset, Some(3)),
        case(by_distance, false, around, false, false, 1, Some(0.7), Some(3.0), whole, None),
        case(alibi, true, None, false, true, 4, Some(0.7), None, packed, Some(3)),
        case(by_distance, true, hf, false, true, 2, None, Some(3.0), packed, None),
        case(no_bias, false, around, true, true, 2, Some(0.7), None, packed, Some(3)),
        case(alibi, false, None, true, false, 1, None, Some(3.0), whole, None),
        case(by_distance, true, None, true, false, 4, Some(0.7), None, offset, None),
        case(no_bias, true, hf, false, false, 1, None, Some(3.0), rolling(10, 6, 3), Some(3)),
        case(alibi, true, hf, true, false, 4, None, None, rolling(9, 7, 1), None),
        case(by_distance, false, None, false, true, 2, None, None, whole, Some(3)),
        case(no_bias, true, None, true, true, 1, Some(0.7), Some(3.0), offset, Some(3)),
        case(alibi, false, around, false, false, 2, Some(0.7), Some(3.0), shared, Some(3)),
        case(by_distance, true, None, false, false, 1, None, None, shared, Some(3)),
        case(by_distance, true, hf, true, true, 4, Some(0.7), Some(3.0), offset, Some(3)),
        case(no_bias, false, None, false, false, 2, None, Some(3.0), rolling(2, 0, 5), None),
    ];
    cases
}

/// `[rows, len]` ints on the device.
pub(crate) fn ints(rows: Vec<Vec<i64>>, device: &Device) -> Tensor<2, Int> {
    let shape = [rows.len(), rows[0].len()];
    Tensor::from_data(TensorData::new(rows.concat(), shape), device)
}

/// A case's inputs besides q, k, v and the bias: the options `attend` takes, and the absolute
/// positions `[batch, seq]` the spelled-out reference measures with.
struct Setup {
    seq_q: usize,
    seq_k: usize,
    query_positions: Vec<Vec<i64>>,
    key_positions: Vec<Vec<i64>>,
    key_padding: Option<Tensor<2, Bool>>,
    segments: Option<(Tensor<2, Int>, Tensor<2, Int>)>,
    options: AttendOptions,
}

fn setup(case: &Case, device: &Device) -> Setup {
    let sequential = |from: usize, len: usize| -> Vec<Vec<i64>> {
        vec![(from as i64..(from + len) as i64).collect(); BATCH]
    };
    let splits = [3, 4, 5];
    let packed: Vec<Vec<i64>> = splits
        .iter()
        .map(|&s| (0..s).chain(0..7 - s).collect())
        .collect();
    let mut options = AttendOptions::new().causal(case.causal);
    let (query_positions, key_positions) = match case.pos {
        Pos::Whole(seq) => (sequential(0, seq), sequential(0, seq)),
        Pos::Offset => {
            options = options.offset(5);
            (sequential(5, 7), sequential(0, 12))
        }
        Pos::Rolling { query, key, seq_q } => {
            options = options.sequential(query, key);
            (
                sequential(query, seq_q),
                sequential(key, query + seq_q - key),
            )
        }
        Pos::Packed => {
            let p = ints(packed.clone(), device);
            options = options.positions(p.clone(), p);
            (packed.clone(), packed.clone())
        }
        Pos::Shared => {
            let p = ints(vec![SHARED.to_vec()], device);
            options = options.positions(p.clone(), p);
            (vec![SHARED.to_vec(); BATCH], vec![SHARED.to_vec(); BATCH])
        }
    };
    let (seq_q, seq_k) = (query_positions[0].len(), key_positions[0].len());
    if let Some(window) = case.window {
        options = options.window(window);
    }
    let key_padding = case.padded.then(|| {
        let mut mask = vec![false; BATCH * seq_k];
        mask[seq_k..seq_k + 2.min(seq_k)].fill(true);
        mask[2 * seq_k..].fill(true);
        Tensor::<2, Bool>::from_data(TensorData::new(mask, [BATCH, seq_k]), device)
    });
    if let Some(mask) = &key_padding {
        options = options.key_padding(mask.clone());
    }
    let segments = case.segments.then(|| match case.pos {
        Pos::Packed => {
            let ids: Vec<Vec<i64>> = splits
                .iter()
                .map(|&s| (0..7).map(|i| (i >= s) as i64).collect())
                .collect();
            (ints(ids.clone(), device), ints(ids, device))
        }
        _ => {
            let ids = |positions: &Vec<Vec<i64>>| {
                let ids = positions
                    .iter()
                    .enumerate()
                    .map(|(b, row)| row.iter().map(|&p| (p >= 4 + b as i64) as i64).collect())
                    .collect();
                ints(ids, device)
            };
            (ids(&query_positions), ids(&key_positions))
        }
    });
    if let Some((query, key)) = &segments {
        options = options.segments(query.clone(), key.clone());
    }
    if let Some(scale) = case.scale {
        options = options.scale(scale);
    }
    if let Some(softcap) = case.softcap {
        options = options.softcap(softcap);
    }
    if let Some(rows) = case.tile {
        options = options.tile_rows(rows);
    }
    Setup {
        seq_q,
        seq_k,
        query_positions,
        key_positions,
        key_padding,
        segments,
        options,
    }
}

/// The attention spelled out in plain tensor ops: the output `[batch, n_heads, seq_q, d_v]`,
/// and which queries see no key, `[batch][seq_q]`.
fn spelled_out(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    bias: &AttentionBias,
    case: &Case,
    s: &Setup,
) -> (Tensor<4>, Vec<Vec<bool>>) {
    let device = q.device();
    let [batch, heads, seq_q, d] = q.dims();
    let [_, kv_heads, seq_k, _] = k.dims();
    let group = heads / kv_heads;
    // Query head h reads kv head h / group: each kv head copied `group` times in a row.
    let repeat = |t: Tensor<4>| {
        let [b, h, s, d] = t.dims();
        t.unsqueeze_dim::<5>(2)
            .expand([b, h, group, s, d])
            .reshape([b, h * group, s, d])
    };
    let scale = case.scale.unwrap_or(1.0 / (d as f64).sqrt());
    let mut scores = q.matmul(repeat(k).swap_dims(2, 3)).mul_scalar(scale);
    if let Some(c) = case.softcap {
        scores = scores.div_scalar(c).tanh().mul_scalar(c);
    }
    let grid = [batch, 1, seq_q, seq_k];
    // rel = key position - query position, [batch, 1, seq_q, seq_k]
    let rel = ints(s.key_positions.clone(), &device)
        .reshape([batch, 1, 1, seq_k])
        .expand(grid)
        - ints(s.query_positions.clone(), &device)
            .reshape([batch, 1, seq_q, 1])
            .expand(grid);
    scores = match bias {
        AttentionBias::None => scores,
        AttentionBias::Alibi(slopes) => {
            scores - rel.clone().abs().float() * slopes.clone().reshape([1, heads, 1, 1])
        }
        AttentionBias::ByDistance { bias, reach } => {
            let reach = *reach as i64;
            let index = rel.clone().clamp(-reach, reach).add_scalar(reach);
            let gathered = bias
                .clone()
                .select(1, index.reshape([batch * seq_q * seq_k]))
                .reshape([heads, batch, seq_q, seq_k])
                .swap_dims(0, 1);
            scores + gathered
        }
    };
    let mut hidden: Tensor<4, Bool> = Tensor::from_data(
        TensorData::new(vec![false; grid.iter().product()], grid),
        &device,
    );
    if case.causal {
        hidden = hidden.bool_or(rel.clone().greater_elem(0));
    }
    if let Some(w) = case.window {
        hidden = hidden.bool_or(rel.clone().lower_elem(-(w.before as i64)));
        if !case.causal {
            hidden = hidden.bool_or(rel.clone().greater_elem(w.after as i64));
        }
    }
    if let Some(mask) = &s.key_padding {
        hidden = hidden.bool_or(mask.clone().reshape([batch, 1, 1, seq_k]).expand(grid));
    }
    if let Some((query, key)) = &s.segments {
        let query = query.clone().reshape([batch, 1, seq_q, 1]).expand(grid);
        let key = key.clone().reshape([batch, 1, 1, seq_k]).expand(grid);
        hidden = hidden.bool_or(query.not_equal(key));
    }
    let seen: Vec<i64> = hidden
        .clone()
        .bool_not()
        .int()
        .sum_dim(3)
        .into_data()
        .iter::<i64>()
        .collect();
    let empty = seen
        .chunks(seq_q)
        .map(|row| row.iter().map(|&n| n == 0).collect())
        .collect();
    let hidden = hidden.expand([batch, heads, seq_q, seq_k]);
    let weights = softmax(scores.mask_fill(hidden.clone(), -1e30), 3).mask_fill(hidden, 0.0);
    (weights.matmul(repeat(v)), empty)
}

fn what(case: &Case) -> String {
    format!("{case:?}")
}

/// `got` equals `want` within `tolerance`, with no NaN or infinity; the message names the case.
pub(crate) fn agree<const D: usize>(
    got: Tensor<D>,
    want: Tensor<D>,
    tolerance: Tolerance<f32>,
    what: &str,
) {
    assert_eq!(got.dims(), want.dims(), "{what}: shapes");
    let got = got.into_data();
    assert!(
        got.iter::<f32>().all(f32::is_finite),
        "{what}: NaN or infinity"
    );
    if let Err(message) =
        crate::try_panic(|| got.assert_approx_eq::<f32>(&want.into_data(), tolerance))
    {
        panic!("{what}: {message}");
    }
}

/// The rows `[b, h, i, ..]` of queries that see no key are exactly zero.
fn empty_rows_are_zero(t: Tensor<4>, empty: &[Vec<bool>], what: &str) -> usize {
    let [_, heads, seq_q, d] = t.dims();
    let values: Vec<f32> = t.into_data().iter::<f32>().collect();
    let mut count = 0;
    for (b, rows) in empty.iter().enumerate() {
        for (i, &empty) in rows.iter().enumerate() {
            if !empty {
                continue;
            }
            count += 1;
            for h in 0..heads {
                let at = ((b * heads + h) * seq_q + i) * d;
                let row = &values[at..at + d];
                assert!(
                    row.iter().all(|&x| x == 0.0),
                    "{what}: query [{b}, {i}] sees no key, head {h} must be exactly zero, got \
                     {row:?}"
                );
            }
        }
    }
    count
}

/// A case's q, k, v, the slopes and the table.
struct Inputs {
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    slopes: Tensor<1>,
    table: Tensor<2>,
}

fn inputs(case: &Case, s: &Setup, device: &Device) -> Inputs {
    // Scores up to about 6: the softcap of 3 bends them.
    let normal =
        |dims: [usize; 4], std| Tensor::<4>::random(dims, Distribution::Normal(0.0, std), device);
    Inputs {
        q: normal([BATCH, N_HEADS, s.seq_q, D_HEAD], 1.5),
        k: normal([BATCH, case.n_kv_heads, s.seq_k, D_HEAD], 1.5),
        v: normal([BATCH, case.n_kv_heads, s.seq_k, D_HEAD], 1.0),
        slopes: Tensor::from_floats([0.5, 0.25, 0.125, 0.0625], device),
        table: Tensor::random(
            [N_HEADS, 2 * REACH + 1],
            Distribution::Normal(0.0, 1.0),
            device,
        ),
    }
}

fn bias_of(case: &Case, slopes: &Tensor<1>, table: &Tensor<2>) -> AttentionBias {
    match case.bias {
        Bias::None => AttentionBias::None,
        Bias::Alibi => AttentionBias::Alibi(slopes.clone()),
        Bias::ByDistance => AttentionBias::ByDistance {
            bias: table.clone(),
            reach: REACH,
        },
    }
}

/// The output of every case equals the spelled-out attention to 2e-4, and the queries that
/// see no key (a fully padded sequence, a window or segment that leaves nothing) give exactly
/// zero.
pub fn attend_equals_spelled_out(device: &Device) {
    device.seed(31);
    let mut empty_queries = 0;
    for case in cases() {
        let what = what(&case);
        let s = setup(&case, device);
        let x = inputs(&case, &s, device);
        let bias = bias_of(&case, &x.slopes, &x.table);
        let options = s.options.clone().bias(bias.clone());
        let out = attend(x.q.clone(), x.k.clone(), x.v.clone(), &options);
        let (reference, empty) = spelled_out(x.q, x.k, x.v, &bias, &case, &s);
        agree(
            out.clone(),
            reference,
            Tolerance::absolute(2e-4),
            &format!("{what}: output"),
        );
        empty_queries += empty_rows_are_zero(out, &empty, &format!("{what}: output"));
    }
    assert!(empty_queries > 0, "no case has a query that sees no key");
}

/// The gradients of `sum(out * w)` on q, k, v (k and v with their own kv heads) and on the
/// bias tensor (ALiBi's slopes, the table per distance) equal the spelled-out attention's;
/// a query that sees no key gets exactly zero gradient.
pub fn attend_gradients_equal_spelled_out(device: &Device) {
    device.seed(32);
    for case in cases() {
        let what = what(&case);
        let s = setup(&case, device);
        let x = inputs(&case, &s, device);
        let upstream = Tensor::<4>::random(
            [BATCH, N_HEADS, s.seq_q, D_HEAD],
            Distribution::Normal(0.0, 1.0),
            device,
        );
        let leaf4 = |t: &Tensor<4>| t.clone().detach().require_grad();
        let (q1, k1, v1) = (leaf4(&x.q), leaf4(&x.k), leaf4(&x.v));
        let (q2, k2, v2) = (leaf4(&x.q), leaf4(&x.k), leaf4(&x.v));
        let (s1, s2) = (
            x.slopes.clone().require_grad(),
            x.slopes.clone().require_grad(),
        );
        let (t1, t2) = (
            x.table.clone().require_grad(),
            x.table.clone().require_grad(),
        );
        let options = s.options.clone().bias(bias_of(&case, &s1, &t1));
        let out = attend(q1.clone(), k1.clone(), v1.clone(), &options);
        let (reference, empty) = spelled_out(
            q2.clone(),
            k2.clone(),
            v2.clone(),
            &bias_of(&case, &s2, &t2),
            &case,
            &s,
        );
        let g1 = (out * upstream.clone()).sum().backward();
        let g2 = (reference * upstream).sum().backward();
        let tolerance = Tolerance::rel_abs(1e-3, 1e-3);
        let grad4 = |t: &Tensor<4>, g, name: &str| {
            t.grad(g)
                .unwrap_or_else(|| panic!("{what}: no gradient on {name}"))
        };
        let dq = grad4(&q1, &g1, "q");
        agree(
            dq.clone(),
            grad4(&q2, &g2, "q"),
            tolerance,
            &format!("{what}: dq"),
        );
        empty_rows_are_zero(dq, &empty, &format!("{what}: dq"));
        agree(
            grad4(&k1, &g1, "k"),
            grad4(&k2, &g2, "k"),
            tolerance,
            &format!("{what}: dk"),
        );
        agree(
            grad4(&v1, &g1, "v"),
            grad4(&v2, &g2, "v"),
            tolerance,
            &format!("{what}: dv"),
        );
        match case.bias {
            Bias::None => {}
            Bias::Alibi => agree(
                s1.grad(&g1).expect("a gradient on the slopes"),
                s2.grad(&g2).expect("a reference gradient"),
                tolerance,
                &format!("{what}: ALiBi slopes gradient"),
            ),
            Bias::ByDistance => agree(
                t1.grad(&g1).expect("a gradient on the table"),
                t2.grad(&g2).expect("a reference gradient"),
                tolerance,
                &format!("{what}: table gradient"),
            ),
        }
    }
}

on_every_device!(attend_equals_spelled_out);
mod backward {
    use super::attend_gradients_equal_spelled_out;
    on_every_autodiff_device!(attend_gradients_equal_spelled_out);
}
