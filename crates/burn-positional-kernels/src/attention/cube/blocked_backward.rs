//! The register-blocked SIMT backward ([`FlashVariant::Blocked`](super::FlashVariant), issue
//! 73): FlashAttention-2's backward split as it splits it, in two kernels on the forward's
//! register tiles (`blocked.rs`), each product a unit's 4 x 4 tile of 16 independent FMAs a step
//! fed by two 4-wide vectors from shared memory.
//!
//! - [`flash_blocked_dq_kernel`]: a cube of 128 units over [`ROWS`] query rows of one head walks
//!   the keys they see in blocks of [`BLOCK`]: `S = Q Kᵀ` and `dP = dO Vᵀ` ([`product_t`], the
//!   operands staged transposed), per score the formula, `p = exp2(s log2 e - lse log2 e)` and
//!   `dS = p (dP - D)` (times the softcap's slope), `dS` to shared memory transposed, then
//!   `dQ += dS K` ([`product_n`], K staged row by row); `scale dQ` written at the end.
//! - [`flash_blocked_dkv_kernel`]: a cube over [`ROWS`] keys walks, for every head of the group,
//!   the query rows that see them in blocks of [`BLOCK`]: `Sᵀ = K Qᵀ`, `dPᵀ = V dOᵀ`, the same
//!   per-score work, then `dV += Pᵀ dO` and `dK += dSᵀ Q`; the group's heads sum into the cube's
//!   registers, `scale dK` and `dV` written at the end.
//!
//! A unit `(ty, tx) = (u / 16, u % 16)` owns rows (keys) `4 ty..4 ty + 4` and, of each block, the
//! columns `4 tx..4 tx + 4`; of the gradients it accumulates the same 4 rows times the column
//! vectors `tx + 16 n`. `D = rowsum(dO O)` comes computed, as for the other backward kernels.
//!
//! No bias gradient: where one is wanted (a trained ALiBi slope or distance table) the launch
//! takes the shared backward. The bias itself, the masks, the window, the segments, the padding,
//! explicit positions and the softcap all apply, with the forward's formula (`score.rs`).

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]
// Only the autodiff node calls the backward.
#![cfg_attr(not(feature = "autodiff"), allow(dead_code))]

use burn::tensor::DType;
use burn_cubecl::{kernel::into_contiguous, tensor::CubeTensor};
use cubecl::prelude::*;

use super::backward_units::{cap_slope, query_range};
use super::blocked::{BLOCK, UNITS};
use super::fragment::exp2;
use super::mma_warp::full_block;
use super::{
    EXPLICIT, HIDDEN, Inputs, PADDED, SEGMENTED, ScalarValues, Scalars, UNSEEN, biased_score,
    head_bias, inputs_arg, key_place, key_range, mma, query_place, storage_types, visible,
};
use crate::attention::Sizes;
use crate::attention::tile::TileArgs;
use crate::attention::variant::{FlashVariant, count_backward_launch};

use super::blocked_tiles::{
    COL_STRIDE, GROUPS, Quad, ROW_STRIDE, ROWS, product_n, product_t, zeros,
};

/// `dS` for one score: `raw = scale q . k`, `y` its final score (masked to [`HIDDEN`]), `dp`
/// its `dO . v`, the row's log-sum-exp and `D`: `p (dp - D)` times the softcap's slope at `raw`,
/// and `p` (0 where hidden).
#[cube]
fn score_grad(
    raw: f32,
    y: f32,
    dp: f32,
    lse: f32,
    delta: f32,
    p: &Scalars,
    #[comptime] native: bool,
) -> (f32, f32) {
    let log2e = core::f32::consts::LOG2_E;
    let mut w = 0.0f32;
    if y > f32::new(UNSEEN) {
        w = exp2(y * log2e - lse * log2e, !native);
    }
    (w, w * (dp - delta) * cap_slope::<f32>(raw, p))
}

