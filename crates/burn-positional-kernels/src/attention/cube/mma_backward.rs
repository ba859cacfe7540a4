//! The tensor-core backward ([`FlashVariant::TensorCores`](super::FlashVariant)):
//! FlashAttention-2's backward on `mma.sync.m16n8k16`, every score, probability and gradient
//! tile in registers as in the forward (`mma.rs`), in two kernels of [`WARPS`] warps:
//!
//! - **dK and dV** (`mma_backward_keys.rs`): warp `w` owns 16 keys of one key/value head,
//!   their K and V as A fragments and their `dK`, `dV` accumulators (f32), all in registers.
//!   The cube walks, for every head of the group, the blocks of query rows that can see its
//!   64 keys (`query_range`): the block's Q and dO staged as the forward stages keys (swizzled,
//!   `cp.async`, double-buffered), with its log-sum-exp and `D = rowsum(dO ∘ O)`. Per block:
//!   `Sᵀ = K Qᵀ` and `dPᵀ = V dOᵀ`, the score formula on each accumulator from its row (key)
//!   and column (query), `Pᵀ = exp2(x log2 e - lse log2 e)`, `dSᵀ = Pᵀ (dPᵀ - D)` times the
//!   softcap's slope; then `dV += Pᵀ dO` and `dK += dSᵀ Q` with `Pᵀ` and `dSᵀ` as A operands
//!   straight from their accumulators ([`p_operand`]). A group's heads sum in registers.
//! - **dQ** ([`flash_mma_dq_kernel`]): the forward's tiles (warp `w` owns `m_tiles x 16` rows of
//!   one head, Q and dO as A fragments, `dQ` in f32); per staged block of keys and values,
//!   `S = Q Kᵀ`, `dP = dO Vᵀ`, `dS` as above, ALiBi's slope gradient `-Σ dS |rel|` per row
//!   (reduced across the quad at the end and written per row, summed on the host), and
//!   `dQ += dS K`.
//!
//! FlashAttention-2 accumulates dQ by atomics from the key blocks' loop (5 products a block);
//! these two kernels recompute S and dP in the dQ kernel instead (7 products), which keeps the
//! backward deterministic (the same gradients run to run, what training reproducibility and the
//! tests' comparisons want) with no f32 atomics in the inner loop and no zeroed dQ buffer.
//! The price is the dQ kernel's own walk over the keys and values (staged again from device
//! memory) and its two extra products; which of the two ways is faster on a GPU is not measured.
//! The distance table's gradient (T5's, one sum per clamped distance; `table_slots > 0`) is
//! summed per warp into a table in shared memory, deterministically and without atomics
//! (`mma_table.rs`): on a block whose distances all clamp to one end of the table, each
//! lane's `dS` go to its sum for that end (a register); on a block that reaches inside, the
//! warp's `dS` tile goes to shared memory and each lane sums one diagonal of it (a distance,
//! with sequential positions), which it alone adds to its table entry. At the end the ends'
//! sums are reduced over the warp in a fixed order and each warp writes its table, summed on
//! the host as the other kernels' partial tables. Explicit positions (no diagonals) take the
//! shared backward.
//!
//! `dK` and `dQ` are written times the score scale. With `emulate`, every warp operation is the
//! fragment layer's emulation (CI, lavapipe), at blocks of 16 ([`plan`]).

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]
// Only the autodiff node calls the backward.
#![cfg_attr(not(feature = "autodiff"), allow(dead_code))]

use cubecl::ir::HardwareProperties;
use cubecl::prelude::*;

use super::fragment::{
    self, LANE_SCRATCH, MMA_SCRATCH, WARP, commit_group, exp2, p_operand, quad_sum, wait_group,
};
use super::mma::{M_TILE, MmaPlan, WARPS};
use super::mma_stage::{clear_padding, stage_pair};
use super::mma_table::{table_block, table_out};
use super::mma_warp::{a_fragment, exchanges, full_block, warp_product, zeros_list};
use super::{
    ALIBI, BIAS_GRAD, CAPPED, EXPLICIT, HIDDEN, Inputs, PADDED, SEGMENTED, Scalars, UNSEEN,
    biased_score, head_bias, key_place, key_range, query_place, visible,
};
use crate::attention::Sizes;

