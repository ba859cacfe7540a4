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
//! - The block: a grouped, windowed causal block decoding token by token (and two tokens at a
//!   time) with a [`KvCache`] gives the rows of its full forward, which equals its spelled-out
//!   path (`forward_weights`), while the cache keeps at most `w - 1` keys; a packed row gives
//!   each document what the document gives alone; the cache of a grouped block holds its
//!   key/value heads only.
//! - Refusals (flex only: they are checks on shapes and configs, before any device work): each
//!   names the values and a fix.
//! - `Rope::apply_at` with sequential positions equals `Rope::apply` at that offset, inside the
//!   precomputed table and past it.

use crate::panic_message;

use burn::prelude::*;
use burn::tensor::activation::softmax;
use burn::tensor::{Distribution, Tolerance};
use burn_positional::{
    AttendOptions, AttentionBias, AttentionInput, KvCache, RopeConfig, RopeLayout, ScoreBiasConfig,
    SelfAttention, SelfAttentionConfig, Window, attend, try_attend,
};

const BATCH: usize = 3;
const N_HEADS: usize = 4;
const D_HEAD: usize = 4;
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
fn ints(rows: Vec<Vec<i64>>, device: &Device) -> Tensor<2, Int> {
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
fn agree<const D: usize>(got: Tensor<D>, want: Tensor<D>, tolerance: Tolerance<f32>, what: &str) {
    assert_eq!(got.dims(), want.dims(), "{what}: shapes");
    let got = got.into_data();
    assert!(
        got.iter::<f32>().all(f32::is_finite),
        "{what}: NaN or infinity"
    );
    let compared = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        got.assert_approx_eq::<f32>(&want.into_data(), tolerance)
    }));
    if let Err(payload) = compared {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
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

#[derive(Clone, Copy, Debug)]
enum Scheme {
    None,
    Rope,
    Alibi,
    T5,
}

const SCHEMES: [Scheme; 4] = [Scheme::None, Scheme::Rope, Scheme::Alibi, Scheme::T5];

/// `config` with the scheme's parts sized from the block. T5's table is drawn far from zero
/// (std 1, not 0.02) with 8 buckets up to distance 20, so that its bias shows.
fn with_scheme(config: SelfAttentionConfig, scheme: Scheme) -> SelfAttentionConfig {
    match scheme {
        Scheme::None => config,
        Scheme::Rope => config.with_rotary(),
        Scheme::Alibi => config.with_alibi(),
        Scheme::T5 => {
            let mut config = config.with_t5();
            if let Some(ScoreBiasConfig::T5(t5)) = &mut config.score_bias {
                t5.num_buckets = 8;
                t5.max_distance = 20;
                t5.initializer = burn::nn::Initializer::Normal {
                    mean: 0.0,
                    std: 1.0,
                };
            }
            config
        }
    }
}

/// `x[.., rows, ..]`.
fn rows(x: &Tensor<3>, range: std::ops::Range<usize>) -> Tensor<3> {
    let [batch, _, d] = x.dims();
    x.clone().slice([0..batch, range, 0..d])
}

/// A causal block with 4 query heads over 2 and over 1 key/value heads and
/// `sliding_window = 3`, for every scheme: its full forward equals its spelled-out path, and
/// decoding with one cache, token by token and two tokens at a time, gives the full forward's
/// rows while the cache holds at most `w - 1 = 2` keys.
pub fn grouped_windowed_decoding_equals_the_full_forward(device: &Device) {
    device.seed(33);
    let seq = 6;
    for scheme in SCHEMES {
        for n_kv_heads in [2, 1] {
            let config = SelfAttentionConfig::new(16, N_HEADS)
                .with_causal(true)
                .with_n_kv_heads(Some(n_kv_heads))
                .with_sliding_window(Some(3));
            let block = with_scheme(config, scheme).init(device);
            let x = Tensor::<3>::random([2, seq, 16], Distribution::Normal(0.0, 1.0), device);
            let full = block.forward(x.clone());
            let what = format!("{scheme:?}, n_kv_heads {n_kv_heads}");
            agree(
                full.clone(),
                block.forward_weights(AttentionInput::new(x.clone())).output,
                Tolerance::absolute(2e-4),
                &format!("{what}: forward against forward_weights"),
            );
            for chunk in [1, 2] {
                let mut cache = KvCache::new();
                let mut steps = Vec::new();
                for start in (0..seq).step_by(chunk) {
                    let end = (start + chunk).min(seq);
                    let input = AttentionInput::new(rows(&x, start..end));
                    steps.push(block.forward_cache(input, &mut cache));
                    assert_eq!(cache.len(), end, "{what}, chunks of {chunk}: len");
                    assert_eq!(
                        cache.kept(),
                        end.min(2),
                        "{what}, chunks of {chunk}: kept after {end} tokens"
                    );
                    assert_eq!(cache.start(), end - cache.kept(), "{what}: start");
                }
                agree(
                    Tensor::cat(steps, 1),
                    full.clone(),
                    Tolerance::absolute(2e-4),
                    &format!("{what}, chunks of {chunk}: decoding against the full forward"),
                );
            }
        }
    }
}

/// Two documents in each of two rows (split after 3 and after 4 of 7 tokens), positions
/// restarting at the second: the packed forward gives each document's tokens what the block
/// gives the document alone, for causal blocks (RoPE, ALiBi, T5; and RoPE grouped and
/// windowed) and blocks that are not causal.
pub fn packed_rows_equal_their_documents_alone(device: &Device) {
    device.seed(34);
    let (seq, splits) = (7, [3, 4]);
    let segments: Vec<Vec<i64>> = splits
        .iter()
        .map(|&s| (0..seq).map(|i| (i >= s) as i64).collect())
        .collect();
    let positions: Vec<Vec<i64>> = splits
        .iter()
        .map(|&s| (0..s as i64).chain(0..(seq - s) as i64).collect())
        .collect();
    let mut blocks = Vec::new();
    for causal in [true, false] {
        for scheme in [Scheme::Rope, Scheme::Alibi, Scheme::T5] {
            let config = SelfAttentionConfig::new(16, N_HEADS).with_causal(causal);
            blocks.push((
                format!("{scheme:?}, causal {causal}"),
                with_scheme(config, scheme),
            ));
        }
    }
    let grouped = SelfAttentionConfig::new(16, N_HEADS)
        .with_causal(true)
        .with_n_kv_heads(Some(2))
        .with_sliding_window(Some(3))
        .with_rotary();
    blocks.push(("Rope, causal, 2 kv heads, window 3".into(), grouped));
    for (what, config) in blocks {
        let block: SelfAttention = config.init(device);
        let x = Tensor::<3>::random([2, seq, 16], Distribution::Normal(0.0, 1.0), device);
        let input = AttentionInput::new(x.clone()).packed(
            ints(segments.clone(), device),
            ints(positions.clone(), device),
        );
        let packed = block.forward_input(input);
        for (b, &split) in splits.iter().enumerate() {
            for doc in [0..split, split..seq] {
                let alone = block.forward(x.clone().slice([b..b + 1, doc.clone(), 0..16]));
                agree(
                    packed.clone().slice([b..b + 1, doc.clone(), 0..16]),
                    alone,
                    Tolerance::absolute(1e-4),
                    &format!("{what}: row {b}, tokens {doc:?}"),
                );
            }
        }
    }
}

/// The cache of a block with 2 key/value heads for 4 query heads holds 2 heads, not 4. Its
/// tensors are not public, so this is shown through a clone of the block (a clone may use the
/// cache) whose key and value projections give 4 heads: appending them to the cache panics in
/// burn's concatenation, whose message names the cached keys' shape `[2, 2, 2, 4]`; the block
/// itself decodes on.
pub fn grouped_heads_cache_holds_kv_heads(device: &Device) {
    device.seed(35);
    let block = SelfAttentionConfig::new(16, N_HEADS)
        .with_causal(true)
        .with_n_kv_heads(Some(2))
        .init(device);
    assert_eq!(block.n_kv_heads, 2);
    assert_eq!(block.key.weight.dims(), [16, 8], "2 heads of 4: 8 wide");
    let x = Tensor::<3>::random([2, 3, 16], Distribution::Normal(0.0, 1.0), device);
    let mut cache = KvCache::new();
    let _ = block.forward_cache(AttentionInput::new(rows(&x, 0..2)), &mut cache);
    assert_eq!((cache.len(), cache.kept()), (2, 2));
    // The same block (a clone shares its cache binding), widened to one kv head per query head.
    let mut widened = block.clone();
    widened.n_kv_heads = N_HEADS;
    widened.key = burn::nn::LinearConfig::new(16, 16).init(device);
    widened.value = burn::nn::LinearConfig::new(16, 16).init(device);
    let mut probe = cache.clone();
    let message = panic_message(|| {
        let _ = widened.forward_cache(AttentionInput::new(rows(&x, 2..3)), &mut probe);
    });
    // burn's refusal names both shapes: the cached keys are [batch 2, 2 heads, 2 tokens, 4].
    assert!(
        message.contains("Cat") && message.contains("[2, 2, 2, 4]"),
        "4 heads appended to a cache of 2: {message}"
    );
    // The block itself appends its 2 heads.
    let _ = block.forward_cache(AttentionInput::new(rows(&x, 2..3)), &mut cache);
    assert_eq!((cache.len(), cache.kept()), (3, 3));
}

/// `Rope::apply_at` with the positions `apply` uses gives what `apply` gives, in both layouts:
/// `[1, seq]` positions from 0, `[batch, seq]` rows from their own offsets inside the
/// precomputed table (16 rows), and rows that cross it and lie far past it (computed on the
/// device in f32 there, by `apply` on the host in f64), to 1e-4.
pub fn rope_apply_at_equals_apply(device: &Device) {
    device.seed(36);
    let (batch, heads, seq, d_head) = (3, 2, 6, 8);
    for layout in [RopeLayout::Interleaved, RopeLayout::HalfSplit] {
        let rope = RopeConfig::new(d_head)
            .with_layout(layout)
            .with_cache_len(16)
            .init(device);
        let x = Tensor::<4>::random(
            [batch, heads, seq, d_head],
            Distribution::Normal(0.0, 1.0),
            device,
        );
        let from_zero = ints(vec![(0..seq as i64).collect()], device);
        agree(
            rope.apply_at(x.clone(), from_zero),
            rope.apply(x.clone(), 0),
            Tolerance::absolute(1e-4),
            &format!("{layout:?}: positions [1, seq] from 0"),
        );
        for offsets in [[0, 5, 10], [3, 13, 100]] {
            let positions = offsets
                .iter()
                .map(|&o| (o..o + seq as i64).collect())
                .collect();
            let rotated = rope.apply_at(x.clone(), ints(positions, device));
            for (b, &offset) in offsets.iter().enumerate() {
                let one = |t: Tensor<4>| t.slice([b..b + 1, 0..heads, 0..seq, 0..d_head]);
                agree(
                    one(rotated.clone()),
                    rope.apply(one(x.clone()), offset as usize),
                    Tolerance::absolute(1e-4),
                    &format!("{layout:?}: row {b} from {offset}"),
                );
            }
        }
    }
}

on_every_device!(
    attend_equals_spelled_out,
    grouped_windowed_decoding_equals_the_full_forward,
    packed_rows_equal_their_documents_alone,
    grouped_heads_cache_holds_kv_heads,
    rope_apply_at_equals_apply,
);
mod backward {
    use super::attend_gradients_equal_spelled_out;
    on_every_autodiff_device!(attend_gradients_equal_spelled_out);
}

/// Bad configs and calls are refused with a message naming the values and a fix. Checks on
/// shapes and configs only, so on one device.
mod refusals {
    use super::*;

    fn assert_mentions(message: &str, parts: &[&str]) {
        for part in parts {
            assert!(message.contains(part), "message lacks {part:?}: {message}");
        }
    }

    /// q `[2, 4, 6, 4]`, k and v with `kv_heads` heads.
    fn qkv(kv_heads: usize) -> (Tensor<4>, Tensor<4>, Tensor<4>) {
        let device = crate::devices::flex();
        let q = Tensor::<4>::zeros([2, N_HEADS, 6, D_HEAD], &device);
        let kv = Tensor::<4>::zeros([2, kv_heads, 6, D_HEAD], &device);
        (q, kv.clone(), kv)
    }

    fn refusal(kv_heads: usize, options: AttendOptions) -> String {
        let (q, k, v) = qkv(kv_heads);
        try_attend(q, k, v, &options)
            .expect_err("must be refused")
            .to_string()
    }

    #[test]
    fn kv_heads_that_do_not_divide_the_heads_are_refused_with_the_divisors() {
        let config = SelfAttentionConfig::new(16, 4).with_n_kv_heads(Some(3));
        let message = config.validate().expect_err("must be refused").to_string();
        assert_mentions(
            &message,
            &["n_kv_heads", "Some(3)", "n_heads = 4", "1, 2, 4", "Fix:"],
        );
        let init = panic_message(|| {
            let _ = config.init(&crate::devices::flex());
        });
        assert_eq!(init, message, "init panics with validate's message");
    }

    #[test]
    fn a_window_of_zero_is_refused() {
        let config = SelfAttentionConfig::new(16, 4).with_sliding_window(Some(0));
        let message = config.validate().expect_err("must be refused").to_string();
        assert_mentions(&message, &["sliding_window", "Some(0)", "Fix:"]);
    }

    #[test]
    fn attend_refuses_kv_heads_that_do_not_divide_the_heads() {
        let message = refusal(3, AttendOptions::new());
        assert_mentions(
            &message,
            &["n_kv_heads", "3", "n_heads = 4", "1, 2, 4", "Fix:"],
        );
        let (q, k, v) = qkv(3);
        let panicked = panic_message(|| {
            let _ = attend(q, k, v, &AttendOptions::new());
        });
        assert_eq!(panicked, message, "attend panics with try_attend's message");
    }

    #[test]
    fn attend_refuses_a_key_padding_of_another_shape() {
        let mask = Tensor::<2, Bool>::from_data(
            TensorData::new(vec![false; 10], [2, 5]),
            &crate::devices::flex(),
        );
        let message = refusal(2, AttendOptions::new().key_padding(mask));
        assert_mentions(&message, &["key padding", "[2, 6]", "[2, 5]", "Fix:"]);
    }

    #[test]
    fn attend_refuses_alibi_slopes_of_another_length() {
        let slopes = Tensor::<1>::from_floats([0.5, 0.25, 0.125], &crate::devices::flex());
        let message = refusal(2, AttendOptions::new().bias(AttentionBias::Alibi(slopes)));
        assert_mentions(&message, &["ALiBi slopes", "[4]", "[3]", "Fix:"]);
    }

    #[test]
    fn attend_refuses_a_negative_scale() {
        let message = refusal(2, AttendOptions::new().scale(-0.5));
        assert_mentions(&message, &["scale", "-0.5", "positive", "Fix:"]);
    }
}
