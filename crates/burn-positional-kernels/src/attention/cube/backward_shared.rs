//! The attention's backward shaped for a discrete GPU: FlashAttention-2's split (dK and dV per
//! key block, dQ per query block) with the other side of each product staged in shared memory,
//! as the forward's shared kernel (`shared.rs`) stages its keys. Same scores, masks, bias and
//! gradients as the register backward (`backward.rs`), which stays the choice on CPU-emulated
//! adapters; [`FlashVariant`](crate::FlashVariant) picks between them as it picks the forward.
//!
//! One launch, two kinds of cube of the same size (whole planes, about 128 units), told apart by
//! `CUBE_POS_X`:
//!
//! - a **key cube** holds `units x per_unit` consecutive keys of one key/value head, `per_unit`
//!   per unit in registers with their dK and dV. It walks the query rows that can see any of its
//!   keys (each head of the group in turn) in stages of `stage` rows: all its units copy the
//!   stage's q rows `[stage, d_head]` and dO rows `[stage, d_v]` (one contiguous span each,
//!   coalesced) with each row's log-sum-exp, `D`, position and segment into shared memory; then
//!   each unit scores its keys against every staged row (a broadcast read: all units read the
//!   same element at once) and accumulates `dV += p dO`, `dK += dS q`;
//! - a **query cube** holds the forward's tile of query rows (one or two per unit, every head
//!   of the group) with their dQ and the bias's gradient in registers, and walks its keys in
//!   stages of `stage` keys and values copied into shared memory: `dQ += dS k`.
//!
//! Barriers sit in uniform control flow: the stage loops' bounds are the cube's. Units without
//! keys or rows (a short tail) load and meet the barriers, and write nothing. Shared memory
//! holds the storage dtype; every product and sum is f32.
//!
//! # On NVIDIA GPUs
//!
//! Built for cubes of 128 units and at most 32 KiB of shared memory. NVRTC's figures for an
//! H100/H200 (`sm_90`; `docs/gpu.md`): at f16 width 64, 255 registers a unit, 17 KiB a cube,
//! 2 cubes per multiprocessor, 12.5 % theoretical occupancy, limited by registers, and 248
//! bytes a unit spilled; width 128 spills 3 KiB. A key unit keeps its key, value and both
//! gradients (`2 x (d_head + d_v)` f32 values) in registers across the query walk: the same
//! price as the forward's shared kernel, twice over. The spills are listed in
//! `tools/cuda/known-spills.json`; the tensor-core backward keeps those rows in shared memory.

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]
// Only the autodiff node calls the backward.
#![cfg_attr(not(feature = "autodiff"), allow(dead_code))]

use cubecl::ir::HardwareProperties;
use cubecl::prelude::*;

use super::backward_units::{
    cap_slope, probability, query_range, start_keys, start_queries, write_keys, write_queries,
};
use super::{
    ALIBI, BIAS_GRAD, Inputs, Plan, Scalars, final_score, head_bias, key_place, key_range,
    query_place,
};
use crate::attention::Sizes;

/// Units per plane a cube is a multiple of.
const PLANE: usize = 32;
/// Units a cube aims for: four planes.
const CUBE_UNITS: usize = 128;
/// The most rows or keys staged at once.
const MAX_STAGE: usize = 64;
/// The most shared memory one cube takes, in bytes (both kinds' stages together).
const MAX_SHARED_BYTES: usize = 32 * 1024;

/// See the module. Arguments as [`flash_backward_kernel`](super::backward::flash_backward_kernel),
/// plus the stage length.
#[cube(launch_unchecked, create_dummy_kernel)]
pub(super) fn flash_backward_shared_kernel<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
    inputs: &Inputs<F, I, J, P>,
    delta: &Tensor<C>,
    lse: &Tensor<F>,
    grad: &Tensor<F>,
    dq: &mut Tensor<F>,
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    dbias: &mut Tensor<C>,
    p: Scalars,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] per_unit: usize,
    #[comptime] bias_slots: usize,
    #[comptime] stage: usize,
    #[define(F, C, I, J, P)] _dtypes: [ElemType; 5],
) {
    let (q, k, v, bias) = (&inputs.q, &inputs.k, &inputs.v, &inputs.bias);
    let (padding, positions, segments) = (&inputs.padding, &inputs.positions, &inputs.segments);
    if CUBE_POS_X < p.key_tiles {
        key_cube::<F, C, I, J, P>(
            q, k, v, bias, padding, positions, segments, delta, lse, grad, dk, dv, &p, d_head, d_v,
            per_unit, stage,
        );
    } else {
        query_cube::<F, C, I, J, P>(
            q, k, v, bias, padding, positions, segments, delta, lse, grad, dq, dbias, &p, d_head,
            d_v, per_unit, bias_slots, stage,
        );
    }
}

