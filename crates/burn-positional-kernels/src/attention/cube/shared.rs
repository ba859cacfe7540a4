//! The shared-memory kernel, shaped for a discrete GPU: global memory is far, a plane (warp) of
//! 32 units moves in lockstep, and what wins is reading each byte once per cube.
//!
//! A cube is whole planes (units a multiple of 32, about 128) over one tile: `rows` query rows
//! of each of the `group` heads that share one key/value head of one sequence, one or two rows
//! per unit (two for heads with `d_head + d_v <= 64`), kept in registers with their running
//! maximum, sum and output. The keys the tile can see are walked in stages of `stage` keys
//! (64 where they fit):
//!
//! 1. all the cube's units copy the stage's keys `[stage, d_head]` and values `[stage, d_v]`
//!    into shared memory, unit `u` taking elements `u, u + units, ...` of the stage's one
//!    contiguous span of device memory (coalesced: a plane reads 32 consecutive elements), and
//!    each key's position, visibility (range, padding) and segment into three small arrays;
//! 2. `sync_cube()`; each unit scores its rows against the stage in blocks of 8 keys read from
//!    shared memory (every unit reads the same key element at once: a broadcast, no bank
//!    conflict), with the same per-score formula and online softmax as the register kernel
//!    (`mod.rs`), then accumulates `p v` from the staged values;
//! 3. `sync_cube()` before the next stage overwrites them.
//!
//! Units past the tile's rows (a short tail, a decoding step) still load and meet the
//! barriers; they write nothing. Barriers sit in uniform control flow: the stage loop's bounds
//! are the tile's.
//!
//! Shared memory holds the storage dtype (f16/bf16 stay 2 bytes): twice the keys per stage in
//! the same bytes, and the copy is a plain move; each read widens to f32, where every product
//! and sum is done. A stage of keys and values needs `stage x (d_head + d_v) x bytes` plus 12
//! bytes a key; the plan takes the largest power of two from 64 down to 8 within the device's
//! shared memory (at most 32 KiB, leaving room for a second cube per multiprocessor), and
//! falls back to the register kernel where even 8 keys do not fit.
//!
//! No tensor cores: the block products are the units' f32 multiply-adds. The kernels that put
//! them on `mma.sync` (f16 and bf16) are `mma.rs` and `mma_backward.rs`: each warp's rows (or
//! keys) and their scores in register fragments.
//!
//! Wide heads cost registers: a unit holds `per_unit x (d_head + d_v)` f32 values, 256 at
//! `d_head = d_v = 128`, more than an NVIDIA unit keeps without spilling.
//!
//! # On NVIDIA GPUs
//!
//! Built for cubes of 128 units (4 planes) with at most 32 KiB of shared memory. NVRTC's figures
//! for an H100/H200 (`sm_90`; `cuda_kernels` example, `tools/cuda/kernels.py`, `docs/gpu.md`):
//! f16 at width 64, 241 registers a unit, 17 KiB a cube, so 2 cubes per multiprocessor, 12.5 %
//! theoretical occupancy, limited by registers; width 128 takes all 255 and spills (336 bytes
//! stored a unit). That is the design's price, not a tuning slip: a unit keeps its row's
//! scaled query and output accumulator (`d_head + d_v` values) in registers across the whole key
//! walk, and 50 % occupancy would need 64 registers a unit. The tensor-core kernels spread both
//! over a warp's `mma.sync` fragments.

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]

use cubecl::ir::HardwareProperties;
use cubecl::prelude::*;

use super::{
    Inputs, KEY_BLOCK, Plan, Scalars, fold_block, head_bias, key_place, key_range, score_rows,
    start_rows, write_rows,
};
use crate::attention::Sizes;

/// Units per plane the cube is a multiple of (NVIDIA's warp; half an AMD wave64).
const PLANE: usize = 32;
/// Units a cube aims for: four planes.
const CUBE_UNITS: usize = 128;
/// The most keys staged at once.
const MAX_STAGE: usize = 64;
/// The most shared memory one cube takes, in bytes.
const MAX_SHARED_BYTES: usize = 32 * 1024;

