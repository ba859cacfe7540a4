//! The register kernel, tuned on lavapipe (the CPU-emulated Vulkan of CI). Each unit holds a
//! few consecutive query rows (4 or 8 for narrow heads: each key and value element it loads
//! serves all of them) and walks the keys the tile can see in blocks of 8: it scores its rows
//! against the block (softcap, bias from relative positions, masks), rescales its running sum
//! and output once per block, and accumulates `p v` in registers. Only the output and one
//! log-sum-exp per row are written: no score leaves the unit.
//!
//! No shared memory: on lavapipe staging key blocks in shared memory with two barriers per
//! block measured twice as slow as reading them from device memory (2.2 s against 1.1 s for a
//! causal ALiBi block at 2048 tokens); several rows per unit halved it again. A GPU wants the
//! shared-memory kernel (`shared.rs`).
//!
//! # On NVIDIA GPUs
//!
//! Not built for them: `Auto` takes the shared kernel on a GPU, and this one runs there only
//! when forced or where the shared plan does not fit. Its rows per unit (8 for narrow heads)
//! hold `per_unit x (d_head + d_v)` f32 values, far past an NVIDIA unit's 255 registers: NVRTC
//! (`docs/gpu.md`) gives 255 registers and spills at every width (at f16 width 64, 2 rows a unit:
//! 244 bytes stored, 1,424 loaded; at width 40, 8 rows: 13 KiB), 12.5 % theoretical occupancy.
//! All listed in `tools/cuda/known-spills.json`.

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]

use cubecl::prelude::*;

use super::{
    Inputs, Plan, Scalars, fold_block, head_bias, key_place, key_range, score_rows, start_rows,
    write_rows,
};
use crate::attention::Sizes;

/// One cube per (query tile, key/value head, sequence) = `(CUBE_POS_X, CUBE_POS_Y,
/// CUBE_POS_Z)`. The tile holds `rows` query rows of each head of the group; unit `u` holds
/// `per_unit` consecutive rows of head `kv_head * group + u / (rows / per_unit)`. `C` is the
/// compute type (f32). Inputs are contiguous.
#[cube(launch_unchecked, create_dummy_kernel)]
pub(super) fn flash_registers_kernel<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
    inputs: &Inputs<F, I, J, P>,
    output: &mut Tensor<F>,
    lse: &mut Tensor<F>,
    p: Scalars,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] per_unit: usize,
    #[comptime] block: usize,
    #[define(F, C, I, J, P)] _dtypes: [ElemType; 5],
) {
    let (q, k, v, bias) = (&inputs.q, &inputs.k, &inputs.v, &inputs.bias);
    let (padding, positions, segments) = (&inputs.padding, &inputs.positions, &inputs.segments);
    let seq_k = p.seq_k as usize;
    let group = p.group as usize;
    let rows = p.rows as usize;
    let kv_head = CUBE_POS_Y as usize;
    let b = CUBE_POS_Z as usize;
    let unit = UNIT_POS_X as usize;
    let units_per_head = rows / per_unit;
    let r0 = CUBE_POS_X as usize * rows;
    let head = kv_head * group + unit / units_per_head;
    let i0 = r0 + (unit % units_per_head) * per_unit;

    // The unit's queries, scaled, in registers; where they sit; their segments.
    let mut rows = start_rows::<F, C, I, J>(
        q, positions, segments, &p, b, head, i0, per_unit, d_head, d_v,
    );
    let (slope, table_base) = head_bias::<F, C>(bias, &p, head);
    let (k_lo, k_hi) = key_range(&p, r0);
    let kv_base = (b * CUBE_COUNT_Y as usize + kv_head) * seq_k;

    // Keys in blocks of `block`: scores first, then one rescale per row and block.
    let mut s = Array::<C>::new(per_unit * block);
    let mut j0 = k_lo;
    // A unit past the rows (the cube has 32 units whatever the lengths) walks no key.
    if i0 >= p.seq_q as usize {
        j0 = k_hi;
    }
    while j0 < k_hi {
        #[unroll]
        for c in 0..block {
            let j = j0 + c;
            let in_range = j < k_hi;
            #[unroll]
            for t in 0..per_unit {
                s[t * block + c] = C::new(0.0);
            }
            if in_range {
                #[unroll]
                for d in 0..d_head {
                    let kd = C::cast_from(k[(kv_base + j) * d_head + d]);
                    #[unroll]
                    for t in 0..per_unit {
                        s[t * block + c] += rows.q[t * d_head + d] * kd;
                    }
                }
            }
            let (kp, key_seen, k_segment) =
                key_place(positions, segments, padding, &p, b, j, in_range);
            score_rows::<F, C>(
                &mut s, &rows, c, kp, key_seen, k_segment, i0, bias, slope, table_base, &p,
                per_unit, block,
            );
        }
        fold_block(&mut s, &mut rows, per_unit, block, d_v);
        #[unroll]
        for c in 0..block {
            let j = j0 + c;
            if j < k_hi {
                #[unroll]
                for d in 0..d_v {
                    let vd = C::cast_from(v[(kv_base + j) * d_v + d]);
                    #[unroll]
                    for t in 0..per_unit {
                        rows.acc[t * d_v + d] += s[t * block + c] * vd;
                    }
                }
            }
        }
        j0 += block;
    }

    write_rows(output, lse, &rows, &p, b, head, i0, per_unit, d_v);
}

/// Rows per unit: each key and value element loaded serves this many queries (fewer for wide
/// heads, whose rows take more registers). A power of two no larger than seq_q: a decoding step
/// (one query) keeps one row per unit, and there are at most four compiled variants per head
/// width, whatever the group (a run-time value). 32 units per cube whatever the lengths, at
/// least one per head of the group ([`units_per_head`](super::units_per_head)).
pub(super) fn plan(sizes: &Sizes, group: usize) -> Plan {
    let per_unit = match sizes.d_head + sizes.d_v {
        0..=96 => 8,
        97..=192 => 2,
        _ => 1,
    }
    .min(1 << sizes.seq_q.ilog2());
    let units_per_head = super::units_per_head(group);
    Plan {
        per_unit,
        rows: units_per_head * per_unit,
        units: group * units_per_head,
        stage: None,
    }
}
