//! The attention's backward as one CubeCL kernel (wgpu, CUDA): FlashAttention-2's backward with
//! the bias and the masks computed per score, as the forward computes them ([`final_score`]).
//!
//! One launch, two kinds of cube, told apart by `CUBE_POS_X` (no atomics, no second launch):
//!
//! - the first `key_tiles` cubes of each (key/value head, sequence) hold keys: each unit keeps
//!   `per_unit` consecutive keys and values in registers with their gradients, and walks every
//!   query row (of each head of the group) that can see them, recomputing `p = exp(s - lse)`
//!   per score: `dV += p dO`, `dS = p (dO . v - D)`, `dK += scale dS q`. A group's heads sum into
//!   their key/value head in the unit's registers: nothing is repeated;
//! - the others hold query rows, laid out as the forward's tiles (`per_unit` rows of one head
//!   per unit): they walk the keys their rows can see: `dQ += scale dS k`, and reduce the bias's
//!   gradient of their rows per head and distance in registers (ALiBi's `-sum dS |rel|`, a
//!   table's entry per clamped distance), written once per unit.
//!
//! `D = rowsum(dO * O)` comes computed (in f32, before the launch: FlashAttention-2's
//! preprocessing step, two element-wise ops), so a key cube does not read a query's output
//! row for every query it meets. The bias's per-unit gradients (`[batch, n_heads, units, width]`, a few per query tile) are summed over
//! the batch and the units after the launch, by one reduction: no scatter per tile.
//!
//! Both kinds compute in f32 whatever the storage dtype, as the forward. No shared memory: this
//! is the variant for CPU-emulated adapters (lavapipe, where shared memory measured slower in the
//! forward); `backward_shared.rs` stages the other side of each product in shared memory for a
//! GPU. [`launch_backward`] picks one by the variant the forward was called with.
//!
//! # On NVIDIA GPUs
//!
//! Not built for them (the shared backward is `Auto`'s choice on a GPU): NVRTC (`docs/gpu.md`)
//! compiles it to 64 registers and spills 11 KiB a unit at f16 width 64, each unit's keys,
//! values and gradients (`per_unit x 2 x (d_head + d_v)` f32 values) living in local memory.
//! Listed in `tools/cuda/known-spills.json`.

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]
// Only the autodiff node calls the backward.
#![cfg_attr(not(feature = "autodiff"), allow(dead_code))]

use burn::backend::TensorMetadata;
use burn::tensor::{DType, Shape};
use burn_cubecl::{kernel::into_contiguous, ops::numeric::empty_device_dtype, tensor::CubeTensor};
use cubecl::prelude::*;

use super::backward_units::{
    cap_slope, probability, query_range, start_keys, start_queries, write_keys, write_queries,
};
use super::{
    ALIBI, BIAS_GRAD, Inputs, ScalarValues, Scalars, final_score, head_bias, inputs_arg, key_place,
    key_range, query_place, storage_types,
};
use crate::attention::tile::BiasKind;
use crate::attention::variant::{FlashVariant, count_backward_launch, pick};
use crate::attention::{Sizes, check_sizes};

/// One launch over `(key_tiles + query tiles, n_kv_heads, batch)` cubes of `CUBE_DIM_X` units;
/// see the module. `C` is the compute type (f32); `dbias` holds the units' bias gradients
/// `[batch, n_heads, units per head x query tiles, width]` (in `C`; `width` is 1 for a slope,
/// `2 reach + 1` for a table, held in `bias_slots` registers per unit; an unwritten placeholder
/// when no bias gradient is wanted); `delta` is `rowsum(dO * O)`, `[batch, n_heads, seq_q]` in
/// `C`. Inputs are contiguous.
#[cube(launch_unchecked, create_dummy_kernel)]
pub(super) fn flash_backward_kernel<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
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
    #[define(F, C, I, J, P)] _dtypes: [ElemType; 5],
) {
    let (q, k, v, bias) = (&inputs.q, &inputs.k, &inputs.v, &inputs.bias);
    let (padding, positions, segments) = (&inputs.padding, &inputs.positions, &inputs.segments);
    if CUBE_POS_X < p.key_tiles {
        key_cube::<F, C, I, J, P>(
            q, k, v, bias, padding, positions, segments, delta, lse, grad, dk, dv, &p, d_head, d_v,
            per_unit,
        );
    } else {
        query_cube::<F, C, I, J, P>(
            q, k, v, bias, padding, positions, segments, delta, lse, grad, dq, dbias, &p, d_head,
            d_v, per_unit, bias_slots,
        );
    }
}

