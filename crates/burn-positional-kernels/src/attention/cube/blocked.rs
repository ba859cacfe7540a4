//! The register-blocked SIMT forward ([`FlashVariant::Blocked`](super::FlashVariant), issue 73):
//! FlashAttention-2's loop on the FMA units, shaped as an SGEMM is. Each unit owns a small tile
//! of the scores and of the output in registers and reads its operands from shared memory as
//! 4-wide vectors, so a handful of loads feed tens of independent multiply-adds; the shared
//! kernel (`shared.rs`) keeps one query row a unit, so every score is a chain of dependent FMAs
//! with a load of the key each.
//!
//! A cube is [`UNITS`] units over `tile_rows` query rows: 64 where the values are at most 32
//! wide, or 64 under the plain formula; else 32 (a unit's output and the general formula's row
//! state then fit 128 registers). They are `span` heads of a key/value head's group times
//! `rows = tile_rows / span` rows each (`span` > 1 only for calls shorter than a tile: a decoding
//! step's rows of several heads share the stages). With `groups = UNITS / (tile_rows / 4)` (8 or
//! 16), unit `u` is `(ty, tx) = (u / groups, u % groups)`: it owns the tile's rows
//! `4 ty..4 ty + 4` (one head's consecutive queries) and, of each block of [`BLOCK`] keys, the
//! vectors of 4 keys `tx + groups kq` (a 4 x 8 or 4 x 4 tile of the scores); of the output the same
//! rows times the vectors of 4 columns `tx + groups n` (a 4 x `d_v / groups` tile). A row
//! group's `groups` units are consecutive: within one plane.
//!
//! Past 700 lines for one reason to change: the forward's register tiles. The kernel, its plan
//! (which sizes the tiles, stages and row groups the kernel indexes by) and its launch (which
//! passes that plan) change together whenever the tiles do; the row-group reductions are the
//! kernel's own few lines.
//!
//! Per block of keys:
//!
//! 1. `S = Q Kᵀ`, in stages of `chunk` dimensions (16 or 32): the cube copies the stage's query
//!    rows and keys into shared memory transposed (`[dimension][row]`, f32, 4 rows or keys a
//!    vector, rows padded by one vector so the copies meet no bank conflict); each unit then reads,
//!    per dimension, one vector of its 4 rows and one or two of its keys for 16 or 32
//!    multiply-adds. The query rows are read again each block (from the cache: they are the
//!    tile's own), which keeps a cube within 32 KiB of shared memory at every width. The copies
//!    are loops strided by the cube's size as a run-time value, which the compiler keeps as
//!    loops: unrolled, every address of a stage stayed in registers across the walk (NVRTC for
//!    sm_90, f32 at width 64 under the plain formula: 196 registers unrolled, 142 as loops, 127
//!    with the rows' divisions as shifts and the maxima through plane shuffles);
//! 2. the score formula ([`biased_score`], and [`visible`] except on blocks every row sees
//!    whole: the tensor-core forward's classification, [`full_block`]), in log2 units: the
//!    `log2 e` folded in, the weights `exp2(s - m)` (one `MUFU.EX2` on CUDA, [`exp2`]);
//! 3. each row's block maximum across its row group: plane shuffles where the device's planes
//!    hold a row group ([`group_max`]), else shared memory written before the barrier that ends
//!    the stage's reads (no barrier of its own), each plane's share of a group combined by
//!    shuffles first where the device has narrower planes ([`BlockedPlan::plane_width`]); the
//!    rescale, the weights; each unit's share of a row's sum stays its own until the end;
//! 4. `O += P V`: the weights go to shared memory transposed (`[key][row]`, in the space of the
//!    query and key stages, which no one reads any more), the values in stages of `v_keys` keys
//!    (`[key][column]`); per key a unit reads one vector of its 4 weights and `d_v / (4 groups)`
//!    vectors of values for `4 d_v / groups` multiply-adds;
//! 5. at the end each row's sum is added across its row group (in one order: the same bits on
//!    every unit), and `O / l` and `m + ln l` written.
//!
//! Barriers: two a stage of `Q Kᵀ` and two a stage of `V`, the stage of the weights included
//! (6 a block at width 64 with 48 KiB of shared memory). The inner loops run 4 dimensions or
//! keys unrolled a step: small kernels for llvmpipe's LLVM, and few enough run-time iterations
//! that its loop limit (`mma::LOOP_LIMIT`) is far away at the tests' lengths.
//!
//! Odd widths are padded with zeros: `d_head` to the stage (16 or 32), `d_v` to `4 groups`
//! (32 or 64). Split keys as the shared forward (`split.rs`: the same partial outputs and
//! combine).
//!
//! # On NVIDIA GPUs
//!
//! NVRTC's SASS for sm_90 and sm_80 (`tools/cuda/kernels.py`, its SIMT table in `docs/gpu.md`):
//! 87 to 128 registers a unit at widths 32 to 128 (4 cubes of 128 units a multiprocessor), the
//! inner loops 81 to 87 % FFMA with 8 to 10.7 FFMA a shared load (`LDS.128`), 36 or 20
//! `MUFU.EX2` a block and no accurate-exp sequence; the shared kernel beside it: 128 to 255
//! registers, 29 to 61 % FFMA, 1.1 to 8.5 FFMA a load. One specialization spills: keys of 64
//! and values of 32 under the plain formula on sm_80, where ptxas holds 96 registers and spills
//! 52 bytes (sm_90: 95 registers, none); it is outside the check's matrix (`cuda_cases.rs`).

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]

