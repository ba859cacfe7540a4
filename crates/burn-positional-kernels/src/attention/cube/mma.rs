//! The tensor-core forward ([`FlashVariant::TensorCores`](super::FlashVariant)): FlashAttention-2
//! on `mma.sync.m16n8k16` (f16 or bf16 in, f32 accumulators), with S, P, O and the row
//! statistics in registers (issue 72). Every warp-level operation is the fragment layer's
//! (`fragment/`): native on CUDA, emulated over virtual warps of 32 units everywhere else
//! (`emulate`), so CI runs this index logic on lavapipe.
//!
//! A cube is [`WARPS`] warps over one tile: `tiles x m_tiles x 16` query rows of each of `span`
//! heads of a key/value head's group (`span x tiles = WARPS`); warp `w` owns `m_tiles x 16`
//! rows of one head, as FlashAttention-2 tiles its warps along the queries
//! (`kernel_traits.h:32-33`: 32 rows a warp at widths up to 64, here 16 at wider heads, where
//! the output's accumulators take the registers):
//!
//! 1. once: each warp's query rows straight into its A fragments (zeros past `seq_q` and
//!    `d_head`), the key stage's padding columns cleared;
//! 2. per block of `block` keys: the cube's units copy its keys `[block, dh]` and values
//!    `[block, dvp]` into a stage, 16 bytes a copy ([`copy_16_bytes`](super::fragment::copy_16_bytes): `cp.async`), rows
//!    swizzled by [`chunk_at`](super::fragment::chunk_at); with two stages the next block's copies are in flight while
//!    this one is computed;
//! 3. each warp: `S = Q Kᵀ`, one `ldmatrix` x4 of K per 16 keys and 16 dimensions feeding two
//!    products; the score formula on every accumulator, from its row and column
//!    ([`biased_score`] on blocks every row sees whole, [`final_score`] with the masks on the
//!    others: the block classification of FlexAttention's full and partial blocks);
//! 4. the online softmax in registers: each lane's two rows per m-tile reduced across its quad
//!    ([`quad_max`], [`quad_sum`]), the output rescaled, the weights `exp2(s log2 e - m log2 e)`
//!    ([`exp2`]: one `MUFU.EX2`);
//! 5. `O += P V`: the accumulators of S's n8-tiles `2s`, `2s + 1` are P's A operand for keys
//!    `16s..16s + 16` ([`p_operand`]), V's B fragments one `ldmatrix.trans` x4 per 16 keys and
//!    16 columns;
//! 6. at the end, each row's sum reduced across its quad, `O / l` and `m + ln l` written.
//!
//! Two barriers a block: the wait for the stage ([`wait_group`]) and the end of its reads.

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]

use cubecl::ir::HardwareProperties;
use cubecl::prelude::*;

use super::fragment::{
    LANE_SCRATCH, MMA_SCRATCH, WARP, commit_group, exp2, p_operand, quad_max, quad_sum, wait_group,
};
use super::mma_stage::{clear_padding, stage_pair};
use super::mma_warp::{a_fragment, exchanges, full_block, warp_product, zeros_list};
use super::{
    EXPLICIT, HIDDEN, Inputs, PADDED, SEGMENTED, Scalars, UNSEEN, biased_score, head_bias,
    key_place, key_range, query_place, visible,
};
use crate::attention::Sizes;
use crate::attention::variant::mma_ready;
use burn::tensor::DType;

/// Warps a cube: FlashAttention-2's 4 (`flash_fwd_launch_template.h:194-262`).
pub(super) const WARPS: usize = 4;
/// Rows of one m-tile (the `m16` of the product).
pub(super) const M_TILE: usize = 16;
/// The most shared memory one cube takes, in bytes: what CUDA gives a kernel without opting in.
const MAX_SHARED_BYTES: usize = 48 * 1024;