/// A cube of keys: unit `u` holds keys `j0 = (CUBE_POS_X * CUBE_DIM_X + u) * per_unit ..` of
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
) {
    let seq_q = p.seq_q as usize;
    let seq_k = p.seq_k as usize;
    let group = p.group as usize;
    let kv_head = CUBE_POS_Y as usize;
    let b = CUBE_POS_Z as usize;
    let j0 = (CUBE_POS_X as usize * CUBE_DIM_X as usize + UNIT_POS_X as usize) * per_unit;
    let kv_base = (b * CUBE_COUNT_Y as usize + kv_head) * seq_k;

    let mut keys = start_keys::<F, C, I, J, P>(
        k, v, padding, positions, segments, p, b, kv_base, j0, per_unit, d_head, d_v,
    );

    let mut qs = Array::<C>::new(d_head);
    let mut gs = Array::<C>::new(d_v);
    if j0 < seq_k {
        let (i_lo, i_hi) = query_range(p, j0, min(j0 + per_unit, seq_k));
        for g in 0..group {
            let head = kv_head * group + g;
            let (slope, table_base) = head_bias::<F, C>(bias, p, head);
            for i in i_lo..i_hi {
                let row = (b * p.n_heads as usize + head) * seq_q + i;
                #[unroll]
                for d in 0..d_head {
                    qs[d] = C::cast_from(q[row * d_head + d]) * C::cast_from(p.scale);
                }
                #[unroll]
                for d in 0..d_v {
                    gs[d] = C::cast_from(grad[row * d_v + d]);
                }
                let row_delta = delta[row];
                let row_lse = C::cast_from(lse[row]);
                let (position, segment) = query_place(positions, segments, p, b, i);
                #[unroll]
                for t in 0..per_unit {
                    let mut raw = C::new(0.0);
                    #[unroll]
                    for d in 0..d_head {
                        raw += qs[d] * keys.keys[t * d_head + d];
                    }
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
                            dp += gs[d] * keys.values[t * d_v + d];
                            keys.dv[t * d_v + d] += w * gs[d];
                        }
                        let ds = w * (dp - row_delta) * cap_slope::<C>(raw, p);
                        #[unroll]
                        for d in 0..d_head {
                            keys.dk[t * d_head + d] += ds * qs[d];
                        }
                    }
                }
            }
        }
    }

    // dK accumulated from the scaled queries already.
    write_keys::<F, C>(
        dk,
        dv,
        &keys,
        p,
        kv_base,
        j0,
        C::new(1.0),
        per_unit,
        d_head,
        d_v,
    );
}