use cubecl::features::Plane;
use cubecl::ir::DeviceProperties;
use cubecl::prelude::*;

use burn::tensor::Shape;
use burn_cubecl::{ops::numeric::empty_device_dtype, tensor::CubeTensor};

use super::fragment::exp2;
use super::mma_warp::full_block;
use super::{
    EXPLICIT, HIDDEN, Inputs, PADDED, SEGMENTED, ScalarValues, Scalars, UNSEEN, biased_score,
    head_bias, inputs_arg, key_place, key_range, mma, query_place, split, storage_types, visible,
};
use crate::attention::Sizes;
use crate::attention::tile::TileArgs;
use crate::attention::variant::{FlashVariant, count_launch, count_plane_launch};

/// Units a cube: four planes of 32.
pub(super) const UNITS: usize = 128;
/// Keys a block.
pub(super) const BLOCK: usize = 64;
/// Vectors of 4 a transposed row of the key stage: 16 (64 keys) and one of padding.
const KEY_STRIDE: usize = BLOCK / 4 + 1;
/// Dimensions or keys of one unrolled step of the inner loops.
const STEP: usize = 4;
/// The most shared memory one cube takes, in bytes: what CUDA gives a kernel without opting in.
const MAX_SHARED_BYTES: usize = 48 * 1024;

type Quad = Vector<f32, Const<4>>;