/// One cube per (tile of [`ROWS`] query rows, query head, sequence): dQ; see the module. `lse`
/// is the forward's `[batch, n_heads, seq_q, 1]`, `delta` `rowsum(dO O)` `[batch, n_heads,
/// seq_q]` in f32. `chunk` is the dimensions of a stage of the transposed products (16 or 32),
/// `b_rows` the keys of a stage of K. Inputs are contiguous.
#[cube(launch_unchecked, create_dummy_kernel)]
pub(super) fn flash_blocked_dq_kernel<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
    inputs: &Inputs<F, I, J, P>,
    delta: &Tensor<C>,
    lse: &Tensor<F>,
    grad: &Tensor<F>,
    dq: &mut Tensor<F>,
    p: Scalars,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] chunk: usize,
    #[comptime] b_rows: usize,
    #[comptime] general: bool,
    #[comptime] native: bool,
    #[define(F, C, I, J, P)] _dtypes: [ElemType; 5],
) {
    let (q, k, v, bias) = (&inputs.q, &inputs.k, &inputs.v, &inputs.bias);
    let (padding, positions, segments) = (&inputs.padding, &inputs.positions, &inputs.segments);
    let n_out = comptime!(d_head.div_ceil(4 * GROUPS));
    let unit = UNIT_POS as usize;
    let ty = unit / GROUPS;
    let tx = unit % GROUPS;
    let head = CUBE_POS_Y as usize;
    let b = CUBE_POS_Z as usize;
    let seq_q = p.seq_q as usize;
    let seq_k = p.seq_k as usize;
    let n_heads = p.n_heads as usize;
    let group = p.group as usize;
    let r0 = CUBE_POS_X as usize * ROWS;
    let q_row = (b * n_heads + head) * seq_q + r0;
    let kv_base = (b * (n_heads / group) + head / group) * seq_k;
    let i0 = r0 + ty * 4;

    let stage_len = comptime!(
        (chunk * (ROW_STRIDE + COL_STRIDE)).max(b_rows * d_head.next_multiple_of(4 * GROUPS) / 4)
    );
    let mut stage = Shared::<[Quad]>::new_aligned_slice(stage_len, 16usize);
    let mut ds_s = Shared::<[Quad]>::new_aligned_slice(comptime!(BLOCK * ROW_STRIDE), 16usize);
    let meta = comptime!(if general { BLOCK } else { 1 });
    let mut kp_s = Shared::<[i32]>::new_slice(meta);
    let mut seen_s = Shared::<[u32]>::new_slice(meta);
    let mut segment_s = Shared::<[i32]>::new_slice(meta);

    let mut q_pos = Array::<i32>::new(4usize);
    let mut q_seg = Array::<i32>::new(4usize);
    let mut row_lse = Array::<f32>::new(4usize);
    let mut row_delta = Array::<f32>::new(4usize);
    #[unroll]
    for t in 0..4usize {
        let i = i0 + t;
        let (position, segment) = query_place(positions, segments, &p, b, i);
        q_pos[t] = position;
        q_seg[t] = segment;
        let mut x = 0.0f32;
        let mut dx = 0.0f32;
        if i < seq_q {
            x = f32::cast_from(lse[(b * n_heads + head) * seq_q + i]);
            dx = f32::cast_from(delta[(b * n_heads + head) * seq_q + i]);
        }
        row_lse[t] = x;
        row_delta[t] = dx;
    }
    let mut acc = zeros(comptime!(4 * n_out));
    let (slope, table_base) = head_bias::<F, f32>(bias, &p, head);
    let classify = (p.flags & (EXPLICIT | SEGMENTED | PADDED)) == 0;
    let last_row = min(r0 + ROWS, seq_q) - 1;
    let (k_lo, k_hi) = key_range(&p, r0);

    let mut j0 = k_lo;
    while j0 < k_hi {
        if comptime!(general) {
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
        // S = Q Kᵀ and dP = dO Vᵀ (their first barriers publish the keys' places).
        let mut s = zeros(4usize);
        product_t::<F>(
            q,
            q_row,
            seq_q - r0,
            k,
            kv_base + j0,
            k_hi - j0,
            &mut stage,
            &mut s,
            d_head,
            chunk,
        );
        let mut dp = zeros(4usize);
        product_t::<F>(
            grad,
            q_row,
            seq_q - r0,
            v,
            kv_base + j0,
            k_hi - j0,
            &mut stage,
            &mut dp,
            d_v,
            chunk,
        );
        // dS, transposed into `ds_s` (`[key][row]`).
        let full = classify && j0 + BLOCK <= k_hi && full_block(&p, r0, last_row, j0, BLOCK);
        let rel0 = p.key_offset + j0 as i32 - (p.query_offset + i0 as i32);
        #[unroll]
        for e in 0..4usize {
            let c = 4 * tx + e;
            let mut column = Quad::empty();
            #[unroll]
            for t in 0..4usize {
                let raw = s[t].extract(e) * p.scale;
                let mut rel = rel0 + (4 * tx) as i32 + comptime!(e as i32 - t as i32);
                let mut k_seen = j0 + c < k_hi;
                let mut k_seg = 0i32;
                if comptime!(general) {
                    rel = kp_s[c] - q_pos[t];
                    k_seen = seen_s[c] == 1;
                    k_seg = segment_s[c];
                }
                let mut y = raw;
                if comptime!(general) {
                    y = biased_score::<F, f32>(raw, rel, bias, slope, table_base, &p, native);
                }
                if !full && !visible(rel, k_seen && i0 + t < seq_q, q_seg[t], k_seg, &p) {
                    y = f32::new(HIDDEN);
                }
                let (_, ds) = score_grad(
                    raw,
                    y,
                    dp[t].extract(e),
                    row_lse[t],
                    row_delta[t],
                    &p,
                    native,
                );
                column.insert(t, ds);
            }
            ds_s[c * ROW_STRIDE + ty] = column;
        }
        // dQ += dS K (its first barrier publishes `ds_s`, its last ends the reads).
        product_n::<F>(
            &ds_s,
            k,
            kv_base + j0,
            k_hi - j0,
            &mut stage,
            &mut acc,
            d_head,
            b_rows,
        );
        j0 += BLOCK;
    }

    #[unroll]
    for t in 0..4usize {
        let i = i0 + t;
        if i < seq_q {
            let row = (b * n_heads + head) * seq_q + i;
            #[unroll]
            for n in 0..n_out {
                let quad = acc[t * n_out + n];
                #[unroll]
                for x in 0..4usize {
                    let col = 4 * (tx + GROUPS * n) + x;
                    if col < d_head {
                        dq[row * d_head + col] = F::cast_from(quad.extract(x) * p.scale);
                    }
                }
            }
        }
    }
}

/// One cube per (tile of [`ROWS`] keys, key/value head, sequence): dK and dV over every head of
/// the group; see the module. Arguments as [`flash_blocked_dq_kernel`]'s; `b_rows` is the query
/// rows of a stage of dO and Q.
#[cube(launch_unchecked, create_dummy_kernel)]
pub(super) fn flash_blocked_dkv_kernel<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
    inputs: &Inputs<F, I, J, P>,
    delta: &Tensor<C>,
    lse: &Tensor<F>,
    grad: &Tensor<F>,
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    p: Scalars,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] chunk: usize,
    #[comptime] b_rows: usize,
    #[comptime] general: bool,
    #[comptime] native: bool,
    #[define(F, C, I, J, P)] _dtypes: [ElemType; 5],
) {
    let (q, k, v, bias) = (&inputs.q, &inputs.k, &inputs.v, &inputs.bias);
    let (padding, positions, segments) = (&inputs.padding, &inputs.positions, &inputs.segments);
    let k_out = comptime!(d_head.div_ceil(4 * GROUPS));
    let v_out = comptime!(d_v.div_ceil(4 * GROUPS));
    let unit = UNIT_POS as usize;
    let ty = unit / GROUPS;
    let tx = unit % GROUPS;
    let kv_head = CUBE_POS_Y as usize;
    let b = CUBE_POS_Z as usize;
    let seq_q = p.seq_q as usize;
    let seq_k = p.seq_k as usize;
    let n_heads = p.n_heads as usize;
    let group = p.group as usize;
    let j0 = CUBE_POS_X as usize * ROWS;
    let kv_row = (b * (n_heads / group) + kv_head) * seq_k + j0;
    let width = max(min(j0 + ROWS, seq_k), j0 + 1) - j0;

    let stage_len = comptime!(
        (chunk * (ROW_STRIDE + COL_STRIDE))
            .max(b_rows * d_head.max(d_v).next_multiple_of(4 * GROUPS) / 4)
    );
    let mut stage = Shared::<[Quad]>::new_aligned_slice(stage_len, 16usize);
    let mut pt_s = Shared::<[Quad]>::new_aligned_slice(comptime!(BLOCK * ROW_STRIDE), 16usize);
    let mut dst_s = Shared::<[Quad]>::new_aligned_slice(comptime!(BLOCK * ROW_STRIDE), 16usize);

    // The cube's keys: where each sits (the general formula's; in shared memory, not held in
    // registers across the walk; the first product's barrier publishes them).
    let meta = comptime!(if general { ROWS } else { 1 });
    let mut kp_s = Shared::<[i32]>::new_slice(meta);
    let mut seen_s = Shared::<[u32]>::new_slice(meta);
    let mut segment_s = Shared::<[i32]>::new_slice(meta);
    if comptime!(general) {
        if unit < ROWS {
            let j = j0 + unit;
            let (position, seen, segment) =
                key_place(positions, segments, padding, &p, b, j, j < seq_k);
            kp_s[unit] = position;
            let mut seen_bit = 0u32;
            if seen {
                seen_bit = 1u32;
            }
            seen_s[unit] = seen_bit;
            segment_s[unit] = segment;
        }
    }
    let mut acc_k = zeros(comptime!(4 * k_out));
    let mut acc_v = zeros(comptime!(4 * v_out));
    let classify = (p.flags & (EXPLICIT | SEGMENTED | PADDED)) == 0;
    let (q_lo, q_hi) = query_range(&p, j0, j0 + width);

    let mut h = 0usize;
    while h < group {
        let head = kv_head * group + h;
        let (slope, table_base) = head_bias::<F, f32>(bias, &p, head);
        let q_base = (b * n_heads + head) * seq_q;
        let mut i0 = q_lo;
        while i0 < q_hi {
            // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ.
            let mut s = zeros(4usize);
            product_t::<F>(
                k,
                kv_row,
                seq_k - j0,
                q,
                q_base + i0,
                q_hi - i0,
                &mut stage,
                &mut s,
                d_head,
                chunk,
            );
            let mut dp = zeros(4usize);
            product_t::<F>(
                v,
                kv_row,
                seq_k - j0,
                grad,
                q_base + i0,
                q_hi - i0,
                &mut stage,
                &mut dp,
                d_v,
                chunk,
            );
            // Pᵀ and dSᵀ transposed again (`[query][key]`).
            let rel0 = p.key_offset + j0 as i32 - (p.query_offset + i0 as i32);
            let full = classify
                && i0 + BLOCK <= q_hi
                && j0 + ROWS <= seq_k
                && full_block(&p, i0, i0 + BLOCK - 1, j0, ROWS);
            #[unroll]
            for e in 0..4usize {
                let c = 4 * tx + e;
                // Query `i0 + c`: where it sits, its lse and D (read here: not held across the
                // products).
                let i = i0 + c;
                let (q_pos, q_seg) = query_place(positions, segments, &p, b, i);
                let mut q_lse = 0.0f32;
                let mut q_delta = 0.0f32;
                if i < q_hi {
                    q_lse = f32::cast_from(lse[q_base + i]);
                    q_delta = f32::cast_from(delta[q_base + i]);
                }
                let mut p_column = Quad::empty();
                let mut ds_column = Quad::empty();
                #[unroll]
                for t in 0..4usize {
                    let raw = s[t].extract(e) * p.scale;
                    // Sequential positions (the plain formula): `rel0 + 4 ty + t - c`.
                    let mut rel =
                        rel0 + (4 * ty) as i32 - (4 * tx) as i32 + comptime!(t as i32 - e as i32);
                    let mut seen = j0 + 4 * ty + t < seq_k && i0 + c < q_hi;
                    let mut query_segment = 0i32;
                    let mut key_segment = 0i32;
                    let mut y = raw;
                    if comptime!(general) {
                        let key = 4 * ty + t;
                        rel = kp_s[key] - q_pos;
                        seen = seen_s[key] == 1 && i0 + c < q_hi;
                        query_segment = q_seg;
                        key_segment = segment_s[key];
                        y = biased_score::<F, f32>(raw, rel, bias, slope, table_base, &p, native);
                    }
                    if !full && !visible(rel, seen, query_segment, key_segment, &p) {
                        y = f32::new(HIDDEN);
                    }
                    let (w, ds) = score_grad(raw, y, dp[t].extract(e), q_lse, q_delta, &p, native);
                    p_column.insert(t, w);
                    ds_column.insert(t, ds);
                }
                pt_s[c * ROW_STRIDE + ty] = p_column;
                dst_s[c * ROW_STRIDE + ty] = ds_column;
            }
            // dV += Pᵀ dO, dK += dSᵀ Q.
            product_n::<F>(
                &pt_s,
                grad,
                q_base + i0,
                q_hi - i0,
                &mut stage,
                &mut acc_v,
                d_v,
                b_rows,
            );
            product_n::<F>(
                &dst_s,
                q,
                q_base + i0,
                q_hi - i0,
                &mut stage,
                &mut acc_k,
                d_head,
                b_rows,
            );
            i0 += BLOCK;
        }
        h += 1;
    }

    #[unroll]
    for t in 0..4usize {
        let j = j0 + ty * 4 + t;
        if j < seq_k {
            let row = kv_row - j0 + j;
            #[unroll]
            for n in 0..k_out {
                let quad = acc_k[t * k_out + n];
                #[unroll]
                for x in 0..4usize {
                    let col = 4 * (tx + GROUPS * n) + x;
                    if col < d_head {
                        dk[row * d_head + col] = F::cast_from(quad.extract(x) * p.scale);
                    }
                }
            }
            #[unroll]
            for n in 0..v_out {
                let quad = acc_v[t * v_out + n];
                #[unroll]
                for x in 0..4usize {
                    let col = 4 * (tx + GROUPS * n) + x;
                    if col < d_v {
                        dv[row * d_v + col] = F::cast_from(quad.extract(x));
                    }
                }
            }
        }
    }
}