/// A cube of query rows, laid out as the forward's tile `CUBE_POS_X - key_tiles`: unit `u`
/// holds `per_unit` rows of one head, writes their dQ rows and its share of the bias's
/// gradient.
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
) {
    let seq_q = p.seq_q as usize;
    let seq_k = p.seq_k as usize;
    let group = p.group as usize;
    let rows = p.rows as usize;
    let kv_head = CUBE_POS_Y as usize;
    let b = CUBE_POS_Z as usize;
    let unit = UNIT_POS_X as usize;
    let units_per_head = rows / per_unit;
    let tile = (CUBE_POS_X - p.key_tiles) as usize;
    let r0 = tile * rows;
    let head = kv_head * group + unit / units_per_head;
    let slot = tile * units_per_head + unit % units_per_head;
    let i0 = r0 + (unit % units_per_head) * per_unit;
    let kv_base = (b * CUBE_COUNT_Y as usize + kv_head) * seq_k;

    let mut mine = start_queries::<F, C, I, J>(
        q, grad, delta, lse, positions, segments, p, b, head, i0, per_unit, d_head, d_v,
    );
    let (slope, table_base) = head_bias::<F, C>(bias, p, head);
    // The unit's bias gradient, when wanted: one slope (ALiBi) or one entry per clamped
    // distance (`2 reach + 1` of the `bias_slots`).
    let wanted = (p.flags & BIAS_GRAD) != 0;
    let mut dbs = Array::<C>::new(bias_slots);
    for e in 0..bias_slots {
        dbs[e] = C::new(0.0);
    }

    let mut ks = Array::<C>::new(d_head);
    let mut vs = Array::<C>::new(d_v);
    if i0 < seq_q {
        let (k_lo, k_hi) = key_range(p, r0);
        for j in k_lo..k_hi {
            #[unroll]
            for d in 0..d_head {
                ks[d] = C::cast_from(k[(kv_base + j) * d_head + d]);
            }
            #[unroll]
            for d in 0..d_v {
                vs[d] = C::cast_from(v[(kv_base + j) * d_v + d]);
            }
            let (key_position, seen, key_segment) =
                key_place(positions, segments, padding, p, b, j, true);
            #[unroll]
            for t in 0..per_unit {
                let mut raw = C::new(0.0);
                #[unroll]
                for d in 0..d_head {
                    raw += mine.q[t * d_head + d] * ks[d];
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
                        dp += mine.grad[t * d_v + d] * vs[d];
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
                        mine.dq[t * d_head + d] += ds * ks[d];
                    }
                }
            }
        }
    }

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

/// Rows (or keys) per unit for the backward: fewer than the forward's, as a unit keeps its rows'
/// gradients too. A power of two no larger than either sequence. On lavapipe, causal, 8 heads of
/// 32, 2048 tokens, forward plus backward: 1435 ms with 4, 1445 with 8, 1893 with 2.
pub(super) fn per_unit(sizes: &Sizes) -> usize {
    let per_unit: usize = match sizes.d_head + sizes.d_v {
        0..=96 => 4,
        97..=192 => 2,
        _ => 1,
    };
    per_unit.min(1 << sizes.seq_q.min(sizes.seq_k).max(1).ilog2())
}