/// A cube of keys: unit `u` holds keys `CUBE_POS_X * units * per_unit + u * per_unit ..` of
/// key/value head `CUBE_POS_Y` of sequence `CUBE_POS_Z`, and writes their dK and dV rows.
#[cube]
fn key_cube<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    bias: &Tensor<F>,
    padding: &Tensor<P>,
    positions: &Tensor<I>,
    segments: &Tensor<J>,
    delta: &Tensor<C>,
    lse: &Tensor<F>,
    grad: &Tensor<F>,
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    p: &Scalars,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] per_unit: usize,
    #[comptime] stage: usize,
) {
    let seq_q = p.seq_q as usize;
    let seq_k = p.seq_k as usize;
    let group = p.group as usize;
    let kv_head = CUBE_POS_Y as usize;
    let b = CUBE_POS_Z as usize;
    let unit = UNIT_POS_X as usize;
    let units = CUBE_DIM_X as usize;
    let span_lo = CUBE_POS_X as usize * units * per_unit;
    let span_hi = min(span_lo + units * per_unit, seq_k);
    let j0 = span_lo + unit * per_unit;
    let kv_base = (b * CUBE_COUNT_Y as usize + kv_head) * seq_k;
    let scale = C::cast_from(p.scale);

    let mut keys = start_keys::<F, C, I, J, P>(
        k, v, padding, positions, segments, p, b, kv_base, j0, per_unit, d_head, d_v,
    );

    let mut q_s = Shared::<[F]>::new_slice(comptime!(stage * d_head));
    let mut g_s = Shared::<[F]>::new_slice(comptime!(stage * d_v));
    let mut lse_s = Shared::<[C]>::new_slice(stage);
    let mut delta_s = Shared::<[C]>::new_slice(stage);
    let mut qp_s = Shared::<[i32]>::new_slice(stage);
    let mut qseg_s = Shared::<[i32]>::new_slice(stage);
    // The rows that can see any key of the cube's span (the same for every unit).
    let mut i_lo = 0usize;
    let mut i_hi = 0usize;
    if span_lo < seq_k {
        let (lo, hi) = query_range(p, span_lo, span_hi);
        i_lo = lo;
        i_hi = hi;
    }
    for g in 0..group {
        let head = kv_head * group + g;
        let (slope, table_base) = head_bias::<F, C>(bias, p, head);
        let row_base = (b * p.n_heads as usize + head) * seq_q;
        let mut i0 = i_lo;
        while i0 < i_hi {
            // 1. The stage's rows: q and dO as two contiguous spans, zeros past `i_hi`.
            let n = min(stage, i_hi - i0);
            let mut e = unit;
            while e < comptime!(stage * d_head) {
                let mut x = F::new(0.0);
                if e < n * d_head {
                    x = q[(row_base + i0) * d_head + e];
                }
                q_s[e] = x;
                e += units;
            }
            e = unit;
            while e < comptime!(stage * d_v) {
                let mut x = F::new(0.0);
                if e < n * d_v {
                    x = grad[(row_base + i0) * d_v + e];
                }
                g_s[e] = x;
                e += units;
            }
            let mut c = unit;
            while c < stage {
                let i = i0 + c;
                let mut row_lse = C::new(0.0);
                let mut row_delta = C::new(0.0);
                if c < n {
                    row_lse = C::cast_from(lse[row_base + i]);
                    row_delta = delta[row_base + i];
                }
                lse_s[c] = row_lse;
                delta_s[c] = row_delta;
                let (position, segment) = query_place(positions, segments, p, b, i);
                qp_s[c] = position;
                qseg_s[c] = segment;
                c += units;
            }
            sync_cube();

            // 2. The unit's keys against every staged row.
            if j0 < seq_k {
                for c in 0..n {
                    let position = qp_s[c];
                    let segment = qseg_s[c];
                    let row_lse = lse_s[c];
                    let row_delta = delta_s[c];
                    #[unroll]
                    for t in 0..per_unit {
                        let mut raw = C::new(0.0);
                        #[unroll]
                        for d in 0..d_head {
                            raw += C::cast_from(q_s[c * d_head + d]) * keys.keys[t * d_head + d];
                        }
                        let raw = raw * scale;
                        let x = final_score::<F, C>(
                            raw,
                            keys.position[t] - position,
                            keys.seen[t] == 1,
                            segment,
                            keys.segment[t],
                            bias,
                            slope,
                            table_base,
                            p,
                        );
                        let w = probability::<C>(x, row_lse);
                        if w != C::new(0.0) {
                            let mut dp = C::new(0.0);
                            #[unroll]
                            for d in 0..d_v {
                                let gd = C::cast_from(g_s[c * d_v + d]);
                                dp += gd * keys.values[t * d_v + d];
                                keys.dv[t * d_v + d] += w * gd;
                            }
                            let ds = w * (dp - row_delta) * cap_slope::<C>(raw, p);
                            #[unroll]
                            for d in 0..d_head {
                                keys.dk[t * d_head + d] += ds * C::cast_from(q_s[c * d_head + d]);
                            }
                        }
                    }
                }
            }
            // 3. Everyone done with the stage before the next one overwrites it.
            sync_cube();
            i0 += stage;
        }
    }

    // dK accumulated from the unscaled staged queries: scaled once here.
    write_keys::<F, C>(dk, dv, &keys, p, kv_base, j0, scale, per_unit, d_head, d_v);
}

