//! The tensor-core backward ([`FlashVariant::TensorCores`](super::FlashVariant)):
//! FlashAttention-2's backward with its six block products on cooperative matrices, in two
//! launches of planes of 32 units, every product's operands in shared memory (heads padded
//! with zeros to a multiple of 16), as the forward (`tensor_cores.rs`):
//!
//! - **keys** ([`flash_tc_keys_kernel`]): plane `w` owns 16 keys and values of one key/value
//!   head with their gradients `dK`, `dV` (f32). The cube walks, for each head of the group,
//!   the blocks of 16 query rows that can see its keys: all units stage the block's `Q`, `dO`,
//!   log-sum-exp, `D = rowsum(dO * O)` and places; each plane computes `Sᵀ = K Qᵀ` and
//!   `dPᵀ = V dOᵀ`, its units turn each entry into `Pᵀ = exp(x - lse)` and
//!   `dSᵀ = Pᵀ (dPᵀ - D)` times the softcap's slope (8 entries a unit), stored in the storage
//!   dtype, then `dV += Pᵀ dO` and `dK += dSᵀ Q`;
//! - **queries** ([`flash_tc_queries_kernel`]): plane `w` owns 16 query rows of one head (the
//!   forward's tiles) with their `dQ` (f32); the cube walks blocks of 16 keys: `S = Q Kᵀ`,
//!   `dP = dO Vᵀ`, then units 0..16 one row each: `dS`, the bias's gradient in registers (ALiBi's
//!   `-sum dS |rel|`, a table's entry per clamped distance), `dS` times the softcap's slope;
//!   then `dQ += dS K`.
//!
//! `dK` and `dQ` are written times the score scale. Products are `cmma`, or the plane's units
//! in f32 where the device has none for the dtype (`emulate`, what CI runs).
//!
//! # On NVIDIA GPUs
//!
//! Built for at most 48 KiB of shared memory a cube, as the forward. NVRTC's figures for an
//! H100/H200 (`sm_90`; `docs/gpu.md`), f16 at width 64: the key kernel 2 planes, 64 registers,
//! 35 KiB, 6 cubes per multiprocessor, 18.8 % theoretical occupancy; the query kernel 4 planes,
//! 56 registers, 46 KiB, 25 %; both limited by shared memory, both with `HMMA` in their machine
//! code. A key plane holds 16 keys, values and their f32 gradients beside a block of query rows
//! and two score tiles, all in shared memory: the cube's bytes bound the count, as in the
//! forward. The key kernel spills 20 bytes a unit (`tools/cuda/known-spills.json`).

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]
// Only the autodiff node calls the backward.
#![cfg_attr(not(feature = "autodiff"), allow(dead_code))]

use cubecl::ir::HardwareProperties;
use cubecl::prelude::*;

use super::backward_units::{cap_slope, probability, query_range};
use super::tensor_cores::{
    EMULATED_STEP, PLANE, TILE, clear, copy_iterations, plane_rows, row_tile, stage_places,
    stage_rows, tile_product,
};
use super::{ALIBI, BIAS_GRAD, Scalars, final_score, head_bias, key_range, query_place};
use crate::attention::Sizes;

/// The most shared memory one cube takes, in bytes (as the forward).
const MAX_SHARED_BYTES: usize = 48 * 1024;
/// The most planes in a cube.
const MAX_PLANES: usize = 4;