/// One cube per (query tile, key/value head and run of `span` of its heads, sequence) =
/// `(CUBE_POS_X, CUBE_POS_Y, CUBE_POS_Z)`, [`WARPS`] warps of 32 units; see the module. `C` is
/// the compute type (f32). Inputs are contiguous; `block` is a multiple of 16. `general`: the
/// call has a bias, a softcap, explicit positions, segments or padding ([`general`]); without
/// them the scores are `scale q . k` under the causal mask and the window alone, which is most
/// of a model's calls and a loop a third the size (the kernel's SASS, `docs/gpu.md`).
#[cube(launch_unchecked, create_dummy_kernel)]
pub(super) fn flash_mma_kernel<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
    inputs: &Inputs<F, I, J, P>,
    output: &mut Tensor<F>,
    lse: &mut Tensor<F>,
    p: Scalars,
    group: u32,
    span: u32,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] block: usize,
    #[comptime] m_tiles: usize,
    #[comptime] stages: usize,
    #[comptime] general: bool,
    #[comptime] emulate: bool,
    #[define(F, C, I, J, P)] _dtypes: [ElemType; 5],
) {
    let (q, k, v, bias) = (&inputs.q, &inputs.k, &inputs.v, &inputs.bias);
    let (padding, positions, segments) = (&inputs.padding, &inputs.positions, &inputs.segments);
    let dh = comptime!(d_head.next_multiple_of(16));
    let dvp = comptime!(d_v.next_multiple_of(16));
    let k_slices = comptime!(d_head.next_multiple_of(16) / 16);
    let n_tiles = comptime!(block / 8);
    let o_tiles = comptime!(d_v.next_multiple_of(16) / 8);
    let warp_rows = comptime!(m_tiles * M_TILE);
    let row_slots = comptime!(2 * m_tiles);
    // The emulated exchanges of S a block (the emulation's slots count on from them in `P V`).
    let s_calls = comptime!(exchanges(d_head.next_multiple_of(16) / 16));

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
    let r0 = CUBE_POS_X as usize * p.rows as usize;
    let head = kv_head * group + run * span + w / tiles;
    let i0 = r0 + (w % tiles) * warp_rows;
    let seq_q = p.seq_q as usize;
    let seq_k = p.seq_k as usize;
    let n_heads = p.n_heads as usize;
    let kv_base = (b * (n_heads / group) + kv_head) * seq_k;
    let q_base = (b * n_heads + head) * seq_q;

    let mut k_s = Shared::<[F]>::new_aligned_slice(comptime!(stages * block * dh), 16usize);
    let mut v_s = Shared::<[F]>::new_aligned_slice(comptime!(stages * block * dvp), 16usize);
    // The emulated warp operations' exchange space (a word each where they are native).
    let mut scratch =
        Shared::<[f32]>::new_slice(comptime!(if emulate { WARPS * MMA_SCRATCH } else { 1 }));
    let mut lanes =
        Shared::<[u32]>::new_slice(comptime!(if emulate { WARPS * LANE_SCRATCH } else { 1 }));

    // 1. The warp's query rows as A fragments, one per m-tile and 16 dimensions.
    let mut qa = Sequence::<Array<Vector<F, Const<2>>>>::new();
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
    }
    // The lane's rows: slot `2 mt + h` is row `g + 8 h` of m-tile `mt` (the accumulators' pair
    // `h`): its place, running maximum and the lane's share of its sum.
    let mut q_pos = Array::<i32>::new(row_slots);
    let mut q_seg = Array::<i32>::new(row_slots);
    let mut m = Array::<f32>::new(row_slots);
    let mut l = Array::<f32>::new(row_slots);
    #[unroll]
    for r in 0..row_slots {
        let row = i0 + (r / 2) * M_TILE + g + 8 * (r % 2);
        let (position, segment) = query_place(positions, segments, &p, b, row);
        q_pos[r] = position;
        q_seg[r] = segment;
        m[r] = f32::new(HIDDEN);
        l[r] = 0.0;
    }
    let mut acc_o = zeros_list(comptime!(m_tiles * o_tiles / 2));
    let (slope, table_base) = head_bias::<F, f32>(bias, &p, head);
    let scale = p.scale;
    let log2e = core::f32::consts::LOG2_E;
    // Only sequential positions without segments or padding have blocks every row sees whole.
    let classify = (p.flags & (EXPLICIT | SEGMENTED | PADDED)) == 0;

    clear_padding::<F>(&mut k_s, comptime!(stages * block), d_head, dh);
    clear_padding::<F>(&mut v_s, comptime!(stages * block), d_v, dvp);

    // 2. The first block's copies, then one block a step.
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

        // 3. S = Q Kᵀ: per 16 keys and 16 dimensions, one ldmatrix of K (matrix i: keys
        // 8 (i / 2), dimensions 8 (i % 2)) gives the B fragments of two n8-tiles.
        let mut acc_s = zeros_list(comptime!(m_tiles * n_tiles / 2));
        warp_product::<F>(
            &qa,
            &k_s,
            kb,
            &mut acc_s,
            &mut scratch,
            m_tiles,
            k_slices,
            comptime!(n_tiles / 2),
            dh,
            true,
            0usize,
            emulate,
        );

        // The score formula on each accumulator: pair `h` of n8-tile `n` holds row `g + 8 h`,
        // keys `j0 + 8 n + 2 quad + {0, 1}`.
        let full = classify && full_block(&p, r0, min(r0 + p.rows as usize, seq_q) - 1, j0, block);
        #[unroll]
        for n in 0..n_tiles {
            #[unroll]
            for e in 0..2usize {
                let j = j0 + n * 8 + 2 * quad + e;
                // Without `general`, keys sit at sequential positions and nothing else applies.
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
                    let at = (r / 2) * (n_tiles / 2) + n / 2;
                    let h = r % 2;
                    let slot = 2 * (n % 2) + h;
                    let mut pair = acc_s.index(at)[slot];
                    let rel = k_pos - q_pos[r];
                    let mut y = pair.extract(e) * scale;
                    if comptime!(general) {
                        y = biased_score::<F, f32>(y, rel, bias, slope, table_base, &p, !emulate);
                    }
                    if !full {
                        let row = i0 + (r / 2) * M_TILE + g + 8 * h;
                        if !visible(rel, k_seen && row < seq_q, q_seg[r], k_seg, &p) {
                            y = f32::new(HIDDEN);
                        }
                    }
                    pair.insert(e, y);
                    acc_s.index_mut(at)[slot] = pair;
                }
            }
        }

        // 4. The online softmax, row by row: the block's maximum across the quad, the rescale,
        // the weights.
        #[unroll]
        for r in 0..row_slots {
            let mt = r / 2;
            let h = r % 2;
            let mut block_max = f32::new(HIDDEN);
            #[unroll]
            for n in 0..n_tiles {
                let pair = acc_s.index(mt * (n_tiles / 2) + n / 2)[2 * (n % 2) + h];
                block_max = max(block_max, max(pair.extract(0usize), pair.extract(1usize)));
            }
            block_max = quad_max(block_max, &mut lanes, r % 2, emulate);
            let m_new = max(m[r], block_max);
            let seen = m_new > f32::new(UNSEEN);
            let mut correction = 1.0f32;
            if seen {
                correction = exp2((m[r] - m_new) * log2e, emulate);
                m[r] = m_new;
            }
            l[r] *= correction;
            #[unroll]
            for c in 0..o_tiles {
                let at = mt * (o_tiles / 2) + c / 2;
                let mut pair = acc_o.index(at)[2 * (c % 2) + h];
                pair = pair * Vector::new(correction);
                acc_o.index_mut(at)[2 * (c % 2) + h] = pair;
            }
            let shift = m_new * log2e;
            #[unroll]
            for n in 0..n_tiles {
                let at = mt * (n_tiles / 2) + n / 2;
                let mut pair = acc_s.index(at)[2 * (n % 2) + h];
                #[unroll]
                for e in 0..2usize {
                    let mut weight = 0.0f32;
                    if seen {
                        weight = exp2(pair.extract(e) * log2e - shift, emulate);
                    }
                    l[r] += weight;
                    pair.insert(e, weight);
                }
                acc_s.index_mut(at)[2 * (n % 2) + h] = pair;
            }
        }

        // 5. O += P V: per 16 keys and 16 columns, one ldmatrix.trans of V (matrix i: keys
        // 8 (i % 2), columns 8 (i / 2)) gives the B fragments of two n8-tiles of the output.
        let mut pa = Sequence::<Array<Vector<F, Const<2>>>>::new();
        #[unroll]
        for mt in 0..m_tiles {
            #[unroll]
            for s in 0..comptime!(n_tiles / 2) {
                pa.push(p_operand::<F>(acc_s.index(mt * (n_tiles / 2) + s)));
            }
        }
        // The slots go on alternating from the products of S.
        warp_product::<F>(
            &pa,
            &v_s,
            vb,
            &mut acc_o,
            &mut scratch,
            m_tiles,
            comptime!(n_tiles / 2),
            comptime!(o_tiles / 2),
            dvp,
            false,
            s_calls,
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

    // 6. Each row's sum across its quad; `O / l` and `m + ln l` (zeros and the dtype's lowest
    // value for a row that saw no key).
    #[unroll]
    for r in 0..row_slots {
        l[r] = quad_sum(l[r], &mut lanes, r % 2, emulate);
    }
    #[unroll]
    for r in 0..row_slots {
        let mt = r / 2;
        let h = r % 2;
        let row = i0 + mt * M_TILE + g + 8 * h;
        if row < seq_q {
            let mut inv = 0.0f32;
            let mut log_sum = p.lowest;
            if l[r] > 0.0 {
                inv = 1.0 / l[r];
                log_sum = m[r] + f32::ln(l[r]);
            }
            #[unroll]
            for c in 0..o_tiles {
                let pair = acc_o.index(mt * (o_tiles / 2) + c / 2)[2 * (c % 2) + h];
                #[unroll]
                for e in 0..2usize {
                    let col = c * 8 + 2 * quad + e;
                    if col < d_v {
                        output[(q_base + row) * d_v + col] = F::cast_from(pair.extract(e) * inv);
                    }
                }
            }
            if quad == 0 {
                lse[q_base + row] = F::cast_from(log_sum);
            }
        }
    }
}