/// One cube per (query tile and key split, key/value head and run of `span` of its heads,
/// sequence) = `(CUBE_POS_X, CUBE_POS_Y, CUBE_POS_Z)`, [`UNITS`] units; see the module. `chunk`
/// is the dimensions of a stage of `Q Kᵀ` (16 or 32, dividing `d_head` padded to it), `v_keys`
/// the keys of a stage of `V` (dividing [`BLOCK`]). `general`: the call has a bias, a softcap,
/// explicit positions, segments or padding (`mma::general`). `native`: CUDA's approximate
/// `ex2` and `tanh` ([`exp2`]). Inputs are contiguous.
#[cube(launch_unchecked, create_dummy_kernel)]
pub(super) fn flash_blocked_kernel<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
    inputs: &Inputs<F, I, J, P>,
    output: &mut Tensor<F>,
    lse: &mut Tensor<F>,
    p: Scalars,
    group: u32,
    span: u32,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] tile_rows: usize,
    #[comptime] chunk: usize,
    #[comptime] v_keys: usize,
    #[comptime] general: bool,
    #[comptime] native: bool,
    #[comptime] plane_width: usize,
    #[define(F, C, I, J, P)] _dtypes: [ElemType; 5],
) {
    let (q, k, v, bias) = (&inputs.q, &inputs.k, &inputs.v, &inputs.bias);
    let (padding, positions, segments) = (&inputs.padding, &inputs.positions, &inputs.segments);
    let chunks = comptime!(d_head.div_ceil(chunk));
    // Units that share a row group (consecutive units), vectors of 4 a transposed row of the
    // query stage and of the weights (one of padding).
    let groups = comptime!(UNITS / (tile_rows / 4));
    let row_stride = comptime!(tile_rows / 4 + 1);
    // A unit's vectors of keys (`4 (tx + groups kq)..`) and of output columns (`4 (tx + groups
    // n)..`), and the vectors a row of the value stage.
    let key_quads = comptime!(BLOCK / 4 / groups);
    let out_vectors = comptime!(d_v.div_ceil(4 * groups));
    let v_row = comptime!(d_v.next_multiple_of(4 * groups) / 4);
    let v_stages = comptime!(BLOCK / v_keys);
    let k_at = comptime!(chunk * row_stride);

    let unit = UNIT_POS as usize;
    // The copies stride by the cube's size as a run-time value: a loop the compiler keeps (one
    // vector's loads in flight a unit), where a fully unrolled one has every load of a stage in
    // registers at once (137 live at the softmax at width 64, NVRTC for sm_90).
    let units = CUBE_DIM_X as usize;
    let ty = unit / groups;
    let tx = unit % groups;
    let group = group as usize;
    let span = span as usize;
    let runs = group / span;
    let kv_head = CUBE_POS_Y as usize / runs;
    let run = CUBE_POS_Y as usize % runs;
    let b = CUBE_POS_Z as usize;
    let seq_q = p.seq_q as usize;
    let seq_k = p.seq_k as usize;
    let n_heads = p.n_heads as usize;
    // A power of two (`tile_rows / span`): the copies divide by shifts.
    let rows = p.rows as usize;
    let rows_shift = u32::trailing_zeros(p.rows) as usize;
    let splits = p.splits as usize;
    let split = CUBE_POS_X as usize % splits;
    let r0 = (CUBE_POS_X as usize / splits) * rows;
    let first_head = kv_head * group + run * span;
    let kv_base = (b * (n_heads / group) + kv_head) * seq_k;
    // This unit's 4 rows: one head's queries `i0..i0 + 4`.
    let head = first_head + (ty * 4) / rows;
    let i0 = r0 + (ty * 4) % rows;

    // The stages of `Q Kᵀ` (`[chunk][row_stride]` of rows, then `[chunk][KEY_STRIDE]` of keys),
    // later the weights (`[BLOCK][row_stride]`); the value stage; the row groups' maxima and
    // sums; the keys' places.
    let qk_len = comptime!((chunk * (row_stride + KEY_STRIDE)).max(BLOCK * row_stride));
    let mut qk_s = Shared::<[Quad]>::new_aligned_slice(qk_len, 16usize);
    let mut v_s = Shared::<[Quad]>::new_aligned_slice(comptime!(v_keys * v_row), 16usize);
    // Row groups wider than the shuffles reach exchange their planes' partials here.
    let whole_planes = comptime!(plane_width == groups);
    let mut red_s = Shared::<[Quad]>::new_aligned_slice(
        comptime!(if whole_planes { 1 } else { UNITS }),
        16usize,
    );
    let meta = comptime!(if general { BLOCK } else { 1 });
    let mut kp_s = Shared::<[i32]>::new_slice(meta);
    let mut seen_s = Shared::<[u32]>::new_slice(meta);
    let mut segment_s = Shared::<[i32]>::new_slice(meta);

    let mut q_pos = Array::<i32>::new(4usize);
    let mut q_seg = Array::<i32>::new(4usize);
    let mut m = Array::<f32>::new(4usize);
    let mut l = Array::<f32>::new(4usize);
    #[unroll]
    for t in 0..4usize {
        let (position, segment) = query_place(positions, segments, &p, b, i0 + t);
        q_pos[t] = position;
        q_seg[t] = segment;
        m[t] = f32::new(HIDDEN);
        l[t] = 0.0;
    }
    let mut acc = Array::<Quad>::new(comptime!(4 * out_vectors));
    #[unroll]
    for a in 0..comptime!(4 * out_vectors) {
        acc[a] = Quad::new(0.0);
    }
    let (slope, table_base) = head_bias::<F, f32>(bias, &p, head);
    let scale = p.scale;
    let log2e = core::f32::consts::LOG2_E;
    // Only sequential positions without segments or padding have blocks every row sees whole.
    let classify = (p.flags & (EXPLICIT | SEGMENTED | PADDED)) == 0;
    let last_row = min(r0 + rows, seq_q) - 1;

    // This cube's share of the tile's keys: one of `splits` consecutive runs.
    let (tile_lo, tile_hi) = key_range(&p, r0);
    let mut width = 0usize;
    if tile_hi > tile_lo {
        width = tile_hi - tile_lo;
    }
    let share = (width + splits - 1) / splits;
    let k_lo = min(tile_lo + split * share, tile_hi);
    let k_hi = min(k_lo + share, tile_hi);

    let mut j0 = k_lo;
    while j0 < k_hi {
        // 1. S = Q Kᵀ, a stage of `chunk` dimensions at a time.
        let mut s = Array::<Quad>::new(comptime!(4 * key_quads));
        #[unroll]
        for a in 0..comptime!(4 * key_quads) {
            s[a] = Quad::new(0.0);
        }
        #[unroll]
        for ci in 0..chunks {
            let d0 = ci * chunk;
            let mut w = unit;
            while w < comptime!(chunk * (BLOCK / 4)) {
                let d = w % chunk;
                // Rows (and keys) `4 rv..4 rv + 4`: one head's consecutive queries.
                let r4 = (w / chunk) * 4;
                let i = r0 + (r4 & (rows - 1));
                let q_row = (b * n_heads + first_head + (r4 >> rows_shift)) * seq_q + i;
                let in_width = d0 + d < d_head;
                let mut qv = Quad::empty();
                let mut kv = Quad::empty();
                // The query stage has `tile_rows` rows, the key stage 64 keys.
                let query = r4 < tile_rows;
                #[unroll]
                for c in 0..4usize {
                    let mut x = 0.0f32;
                    if query && i + c < seq_q && in_width {
                        x = f32::cast_from(q[(q_row + c) * d_head + d0 + d]);
                    }
                    qv.insert(c, x);
                    let mut y = 0.0f32;
                    if j0 + r4 + c < k_hi && in_width {
                        y = f32::cast_from(k[(kv_base + j0 + r4 + c) * d_head + d0 + d]);
                    }
                    kv.insert(c, y);
                }
                if query {
                    qk_s[d * row_stride + r4 / 4] = qv;
                }
                qk_s[k_at + d * KEY_STRIDE + r4 / 4] = kv;
                w += units;
            }
            if comptime!(general && ci == 0) {
                if unit < BLOCK {
                    let j = j0 + unit;
                    let (position, seen, segment) =
                        key_place(positions, segments, padding, &p, b, j, j < k_hi);
                    kp_s[unit] = position;
                    let mut seen_bit = 0u32;
                    if seen {
                        seen_bit = 1u32;
                    }
                    seen_s[unit] = seen_bit;
                    segment_s[unit] = segment;
                }
            }
            sync_cube();
            let mut d = 0usize;
            while d < chunk {
                #[unroll]
                for dd in 0..STEP {
                    let qv = qk_s[(d + dd) * row_stride + ty];
                    #[unroll]
                    for kq in 0..key_quads {
                        let keys = qk_s[k_at + (d + dd) * KEY_STRIDE + tx + groups * kq];
                        #[unroll]
                        for t in 0..4usize {
                            s[t * key_quads + kq] += Quad::new(qv.extract(t)) * keys;
                        }
                    }
                }
                d += STEP;
            }
            if comptime!(ci + 1 < chunks) {
                sync_cube();
            }
        }

        // 2. The score formula, in log2 units; each row's maximum over this unit's keys.
        let full = classify && j0 + BLOCK <= k_hi && full_block(&p, r0, last_row, j0, BLOCK);
        // Sequential positions (the plain formula): key `j0 + c` against row `i0 + t` is
        // `rel0 + c - t` away, one register for the block and the rest immediates.
        let rel0 = p.key_offset + j0 as i32 - (p.query_offset + i0 as i32);
        let mut part_max = Quad::empty();
        #[unroll]
        for t in 0..4usize {
            let mut row_max = f32::new(HIDDEN);
            #[unroll]
            for kq in 0..key_quads {
                let mut quad = s[t * key_quads + kq];
                #[unroll]
                for e in 0..4usize {
                    let c = 4 * (tx + groups * kq) + e;
                    let mut rel =
                        rel0 + (4 * (tx + groups * kq)) as i32 + comptime!(e as i32 - t as i32);
                    let mut k_seen = j0 + c < k_hi;
                    let mut k_seg = 0i32;
                    if comptime!(general) {
                        rel = kp_s[c] - q_pos[t];
                        k_seen = seen_s[c] == 1;
                        k_seg = segment_s[c];
                    }
                    let mut y = quad.extract(e) * scale;
                    if comptime!(general) {
                        y = biased_score::<F, f32>(y, rel, bias, slope, table_base, &p, native);
                    }
                    y *= log2e;
                    if !full && !visible(rel, k_seen && i0 + t < seq_q, q_seg[t], k_seg, &p) {
                        y = f32::new(HIDDEN);
                    }
                    quad.insert(e, y);
                    row_max = max(row_max, y);
                }
                s[t * key_quads + kq] = quad;
            }
            part_max.insert(t, row_max);
        }
        if comptime!(!whole_planes) {
            // Each plane's share of its row groups first (nothing where the planes are narrower
            // than 2 or the device has no plane operations), then shared memory.
            if comptime!(plane_width > 1) {
                #[unroll]
                for t in 0..4usize {
                    part_max.insert(t, group_max(part_max.extract(t), plane_width));
                }
            }
            red_s[unit] = part_max;
        }
        // The stages' reads end; the maxima are out.
        sync_cube();

        // 3. The rows' maxima, the rescale, the weights (this unit's share of each row's sum).
        #[unroll]
        for t in 0..4usize {
            let mut block_max = f32::new(HIDDEN);
            if comptime!(whole_planes) {
                block_max = group_max(part_max.extract(t), groups);
            } else {
                #[unroll]
                for x in 0..comptime!(groups / plane_width) {
                    block_max = max(block_max, red_s[ty * groups + x * plane_width].extract(t));
                }
            }
            let m_new = max(m[t], block_max);
            let seen = m_new > f32::new(UNSEEN);
            let mut correction = 1.0f32;
            if seen {
                correction = exp2(m[t] - m_new, !native);
                m[t] = m_new;
            }
            l[t] *= correction;
            #[unroll]
            for n in 0..out_vectors {
                acc[t * out_vectors + n] = acc[t * out_vectors + n] * Quad::new(correction);
            }
            #[unroll]
            for kq in 0..key_quads {
                let mut quad = s[t * key_quads + kq];
                #[unroll]
                for e in 0..4usize {
                    let mut weight = 0.0f32;
                    if seen {
                        weight = exp2(quad.extract(e) - m_new, !native);
                    }
                    l[t] += weight;
                    quad.insert(e, weight);
                }
                s[t * key_quads + kq] = quad;
            }
        }

        // 4. The weights transposed into the stages' space (`[key][row]`), then O += P V.
        #[unroll]
        for kq in 0..key_quads {
            #[unroll]
            for e in 0..4usize {
                let c = 4 * (tx + groups * kq) + e;
                let mut weights = Quad::empty();
                #[unroll]
                for t in 0..4usize {
                    weights.insert(t, s[t * key_quads + kq].extract(e));
                }
                qk_s[c * row_stride + ty] = weights;
            }
        }
        #[unroll]
        for vs in 0..v_stages {
            if comptime!(vs > 0) {
                sync_cube();
            }
            // Zeros past `k_hi`: their weights are 0, and 0 times a stale value could be NaN.
            let mut w = unit;
            while w < comptime!(v_keys * v_row) {
                let c = w / v_row;
                let cv = w % v_row;
                let j = j0 + vs * v_keys + c;
                let mut quad = Quad::empty();
                #[unroll]
                for x in 0..4usize {
                    let col = cv * 4 + x;
                    let mut y = 0.0f32;
                    if j < k_hi && col < d_v {
                        y = f32::cast_from(v[(kv_base + j) * d_v + col]);
                    }
                    quad.insert(x, y);
                }
                v_s[w] = quad;
                w += units;
            }
            sync_cube();
            let mut c = 0usize;
            while c < v_keys {
                #[unroll]
                for cc in 0..STEP {
                    let weights = qk_s[(vs * v_keys + c + cc) * row_stride + ty];
                    #[unroll]
                    for n in 0..out_vectors {
                        let values = v_s[(c + cc) * v_row + tx + groups * n];
                        #[unroll]
                        for t in 0..4usize {
                            acc[t * out_vectors + n] += Quad::new(weights.extract(t)) * values;
                        }
                    }
                }
                c += STEP;
            }
        }
        // Everyone done with the weights and values before the next block overwrites them.
        sync_cube();
        j0 += BLOCK;
    }

    // 5. Each row's sum over its row group's units, in one order.
    if comptime!(!whole_planes) {
        let mut part_sum = Quad::empty();
        #[unroll]
        for t in 0..4usize {
            let mut share = l[t];
            if comptime!(plane_width > 1) {
                share = group_sum(share, plane_width);
            }
            part_sum.insert(t, share);
        }
        red_s[unit] = part_sum;
        sync_cube();
    }
    // Split keys: this split's normalized rows and log-sum-exp, at sequence `split * batch + b`
    // of the `[splits * batch, ..]` partial outputs.
    let at = split * CUBE_COUNT_Z as usize + b;
    #[unroll]
    for t in 0..4usize {
        let mut sum = 0.0f32;
        if comptime!(whole_planes) {
            sum = group_sum(l[t], groups);
        } else {
            #[unroll]
            for x in 0..comptime!(groups / plane_width) {
                sum += red_s[ty * groups + x * plane_width].extract(t);
            }
        }
        let i = i0 + t;
        if i < seq_q {
            let row = (at * n_heads + head) * seq_q + i;
            let mut inv = 0.0f32;
            let mut log_sum = p.lowest;
            if sum > 0.0 {
                inv = 1.0 / sum;
                log_sum = m[t] * core::f32::consts::LN_2 + f32::ln(sum);
            }
            #[unroll]
            for n in 0..out_vectors {
                let quad = acc[t * out_vectors + n];
                #[unroll]
                for x in 0..4usize {
                    let col = 4 * (tx + groups * n) + x;
                    if col < d_v {
                        output[row * d_v + col] = F::cast_from(quad.extract(x) * inv);
                    }
                }
            }
            if tx == 0 {
                lse[row] = F::cast_from(log_sum);
            }
        }
    }
}