/// Key cubes: `(CUBE_POS_X, CUBE_POS_Y, CUBE_POS_Z)` = (run of `16 x planes` keys, key/value
/// head, sequence); see the module. `delta` is `[batch, n_heads, seq_q]` in `C`.
#[cube(launch_unchecked, create_dummy_kernel)]
pub(super) fn flash_tc_keys_kernel<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
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
    p: Scalars,
    group: u32,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] planes: usize,
    #[comptime] emulate: bool,
    #[define(F, C, I, J, P)] _dtypes: [ElemType; 5],
) {
    let group = group as usize;
    let dh = comptime!(d_head.next_multiple_of(TILE));
    let dvp = comptime!(d_v.next_multiple_of(TILE));
    let seq_q = p.seq_q as usize;
    let seq_k = p.seq_k as usize;
    let n_heads = p.n_heads as usize;
    let kv_head = CUBE_POS_Y as usize;
    let b = CUBE_POS_Z as usize;
    let unit = UNIT_POS_X as usize;
    let w = unit / PLANE;
    let lane = unit % PLANE;
    let cube_j0 = CUBE_POS_X as usize * comptime!(planes * TILE);
    let units = comptime!(planes * PLANE);
    let kv_base = (b * CUBE_COUNT_Y as usize + kv_head) * seq_k;

    // The cube's keys and values (zeros past `seq_k` and the widths), their gradients, places.
    let mut k_s = Shared::<[F]>::new_slice(comptime!(planes * TILE * dh));
    let mut v_s = Shared::<[F]>::new_slice(comptime!(planes * TILE * dvp));
    let mut dk_s = Shared::<[C]>::new_slice(comptime!(planes * TILE * dh));
    let mut dv_s = Shared::<[C]>::new_slice(comptime!(planes * TILE * dvp));
    let mut kp_s = Shared::<[i32]>::new_slice(comptime!(planes * TILE));
    let mut seen_s = Shared::<[u32]>::new_slice(comptime!(planes * TILE));
    let mut kseg_s = Shared::<[i32]>::new_slice(comptime!(planes * TILE));
    // A block of query rows: Q, dO, and per row its lse, D, place and whether it exists.
    let mut q_s = Shared::<[F]>::new_slice(comptime!(TILE * dh));
    let mut do_s = Shared::<[F]>::new_slice(comptime!(TILE * dvp));
    let mut lse_s = Shared::<[C]>::new_slice(TILE);
    let mut delta_s = Shared::<[C]>::new_slice(TILE);
    let mut qp_s = Shared::<[i32]>::new_slice(TILE);
    let mut qseg_s = Shared::<[i32]>::new_slice(TILE);
    let mut row_s = Shared::<[u32]>::new_slice(TILE);
    // Each plane's Sᵀ and dPᵀ (f32), then Pᵀ and dSᵀ in the storage dtype.
    let mut st_s = Shared::<[C]>::new_slice(comptime!(planes * TILE * TILE));
    let mut dpt_s = Shared::<[C]>::new_slice(comptime!(planes * TILE * TILE));
    let mut pt_s = Shared::<[F]>::new_slice(comptime!(planes * TILE * TILE));
    let mut dst_s = Shared::<[F]>::new_slice(comptime!(planes * TILE * TILE));

    let mut valid = 0;
    if cube_j0 < seq_k {
        valid = seq_k - cube_j0;
    }
    stage_rows::<F>(
        k,
        &mut k_s,
        0,
        kv_base + cube_j0,
        valid,
        comptime!(planes * TILE),
        d_head,
        units,
    );
    stage_rows::<F>(
        v,
        &mut v_s,
        0,
        kv_base + cube_j0,
        valid,
        comptime!(planes * TILE),
        d_v,
        units,
    );
    clear::<C>(&mut dk_s, comptime!(planes * TILE * dh), units);
    clear::<C>(&mut dv_s, comptime!(planes * TILE * dvp), units);
    stage_places::<I, J, P>(
        positions,
        segments,
        padding,
        &p,
        b,
        cube_j0,
        seq_k,
        &mut kp_s,
        &mut seen_s,
        &mut kseg_s,
        comptime!(planes * TILE),
        units,
    );

    let scale = C::cast_from(p.scale);
    let mut cube_j1 = seq_k;
    if cube_j0 + comptime!(planes * TILE) < seq_k {
        cube_j1 = cube_j0 + comptime!(planes * TILE);
    }
    let mut i_lo = 0;
    let mut i_hi = 0;
    if cube_j0 < seq_k {
        let (lo, hi) = query_range(&p, cube_j0, cube_j1);
        i_lo = lo;
        i_hi = hi;
    }
    for g in 0..group {
        let head = kv_head * group + g;
        let (slope, table_base) = head_bias::<F, C>(bias, &p, head);
        let mut ib = i_lo;
        while ib < i_hi {
            // The block's rows `ib..ib + 16` (zeros past `i_hi`: their weights are 0).
            sync_cube();
            let first = (b * n_heads + head) * seq_q + ib;
            stage_rows::<F>(q, &mut q_s, 0, first, i_hi - ib, TILE, d_head, units);
            stage_rows::<F>(grad, &mut do_s, 0, first, i_hi - ib, TILE, d_v, units);
            if unit < TILE {
                let i = ib + unit;
                let mut row_lse = C::new(0.0);
                let mut row_delta = C::new(0.0);
                let mut exists = 0u32;
                if i < i_hi {
                    let row = (b * n_heads + head) * seq_q + i;
                    row_lse = C::cast_from(lse[row]);
                    row_delta = delta[row];
                    exists = 1u32;
                }
                let (position, segment) = query_place(positions, segments, &p, b, i);
                lse_s[unit] = row_lse;
                delta_s[unit] = row_delta;
                qp_s[unit] = position;
                qseg_s[unit] = segment;
                row_s[unit] = exists;
            }
            sync_cube();

            // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ for the plane's 16 keys.
            tile_product::<F, C>(
                &k_s,
                w * TILE * dh,
                dh,
                false,
                &q_s,
                0,
                dh,
                true,
                &mut st_s,
                w * TILE * TILE,
                TILE,
                dh,
                false,
                lane,
                emulate,
            );
            tile_product::<F, C>(
                &v_s,
                w * TILE * dvp,
                dvp,
                false,
                &do_s,
                0,
                dvp,
                true,
                &mut dpt_s,
                w * TILE * TILE,
                TILE,
                dvp,
                false,
                lane,
                emulate,
            );
            sync_cube();

            // Pᵀ and dSᵀ, entry (key kk, row rr), 8 a unit.
            #[unroll]
            for t in 0..comptime!(TILE * TILE / PLANE) {
                let at = lane + t * PLANE;
                let kk = at / TILE;
                let rr = at % TILE;
                let key = w * TILE + kk;
                let raw = st_s[w * TILE * TILE + at] * scale;
                let x = final_score::<F, C>(
                    raw,
                    kp_s[key] - qp_s[rr],
                    seen_s[key] == 1 && row_s[rr] == 1,
                    qseg_s[rr],
                    kseg_s[key],
                    bias,
                    slope,
                    table_base,
                    &p,
                );
                let weight = probability::<C>(x, lse_s[rr]);
                let ds =
                    weight * (dpt_s[w * TILE * TILE + at] - delta_s[rr]) * cap_slope::<C>(raw, &p);
                pt_s[w * TILE * TILE + at] = F::cast_from(weight);
                dst_s[w * TILE * TILE + at] = F::cast_from(ds);
            }
            sync_cube();

            // dV += Pᵀ dO and dK += dSᵀ Q, 16 columns at a time.
            #[unroll]
            for t in 0..comptime!(dvp / TILE) {
                tile_product::<F, C>(
                    &pt_s,
                    w * TILE * TILE,
                    TILE,
                    false,
                    &do_s,
                    t * TILE,
                    dvp,
                    false,
                    &mut dv_s,
                    w * TILE * dvp + t * TILE,
                    dvp,
                    TILE,
                    true,
                    lane,
                    emulate,
                );
            }
            #[unroll]
            for t in 0..comptime!(dh / TILE) {
                tile_product::<F, C>(
                    &dst_s,
                    w * TILE * TILE,
                    TILE,
                    false,
                    &q_s,
                    t * TILE,
                    dh,
                    false,
                    &mut dk_s,
                    w * TILE * dh + t * TILE,
                    dh,
                    TILE,
                    true,
                    lane,
                    emulate,
                );
            }
            ib += TILE;
        }
    }
    sync_cube();

    let mut e = unit;
    while e < comptime!(planes * TILE * dh) {
        let j = cube_j0 + e / dh;
        let col = e % dh;
        if j < seq_k && col < d_head {
            dk[(kv_base + j) * d_head + col] = F::cast_from(dk_s[e] * scale);
        }
        e += units;
    }
    e = unit;
    while e < comptime!(planes * TILE * dvp) {
        let j = cube_j0 + e / dvp;
        let col = e % dvp;
        if j < seq_k && col < d_v {
            dv[(kv_base + j) * d_v + col] = F::cast_from(dv_s[e]);
        }
        e += units;
    }
}