/// llvmpipe (lavapipe's compiler) ends every loop of a shader invocation once the iterations of
/// all its loops add up to this (Mesa's `LP_MAX_TGSI_LOOP_ITERATIONS`, "shared between every
/// loop"), silently: the kernel goes on with wrong sums and skips the rest of its loops (issue
/// 61: the first tensor-core kernels gave wrong numbers from 1,640 keys on lavapipe). The
/// tensor-core kernels count their iterations on a CPU adapter ([`forward_iterations`],
/// `MmaBackwardPlan::iterations`) and leave a launch that would pass it to the shared kernel.
pub(super) const LOOP_LIMIT: usize = 65_535;

/// Whether a launch of `iterations` loop iterations an invocation would be cut short on this
/// device: a CPU adapter (lavapipe's llvmpipe) running the emulated warps.
pub(super) fn cut_short(iterations: usize, emulate: bool, cpu_adapter: bool) -> bool {
    emulate && cpu_adapter && iterations >= LOOP_LIMIT
}

/// How the forward runs on a device for `dtype`: `Some(false)` on its own `mma.sync` (f16 and
/// bf16 on CUDA, sm_80 and up), `Some(true)` emulated where the device has no `mma.sync` at all
/// (wgpu, lavapipe: what CI checks), `None` for f32 on a device that has it for the halves (the
/// emulation would only be slower than the shared kernel there).
pub(crate) fn emulation(properties: &cubecl::ir::DeviceProperties, dtype: DType) -> Option<bool> {
    if mma_ready(properties, dtype) {
        Some(false)
    } else if [DType::F16, DType::BF16]
        .iter()
        .any(|&half| mma_ready(properties, half))
    {
        None
    } else {
        Some(true)
    }
}