/// Keys a dK/dV cube holds: 16 a warp.
pub(super) const KEYS_PER_CUBE: usize = WARPS * M_TILE;
/// The most shared memory one cube takes, in bytes (as the forward).
const MAX_SHARED_BYTES: usize = 48 * 1024;

/// The softcap's slope `1 - tanh(raw / c)^2` at `raw = scale q . k` (1 without a softcap), its
/// `tanh` the fragment layer's (one `MUFU.TANH` natively, as the forward's score).
#[cube]
fn cap_slope(raw: f32, p: &Scalars, #[comptime] emulate: bool) -> f32 {
    let mut slope = 1.0f32;
    if (p.flags & CAPPED) != 0 {
        let t = fragment::tanh(raw * (1.0f32 / p.softcap), emulate);
        slope = 1.0f32 - t * t;
    }
    slope
}

/// The final score of one accumulator of `S` (`raw` unscaled), as the forward computes it: the
/// scale, with `general` the softcap and the bias, [`HIDDEN`] where `!full` and a mask hides
/// the pair; and the gradient's factor of the softcap.
#[cube]
pub(super) fn score<F: Float>(
    s: f32,
    rel: i32,
    seen: bool,
    q_seg: i32,
    k_seg: i32,
    slope: f32,
    table_base: usize,
    bias: &Tensor<F>,
    p: &Scalars,
    full: bool,
    #[comptime] general: bool,
    #[comptime] emulate: bool,
) -> (f32, f32) {
    let raw = s * p.scale;
    let mut y = raw;
    let mut factor = 1.0f32;
    if comptime!(general) {
        y = biased_score::<F, f32>(raw, rel, bias, slope, table_base, p, !emulate);
        factor = cap_slope(raw, p, emulate);
    }
    if !full && !visible(rel, seen, q_seg, k_seg, p) {
        y = f32::new(HIDDEN);
    }
    (y, factor)
}

