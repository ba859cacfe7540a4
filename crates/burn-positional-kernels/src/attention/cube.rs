//! The attention as one CubeCL kernel (wgpu, CUDA): FlashAttention-2's loop with the bias and
//! the masks computed inside it.
//!
//! A cube takes one tile: `rows` query rows of each of the `group` heads that share one
//! key/value head of one sequence, so the group's units read the same key and value rows
//! (once per group from device memory, then from cache). Each unit holds a few consecutive
//! query rows (4 or 8 for narrow heads: each key and value element it loads serves all of
//! them) and walks the keys the tile can see in blocks of 8: it scores its rows against the
//! block (softcap, bias from relative positions, masks), rescales its running sum and output
//! once per block, and accumulates `p v` in registers. Only the output and one log-sum-exp per
//! row are written: no score leaves the unit. Computed in f32 whatever the storage dtype, as
//! the host kernel.
//!
//! No shared memory: on lavapipe (the CPU-emulated Vulkan of CI) staging key blocks in shared
//! memory with two barriers per block measured twice as slow as reading them from device
//! memory (2.2 s against 1.1 s for a causal ALiBi block at 2048 tokens); several rows per unit
//! halved it again. A GPU would want shared-memory staging and tensor-core products; no GPU
//! was at hand to tune for.

// Kernel code is CubeCL's Rust subset: one argument per launch value.
#![allow(clippy::too_many_arguments)]

use burn::backend::{TensorMetadata, cubecl::dtype_to_storage_type};
use burn::tensor::{DType, Shape};
use burn_cubecl::{kernel::into_contiguous, ops::numeric::empty_device_dtype, tensor::CubeTensor};
use cubecl::prelude::*;

use super::check_sizes;
use super::tile::{BiasKind, TileArgs};

/// A hidden score (WGSL has no infinity literal): `exp(HIDDEN - m)` is 0 for any real `m`.
const HIDDEN: f32 = -1.0e30;
/// A running maximum below this has seen no key.
const UNSEEN: f32 = -1.0e29;
/// Bits of the kernel's `flags`.
const ALIBI: u32 = 1;
const BY_DISTANCE: u32 = 2;
const CAUSAL: u32 = 4;
const WINDOW: u32 = 8;
const EXPLICIT: u32 = 16;
const SEGMENTED: u32 = 32;
const PADDED: u32 = 64;
const CAPPED: u32 = 128;

/// Keys scored before the online softmax rescales a row (one rescale per block).
const KEY_BLOCK: usize = 8;
/// Sequential positions, window sizes and explicit positions stay below this, so that the
/// kernel's i32 sums of two never overflow.
const POSITION_LIMIT: usize = 1 << 30;