/// The largest `x` of the `groups` consecutive units (a power of two, aligned to it, within one
/// plane) this unit is one of: a butterfly of plane shuffles, the same on every unit of them.
#[cube]
fn group_max(x: f32, #[comptime] groups: usize) -> f32 {
    let mut m = x;
    #[unroll]
    for k in 0..comptime!(groups.trailing_zeros() as usize) {
        m = max(m, plane_shuffle_xor(m, comptime!(1u32 << k)));
    }
    m
}

/// The sum of `x` over the `groups` consecutive units this unit is one of, as [`group_max`]:
/// each step adds two partial sums, whose order does not change an f32 sum, so every unit of
/// them gets the same bits.
#[cube]
fn group_sum(x: f32, #[comptime] groups: usize) -> f32 {
    let mut s = x;
    #[unroll]
    for k in 0..comptime!(groups.trailing_zeros() as usize) {
        s += plane_shuffle_xor(s, comptime!(1u32 << k));
    }
    s
}

/// A register-blocked cube's geometry: `span` heads of a group times `tile_rows / span` query
/// rows each (`tile_rows` 64, or 32 for values wider than 64: a unit's output tile is 4 rows of
/// `d_v / 8` or `d_v / 16` columns), `chunk` dimensions a stage of `Q Kᵀ` and `v_keys` keys a
/// stage of `V`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BlockedPlan {
    pub span: usize,
    pub tile_rows: usize,
    pub chunk: usize,
    pub v_keys: usize,
    /// How many consecutive units of a row group combine its statistics by plane shuffles
    /// ([`group_max`], [`group_sum`]) before shared memory combines those partials: the row
    /// group whole where the device's planes hold one (NVIDIA's 32, AMD's 32 or 64, Apple's 32:
    /// no shared memory), the device's smallest plane where it is narrower (an Intel GPU's 8,
    /// lavapipe's 8 or 4), 1 where the device has no plane operations (shared memory alone).
    pub plane_width: usize,
}

