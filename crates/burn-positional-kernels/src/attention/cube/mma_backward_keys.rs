//! The tensor-core backward's dK/dV kernel ([`flash_mma_dkv_kernel`]; `mma_backward.rs` has
//! the design and the dQ kernel): warp `w` owns 16 keys of one key/value head, K and V as A
//! fragments and `dK`, `dV` in registers, over the query blocks of every head of the group.

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]
// Only the autodiff node calls the backward.
#![cfg_attr(not(feature = "autodiff"), allow(dead_code))]

use cubecl::prelude::*;

use super::fragment::{MMA_SCRATCH, commit_group, exp2, p_operand, wait_group};
use super::mma::{M_TILE, WARPS};
use super::mma_backward::{KEYS_PER_CUBE, score};
use super::mma_stage::{clear_padding, stage_pair};
use super::mma_warp::{a_fragment, exchanges, full_block, warp_product, zeros_list};
use super::{
    EXPLICIT, Inputs, PADDED, SEGMENTED, Scalars, UNSEEN, backward_units::query_range, head_bias,
    key_place, query_place,
};

/// dK/dV cubes: `(CUBE_POS_X, CUBE_POS_Y, CUBE_POS_Z)` = (run of [`KEYS_PER_CUBE`] keys,
/// key/value head, sequence); see the module. `delta` is `rowsum(dO ∘ O)`,
/// `[batch, n_heads, seq_q]` in `C` (f32); `block` query rows a step, `stages` of them staged.
#[cube(launch_unchecked, create_dummy_kernel)]
pub(super) fn flash_mma_dkv_kernel<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
    inputs: &Inputs<F, I, J, P>,
    delta: &Tensor<C>,
    lse: &Tensor<F>,
    grad: &Tensor<F>,
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    p: Scalars,
    group: u32,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] block: usize,
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
    let v_slices = comptime!(d_v.next_multiple_of(16) / 16);
    let n_pairs = comptime!(block / 16);
    let lane = (UNIT_POS % 32u32) as usize;
    let w = (UNIT_POS / 32u32) as usize;
    let g = lane / 4;
    let quad = lane % 4;
    let group = group as usize;
    let seq_q = p.seq_q as usize;
    let seq_k = p.seq_k as usize;
    let n_heads = p.n_heads as usize;
    let kv_head = CUBE_POS_Y as usize;
    let b = CUBE_POS_Z as usize;
    let c0 = CUBE_POS_X as usize * KEYS_PER_CUBE;
    let j0 = c0 + w * M_TILE;
    let kv_base = (b * (n_heads / group) + kv_head) * seq_k;

    let mut q_s = Shared::<[F]>::new_aligned_slice(comptime!(stages * block * dh), 16usize);
    let mut o_s = Shared::<[F]>::new_aligned_slice(comptime!(stages * block * dvp), 16usize);
    let mut lse_s = Shared::<[f32]>::new_slice(comptime!(stages * block));
    let mut delta_s = Shared::<[f32]>::new_slice(comptime!(stages * block));
    let mut scratch =
        Shared::<[f32]>::new_slice(comptime!(if emulate { WARPS * MMA_SCRATCH } else { 1 }));

    // The warp's keys and values as A fragments, where each of the lane's two keys sits.
    let mut ka = Sequence::<Array<Vector<F, Const<2>>>>::new();
    #[unroll]
    for kk in 0..k_slices {
        ka.push(a_fragment::<F>(k, kv_base, j0, seq_k, kk * 16, d_head));
    }
    let mut va = Sequence::<Array<Vector<F, Const<2>>>>::new();
    #[unroll]
    for kk in 0..v_slices {
        va.push(a_fragment::<F>(v, kv_base, j0, seq_k, kk * 16, d_v));
    }
    let mut k_pos = Array::<i32>::new(2usize);
    let mut k_seen = Array::<u32>::new(2usize);
    let mut k_seg = Array::<i32>::new(2usize);
    #[unroll]
    for h in 0..2usize {
        let j = j0 + g + 8 * h;
        k_pos[h] = p.key_offset + j as i32;
        let mut seen = j < seq_k;
        k_seg[h] = 0i32;
        if comptime!(general) {
            let (position, key_seen, segment) =
                key_place(positions, segments, padding, &p, b, j, j < seq_k);
            k_pos[h] = position;
            seen = key_seen;
            k_seg[h] = segment;
        }
        let mut bit = 0u32;
        if seen {
            bit = 1u32;
        }
        k_seen[h] = bit;
    }
    let mut acc_dk = zeros_list(k_slices);
    let mut acc_dv = zeros_list(v_slices);
    let log2e = core::f32::consts::LOG2_E;
    let classify = (p.flags & (EXPLICIT | SEGMENTED | PADDED)) == 0;

    clear_padding::<F>(&mut q_s, comptime!(stages * block), d_head, dh);
    clear_padding::<F>(&mut o_s, comptime!(stages * block), d_v, dvp);

    // One step per (head of the group, block of rows that can see some of the cube's keys).
    let (i_lo, i_hi) = query_range(&p, c0, min(c0 + KEYS_PER_CUBE, seq_k));
    let blocks = (i_hi - i_lo + block - 1) / block;
    let total = group * blocks;
    let mut t = 0usize;
    let mut stage = 0usize;
    if total > 0 {
        let rows = (b * n_heads + kv_head * group) * seq_q;
        stage_queries::<F, C>(
            q,
            grad,
            lse,
            delta,
            &mut q_s,
            &mut o_s,
            &mut lse_s,
            &mut delta_s,
            0,
            rows,
            i_lo,
            seq_q,
            block,
            d_head,
            d_v,
            emulate,
        );
    }
    commit_group(emulate);
    while t < total {
        let next = t + 1;
        if comptime!(stages == 2) {
            if next < total {
                let head = kv_head * group + next / blocks;
                let ib = i_lo + (next % blocks) * block;
                stage_queries::<F, C>(
                    q,
                    grad,
                    lse,
                    delta,
                    &mut q_s,
                    &mut o_s,
                    &mut lse_s,
                    &mut delta_s,
                    1 - stage,
                    (b * n_heads + head) * seq_q,
                    ib,
                    seq_q,
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
        let head = kv_head * group + t / blocks;
        let ib = i_lo + (t % blocks) * block;
        let (slope, table_base) = head_bias::<F, f32>(bias, &p, head);
        let qb = stage * block * dh;
        let ob = stage * block * dvp;
        let sb = stage * block;

        // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ: the stage's rows (queries) are the products' columns.
        let mut acc_s = zeros_list(n_pairs);
        let mut acc_dp = zeros_list(n_pairs);
        warp_product::<F>(
            &ka,
            &q_s,
            qb,
            &mut acc_s,
            &mut scratch,
            1usize,
            k_slices,
            n_pairs,
            dh,
            true,
            0usize,
            emulate,
        );
        warp_product::<F>(
            &va,
            &o_s,
            ob,
            &mut acc_dp,
            &mut scratch,
            1usize,
            v_slices,
            n_pairs,
            dvp,
            true,
            comptime!(exchanges(k_slices)),
            emulate,
        );

        // Pᵀ and dSᵀ in place: pair `h` of n8-tile `n` holds key `g + 8 h`, queries
        // `ib + 8 n + 2 quad + {0, 1}`. A block is full when all its rows exist and see every
        // key of the cube.
        let full = classify
            && ib + block <= seq_q
            && full_block(&p, ib, ib + block - 1, c0, KEYS_PER_CUBE);
        #[unroll]
        for n in 0..comptime!(block / 8) {
            #[unroll]
            for e in 0..2usize {
                let col = n * 8 + 2 * quad + e;
                let i = ib + col;
                let shift = lse_s[sb + col] * log2e;
                let d = delta_s[sb + col];
                let mut q_pos = p.query_offset + i as i32;
                let mut q_seg = 0i32;
                if comptime!(general) {
                    let (position, segment) = query_place(positions, segments, &p, b, i);
                    q_pos = position;
                    q_seg = segment;
                }
                #[unroll]
                for h in 0..2usize {
                    let at = n / 2;
                    let slot = 2 * (n % 2) + h;
                    let mut sp = acc_s.index(at)[slot];
                    let mut dp = acc_dp.index(at)[slot];
                    let (y, factor) = score::<F>(
                        sp.extract(e),
                        k_pos[h] - q_pos,
                        k_seen[h] == 1 && i < seq_q,
                        q_seg,
                        k_seg[h],
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
                        weight = exp2(y * log2e - shift, emulate);
                    }
                    sp.insert(e, weight);
                    dp.insert(e, weight * (dp.extract(e) - d) * factor);
                    acc_s.index_mut(at)[slot] = sp;
                    acc_dp.index_mut(at)[slot] = dp;
                }
            }
        }

        // dV += Pᵀ dO and dK += dSᵀ Q: the stage's rows (queries) are the inner dimension.
        let mut pa = Sequence::<Array<Vector<F, Const<2>>>>::new();
        let mut dsa = Sequence::<Array<Vector<F, Const<2>>>>::new();
        #[unroll]
        for s in 0..n_pairs {
            pa.push(p_operand::<F>(acc_s.index(s)));
            dsa.push(p_operand::<F>(acc_dp.index(s)));
        }
        let calls = comptime!(exchanges(k_slices) + exchanges(v_slices));
        warp_product::<F>(
            &pa,
            &o_s,
            ob,
            &mut acc_dv,
            &mut scratch,
            1usize,
            n_pairs,
            v_slices,
            dvp,
            false,
            calls,
            emulate,
        );
        warp_product::<F>(
            &dsa,
            &q_s,
            qb,
            &mut acc_dk,
            &mut scratch,
            1usize,
            n_pairs,
            k_slices,
            dh,
            false,
            comptime!(calls + exchanges(n_pairs)),
            emulate,
        );
        // Every warp done with the stage before a copy overwrites it.
        sync_cube();
        if comptime!(stages == 1) {
            if next < total {
                let head = kv_head * group + next / blocks;
                let ib = i_lo + (next % blocks) * block;
                stage_queries::<F, C>(
                    q,
                    grad,
                    lse,
                    delta,
                    &mut q_s,
                    &mut o_s,
                    &mut lse_s,
                    &mut delta_s,
                    0usize,
                    (b * n_heads + head) * seq_q,
                    ib,
                    seq_q,
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
        t = next;
    }

    // The lane's keys `g + 8 h`, columns `8 c + 2 quad + {0, 1}`; dK times the scale.
    #[unroll]
    for h in 0..2usize {
        let j = j0 + g + 8 * h;
        if j < seq_k {
            #[unroll]
            for c in 0..comptime!(2 * k_slices) {
                let pair = acc_dk.index(c / 2)[2 * (c % 2) + h];
                #[unroll]
                for e in 0..2usize {
                    let col = c * 8 + 2 * quad + e;
                    if col < d_head {
                        dk[(kv_base + j) * d_head + col] = F::cast_from(pair.extract(e) * p.scale);
                    }
                }
            }
            #[unroll]
            for c in 0..comptime!(2 * v_slices) {
                let pair = acc_dv.index(c / 2)[2 * (c % 2) + h];
                #[unroll]
                for e in 0..2usize {
                    let col = c * 8 + 2 * quad + e;
                    if col < d_v {
                        dv[(kv_base + j) * d_v + col] = F::cast_from(pair.extract(e));
                    }
                }
            }
        }
    }
}

/// Query rows `i0..i0 + block` of one head (its rows from `rows` on) into stage `stage`: Q and
/// dO as [`stage_pair`] copies them (rows past `seq_q` repeat the last; the masks hide them),
/// the log-sum-exp and `D` one row a unit (zeros past `seq_q`).
#[cube]
fn stage_queries<F: Float, C: Float>(
    q: &Tensor<F>,
    grad: &Tensor<F>,
    lse: &Tensor<F>,
    delta: &Tensor<C>,
    q_s: &mut [F],
    o_s: &mut [F],
    lse_s: &mut [f32],
    delta_s: &mut [f32],
    stage: usize,
    rows: usize,
    i0: usize,
    seq_q: usize,
    #[comptime] block: usize,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] emulate: bool,
) {
    let valid = min(block, seq_q - i0);
    stage_pair::<F>(
        q,
        q_s,
        grad,
        o_s,
        stage,
        rows + i0,
        valid,
        block,
        d_head,
        d_v,
        emulate,
    );
    let u = UNIT_POS as usize;
    if u < block {
        let i = i0 + u;
        let mut l = 0.0f32;
        let mut d = 0.0f32;
        if i < seq_q {
            l = f32::cast_from(lse[rows + i]);
            d = f32::cast_from(delta[rows + i]);
        }
        lse_s[stage * block + u] = l;
        delta_s[stage * block + u] = d;
    }
}