/// dQ cubes: the forward's tiles and geometry (`plan`); see the module. `dbias` holds each
/// row's ALiBi slope gradient, `[batch, n_heads, query tiles x rows, 1]` in `C` (written when
/// `BIAS_GRAD` is set, zeros at rows past `seq_q`), or with `table_slots > 0` (a power of two at
/// least the table's `2 reach + 1` entries; sequential positions only) each warp's part of the
/// distance table's gradient, `[batch, n_heads, query tiles x tiles, 2 reach + 1]`.
#[cube(launch_unchecked, create_dummy_kernel)]
pub(super) fn flash_mma_dq_kernel<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
    inputs: &Inputs<F, I, J, P>,
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
    #[comptime] block: usize,
    #[comptime] m_tiles: usize,
    #[comptime] stages: usize,
    #[comptime] general: bool,
    #[comptime] table_slots: usize,
    #[comptime] emulate: bool,
    #[define(F, C, I, J, P)] _dtypes: [ElemType; 5],
) {
    let (q, k, v, bias) = (&inputs.q, &inputs.k, &inputs.v, &inputs.bias);
    let (padding, positions, segments) = (&inputs.padding, &inputs.positions, &inputs.segments);
    let dh = comptime!(d_head.next_multiple_of(16));
    let dvp = comptime!(d_v.next_multiple_of(16));
    let table = comptime!(table_slots > 0);
    let k_slices = comptime!(d_head.next_multiple_of(16) / 16);
    let v_slices = comptime!(d_v.next_multiple_of(16) / 16);
    let n_pairs = comptime!(block / 16);
    let warp_rows = comptime!(m_tiles * M_TILE);
    let row_slots = comptime!(2 * m_tiles);
    let lane = (UNIT_POS % 32u32) as usize;
    let w = (UNIT_POS / 32u32) as usize;
    let g = lane / 4;
    let quad = lane % 4;
    let group = group as usize;
    let span = span as usize;
    let tiles = WARPS / span;
    let runs = group / span;
    let kv_head = CUBE_POS_Y as usize / runs;
    let run = CUBE_POS_Y as usize % runs;
    let b = CUBE_POS_Z as usize;
    let rows = p.rows as usize;
    let r0 = CUBE_POS_X as usize * rows;
    let head = kv_head * group + run * span + w / tiles;
    let i0 = r0 + (w % tiles) * warp_rows;
    let seq_q = p.seq_q as usize;
    let seq_k = p.seq_k as usize;
    let n_heads = p.n_heads as usize;
    let kv_base = (b * (n_heads / group) + kv_head) * seq_k;
    let q_base = (b * n_heads + head) * seq_q;

    let mut k_s = Shared::<[F]>::new_aligned_slice(comptime!(stages * block * dh), 16usize);
    let mut v_s = Shared::<[F]>::new_aligned_slice(comptime!(stages * block * dvp), 16usize);
    let mut scratch =
        Shared::<[f32]>::new_slice(comptime!(if emulate { WARPS * MMA_SCRATCH } else { 1 }));
    let mut lanes =
        Shared::<[u32]>::new_slice(comptime!(if emulate { WARPS * LANE_SCRATCH } else { 1 }));
    // The distance table's gradient: each warp's `dS` tile of a block and its table.
    let tile_size = comptime!(warp_rows * block);
    let mut ds_s =
        Shared::<[f32]>::new_slice(comptime!(if table { WARPS * warp_rows * block } else { 1 }));
    let mut table_s =
        Shared::<[f32]>::new_slice(comptime!(if table { WARPS * table_slots } else { 1 }));
    let mut ends = Array::<f32>::new(2usize);
    ends[0] = 0.0;
    ends[1] = 0.0;
    if comptime!(table) {
        #[unroll]
        for t in 0..comptime!(table_slots.div_ceil(WARP)) {
            let slot = t * WARP + lane;
            if slot < table_slots {
                table_s[w * table_slots + slot] = 0.0;
            }
        }
    }

    // The warp's rows of Q and dO as A fragments; per row slot `2 mt + h` (row `g + 8 h` of
    // m-tile `mt`) its place, log-sum-exp (times log2 e), `D` and slope gradient.
    let mut qa = Sequence::<Array<Vector<F, Const<2>>>>::new();
    let mut oa = Sequence::<Array<Vector<F, Const<2>>>>::new();
    #[unroll]
    for mt in 0..m_tiles {
        #[unroll]
        for kk in 0..k_slices {
            qa.push(a_fragment::<F>(
                q,
                q_base,
                i0 + mt * M_TILE,
                seq_q,
                kk * 16,
                d_head,
            ));
        }
        #[unroll]
        for kk in 0..v_slices {
            oa.push(a_fragment::<F>(
                grad,
                q_base,
                i0 + mt * M_TILE,
                seq_q,
                kk * 16,
                d_v,
            ));
        }
    }
    let log2e = core::f32::consts::LOG2_E;
    let mut q_pos = Array::<i32>::new(row_slots);
    let mut q_seg = Array::<i32>::new(row_slots);
    let mut shift = Array::<f32>::new(row_slots);
    let mut d = Array::<f32>::new(row_slots);
    let mut d_slope = Array::<f32>::new(row_slots);
    #[unroll]
    for r in 0..row_slots {
        let row = i0 + (r / 2) * M_TILE + g + 8 * (r % 2);
        let (position, segment) = query_place(positions, segments, &p, b, row);
        q_pos[r] = position;
        q_seg[r] = segment;
        shift[r] = 0.0;
        d[r] = 0.0;
        if row < seq_q {
            shift[r] = f32::cast_from(lse[q_base + row]) * log2e;
            d[r] = f32::cast_from(delta[q_base + row]);
        }
        d_slope[r] = 0.0;
    }
    let mut acc_dq = zeros_list(comptime!(m_tiles * k_slices));
    let (slope, table_base) = head_bias::<F, f32>(bias, &p, head);
    let alibi_grad = (p.flags & (BIAS_GRAD | ALIBI)) == (BIAS_GRAD | ALIBI);
    let classify = (p.flags & (EXPLICIT | SEGMENTED | PADDED)) == 0;
    let s_calls = comptime!(exchanges(k_slices));

    clear_padding::<F>(&mut k_s, comptime!(stages * block), d_head, dh);
    clear_padding::<F>(&mut v_s, comptime!(stages * block), d_v, dvp);

    let (k_lo, k_hi) = key_range(&p, r0);
    let mut j0 = k_lo;
    let mut stage = 0usize;
    if j0 < k_hi {
        let valid = min(block, seq_k - j0);
        stage_pair::<F>(
            k,
            &mut k_s,
            v,
            &mut v_s,
            0,
            kv_base + j0,
            valid,
            block,
            d_head,
            d_v,
            emulate,
        );
    }
    commit_group(emulate);
    while j0 < k_hi {
        let next = j0 + block;
        if comptime!(stages == 2) {
            if next < k_hi {
                let valid = min(block, seq_k - next);
                stage_pair::<F>(
                    k,
                    &mut k_s,
                    v,
                    &mut v_s,
                    1 - stage,
                    kv_base + next,
                    valid,
                    block,
                    d_head,
                    d_v,
                    emulate,
                );
            }
            commit_group(emulate);
            wait_group(1u32, emulate);
        } else {
            wait_group(0u32, emulate);
        }
        let kb = stage * block * dh;
        let vb = stage * block * dvp;

        // S = Q Kᵀ, dP = dO Vᵀ.
        let mut acc_s = zeros_list(comptime!(m_tiles * n_pairs));
        let mut acc_dp = zeros_list(comptime!(m_tiles * n_pairs));
        warp_product::<F>(
            &qa,
            &k_s,
            kb,
            &mut acc_s,
            &mut scratch,
            m_tiles,
            k_slices,
            n_pairs,
            dh,
            true,
            0usize,
            emulate,
        );
        warp_product::<F>(
            &oa,
            &v_s,
            vb,
            &mut acc_dp,
            &mut scratch,
            m_tiles,
            v_slices,
            n_pairs,
            dvp,
            true,
            s_calls,
            emulate,
        );

        // dS in S's place: pair `h` of n8-tile `n` holds row `g + 8 h`, keys
        // `j0 + 8 n + 2 quad + {0, 1}`.
        let full = classify && full_block(&p, r0, min(r0 + rows, seq_q) - 1, j0, block);
        // The distances this block's pairs span, over the cube's rows (the same on every unit):
        // whether any lies inside the table, or all clamp to its first (`low`) or last entry.
        let first_rel = p.key_offset + j0 as i32 - (p.query_offset + (r0 + rows - 1) as i32);
        let last_rel = p.key_offset + (j0 + block - 1) as i32 - (p.query_offset + r0 as i32);
        let inside = last_rel > -p.reach && first_rel < p.reach;
        let low = last_rel <= -p.reach;
        let mut edge = 0.0f32;
        #[unroll]
        for n in 0..comptime!(block / 8) {
            #[unroll]
            for e in 0..2usize {
                let j = j0 + n * 8 + 2 * quad + e;
                let mut k_pos = p.key_offset + j as i32;
                let mut k_seen = j < k_hi;
                let mut k_seg = 0i32;
                if comptime!(general) {
                    let (position, seen, segment) =
                        key_place(positions, segments, padding, &p, b, j, j < k_hi);
                    k_pos = position;
                    k_seen = seen;
                    k_seg = segment;
                }
                #[unroll]
                for r in 0..row_slots {
                    let at = (r / 2) * n_pairs + n / 2;
                    let slot = 2 * (n % 2) + r % 2;
                    let row = i0 + (r / 2) * M_TILE + g + 8 * (r % 2);
                    let mut sp = acc_s.index(at)[slot];
                    let dp = acc_dp.index(at)[slot];
                    let rel = k_pos - q_pos[r];
                    let (y, factor) = score::<F>(
                        sp.extract(e),
                        rel,
                        k_seen && row < seq_q,
                        q_seg[r],
                        k_seg,
                        slope,
                        table_base,
                        bias,
                        &p,
                        full,
                        general,
                        emulate,
                    );
                    let mut weight = 0.0f32;
                    if y > f32::new(UNSEEN) {
                        weight = exp2(y * log2e - shift[r], emulate);
                    }
                    let ds = weight * (dp.extract(e) - d[r]);
                    if alibi_grad {
                        let mut distance = rel;
                        if rel < 0 {
                            distance = -rel;
                        }
                        d_slope[r] -= ds * f32::cast_from(distance);
                    }
                    if comptime!(table) {
                        if inside {
                            let at =
                                ((r / 2) * M_TILE + g + 8 * (r % 2)) * block + n * 8 + 2 * quad + e;
                            ds_s[w * tile_size + at] = ds;
                        } else {
                            edge += ds;
                        }
                    }
                    sp.insert(e, ds * factor);
                    acc_s.index_mut(at)[slot] = sp;
                }
            }
        }

        if comptime!(table) {
            table_block(
                &ds_s,
                &mut table_s,
                &mut ends,
                edge,
                inside,
                low,
                &p,
                j0 as i32 - i0 as i32,
                w,
                lane,
                warp_rows,
                block,
                table_slots,
                emulate,
            );
        }

        // dQ += dS K: the stage's rows (keys) are the inner dimension.
        let mut dsa = Sequence::<Array<Vector<F, Const<2>>>>::new();
        #[unroll]
        for mt in 0..m_tiles {
            #[unroll]
            for s in 0..n_pairs {
                dsa.push(p_operand::<F>(acc_s.index(mt * n_pairs + s)));
            }
        }
        warp_product::<F>(
            &dsa,
            &k_s,
            kb,
            &mut acc_dq,
            &mut scratch,
            m_tiles,
            n_pairs,
            k_slices,
            dh,
            false,
            comptime!(s_calls + exchanges(v_slices)),
            emulate,
        );
        // Every warp done with the stage before a copy overwrites it.
        sync_cube();
        if comptime!(stages == 1) {
            if next < k_hi {
                let valid = min(block, seq_k - next);
                stage_pair::<F>(
                    k,
                    &mut k_s,
                    v,
                    &mut v_s,
                    0,
                    kv_base + next,
                    valid,
                    block,
                    d_head,
                    d_v,
                    emulate,
                );
            }
            commit_group(emulate);
        } else {
            stage = 1 - stage;
        }
        j0 = next;
    }

    #[unroll]
    for r in 0..row_slots {
        let mt = r / 2;
        let h = r % 2;
        let row = i0 + mt * M_TILE + g + 8 * h;
        if row < seq_q {
            #[unroll]
            for c in 0..comptime!(2 * k_slices) {
                let pair = acc_dq.index(mt * k_slices + c / 2)[2 * (c % 2) + h];
                #[unroll]
                for e in 0..2usize {
                    let col = c * 8 + 2 * quad + e;
                    if col < d_head {
                        dq[(q_base + row) * d_head + col] = F::cast_from(pair.extract(e) * p.scale);
                    }
                }
            }
        }
    }
    if comptime!(table) {
        table_out::<C>(
            dbias,
            &mut ds_s,
            &mut table_s,
            &ends,
            &p,
            (b * n_heads + head) * CUBE_COUNT_X as usize * tiles
                + CUBE_POS_X as usize * tiles
                + w % tiles,
            w,
            lane,
            tile_size,
            table_slots,
        );
    }
    // ALiBi's slope gradient: each row's sum across its quad, at the row's slot of its head's
    // `query tiles x rows` (zeros for rows past `seq_q`, whose scores are not masked on full
    // blocks).
    if comptime!(general && !table) {
        #[unroll]
        for r in 0..row_slots {
            d_slope[r] = quad_sum(d_slope[r], &mut lanes, r % 2, emulate);
        }
        if alibi_grad && quad == 0 {
            #[unroll]
            for r in 0..row_slots {
                let offset = (w % tiles) * warp_rows + (r / 2) * M_TILE + g + 8 * (r % 2);
                let mut x = 0.0f32;
                if r0 + offset < seq_q {
                    x = d_slope[r];
                }
                let slots = CUBE_COUNT_X as usize * rows;
                dbias[(b * n_heads + head) * slots + r0 + offset] = C::cast_from(x);
            }
        }
    }
}