/// Query cubes: `(CUBE_POS_X, CUBE_POS_Y, CUBE_POS_Z)` = (query tile of `16 x tiles` rows,
/// key/value head and run of `span` of its heads, sequence), planes as the forward's; see the
/// module. `dbias` holds each row's bias gradient, `[batch, n_heads, query tiles x 16 x tiles,
/// width]` in `C` (unwritten when not wanted).
#[cube(launch_unchecked, create_dummy_kernel)]
pub(super) fn flash_tc_queries_kernel<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
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
    p: Scalars,
    group: u32,
    span: u32,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] planes: usize,
    #[comptime] bias_slots: usize,
    #[comptime] emulate: bool,
    #[define(F, C, I, J, P)] _dtypes: [ElemType; 5],
) {
    let dh = comptime!(d_head.next_multiple_of(TILE));
    let dvp = comptime!(d_v.next_multiple_of(TILE));
    let units = comptime!(planes * PLANE);
    let t = row_tile(&p, group, span, planes);
    let (b, r0, first_head, head, i0, kv_base) = (t.b, t.r0, t.first_head, t.head, t.i0, t.kv_base);
    let (tiles, w, lane) = (t.tiles, t.w, t.lane);
    let seq_q = p.seq_q as usize;
    let n_heads = p.n_heads as usize;

    let mut q_s = Shared::<[F]>::new_slice(comptime!(planes * TILE * dh));
    let mut do_s = Shared::<[F]>::new_slice(comptime!(planes * TILE * dvp));
    let mut dq_s = Shared::<[C]>::new_slice(comptime!(planes * TILE * dh));
    let mut k_s = Shared::<[F]>::new_slice(comptime!(TILE * dh));
    let mut v_s = Shared::<[F]>::new_slice(comptime!(TILE * dvp));
    let mut kp_s = Shared::<[i32]>::new_slice(TILE);
    let mut seen_s = Shared::<[u32]>::new_slice(TILE);
    let mut kseg_s = Shared::<[i32]>::new_slice(TILE);
    let mut s_s = Shared::<[C]>::new_slice(comptime!(planes * TILE * TILE));
    let mut dp_s = Shared::<[C]>::new_slice(comptime!(planes * TILE * TILE));
    let mut ds_s = Shared::<[F]>::new_slice(comptime!(planes * TILE * TILE));

    for pw in 0..planes {
        let (first, valid) = plane_rows(&p, b, first_head, r0, pw, tiles);
        stage_rows::<F>(
            q,
            &mut q_s,
            pw * TILE * dh,
            first,
            valid,
            TILE,
            d_head,
            units,
        );
        stage_rows::<F>(
            grad,
            &mut do_s,
            pw * TILE * dvp,
            first,
            valid,
            TILE,
            d_v,
            units,
        );
    }
    clear::<C>(&mut dq_s, comptime!(planes * TILE * dh), units);

    // The row a unit 0..16 owns, and its share of the bias's gradient.
    let r = lane % TILE;
    let owner = lane < TILE;
    let i = i0 + r;
    let row_exists = i < seq_q;
    let (position, segment) = query_place(positions, segments, &p, b, i);
    let mut row_lse = C::new(0.0);
    let mut row_delta = C::new(0.0);
    if row_exists {
        let row = (b * n_heads + head) * seq_q + i;
        row_lse = C::cast_from(lse[row]);
        row_delta = delta[row];
    }
    let (slope, table_base) = head_bias::<F, C>(bias, &p, head);
    let wanted = (p.flags & BIAS_GRAD) != 0;
    let mut dbs = Array::<C>::new(bias_slots);
    for s in 0..bias_slots {
        dbs[s] = C::new(0.0);
    }
    let scale = C::cast_from(p.scale);

    let (k_lo, k_hi) = key_range(&p, r0);
    let mut j0 = k_lo;
    while j0 < k_hi {
        sync_cube();
        stage_rows::<F>(k, &mut k_s, 0, kv_base + j0, k_hi - j0, TILE, d_head, units);
        stage_rows::<F>(v, &mut v_s, 0, kv_base + j0, k_hi - j0, TILE, d_v, units);
        stage_places::<I, J, P>(
            positions,
            segments,
            padding,
            &p,
            b,
            j0,
            k_hi,
            &mut kp_s,
            &mut seen_s,
            &mut kseg_s,
            TILE,
            units,
        );
        sync_cube();

        // S = Q Kᵀ and dP = dO Vᵀ for the plane's 16 rows.
        tile_product::<F, C>(
            &q_s,
            w * TILE * dh,
            dh,
            false,
            &k_s,
            0,
            dh,
            true,
            &mut s_s,
            w * TILE * TILE,
            TILE,
            dh,
            false,
            lane,
            emulate,
        );
        tile_product::<F, C>(
            &do_s,
            w * TILE * dvp,
            dvp,
            false,
            &v_s,
            0,
            dvp,
            true,
            &mut dp_s,
            w * TILE * TILE,
            TILE,
            dvp,
            false,
            lane,
            emulate,
        );
        sync_cube();

        if owner {
            let base = w * TILE * TILE + r * TILE;
            for c in 0..TILE {
                let raw = s_s[base + c] * scale;
                let rel = kp_s[c] - position;
                let x = final_score::<F, C>(
                    raw,
                    rel,
                    seen_s[c] == 1 && row_exists,
                    segment,
                    kseg_s[c],
                    bias,
                    slope,
                    table_base,
                    &p,
                );
                let weight = probability::<C>(x, row_lse);
                let ds = weight * (dp_s[base + c] - row_delta);
                if weight != C::new(0.0) {
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
                }
                ds_s[base + c] = F::cast_from(ds * cap_slope::<C>(raw, &p));
            }
        }
        sync_cube();

        // dQ += dS K, 16 columns at a time.
        #[unroll]
        for t in 0..comptime!(dh / TILE) {
            tile_product::<F, C>(
                &ds_s,
                w * TILE * TILE,
                TILE,
                false,
                &k_s,
                t * TILE,
                dh,
                false,
                &mut dq_s,
                w * TILE * dh + t * TILE,
                dh,
                TILE,
                true,
                lane,
                emulate,
            );
        }
        j0 += TILE;
    }
    sync_cube();

    if owner {
        if row_exists {
            let row = (b * n_heads + head) * seq_q + i;
            let base = (w * TILE + r) * dh;
            for d in 0..d_head {
                dq[row * d_head + d] = F::cast_from(dq_s[base + d] * scale);
            }
        }
        // Nothing (no gradient wanted), one slope, or the table's `2 reach + 1` entries, at
        // this row's slot of its head's `query tiles x rows` slots.
        let mut width = 0;
        if wanted {
            width = 1;
            if comptime!(bias_slots > 1) {
                width = 2 * p.reach as usize + 1;
            }
        }
        let rows = p.rows as usize;
        let slots = CUBE_COUNT_X as usize * rows;
        let slot = CUBE_POS_X as usize * rows + (w % tiles) * TILE + r;
        let at = ((b * n_heads + head) * slots + slot) * width;
        for s in 0..width {
            dbias[at + s] = dbs[s];
        }
    }
}

