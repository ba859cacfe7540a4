//! What both backward kernels (`backward.rs`, `backward_shared.rs`) hold and compute per unit:
//! a key cube's keys with their gradients ([`Keys`]), a query cube's rows with theirs
//! ([`Queries`]), loaded and written the same way, and the probability, the softcap's slope and
//! the query rows a run of keys can see. The kernels differ only in where the other side of
//! each product comes from (device memory or a stage in shared memory).

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]
// Only the autodiff node calls the backward.
#![cfg_attr(not(feature = "autodiff"), allow(dead_code))]

use cubecl::prelude::*;

use super::{BIAS_GRAD, CAPPED, CAUSAL, EXPLICIT, Scalars, UNSEEN, WINDOW, key_place, query_place};

/// `p = exp(x - lse)` of a final score `x`, 0 where it is hidden.
#[cube]
pub(super) fn probability<C: Float>(x: C, lse: C) -> C {
    let mut w = C::new(0.0);
    if x > C::new(UNSEEN) {
        w = C::exp(x - lse);
    }
    w
}

/// `1 - tanh(raw / c)^2` under a softcap, else 1: the slope of `c tanh(x / c)` at `raw`.
#[cube]
pub(super) fn cap_slope<C: Float>(raw: C, p: &Scalars) -> C {
    let mut slope = C::new(1.0);
    if (p.flags & CAPPED) != 0 {
        let t = C::tanh(raw / C::cast_from(p.softcap));
        slope = C::new(1.0) - t * t;
    }
    slope
}

/// The query rows that can see some key of `j0..j1` (sequential positions: the causal mask and
/// the window prune them; explicit ones: all).
#[cube]
pub(super) fn query_range(p: &Scalars, j0: usize, j1: usize) -> (usize, usize) {
    let mut lo = 0i32;
    let mut hi = p.seq_q as i32;
    if (p.flags & EXPLICIT) == 0 {
        let first = p.key_offset + j0 as i32 - p.query_offset;
        let last = p.key_offset + j1 as i32 - 1 - p.query_offset;
        let causal = (p.flags & CAUSAL) != 0;
        if causal {
            lo = max(lo, first);
        }
        if (p.flags & WINDOW) != 0 {
            hi = min(hi, last + p.before + 1);
            if !causal {
                lo = max(lo, first - p.after);
            }
        }
    }
    let lo = max(lo, 0);
    (lo as usize, max(hi, lo) as usize)
}

/// A unit's `per_unit` keys from `j0` of one key/value head (rows from `kv_base`) in
/// registers, zeros past `seq_k`, with their gradients and where each key sits: what a key cube
/// of either variant holds.
#[derive(CubeType)]
pub(super) struct Keys<C: Float> {
    pub keys: Array<C>,
    pub values: Array<C>,
    pub dk: Array<C>,
    pub dv: Array<C>,
    pub position: Array<i32>,
    pub seen: Array<u32>,
    pub segment: Array<i32>,
}

/// A unit's keys from `j0`, loaded (see [`Keys`]).
#[cube]
pub(super) fn start_keys<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
    k: &Tensor<F>,
    v: &Tensor<F>,
    padding: &Tensor<P>,
    positions: &Tensor<I>,
    segments: &Tensor<J>,
    p: &Scalars,
    b: usize,
    kv_base: usize,
    j0: usize,
    #[comptime] per_unit: usize,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
) -> Keys<C> {
    let seq_k = p.seq_k as usize;
    let mut s = Keys::<C> {
        keys: Array::<C>::new(comptime!(per_unit * d_head)),
        values: Array::<C>::new(comptime!(per_unit * d_v)),
        dk: Array::<C>::new(comptime!(per_unit * d_head)),
        dv: Array::<C>::new(comptime!(per_unit * d_v)),
        position: Array::<i32>::new(per_unit),
        seen: Array::<u32>::new(per_unit),
        segment: Array::<i32>::new(per_unit),
    };
    #[unroll]
    for t in 0..per_unit {
        let j = j0 + t;
        let in_range = j < seq_k;
        #[unroll]
        for d in 0..d_head {
            let mut x = C::new(0.0);
            if in_range {
                x = C::cast_from(k[(kv_base + j) * d_head + d]);
            }
            s.keys[t * d_head + d] = x;
            s.dk[t * d_head + d] = C::new(0.0);
        }
        #[unroll]
        for d in 0..d_v {
            let mut x = C::new(0.0);
            if in_range {
                x = C::cast_from(v[(kv_base + j) * d_v + d]);
            }
            s.values[t * d_v + d] = x;
            s.dv[t * d_v + d] = C::new(0.0);
        }
        let (position, seen, segment) = key_place(positions, segments, padding, p, b, j, in_range);
        s.position[t] = position;
        let mut seen_bit = 0u32;
        if seen {
            seen_bit = 1u32;
        }
        s.seen[t] = seen_bit;
        s.segment[t] = segment;
    }
    s
}