/// The backward's geometry: `chunk` dimensions a stage of the transposed products, `b_rows`
/// rows a stage of the row-major ones; `None` where the smallest stages do not fit the device
/// (then the shared backward runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BlockedBackwardPlan {
    pub chunk: usize,
    pub b_rows: usize,
}

/// The shared memory the dK/dV kernel (the larger) takes, in bytes.
pub(super) fn shared_bytes(chunk: usize, b_rows: usize, d_head: usize, d_v: usize) -> usize {
    let vector = 16;
    let stage = (chunk * (ROW_STRIDE + COL_STRIDE))
        .max(b_rows * d_head.max(d_v).next_multiple_of(4 * GROUPS) / 4);
    (stage + 2 * BLOCK * ROW_STRIDE) * vector
}

/// See [`BlockedBackwardPlan`]: stages of 32 dimensions where the widths pad to 32 no wider
/// than to 16, rows in stages of 64 where they fit, down to 16; within the device's shared
/// memory (48 KiB at most). `None` too for heads wider than 64, whose dK/dV kernel holds
/// `4 x (d_head + d_v) / 16` accumulators a unit and takes 150 registers (sm_80, the plain
/// formula) to 167 (the general one: a bias, a softcap, explicit positions, segments or padding),
/// NVRTC's: the shared backward runs there.
pub(super) fn plan(
    d_head: usize,
    d_v: usize,
    properties: &cubecl::ir::DeviceProperties,
) -> Option<BlockedBackwardPlan> {
    let hardware = &properties.hardware;
    if UNITS > hardware.max_units_per_cube as usize || d_head.max(d_v) > 64 {
        return None;
    }
    let budget = hardware.max_shared_memory_size.min(48 * 1024);
    let pads = |chunk: usize| d_head.next_multiple_of(chunk) + d_v.next_multiple_of(chunk);
    let chunk = if pads(32) == pads(16) { 32 } else { 16 };
    [64, 32, 16]
        .into_iter()
        .find(|&b_rows| shared_bytes(chunk, b_rows, d_head, d_v) <= budget)
        .map(|b_rows| BlockedBackwardPlan { chunk, b_rows })
}