/// The backward's geometry: the query cubes' `span` and `tiles` (as the forward's), the key
/// cubes' planes; `None` where one plane of either does not fit the device's shared memory.
#[derive(Clone, Copy, Debug)]
pub(super) struct BackwardPlan {
    pub span: usize,
    pub tiles: usize,
    pub key_planes: usize,
}

pub(super) fn plan(
    sizes: &Sizes,
    group: usize,
    elem_size: usize,
    hardware: &HardwareProperties,
) -> Option<BackwardPlan> {
    let (dh, dvp) = (
        sizes.d_head.next_multiple_of(TILE),
        sizes.d_v.next_multiple_of(TILE),
    );
    let budget = hardware.max_shared_memory_size.min(MAX_SHARED_BYTES);
    let max_planes = (hardware.max_units_per_cube as usize / PLANE).min(MAX_PLANES);
    // Per plane: its keys, values (storage) and their gradients (f32), four 16x16 tiles;
    // plus one block of query rows.
    let keys_bytes = |planes: usize| {
        planes * TILE * ((dh + dvp) * (elem_size + 4) + 12 + TILE * 2 * (4 + elem_size))
            + TILE * ((dh + dvp) * elem_size + 20)
    };
    // Per plane: its rows (storage), dQ (f32), three tiles; plus one block of keys.
    let queries_bytes = |planes: usize| {
        planes * TILE * ((dh + dvp) * elem_size + dh * 4 + TILE * (8 + elem_size))
            + TILE * ((dh + dvp) * elem_size + 12)
    };
    let key_planes = [4, 2, 1]
        .into_iter()
        .filter(|&n| n <= max_planes)
        .find(|&n| keys_bytes(n) <= budget)?;
    // As the forward's: four planes where they fit, whatever the sequence's length.
    let spans = (1..=group.min(max_planes))
        .rev()
        .filter(|span| group % span == 0);
    for span in spans {
        let mut tiles = (max_planes / span).max(1);
        loop {
            if queries_bytes(span * tiles) <= budget {
                return Some(BackwardPlan {
                    span,
                    tiles,
                    key_planes,
                });
            }
            if tiles == 1 {
                break;
            }
            tiles /= 2;
        }
    }
    None
}