/// A cube of query rows, laid out as the forward's shared tile `CUBE_POS_X - key_tiles`: unit
/// `u < group * rows / per_unit` holds `per_unit` rows of one head, writes their dQ rows and
/// its share of the bias's gradient; the others only load.
#[cube]
fn query_cube<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    bias: &Tensor<F>,
    padding: &Tensor<P>,
    positions: &Tensor<I>,
    segments: &Tensor<J>,
    delta: &Tensor<C>,
    lse: &Tensor<F>,
    grad: &Tensor<F>,
    dq: &mut Tensor<F>,
    dbias: &mut Tensor<C>,
    p: &Scalars,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] per_unit: usize,
    #[comptime] bias_slots: usize,
    #[comptime] stage: usize,
) {
    let seq_q = p.seq_q as usize;
    let seq_k = p.seq_k as usize;
    let group = p.group as usize;
    let rows = p.rows as usize;
    let kv_head = CUBE_POS_Y as usize;
    let b = CUBE_POS_Z as usize;
    let unit = UNIT_POS_X as usize;
    let units = CUBE_DIM_X as usize;
    let units_per_head = rows / per_unit;
    let active = unit < group * units_per_head;
    let tile = (CUBE_POS_X - p.key_tiles) as usize;
    let r0 = tile * rows;
    // An idle unit stands in as the group's last head, past every row: it reads no query.
    let mut head = kv_head * group + group - 1;
    let mut i0 = seq_q;
    let mut slot = 0usize;
    if active {
        head = kv_head * group + unit / units_per_head;
        i0 = r0 + (unit % units_per_head) * per_unit;
        slot = tile * units_per_head + unit % units_per_head;
    }
    let kv_base = (b * CUBE_COUNT_Y as usize + kv_head) * seq_k;

    let mut mine = start_queries::<F, C, I, J>(
        q, grad, delta, lse, positions, segments, p, b, head, i0, per_unit, d_head, d_v,
    );
    let (slope, table_base) = head_bias::<F, C>(bias, p, head);
    let wanted = (p.flags & BIAS_GRAD) != 0;
    let mut dbs = Array::<C>::new(bias_slots);
    for e in 0..bias_slots {
        dbs[e] = C::new(0.0);
    }

    let mut k_s = Shared::<[F]>::new_slice(comptime!(stage * d_head));
    let mut v_s = Shared::<[F]>::new_slice(comptime!(stage * d_v));
    let mut kp_s = Shared::<[i32]>::new_slice(stage);
    let mut seen_s = Shared::<[u32]>::new_slice(stage);
    let mut segment_s = Shared::<[i32]>::new_slice(stage);
    let (k_lo, k_hi) = key_range(p, r0);
    let mut j0 = k_lo;
    while j0 < k_hi {
        // 1. The stage's keys and values, zeros past `k_hi`.
        let n = min(stage, k_hi - j0);
        let mut e = unit;
        while e < comptime!(stage * d_head) {
            let mut x = F::new(0.0);
            if e < n * d_head {
                x = k[(kv_base + j0) * d_head + e];
            }
            k_s[e] = x;
            e += units;
        }
        e = unit;
        while e < comptime!(stage * d_v) {
            let mut x = F::new(0.0);
            if e < n * d_v {
                x = v[(kv_base + j0) * d_v + e];
            }
            v_s[e] = x;
            e += units;
        }
        let mut c = unit;
        while c < stage {
            let (kp, seen, segment) = key_place(positions, segments, padding, p, b, j0 + c, c < n);
            kp_s[c] = kp;
            let mut seen_bit = 0u32;
            if seen {
                seen_bit = 1u32;
            }
            seen_s[c] = seen_bit;
            segment_s[c] = segment;
            c += units;
        }
        sync_cube();

        // 2. The unit's rows against every staged key.
        if active {
            for c in 0..n {
                let key_position = kp_s[c];
                let seen = seen_s[c] == 1;
                let key_segment = segment_s[c];
                #[unroll]
                for t in 0..per_unit {
                    let mut raw = C::new(0.0);
                    #[unroll]
                    for d in 0..d_head {
                        raw += mine.q[t * d_head + d] * C::cast_from(k_s[c * d_head + d]);
                    }
                    let rel = key_position - mine.position[t];
                    let x = final_score::<F, C>(
                        raw,
                        rel,
                        seen && i0 + t < seq_q,
                        mine.segment[t],
                        key_segment,
                        bias,
                        slope,
                        table_base,
                        p,
                    );
                    let w = probability::<C>(x, mine.lse[t]);
                    if w != C::new(0.0) {
                        let mut dp = C::new(0.0);
                        #[unroll]
                        for d in 0..d_v {
                            dp += mine.grad[t * d_v + d] * C::cast_from(v_s[c * d_v + d]);
                        }
                        let ds = w * (dp - mine.delta[t]);
                        if comptime!(bias_slots == 1) && wanted && (p.flags & ALIBI) != 0 {
                            let mut distance = rel;
                            if rel < 0 {
                                distance = -rel;
                            }
                            dbs[0] -= ds * C::cast_from(distance);
                        }
                        if comptime!(bias_slots > 1) {
                            let at = min(max(rel, -p.reach), p.reach) + p.reach;
                            dbs[at as usize] += ds;
                        }
                        let ds = ds * cap_slope::<C>(raw, p);
                        #[unroll]
                        for d in 0..d_head {
                            mine.dq[t * d_head + d] += ds * C::cast_from(k_s[c * d_head + d]);
                        }
                    }
                }
            }
        }
        // 3. Everyone done with the stage before the next one overwrites it.
        sync_cube();
        j0 += stage;
    }

    if active {
        write_queries::<F, C>(
            dq,
            dbias,
            &mine,
            &dbs,
            p,
            b,
            head,
            i0,
            slot,
            units_per_head,
            per_unit,
            d_head,
            bias_slots,
        );
    }
}