/// The unit's dK (times `dk_scale`) and dV rows written, none past `seq_k`.
#[cube]
pub(super) fn write_keys<F: Float, C: Float>(
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    s: &Keys<C>,
    p: &Scalars,
    kv_base: usize,
    j0: usize,
    dk_scale: C,
    #[comptime] per_unit: usize,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
) {
    #[unroll]
    for t in 0..per_unit {
        let j = j0 + t;
        if j < p.seq_k as usize {
            #[unroll]
            for d in 0..d_head {
                dk[(kv_base + j) * d_head + d] = F::cast_from(s.dk[t * d_head + d] * dk_scale);
            }
            #[unroll]
            for d in 0..d_v {
                dv[(kv_base + j) * d_v + d] = F::cast_from(s.dv[t * d_v + d]);
            }
        }
    }
}

/// A unit's `per_unit` query rows from `i0` of head `head` in registers: q scaled, dO, their
/// `D` and log-sum-exp (zeros past `seq_q`), dQ zeroed, where each row sits: what a query cube
/// of either variant holds.
#[derive(CubeType)]
pub(super) struct Queries<C: Float> {
    pub q: Array<C>,
    pub grad: Array<C>,
    pub dq: Array<C>,
    pub delta: Array<C>,
    pub lse: Array<C>,
    pub position: Array<i32>,
    pub segment: Array<i32>,
}

/// A unit's query rows from `i0`, loaded (see [`Queries`]).
#[cube]
pub(super) fn start_queries<F: Float, C: Float, I: Int, J: Int>(
    q: &Tensor<F>,
    grad: &Tensor<F>,
    delta: &Tensor<C>,
    lse: &Tensor<F>,
    positions: &Tensor<I>,
    segments: &Tensor<J>,
    p: &Scalars,
    b: usize,
    head: usize,
    i0: usize,
    #[comptime] per_unit: usize,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
) -> Queries<C> {
    let seq_q = p.seq_q as usize;
    let mut s = Queries::<C> {
        q: Array::<C>::new(comptime!(per_unit * d_head)),
        grad: Array::<C>::new(comptime!(per_unit * d_v)),
        dq: Array::<C>::new(comptime!(per_unit * d_head)),
        delta: Array::<C>::new(per_unit),
        lse: Array::<C>::new(per_unit),
        position: Array::<i32>::new(per_unit),
        segment: Array::<i32>::new(per_unit),
    };
    #[unroll]
    for t in 0..per_unit {
        let i = i0 + t;
        let in_range = i < seq_q;
        let row = (b * p.n_heads as usize + head) * seq_q + i;
        #[unroll]
        for d in 0..d_head {
            let mut x = C::new(0.0);
            if in_range {
                x = C::cast_from(q[row * d_head + d]) * C::cast_from(p.scale);
            }
            s.q[t * d_head + d] = x;
            s.dq[t * d_head + d] = C::new(0.0);
        }
        #[unroll]
        for d in 0..d_v {
            let mut x = C::new(0.0);
            if in_range {
                x = C::cast_from(grad[row * d_v + d]);
            }
            s.grad[t * d_v + d] = x;
        }
        let mut row_delta = C::new(0.0);
        let mut row_lse = C::new(0.0);
        if in_range {
            row_delta = delta[row];
            row_lse = C::cast_from(lse[row]);
        }
        s.delta[t] = row_delta;
        s.lse[t] = row_lse;
        let (position, segment) = query_place(positions, segments, p, b, i);
        s.position[t] = position;
        s.segment[t] = segment;
    }
    s
}

/// The unit's dQ rows (times the score scale; none past `seq_q`) and its share of the bias's
/// gradient (`bias`: one slope or the table's `2 reach + 1` entries, when wanted) at `slot` of
/// its head's `units_per_head x query tiles` slots.
#[cube]
pub(super) fn write_queries<F: Float, C: Float>(
    dq: &mut Tensor<F>,
    dbias: &mut Tensor<C>,
    s: &Queries<C>,
    bias: &Array<C>,
    p: &Scalars,
    b: usize,
    head: usize,
    i0: usize,
    slot: usize,
    units_per_head: usize,
    #[comptime] per_unit: usize,
    #[comptime] d_head: usize,
    #[comptime] bias_slots: usize,
) {
    let seq_q = p.seq_q as usize;
    #[unroll]
    for t in 0..per_unit {
        let i = i0 + t;
        if i < seq_q {
            let row = (b * p.n_heads as usize + head) * seq_q + i;
            #[unroll]
            for d in 0..d_head {
                dq[row * d_head + d] = F::cast_from(s.dq[t * d_head + d] * C::cast_from(p.scale));
            }
        }
    }
    // Nothing (no gradient wanted), one slope, or the table's `2 reach + 1` entries.
    let mut width = 0;
    if (p.flags & BIAS_GRAD) != 0 {
        width = 1;
        if comptime!(bias_slots > 1) {
            width = 2 * p.reach as usize + 1;
        }
    }
    let slots = CUBE_COUNT_X as usize - p.key_tiles as usize;
    let base = ((b * p.n_heads as usize + head) * slots * units_per_head + slot) * width;
    for e in 0..width {
        dbias[base + e] = bias[e];
    }
}