/// One cube per (query tile, key/value head, sequence) = `(CUBE_POS_X, CUBE_POS_Y,
/// CUBE_POS_Z)`. The tile holds `rows` query rows of each head of the group; unit `u` holds
/// `per_unit` consecutive rows of head `kv_head * group + u / (rows / per_unit)`, so each key
/// and value element it loads serves `per_unit` queries. `C` is the compute type (f32).
/// Inputs are contiguous.
#[cube(launch_unchecked)]
fn flash_kernel<F: Float, C: Float, I: Int, J: Int, P: Numeric>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    bias: &Tensor<F>,
    padding: &Tensor<P>,
    positions: &Tensor<I>,
    segments: &Tensor<J>,
    output: &mut Tensor<F>,
    lse: &mut Tensor<F>,
    n_heads: u32,
    seq_q: u32,
    seq_k: u32,
    rows: u32,
    query_offset: i32,
    key_offset: i32,
    before: i32,
    after: i32,
    reach: i32,
    positions_shared: u32,
    scale: f32,
    softcap: f32,
    lowest: f32,
    #[comptime] d_head: usize,
    #[comptime] d_v: usize,
    #[comptime] per_unit: usize,
    #[comptime] block: usize,
    flags: u32,
    #[comptime] group: usize,
    #[define(F, C, I, J, P)] _dtypes: [ElemType; 5],
) {
    // What the score computes: run-time flags (uniform across the launch), so that one
    // compiled kernel per head width and group serves every option.
    let alibi = (flags & ALIBI) != 0;
    let by_distance = (flags & BY_DISTANCE) != 0;
    let causal = (flags & CAUSAL) != 0;
    let window = (flags & WINDOW) != 0;
    let explicit = (flags & EXPLICIT) != 0;
    let segmented = (flags & SEGMENTED) != 0;
    let padded = (flags & PADDED) != 0;
    let capped = (flags & CAPPED) != 0;
    let rows = rows as usize;
    let seq_q = seq_q as usize;
    let seq_k = seq_k as usize;
    let n_heads = n_heads as usize;
    let tile = CUBE_POS_X as usize;
    let kv_head = CUBE_POS_Y as usize;
    let b = CUBE_POS_Z as usize;
    let n_kv_heads = CUBE_COUNT_Y as usize;
    let unit = UNIT_POS_X as usize;
    let units_per_head = rows / per_unit;
    let r0 = tile * rows;
    let head = kv_head * group + unit / units_per_head;
    let i0 = r0 + (unit % units_per_head) * per_unit;
    let hidden = C::new(HIDDEN);

    let mut position_row = b;
    if positions_shared == 1 {
        position_row = 0;
    }
    let positions_base = position_row * (seq_q + seq_k);
    let segments_base = b * (seq_q + seq_k);

    // The unit's queries, scaled, in registers; where they sit; their segments.
    let mut q_rows = Array::<C>::new(per_unit * d_head);
    let mut acc = Array::<C>::new(per_unit * d_v);
    let mut m = Array::<C>::new(per_unit);
    let mut l = Array::<C>::new(per_unit);
    let mut qp = Array::<i32>::new(per_unit);
    let mut q_segment = Array::<i32>::new(per_unit);
    #[unroll]
    for t in 0..per_unit {
        let i = i0 + t;
        let valid = i < seq_q;
        let q_base = ((b * n_heads + head) * seq_q + i) * d_head;
        #[unroll]
        for d in 0..d_head {
            let mut x = C::new(0.0);
            if valid {
                x = C::cast_from(q[q_base + d]) * C::cast_from(scale);
            }
            q_rows[t * d_head + d] = x;
        }
        #[unroll]
        for d in 0..d_v {
            acc[t * d_v + d] = C::new(0.0);
        }
        m[t] = hidden;
        l[t] = C::new(0.0);
        let mut p = query_offset + i as i32;
        let mut g = 0i32;
        if valid {
            if explicit {
                p = i32::cast_from(positions[positions_base + i]);
            }
            if segmented {
                g = i32::cast_from(segments[segments_base + i]);
            }
        }
        qp[t] = p;
        q_segment[t] = g;
    }
    let mut slope = C::new(0.0);
    if alibi {
        slope = C::cast_from(bias[head]);
    }
    let table_base = head * (2 * reach as usize + 1);

    // The keys the tile's rows can see (sequential positions; all with explicit ones).
    let mut k_lo = 0i32;
    let mut k_hi = seq_k as i32;
    if !explicit {
        let last_row = min(r0 + rows, seq_q) - 1;
        let first = query_offset + r0 as i32;
        let last = query_offset + last_row as i32;
        if causal {
            k_hi = min(k_hi, last - key_offset + 1);
        }
        if window {
            k_lo = max(k_lo, first - before - key_offset);
            if !causal {
                k_hi = min(k_hi, last + after - key_offset + 1);
            }
        }
    }
    let k_lo = max(k_lo, 0) as usize;
    let k_hi = max(k_hi, 0) as usize;
    let kv_base = (b * n_kv_heads + kv_head) * seq_k;

    // Keys in blocks of `block`: scores first, then one rescale per row and block.
    let mut s = Array::<C>::new(per_unit * block);
    let mut j0 = k_lo;
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
                        s[t * block + c] += q_rows[t * d_head + d] * kd;
                    }
                }
            }
            let mut kp = key_offset + j as i32;
            let mut key_seen = in_range;
            let mut k_segment = 0i32;
            if in_range {
                if explicit {
                    kp = i32::cast_from(positions[positions_base + seq_q + j]);
                }
                if padded {
                    key_seen = padding[b * seq_k + j] == P::from_int(0);
                }
                if segmented {
                    k_segment = i32::cast_from(segments[segments_base + seq_q + j]);
                }
            }
            #[unroll]
            for t in 0..per_unit {
                let mut x = s[t * block + c];
                if capped {
                    x = C::tanh(x / C::cast_from(softcap)) * C::cast_from(softcap);
                }
                let rel = kp - qp[t];
                let mut seen = key_seen && i0 + t < seq_q;
                if causal {
                    seen = seen && rel <= 0;
                }
                if window {
                    seen = seen && rel >= -before;
                    if !causal {
                        seen = seen && rel <= after;
                    }
                }
                if segmented {
                    seen = seen && k_segment == q_segment[t];
                }
                if alibi {
                    let mut distance = rel;
                    if rel < 0 {
                        distance = -rel;
                    }
                    x -= slope * C::cast_from(distance);
                }
                if by_distance {
                    let at = min(max(rel, -reach), reach) + reach;
                    x += C::cast_from(bias[table_base + at as usize]);
                }
                if !seen {
                    x = hidden;
                }
                s[t * block + c] = x;
            }
        }
        // The online softmax: the block's maximum rescales what was summed so far.
        #[unroll]
        for t in 0..per_unit {
            let mut block_max = hidden;
            #[unroll]
            for c in 0..block {
                block_max = max(block_max, s[t * block + c]);
            }
            let m_new = max(m[t], block_max);
            if m_new > C::new(UNSEEN) {
                let correction = C::exp(m[t] - m_new);
                l[t] *= correction;
                #[unroll]
                for d in 0..d_v {
                    acc[t * d_v + d] *= correction;
                }
                m[t] = m_new;
            }
            #[unroll]
            for c in 0..block {
                let mut p = C::new(0.0);
                if m_new > C::new(UNSEEN) {
                    p = C::exp(s[t * block + c] - m_new);
                }
                l[t] += p;
                s[t * block + c] = p;
            }
        }
        #[unroll]
        for c in 0..block {
            let j = j0 + c;
            if j < k_hi {
                #[unroll]
                for d in 0..d_v {
                    let vd = C::cast_from(v[(kv_base + j) * d_v + d]);
                    #[unroll]
                    for t in 0..per_unit {
                        acc[t * d_v + d] += s[t * block + c] * vd;
                    }
                }
            }
        }
        j0 += block;
    }

    #[unroll]
    for t in 0..per_unit {
        let i = i0 + t;
        if i < seq_q {
            let row = (b * n_heads + head) * seq_q + i;
            let mut inv = C::new(0.0);
            let mut log_sum = C::cast_from(lowest);
            if l[t] > C::new(0.0) {
                inv = C::new(1.0) / l[t];
                log_sum = m[t] + C::ln(l[t]);
            }
            #[unroll]
            for d in 0..d_v {
                output[row * d_v + d] = F::cast_from(acc[t * d_v + d] * inv);
            }
            lse[row] = F::cast_from(log_sum);
        }
    }
}