impl BlockedPlan {
    /// Query rows per head in one cube.
    pub fn rows(&self) -> usize {
        self.tile_rows / self.span
    }
}

/// The shared memory a cube of `tile_rows` takes for heads of `d_v`, in bytes: the stages of
/// `Q Kᵀ` (or of the weights, in the same space), the value stage, the row groups' exchange,
/// the keys' places.
pub(super) fn shared_bytes(tile_rows: usize, chunk: usize, v_keys: usize, d_v: usize) -> usize {
    let vector = 16;
    let groups = UNITS / (tile_rows / 4);
    let row_stride = tile_rows / 4 + 1;
    (chunk * (row_stride + KEY_STRIDE)).max(BLOCK * row_stride) * vector
        + v_keys * d_v.next_multiple_of(4 * groups) * 4
        + UNITS * vector
        + BLOCK * 12
}

/// The forward's geometry, or `None` where a cube of [`UNITS`] units or the smallest stages do
/// not fit the device (then the shared kernel runs). 64 rows a cube where the values are at most
/// 32 wide, or 64 under the plain formula (`general`: see the kernel), else 32 (a unit's output
/// and the general formula's row state in at most 128 registers: NVRTC for sm_90); stages of
/// 32 dimensions where the width pads to a multiple of 32 no wider than to 16 (else 16), values in
/// stages of 64 keys where they fit, down to 16; as many of the group's heads in a cube (a power
/// of two: each unit's 4 rows are one head's) as leave each at least `seq_q` rows, or all.
pub(super) fn plan(
    sizes: &Sizes,
    group: usize,
    properties: &DeviceProperties,
    general: bool,
) -> Option<BlockedPlan> {
    let hardware = &properties.hardware;
    if UNITS > hardware.max_units_per_cube as usize {
        return None;
    }
    let budget = hardware.max_shared_memory_size.min(MAX_SHARED_BYTES);
    let tile_rows = if sizes.d_v <= 32 || (sizes.d_v <= 64 && !general) {
        64
    } else {
        32
    };
    let chunk = if sizes.d_head.next_multiple_of(32) == sizes.d_head.next_multiple_of(16) {
        32
    } else {
        16
    };
    let wanted = sizes.seq_q.clamp(1, tile_rows);
    let span = [16, 8, 4, 2, 1]
        .into_iter()
        .find(|&span| group % span == 0 && tile_rows / span >= wanted.max(4))
        .unwrap_or(1);
    [64, 32, 16]
        .into_iter()
        .find(|&v_keys| shared_bytes(tile_rows, chunk, v_keys, sizes.d_v) <= budget)
        .map(|v_keys| BlockedPlan {
            span,
            tile_rows,
            chunk,
            v_keys,
            plane_width: plane_width(properties, UNITS / (tile_rows / 4)),
        })
}