/// Whether a call with these [`Scalars::flags`] takes the kernel's `general` score formula: a
/// bias, a softcap, explicit positions, segments or padding.
pub(super) fn general(flags: u32) -> bool {
    use super::{ALIBI, BY_DISTANCE, CAPPED};
    flags & (ALIBI | BY_DISTANCE | CAPPED | EXPLICIT | SEGMENTED | PADDED) != 0
}

/// A tensor-core cube's geometry: `span` heads of a group times `tiles` warps of `m_tiles x 16`
/// query rows each (`span x tiles = WARPS`), the keys a block and the stages of keys and values
/// in shared memory (2: the next block copied while this one is computed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MmaPlan {
    pub span: usize,
    pub tiles: usize,
    pub m_tiles: usize,
    pub block: usize,
    pub stages: usize,
}

impl MmaPlan {
    /// Query rows per head in one cube.
    pub fn rows(&self) -> usize {
        self.tiles * self.m_tiles * M_TILE
    }

    /// Units per cube.
    pub fn units(&self) -> usize {
        WARPS * WARP
    }
}

/// The shared memory a plan takes, in bytes: its stages, and the emulated warps' exchange space.
fn shared_bytes(plan: &MmaPlan, dh: usize, dvp: usize, elem_size: usize, emulate: bool) -> usize {
    let stages = plan.stages * plan.block * (dh + dvp) * elem_size;
    let exchange = if emulate {
        WARPS * (MMA_SCRATCH + LANE_SCRATCH) * 4
    } else {
        8
    };
    stages + exchange
}