/// Host side: checks shapes, makes inputs contiguous, allocates the output and the
/// log-sum-exp and launches [`flash_kernel`] once.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    q: CubeTensor,
    k: CubeTensor,
    v: CubeTensor,
    bias: CubeTensor,
    padding: CubeTensor,
    positions: CubeTensor,
    segments: CubeTensor,
    args: &TileArgs,
) -> (CubeTensor, CubeTensor) {
    let sizes = check_sizes(
        &q.shape().dims::<4>(),
        &k.shape().dims::<4>(),
        &v.shape().dims::<4>(),
    );
    let client = q.client.clone();
    let dtype = q.dtype;
    assert!(
        k.dtype == dtype && v.dtype == dtype && bias.dtype == dtype,
        "tiled_attention: q, k, v and the bias must share one float dtype, got {:?}, {:?}, {:?} \
         and {:?}",
        dtype,
        k.dtype,
        v.dtype,
        bias.dtype
    );
    let output = empty_device_dtype(
        client.clone(),
        q.device.clone(),
        Shape::new([sizes.batch, sizes.n_heads, sizes.seq_q, sizes.d_v]),
        dtype,
    );
    let lse = empty_device_dtype(
        client.clone(),
        q.device.clone(),
        Shape::new([sizes.batch, sizes.n_heads, sizes.seq_q, 1]),
        dtype,
    );
    if sizes.batch * sizes.n_heads * sizes.seq_q == 0 {
        return (output, lse);
    }
    assert!(
        sizes.seq_k > 0,
        "tiled_attention: the kernel needs at least one key (the entry point returns zeros)"
    );
    let limit = |v: usize, what: &str| {
        assert!(
            v < POSITION_LIMIT,
            "tiled_attention: {what} = {v} reaches the kernel's position limit {POSITION_LIMIT}"
        );
        v as i32
    };
    limit(args.query_offset + sizes.seq_q, "the last query position");
    limit(args.key_offset + sizes.seq_k, "the last key position");
    let group = sizes.n_heads / sizes.n_kv_heads;
    // Rows per unit: each key and value element loaded serves this many queries (fewer for
    // wide heads, whose rows take more registers).
    // A power of two no larger than seq_q: a decoding step (one query) keeps one row per unit,
    // and there are at most four compiled variants per head width.
    let per_unit = match sizes.d_head + sizes.d_v {
        0..=96 => 8,
        97..=192 => 2,
        _ => 1,
    }
    .min(1 << sizes.seq_q.ilog2());
    // About 32 units per cube, at least one per head of the group.
    let units_per_head = (32 / group).max(1).min(sizes.seq_q.div_ceil(per_unit));
    let rows = units_per_head * per_unit;
    let tiles = sizes.seq_q.div_ceil(rows);
    let window = args.window;
    let clamp = |w: usize| w.min(POSITION_LIMIT) as i32;
    let (alibi, by_distance, reach) = match args.kind {
        BiasKind::None => (false, false, 0),
        BiasKind::Alibi => (true, false, 0),
        BiasKind::ByDistance { reach } => (false, true, limit(reach, "the bias's reach")),
    };
    let positions_shared = u32::from(args.explicit && positions.shape().dims::<2>()[0] == 1);
    let lowest = dtype.finfo().map_or(f32::MIN, |f| f.min as f32);
    let int_type = |t: &CubeTensor| dtype_to_storage_type(t.dtype);
    let dtypes = [
        dtype_to_storage_type(dtype),
        dtype_to_storage_type(DType::F32),
        int_type(&positions),
        int_type(&segments),
        int_type(&padding),
    ];
    let u32_of = |v: usize, what: &str| {
        u32::try_from(v).unwrap_or_else(|_| panic!("tiled_attention: {what} = {v} exceeds u32"))
    };
    let cube_count = CubeCount::Static(
        u32_of(tiles, "the query tiles"),
        u32_of(sizes.n_kv_heads, "n_kv_heads"),
        u32_of(sizes.batch, "batch"),
    );
    let cube_dim = CubeDim::new_1d(u32_of(group * units_per_head, "the cube's units"));
    let contiguous = into_contiguous;
    // SAFETY: the inputs are made contiguous with the shapes `check_sizes` accepted; every
    // read of q, the output and the log-sum-exp is guarded by `i < seq_q`; k and v are read at
    // keys `j0 + jj < k_hi <= seq_k` of this cube's (sequence, kv head); the bias at head
    // `h < n_heads` (slopes) or `h * (2 reach + 1) + [0, 2 reach]` (table); positions at row 0
    // or `b` of `[1 or batch, seq_q + seq_k]`, segments at row `b` of `[batch, seq_q + seq_k]`
    // and padding at row `b` of `[batch, seq_k]`, each only when `args` says it is given (the
    // api checked those shapes).
    unsafe {
        flash_kernel::launch_unchecked(
            &client,
            cube_count,
            cube_dim,
            contiguous(q).into_tensor_arg(),
            contiguous(k).into_tensor_arg(),
            contiguous(v).into_tensor_arg(),
            contiguous(bias).into_tensor_arg(),
            contiguous(padding).into_tensor_arg(),
            contiguous(positions).into_tensor_arg(),
            contiguous(segments).into_tensor_arg(),
            output.clone().into_tensor_arg(),
            lse.clone().into_tensor_arg(),
            u32_of(sizes.n_heads, "n_heads"),
            u32_of(sizes.seq_q, "seq_q"),
            u32_of(sizes.seq_k, "seq_k"),
            u32_of(rows, "rows"),
            limit(args.query_offset, "the first query position"),
            limit(args.key_offset, "the first key position"),
            window.map_or(0, |w| clamp(w.before)),
            window.map_or(0, |w| clamp(w.after)),
            reach,
            positions_shared,
            args.scale as f32,
            args.softcap.unwrap_or(1.0) as f32,
            lowest,
            sizes.d_head,
            sizes.d_v,
            per_unit,
            KEY_BLOCK,
            [
                (alibi, ALIBI),
                (by_distance, BY_DISTANCE),
                (args.causal, CAUSAL),
                (window.is_some(), WINDOW),
                (args.explicit, EXPLICIT),
                (args.segments, SEGMENTED),
                (args.padded, PADDED),
                (args.softcap.is_some(), CAPPED),
            ]
            .into_iter()
            .filter(|(on, _)| *on)
            .fold(0, |flags, (_, bit)| flags | bit),
            group,
            dtypes,
        );
    }
    (output, lse)
}