/// The cubes' geometry, or `None` where the device cannot hold it (too little shared memory for
/// 8 rows and 8 keys, or more units than a cube may have): the register backward then runs.
/// `per_unit` rows (query cubes) and keys (key cubes) per unit: two for heads with
/// `d_head + d_v <= 64`, else one.
pub(super) fn plan(
    sizes: &Sizes,
    group: usize,
    elem_size: usize,
    hardware: &HardwareProperties,
) -> Option<Plan> {
    let per_unit = if sizes.d_head + sizes.d_v <= 64 { 2 } else { 1 }
        .min(sizes.seq_q)
        .min(sizes.seq_k)
        .max(1);
    // Whatever the lengths, as the forward's (`shared.rs`).
    let units_per_head = (CUBE_UNITS / group).max(1);
    let units = (group * units_per_head).next_multiple_of(PLANE);
    if units > hardware.max_units_per_cube as usize {
        return None;
    }
    // Both kinds' stages: rows (q, dO in the storage dtype; lse and D in f32, a position and a
    // segment) and keys (k, v; a position, a visibility and a segment).
    let per_entry = 2 * (sizes.d_head + sizes.d_v) * elem_size + 16 + 12;
    let budget = hardware.max_shared_memory_size.min(MAX_SHARED_BYTES);
    let stage = [MAX_STAGE, 32, 16, 8]
        .into_iter()
        .find(|stage| stage * per_entry <= budget)?;
    Some(Plan {
        per_unit,
        rows: units_per_head * per_unit,
        units,
        stage: Some(stage),
    })
}