/// The forward's geometry, or `None` where a cube of [`WARPS`] warps or a stage of 16 keys does
/// not fit the device (then the shared kernel runs). As many of the group's heads as divide it
/// share a cube (their warps read the same stages), at most [`WARPS`]; 32 rows a warp at head
/// widths up to 64, 16 beyond (the output's accumulators); blocks of 64 keys where they fit,
/// double-buffered where that fits too, down to 16 keys in one stage.
pub(super) fn plan(
    sizes: &Sizes,
    group: usize,
    elem_size: usize,
    hardware: &HardwareProperties,
    emulate: bool,
) -> Option<MmaPlan> {
    let (dh, dvp) = (
        sizes.d_head.next_multiple_of(16),
        sizes.d_v.next_multiple_of(16),
    );
    if (WARPS * WARP) > hardware.max_units_per_cube as usize {
        return None;
    }
    let budget = hardware.max_shared_memory_size.min(MAX_SHARED_BYTES);
    let span = (1..=group.min(WARPS))
        .rev()
        .find(|span| group % span == 0 && WARPS % span == 0)
        .unwrap_or(1);
    let m_tiles = if dh.max(dvp) <= 64 { 2 } else { 1 };
    // Two m-tiles a warp take blocks of 32 keys (64 spill at width 64: 255 registers a unit).
    let blocks: &[usize] = if m_tiles == 2 {
        &[32, 16]
    } else {
        &[64, 32, 16]
    };
    blocks
        .iter()
        .flat_map(|&block| [(block, 2), (block, 1)])
        .map(|(block, stages)| MmaPlan {
            span,
            tiles: WARPS / span,
            m_tiles,
            block,
            stages,
        })
        .find(|plan| shared_bytes(plan, dh, dvp, elem_size, emulate) <= budget)
}

/// The run-time loop iterations of one invocation at most (llvmpipe's loop limit, `LOOP_LIMIT`):
/// the block loop alone, every other loop unrolled.
pub(super) fn forward_iterations(plan: &MmaPlan, sizes: &Sizes) -> usize {
    sizes.seq_k.div_ceil(plan.block) + 1
}

#[cfg(test)]
mod tests {
    use super::super::fragment::swizzle_span;

    /// The swizzle permutes chunks within aligned runs of its span, so it stays inside the row.
    #[test]
    fn the_swizzle_is_a_permutation_of_each_row() {
        for chunks in [2usize, 4, 6, 8, 10, 12, 16] {
            let span = swizzle_span(chunks);
            assert!(span.is_power_of_two() && chunks % span == 0 && span <= 8);
            for row in 0..16 {
                let mut seen: Vec<usize> = (0..chunks).map(|c| c ^ (row % span)).collect();
                seen.sort();
                assert_eq!(
                    seen,
                    (0..chunks).collect::<Vec<_>>(),
                    "{chunks} chunks, row {row}"
                );
            }
        }
        assert_eq!(swizzle_span(8), 8);
        assert_eq!(swizzle_span(6), 2);
        assert_eq!(swizzle_span(16), 8);
    }
}