/// One cube per (query tile, key/value head, sequence) = `(CUBE_POS_X, CUBE_POS_Y,
/// CUBE_POS_Z)`; unit `u < group * rows / per_unit` holds `per_unit` consecutive rows of head
/// `kv_head * group + u / (rows / per_unit)`, the others only load. `C` is the compute type
/// (f32). Inputs are contiguous.
#[cube(launch_unchecked, create_dummy_kernel)]
pub(super) fn flash_shared_kernel<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
    inputs: &Inputs<F, I, J, P>,
    output: &mut Tensor<F>,
    lse: &mut Tensor<F>,
    p: Scalars,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] per_unit: usize,
    #[comptime] stage: usize,
    #[define(F, C, I, J, P)] _dtypes: [ElemType; 5],
) {
    let (q, k, v, bias) = (&inputs.q, &inputs.k, &inputs.v, &inputs.bias);
    let (padding, positions, segments) = (&inputs.padding, &inputs.positions, &inputs.segments);
    let seq_q = p.seq_q as usize;
    let group = p.group as usize;
    let seq_k = p.seq_k as usize;
    let rows = p.rows as usize;
    let kv_head = CUBE_POS_Y as usize;
    let b = CUBE_POS_Z as usize;
    let unit = UNIT_POS_X as usize;
    let units = CUBE_DIM_X as usize;
    let units_per_head = rows / per_unit;
    let active = unit < group * units_per_head;
    // With the keys split across cubes, `CUBE_POS_X` is `tile * splits + split`.
    let splits = p.splits as usize;
    let split = CUBE_POS_X as usize % splits;
    let r0 = (CUBE_POS_X as usize / splits) * rows;
    // An idle unit stands in as the group's last head, past every row: it reads no query.
    let mut head = kv_head * group + group - 1;
    let mut i0 = seq_q;
    if active {
        head = kv_head * group + unit / units_per_head;
        i0 = r0 + (unit % units_per_head) * per_unit;
    }

    let mut rows = start_rows::<F, C, I, J>(
        q, positions, segments, &p, b, head, i0, per_unit, d_head, d_v,
    );
    let (slope, table_base) = head_bias::<F, C>(bias, &p, head);
    let (tile_lo, tile_hi) = key_range(&p, r0);
    // This cube's share of the tile's keys: one of `splits` consecutive runs.
    let mut span = 0usize;
    if tile_hi > tile_lo {
        span = tile_hi - tile_lo;
    }
    let chunk = (span + splits - 1) / splits;
    let k_lo = min(tile_lo + split * chunk, tile_hi);
    let k_hi = min(k_lo + chunk, tile_hi);
    let kv_base = (b * CUBE_COUNT_Y as usize + kv_head) * seq_k;

    let mut k_s = Shared::<[F]>::new_slice(comptime!(stage * d_head));
    let mut v_s = Shared::<[F]>::new_slice(comptime!(stage * d_v));
    let mut kp_s = Shared::<[i32]>::new_slice(stage);
    let mut seen_s = Shared::<[u32]>::new_slice(stage);
    let mut segment_s = Shared::<[i32]>::new_slice(stage);
    let mut s = Array::<C>::new(per_unit * KEY_BLOCK);
    let mut j0 = k_lo;
    while j0 < k_hi {
        // 1. The stage's keys and values, zeros past `k_hi` (their weights are 0, and 0 times
        // a stale value could be NaN).
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
            let (kp, seen, segment) = key_place(positions, segments, padding, &p, b, j0 + c, c < n);
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

        // 2. The unit's rows against the stage, a block of 8 keys at a time.
        if active {
            let mut c0 = 0;
            while c0 < n {
                #[unroll]
                for c in 0..KEY_BLOCK {
                    let at = c0 + c;
                    #[unroll]
                    for t in 0..per_unit {
                        s[t * KEY_BLOCK + c] = C::new(0.0);
                    }
                    #[unroll]
                    for d in 0..d_head {
                        let kd = C::cast_from(k_s[at * d_head + d]);
                        #[unroll]
                        for t in 0..per_unit {
                            s[t * KEY_BLOCK + c] += rows.q[t * d_head + d] * kd;
                        }
                    }
                    score_rows::<F, C>(
                        &mut s,
                        &rows,
                        c,
                        kp_s[at],
                        seen_s[at] == 1,
                        segment_s[at],
                        i0,
                        bias,
                        slope,
                        table_base,
                        &p,
                        per_unit,
                        KEY_BLOCK,
                    );
                }
                fold_block(&mut s, &mut rows, per_unit, KEY_BLOCK, d_v);
                #[unroll]
                for c in 0..KEY_BLOCK {
                    #[unroll]
                    for d in 0..d_v {
                        let vd = C::cast_from(v_s[(c0 + c) * d_v + d]);
                        #[unroll]
                        for t in 0..per_unit {
                            rows.acc[t * d_v + d] += s[t * KEY_BLOCK + c] * vd;
                        }
                    }
                }
                c0 += KEY_BLOCK;
            }
        }
        // 3. Everyone done with the stage before the next one overwrites it.
        sync_cube();
        j0 += stage;
    }

    if active {
        // Split keys: this split's normalized rows and log-sum-exp, at sequence
        // `split * batch + b` of the `[splits * batch, ..]` partial outputs.
        let at = split * CUBE_COUNT_Z as usize + b;
        write_rows(output, lse, &rows, &p, at, head, i0, per_unit, d_v);
    }
}

/// The cube's geometry, or `None` where the device cannot hold it (too little shared memory
/// for 8 keys, or more units than a cube may have): the caller then runs the register kernel.
pub(super) fn plan(
    sizes: &Sizes,
    group: usize,
    elem_size: usize,
    hardware: &HardwareProperties,
) -> Option<Plan> {
    let per_unit = if sizes.d_head + sizes.d_v <= 64 { 2 } else { 1 }.min(sizes.seq_q);
    // Whatever the lengths: the cube's size is part of the compiled kernel (issue 70: sized by
    // `seq_q`, the kernels' test compiled one per length class, each seconds of LLVM on
    // lavapipe). A short call's idle units still load the stages.
    let units_per_head = (CUBE_UNITS / group).max(1);
    let units = (group * units_per_head).next_multiple_of(PLANE);
    if units > hardware.max_units_per_cube as usize {
        return None;
    }
    // Keys and values in the storage dtype, plus a position, a visibility and a segment.
    let per_key = (sizes.d_head + sizes.d_v) * elem_size + 12;
    let budget = hardware.max_shared_memory_size.min(MAX_SHARED_BYTES);
    let stage = [MAX_STAGE, 32, 16, KEY_BLOCK]
        .into_iter()
        .find(|stage| stage * per_key <= budget)?;
    Some(Plan {
        per_unit,
        rows: units_per_head * per_unit,
        units,
        stage: Some(stage),
    })
}