/// The backward's launch: the dK/dV kernel, then the dQ kernel, with the inputs as the
/// backward's launch checked them (q, k, v, bias, padding, positions, segments), `D =
/// rowsum(dO O)` in f32, the forward's log-sum-exp and the output's gradient, into `dq`, `dk`,
/// `dv` (allocated by the caller). `false` where the plan does not fit (nothing launched: the
/// caller falls back to the shared backward).
pub(super) fn launch(
    inputs: [&CubeTensor; 7],
    [delta, lse, grad]: [&CubeTensor; 3],
    [dq, dk, dv]: [&CubeTensor; 3],
    sizes: &Sizes,
    tile: &TileArgs,
) -> bool {
    let [q, _, _, _, padding, positions, segments] = inputs;
    let client = q.client.clone();
    let properties = client.properties();
    let dtype = q.dtype;
    let Some(plan) = plan(sizes.d_head, sizes.d_v, &properties) else {
        return false;
    };
    count_backward_launch(FlashVariant::Blocked);
    let dtypes = storage_types(dtype, positions, segments, padding);
    let u32_of = |v: usize, what: &str| {
        u32::try_from(v).unwrap_or_else(|_| panic!("tiled_attention: {what} = {v} exceeds u32"))
    };
    let contiguous = |t: &CubeTensor| into_contiguous(t.clone()).into_tensor_arg();
    let values = ScalarValues::new(sizes, tile, ROWS, positions, dtype, 0);
    let general = mma::general(values.flags);
    let native = mma::emulation(&properties, DType::F16) == Some(false);
    let units = CubeDim::new_1d(UNITS as u32);
    // SAFETY: the inputs are made contiguous with the shapes `check_sizes` accepted (grad
    // `[batch, n_heads, seq_q, d_v]`, lse and delta `[batch, n_heads, seq_q, 1]`). The dK/dV
    // cubes read k and v and write dk, dv at keys `j < seq_k` of their (sequence, kv head),
    // columns below `d_head` and `d_v`, and read q, grad, lse, delta at rows `i < q_hi <=
    // seq_q` of the group's heads; the dQ cubes read q, grad, lse, delta and write dq at rows
    // `i < seq_q` of their head, read k and v at keys `j < k_hi <= seq_k`; the bias,
    // positions, segments and padding as the forward reads them; shared memory as the plan
    // fitted it.
    unsafe {
        flash_blocked_dkv_kernel::launch_unchecked(
            &client,
            CubeCount::Static(
                u32_of(sizes.seq_k.div_ceil(ROWS), "the key tiles"),
                u32_of(sizes.n_kv_heads, "n_kv_heads"),
                u32_of(sizes.batch, "batch"),
            ),
            units,
            inputs_arg(inputs),
            contiguous(delta),
            contiguous(lse),
            contiguous(grad),
            dk.clone().into_tensor_arg(),
            dv.clone().into_tensor_arg(),
            values.launch(),
            sizes.d_head,
            sizes.d_v,
            plan.chunk,
            plan.b_rows,
            general,
            native,
            dtypes,
        );
        flash_blocked_dq_kernel::launch_unchecked(
            &client,
            CubeCount::Static(
                u32_of(sizes.seq_q.div_ceil(ROWS), "the query tiles"),
                u32_of(sizes.n_heads, "n_heads"),
                u32_of(sizes.batch, "batch"),
            ),
            units,
            inputs_arg(inputs),
            contiguous(delta),
            contiguous(lse),
            contiguous(grad),
            dq.clone().into_tensor_arg(),
            values.launch(),
            sizes.d_head,
            sizes.d_v,
            plan.chunk,
            plan.b_rows,
            general,
            native,
            dtypes,
        );
    }
    true
}