/// The units of a row group of `groups` (a power of two) whose statistics plane shuffles combine
/// ([`BlockedPlan::plane_width`]): the device's smallest plane, a power of two, up to the group;
/// 1 without plane operations. CubeCL reports none on CPU adapters, whose drivers may still run
/// subgroups (lavapipe's of 8 or 4 units): tests turn them on there
/// (`set_flash_planes_forced`, with the `testing` feature) to run this path on CI.
fn plane_width(properties: &DeviceProperties, groups: usize) -> usize {
    let smallest = properties.hardware.plane_size_min as usize;
    let planes = properties.features.plane.contains(Plane::Ops)
        || crate::attention::variant::planes_forced();
    if !planes || smallest < 2 {
        return 1;
    }
    groups.min(1 << smallest.ilog2())
}

/// The register-blocked forward's launch ([`flash_blocked_kernel`]): the inputs as
/// [`launch`](super::launch) checked them (q, k, v, bias, padding, positions, segments), the outputs it
/// allocated; the keys split as the shared forward splits them (`split.rs`). `false` where its
/// plan does not fit the device (nothing launched: the caller falls back).
pub(super) fn launch(
    inputs: [&CubeTensor; 7],
    output: &CubeTensor,
    lse: &CubeTensor,
    sizes: &Sizes,
    args: &TileArgs,
) -> bool {
    let [q, _, _, _, padding, positions, segments] = inputs;
    let client = q.client.clone();
    let properties = client.properties();
    let dtype = q.dtype;
    let group = sizes.n_heads / sizes.n_kv_heads;
    let mut values = ScalarValues::new(sizes, args, 1, positions, dtype, 0);
    let general = mma::general(values.flags);
    let Some(plan) = plan(sizes, group, &properties, general) else {
        return false;
    };
    count_launch(FlashVariant::Blocked);
    count_plane_launch(plan.plane_width, UNITS / (plan.tile_rows / 4));
    values.rows = plan.rows() as u32;
    let query_tiles = sizes.seq_q.div_ceil(plan.rows());
    let runs = group / plan.span;
    // The grid the splits see: tiles times runs of heads (`key_splits` multiplies in the rest).
    let splits = split::key_splits(
        sizes,
        query_tiles * runs,
        args.key_splits,
        properties.hardware.num_streaming_multiprocessors,
    );
    values.splits = splits as u32;
    let u32_of = |v: usize, what: &str| {
        u32::try_from(v).unwrap_or_else(|_| panic!("tiled_attention: {what} = {v} exceeds u32"))
    };
    let count = CubeCount::Static(
        u32_of(query_tiles * splits, "the query tiles times the key splits"),
        u32_of(
            sizes.n_kv_heads * runs,
            "the key/value heads times their runs of heads",
        ),
        u32_of(sizes.batch, "batch"),
    );
    let (out_buffer, lse_buffer) = if splits > 1 {
        let partial = |d: usize| {
            empty_device_dtype(
                client.clone(),
                q.device.clone(),
                Shape::new([splits * sizes.batch, sizes.n_heads, sizes.seq_q, d]),
                dtype,
            )
        };
        (partial(sizes.d_v), partial(1))
    } else {
        (output.clone(), lse.clone())
    };
    let native = mma::emulation(&properties, burn::tensor::DType::F16) == Some(false);
    // SAFETY: the inputs are made contiguous with the shapes `check_sizes` accepted; q is read
    // at rows `i < seq_q` of heads `kv_head * group + run * span + r / rows < n_heads`, columns
    // below `d_head`; k and v at keys `j < k_hi <= seq_k` of this cube's (sequence, kv head),
    // columns below `d_head` and `d_v`; the output and the log-sum-exp (or the splits' partial
    // ones, `[splits * batch, ..]`) at rows `i < seq_q`, columns below `d_v`; the bias,
    // positions, segments and padding as the other kernels read them; shared memory indices
    // stay below the sizes the kernel declares, which the plan fitted to the device.
    unsafe {
        flash_blocked_kernel::launch_unchecked(
            &client,
            count,
            CubeDim::new_1d(UNITS as u32),
            inputs_arg(inputs),
            out_buffer.clone().into_tensor_arg(),
            lse_buffer.clone().into_tensor_arg(),
            values.launch(),
            u32_of(group, "the group"),
            u32_of(plan.span, "the heads per cube"),
            sizes.d_head,
            sizes.d_v,
            plan.tile_rows,
            plan.chunk,
            plan.v_keys,
            general,
            native,
            plan.plane_width,
            storage_types(dtype, positions, segments, padding),
        )
    }
    if splits > 1 {
        split::combine_splits(
            &out_buffer,
            &lse_buffer,
            output,
            lse,
            splits,
            sizes.d_v,
            values.lowest,
        );
    }
    true
}