/// The backward's host side: checks, contiguous inputs, the four outputs, one launch of
/// [`flash_backward_kernel`], and the bias's per-unit gradients summed into its shape.
#[allow(clippy::too_many_arguments)]
#[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
pub(crate) fn launch_backward(
    q: CubeTensor,
    k: CubeTensor,
    v: CubeTensor,
    bias: CubeTensor,
    padding: CubeTensor,
    positions: CubeTensor,
    segments: CubeTensor,
    output: CubeTensor,
    lse: CubeTensor,
    grad: CubeTensor,
    args: &crate::attention::BackwardArgs,
) -> (CubeTensor, CubeTensor, CubeTensor, CubeTensor) {
    use burn::backend::ops::FloatTensorOps;
    use burn::tensor::FloatDType;
    use burn_cubecl::CubeBackend;

    let tile = &args.tile;
    let sizes = check_sizes(
        &q.shape().dims::<4>(),
        &k.shape().dims::<4>(),
        &v.shape().dims::<4>(),
    );
    let client = q.client.clone();
    let dtype = q.dtype;
    let empty = |shape: Shape, dtype: DType| {
        empty_device_dtype(client.clone(), q.device.clone(), shape, dtype)
    };
    let (dq, dk, dv) = (
        empty(q.shape(), dtype),
        empty(k.shape(), dtype),
        empty(v.shape(), dtype),
    );
    let bias_shape = bias.shape();
    let device = q.device.clone();
    let zeros_bias =
        || CubeBackend::float_zeros(bias_shape.clone(), &device, FloatDType::from(dtype));
    if sizes.batch * sizes.n_heads * sizes.seq_q * sizes.seq_k == 0 {
        return (dq, dk, dv, zeros_bias());
    }
    let group = sizes.n_heads / sizes.n_kv_heads;
    let properties = client.properties();
    let variant = pick(tile.variant, &client, dtype);
    let bias_width = match tile.kind {
        _ if !args.wanted.bias => 0,
        BiasKind::None => 0,
        BiasKind::Alibi => 1,
        BiasKind::ByDistance { reach } => 2 * reach + 1,
    };
    // Registers for a unit's bias gradient: a table's width rounded up to a power of two, so
    // that tables of nearby reaches share one compiled kernel (each variant is seconds of
    // LLVM on lavapipe); one slot for a slope or none. Whether it is wanted at all is a
    // run-time flag (`BIAS_GRAD`), as ALiBi's is: no kernel of its own.
    let bias_slots = if bias_width > 1 {
        bias_width.next_power_of_two()
    } else {
        1
    };
    // D = rowsum(dO * O) in f32, [batch, n_heads, seq_q, 1].
    let f32_of = |t: CubeTensor| {
        if dtype == DType::F32 {
            t
        } else {
            CubeBackend::float_cast(t, FloatDType::F32)
        }
    };
    let delta = CubeBackend::float_sum_dim(
        CubeBackend::float_mul(f32_of(grad.clone()), f32_of(output)),
        3,
    );
    let dtypes = storage_types(dtype, &positions, &segments, &padding);
    let u32_of = |v: usize, what: &str| {
        u32::try_from(v).unwrap_or_else(|_| panic!("tiled_attention: {what} = {v} exceeds u32"))
    };
    let contiguous = |t: CubeTensor| into_contiguous(t).into_tensor_arg();
    // The bias's gradient from the units' (or rows') partial sums `[batch, n_heads, slots,
    // width]`: summed over the batch and the slots, in the bias's shape and dtype.
    let sum_bias = |partial: CubeTensor| {
        if bias_width == 0 {
            return zeros_bias();
        }
        let by_head = CubeBackend::float_sum_dim(CubeBackend::float_sum_dim(partial, 2), 0);
        let summed = CubeBackend::float_reshape(by_head, bias_shape.clone());
        if dtype == DType::F32 {
            summed
        } else {
            CubeBackend::float_cast(summed, FloatDType::from(dtype))
        }
    };

    let cpu_adapter = properties.identity.physical.is_none();
    // The tensor-core backward (`mma_backward.rs`), but for a distance table's gradient at
    // explicit positions (its sums follow the diagonals of sequential ones). Its tables take
    // `bias_slots` entries, as the shared backward's units do.
    let table_slots = if bias_width > 1 { bias_slots } else { 0 };
    if variant == FlashVariant::TensorCores
        && !(table_slots > 0 && tile.explicit)
        && let Some(emulate) = super::mma::emulation(&properties, dtype)
        && let Some(plan) = super::mma_backward::plan(
            &sizes,
            group,
            dtype.size(),
            &properties.hardware,
            emulate,
            table_slots,
        )
        && !super::mma::cut_short(plan.iterations(&sizes, group), emulate, cpu_adapter)
    {
        use super::mma_backward::{KEYS_PER_CUBE, flash_mma_dq_kernel};
        use super::mma_backward_keys::flash_mma_dkv_kernel;
        count_backward_launch(FlashVariant::TensorCores);
        let rows = plan.queries.rows();
        let query_tiles = sizes.seq_q.div_ceil(rows);
        // ALiBi: a slope gradient a row; a table: one table a warp.
        let partial = empty(
            Shape::new(if table_slots > 0 {
                [
                    sizes.batch,
                    sizes.n_heads,
                    query_tiles * plan.queries.tiles,
                    bias_width,
                ]
            } else {
                [sizes.batch, sizes.n_heads, query_tiles * rows, 1]
            }),
            DType::F32,
        );
        let mut values = ScalarValues::new(&sizes, tile, rows, &positions, dtype, 0);
        if bias_width > 0 {
            values.flags |= BIAS_GRAD;
        }
        let general = super::mma::general(values.flags);
        let units = CubeDim::new_1d(u32_of(plan.queries.units(), "the cube's units"));
        // SAFETY: the inputs are made contiguous with the shapes `check_sizes` accepted (grad
        // `[batch, n_heads, seq_q, d_v]`, lse and delta `[batch, n_heads, seq_q, 1]`, as the
        // forward and the line above wrote them). The dK/dV cubes read k and v and write dk, dv
        // at keys `j < seq_k` of their (sequence, kv head), columns below `d_head`, `d_v`, and
        // read q, grad, lse, delta at rows `ib + min(r, valid - 1) < seq_q` of the group's
        // heads; the dQ cubes read q, grad, lse, delta and write dq at rows `i < seq_q` of heads
        // `kv_head * group + run * span + w / tiles < n_heads`, read k and v at keys
        // `j0 + min(r, valid - 1) < seq_k`, and write each row of `partial`, whose shape counts
        // every row of every query tile (ALiBi) or every warp of every query tile (a table of
        // `bias_width` entries, shared memory of `table_slots >= bias_width` a warp), once. The bias, positions, segments and padding are
        // read as the forward reads them; shared memory as the plan fitted it.
        unsafe {
            flash_mma_dkv_kernel::launch_unchecked(
                &client,
                CubeCount::Static(
                    u32_of(sizes.seq_k.div_ceil(KEYS_PER_CUBE), "the key tiles"),
                    u32_of(sizes.n_kv_heads, "n_kv_heads"),
                    u32_of(sizes.batch, "batch"),
                ),
                units,
                inputs_arg([&q, &k, &v, &bias, &padding, &positions, &segments]),
                contiguous(delta.clone()),
                contiguous(lse.clone()),
                contiguous(grad.clone()),
                dk.clone().into_tensor_arg(),
                dv.clone().into_tensor_arg(),
                values.launch(),
                u32_of(group, "the group"),
                sizes.d_head,
                sizes.d_v,
                plan.block,
                plan.stages,
                general,
                emulate,
                dtypes,
            );
            flash_mma_dq_kernel::launch_unchecked(
                &client,
                CubeCount::Static(
                    u32_of(query_tiles, "the query tiles"),
                    u32_of(
                        sizes.n_kv_heads * (group / plan.queries.span),
                        "the key/value heads times their runs of heads",
                    ),
                    u32_of(sizes.batch, "batch"),
                ),
                units,
                inputs_arg([&q, &k, &v, &bias, &padding, &positions, &segments]),
                contiguous(delta),
                contiguous(lse),
                contiguous(grad),
                dq.clone().into_tensor_arg(),
                partial.clone().into_tensor_arg(),
                values.launch(),
                u32_of(group, "the group"),
                u32_of(plan.queries.span, "the heads per cube"),
                sizes.d_head,
                sizes.d_v,
                plan.queries.block,
                plan.queries.m_tiles,
                plan.queries.stages,
                general,
                table_slots,
                emulate,
                dtypes,
            );
        }
        let dbias = sum_bias(partial);
        return (dq, dk, dv, dbias);
    }

    // The register-blocked backward (`blocked_backward.rs`), but for a bias's own gradient
    // (the shared backward sums those).
    if variant == FlashVariant::Blocked
        && bias_width == 0
        && super::blocked_backward::launch(
            [&q, &k, &v, &bias, &padding, &positions, &segments],
            [&delta, &lse, &grad],
            [&dq, &dk, &dv],
            &sizes,
            tile,
        )
    {
        return (dq, dk, dv, zeros_bias());
    }

    // The variant the caller chose (or the adapter's), as the forward picks its kernel; the
    // shared one where the device can hold its stages (the tensor-core one's fallback too, and
    // the register-blocked backward's where a bias's gradient is wanted).
    let shared = match variant {
        FlashVariant::Shared | FlashVariant::TensorCores | FlashVariant::Blocked => {
            super::backward_shared::plan(&sizes, group, dtype.size(), &properties.hardware)
        }
        _ => None,
    };
    let (per_unit, units, rows, stage) = match shared {
        Some(plan) => (plan.per_unit, plan.units, plan.rows, plan.stage),
        None => {
            let per_unit = per_unit(&sizes);
            // As the forward's register cubes: 32 units whatever the lengths, so one compiled
            // kernel serves every length of a width and rows per unit (issue 70; with cubes
            // sized by the lengths, the demo's 3-token training on lavapipe had taken 192 s
            // against 204 s with 32, where the kernels' test compiled a kernel per length class).
            let units_per_head = super::units_per_head(group);
            let units = group * units_per_head;
            (per_unit, units, units_per_head * per_unit, None)
        }
    };
    let units_per_head = rows / per_unit;
    let key_tiles = sizes.seq_k.div_ceil(units * per_unit);
    let query_tiles = sizes.seq_q.div_ceil(rows);
    // The units' bias gradients, f32: [batch, n_heads, query_tiles x units_per_head, width].
    let slots = query_tiles * units_per_head;
    let partial = empty(
        Shape::new([sizes.batch, sizes.n_heads, slots, bias_width.max(1)]),
        DType::F32,
    );
    let mut values = ScalarValues::new(&sizes, tile, rows, &positions, dtype, key_tiles);
    if bias_width > 0 {
        values.flags |= BIAS_GRAD;
    }
    let count = CubeCount::Static(
        u32_of(key_tiles + query_tiles, "the backward's tiles"),
        u32_of(sizes.n_kv_heads, "n_kv_heads"),
        u32_of(sizes.batch, "batch"),
    );
    // SAFETY: the inputs are made contiguous with the shapes `check_sizes` accepted (output and
    // grad `[batch, n_heads, seq_q, d_v]`, lse and delta `[batch, n_heads, seq_q, 1]`, as the forward
    // wrote them); key cubes read and write k, v, dk, dv at keys `j < seq_k` of their
    // (sequence, kv head) and q, delta, grad, lse at rows `i < seq_q`; query cubes read and
    // write q, dq, delta, grad, lse at rows `i < seq_q` and k, v at keys `j < k_hi <= seq_k`;
    // the bias, positions, segments and padding as the forward reads them; each unit of a query
    // cube writes its own `bias_width` slot of `partial`, whose shape counts every unit.
    macro_rules! launch_with {
        ($kernel:path $(, $stage:expr)?) => {
            unsafe {
                $kernel(
                    &client,
                    count,
                    CubeDim::new_1d(u32_of(units, "the cube's units")),
                    inputs_arg([&q, &k, &v, &bias, &padding, &positions, &segments]),
                    contiguous(delta),
                    contiguous(lse),
                    contiguous(grad),
                    dq.clone().into_tensor_arg(),
                    dk.clone().into_tensor_arg(),
                    dv.clone().into_tensor_arg(),
                    partial.clone().into_tensor_arg(),
                    values.launch(),
                    sizes.d_head,
                    sizes.d_v,
                    per_unit,
                    bias_slots,
                    $($stage,)?
                    dtypes,
                )
            }
        };
    }
    count_backward_launch(if stage.is_some() {
        FlashVariant::Shared
    } else {
        FlashVariant::Registers
    });
    match stage {
        Some(stage) => launch_with!(
            super::backward_shared::flash_backward_shared_kernel::launch_unchecked,
            stage
        ),
        None => launch_with!(flash_backward_kernel::launch_unchecked),
    }
    let dbias = sum_bias(partial);
    (dq, dk, dv, dbias)
}