/// Upper bounds on the loop iterations one invocation of the key kernel and of the query kernel
/// runs with emulated products (what llvmpipe counts against
/// [`LOOP_LIMIT`](super::tensor_cores::LOOP_LIMIT)): every run-time loop, every query row and
/// key walked. The larger of the two.
pub(super) fn backward_iterations(
    plan: &BackwardPlan,
    sizes: &Sizes,
    group: usize,
    bias_slots: usize,
) -> usize {
    let (dh, dvp) = (
        sizes.d_head.next_multiple_of(TILE),
        sizes.d_v.next_multiple_of(TILE),
    );
    let step = EMULATED_STEP;
    let units = plan.key_planes * PLANE;
    let rows = plan.key_planes * TILE;
    let per_block = 1
        + copy_iterations(TILE, sizes.d_head, units)
        + copy_iterations(TILE, sizes.d_v, units)
        + (dh + dvp) / step
        + (dvp / TILE + dh / TILE) * (TILE / step);
    let keys = copy_iterations(rows, sizes.d_head, units)
        + copy_iterations(rows, sizes.d_v, units)
        + group * (1 + sizes.seq_q.div_ceil(TILE) * per_block)
        + (dh + dvp) / 2;
    let planes = plan.span * plan.tiles;
    let units = planes * PLANE;
    let per_key_block = 1
        + copy_iterations(TILE, sizes.d_head, units)
        + copy_iterations(TILE, sizes.d_v, units)
        + (dh + dvp) / step
        + TILE
        + dh / TILE * (TILE / step);
    let queries = planes
        * (1 + copy_iterations(TILE, sizes.d_head, units)
            + copy_iterations(TILE, sizes.d_v, units))
        + 2 * bias_slots
        + sizes.seq_k.div_ceil(TILE) * per_key_block
        + sizes.d_head;
    keys.max(queries)
}