/// The backward's geometry: the dQ kernel's (the forward's [`MmaPlan`]), and the query rows a
/// step of the dK/dV kernel and its stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MmaBackwardPlan {
    pub queries: MmaPlan,
    pub block: usize,
    pub stages: usize,
}

/// The backward's plan, or `None` where a cube of [`WARPS`] warps or a stage of 16 rows does not
/// fit the device (then the shared backward runs). The dQ kernel's cubes are the forward's
/// tiles at one m-tile a warp (its Q, dO and dQ fragments take the registers the forward's
/// output took) except at widths up to 32; blocks of 64 keys up to width 64, 32 beyond; the
/// dK/dV kernel's steps of 64 rows up to width 64, 16 beyond. Emulated, both take blocks of 16:
/// the exchanges of `dS K` and `Pᵀ dO` count the block's slices, and each is a barrier, what
/// bounds llvmpipe's compile time (`mma_warp::warp_product`). With a distance table's gradient
/// (`table_slots > 0`) the dQ cube's shared memory also holds each warp's `dS` tile and table
/// (f32), which takes the next smaller block where the stages would not leave room.
pub(super) fn plan(
    sizes: &Sizes,
    group: usize,
    elem_size: usize,
    hardware: &HardwareProperties,
    emulate: bool,
    table_slots: usize,
) -> Option<MmaBackwardPlan> {
    let (dh, dvp) = (
        sizes.d_head.next_multiple_of(16),
        sizes.d_v.next_multiple_of(16),
    );
    if (WARPS * WARP) > hardware.max_units_per_cube as usize {
        return None;
    }
    let budget = hardware.max_shared_memory_size.min(MAX_SHARED_BYTES);
    let exchange = if emulate {
        WARPS * (MMA_SCRATCH + LANE_SCRATCH) * 4
    } else {
        8
    };
    let span = (1..=group.min(WARPS))
        .rev()
        .find(|span| group % span == 0 && WARPS % span == 0)
        .unwrap_or(1);
    let m_tiles = if dh.max(dvp) <= 32 { 2 } else { 1 };
    let blocks: &[usize] = if emulate {
        &[16]
    } else if dh.max(dvp) <= 64 {
        &[64, 32, 16]
    } else {
        &[32, 16]
    };
    // Beyond width 64 the dK/dV kernel's K, V, dK and dV fragments take 192 registers a lane:
    // steps of 32 rows spilled 76-108 bytes (NVRTC, sm_80 and sm_90), 16 leave room.
    let key_blocks: &[usize] = if emulate || dh.max(dvp) <= 64 {
        blocks
    } else {
        &[16]
    };
    let fits = |rows: usize, extra: usize| rows * ((dh + dvp) * elem_size + extra) + exchange;
    let choices =
        |blocks: &'static [usize]| blocks.iter().flat_map(|&block| [(block, 2), (block, 1)]);
    let table = |block: usize| {
        if table_slots == 0 {
            0
        } else {
            WARPS * (m_tiles * M_TILE * block + table_slots) * 4
        }
    };
    let (block, stages) = choices(blocks)
        .find(|&(block, stages)| fits(stages * block, 0) + table(block) <= budget)?;
    let queries = MmaPlan {
        span,
        tiles: WARPS / span,
        m_tiles,
        block,
        stages,
    };
    // The dK/dV kernel's stages hold each row's log-sum-exp and `D` (f32) too.
    let (block, stages) =
        choices(key_blocks).find(|&(block, stages)| fits(stages * block, 8) <= budget)?;
    Some(MmaBackwardPlan {
        queries,
        block,
        stages,
    })
}

impl MmaBackwardPlan {
    /// The run-time loop iterations of one invocation at most (llvmpipe's loop limit,
    /// `LOOP_LIMIT`): the dQ kernel's blocks of keys, the dK/dV kernel's steps over the group's
    /// heads; every other loop unrolled.
    pub fn iterations(&self, sizes: &Sizes, group: usize) -> usize {
        let dq = sizes.seq_k.div_ceil(self.queries.block) + 1;
        let dkv = group * sizes.seq_q.div_ceil(self.block) + 1;
        dq.max(dkv)
    }
}
