//! The attention's backward on the CPU backends (flex, ndarray): FlashAttention-2's backward
//! with the bias and the masks computed inside its tiles, one call per op.
//!
//! Work is cut into tasks of (sequence, key/value head, chunk of key blocks); rayon runs them.
//! A chunk takes every `chunks`-th block of [`KEY_BLOCK`] keys (interleaved, so that under a
//! causal mask, where early keys are seen by more queries, the chunks weigh about the same). For
//! each of its key blocks a task walks the query rows that can see the block, in tiles of
//! [`QUERY_TILE`] rows of each head of the group, and recomputes the tile's probabilities from
//! the forward's log-sum-exp:
//!
//! ```text
//! S  = (scale Q) K_block^T; S = c tanh(S / c); S += bias(rel)   as the forward; hidden: -inf
//! P  = exp(S - lse)                         0 where hidden
//! dV_block += P^T dO                        one gemm
//! dP = dO V_block^T;  dS = P (dP - D)       D = rowsum(dO * O), once per row before the tasks
//! dslope_h -= sum dS |rel|;  dtable_h[clamp(rel) + reach] += dS   per head and distance
//! dS = dS (1 - tanh^2)                      under a softcap
//! dQ += scale dS K_block;  dK_block += scale dS^T Q               two gemms
//! ```
//!
//! A task owns its key blocks' rows of dK and dV, written once; dQ rows are shared by the key
//! blocks of a row, so each chunk sums into a dQ of its own (one, written in place, when a
//! chunk is the whole sequence) and the chunks' are added at the end. The bias's gradient is
//! reduced per head and distance in each task (a run of the table per row of a block, no
//! scatter) and the tasks' are added. The grouped heads' dK and dV are summed in the task,
//! whose tiles stack the group: nothing is repeated. Memory: the chunks' dQ, linear in the
//! sequence; no `seq_q x seq_k` block.
//!
//! Past 700 lines for one reason to change: the backward's formula. The task loop, its gemm
//! calls and the per-row helpers (probabilities, score gradients, the bias's gradient and its
//! transpose test against the forward's table read) change together when it does.

// Only the autodiff node calls the backward.
#![cfg_attr(not(feature = "autodiff"), allow(dead_code))]

use std::mem::MaybeUninit;

use burn::backend::TensorMetadata;
use burn::tensor::{Shape, TensorData};
use multiversion::multiversion;
use rayon::prelude::*;

use super::Sizes;
use super::Wanted;
use super::host::{Inputs, KEY_BLOCK, Out, Relative, Row, exp_nonpositive, mask_and_bias, sum_of};
use super::tile::{BiasKind, TileArgs};
use crate::host_io::{HostTensors, assume_init, in_dtype, output_buffer};

/// Query rows per tile of one head: a tile's scores and score gradients (`64 x 64` floats each)
/// stay in L1/L2 with the key block.
const QUERY_TILE: usize = 64;

/// Tasks the work is cut into, per rayon thread (more, smaller tasks balance uneven ones).
const TASKS_PER_THREAD: usize = 4;

/// The backward on a host backend: `(dq, dk, dv, dbias)` in the shapes and dtype of q, k, v
/// and the bias; zeros where `wanted` says a gradient is not needed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<B: HostTensors>(
    q: &B::Primitive,
    k: &B::Primitive,
    v: &B::Primitive,
    bias: &B::Primitive,
    padding: &B::Primitive,
    positions: &B::Primitive,
    segments: &B::Primitive,
    output: &B::Primitive,
    lse: &B::Primitive,
    grad: &B::Primitive,
    args: &TileArgs,
    wanted: Wanted,
) -> (B::Primitive, B::Primitive, B::Primitive, B::Primitive)
where
    B::Primitive: TensorMetadata,
{
    let sizes = super::check_sizes(
        &q.shape().dims::<4>(),
        &k.shape().dims::<4>(),
        &v.shape().dims::<4>(),
    );
    let dtype = q.dtype();
    let (qv, kv, vv, bv) = (B::floats(q), B::floats(k), B::floats(v), B::floats(bias));
    let (ov, lv, gv) = (B::floats(output), B::floats(lse), B::floats(grad));
    let padding = args.padded.then(|| B::bools(padding));
    let positions = args.explicit.then(|| B::ints(positions));
    let segments = args.segments.then(|| B::ints(segments));
    let inputs = Inputs {
        q: &qv,
        k: &kv,
        v: &vv,
        bias: &bv,
        padding: padding.as_deref(),
        positions: positions.as_ref(),
        segments: segments.as_ref(),
    };
    let saved = Saved {
        output: &ov,
        lse: &lv,
        grad: &gv,
    };
    let grads = backward(&inputs, &saved, sizes, args, wanted);
    let wrap = |values: Vec<f32>, shape: Shape| {
        B::from_data(in_dtype(TensorData::new(values, shape), dtype))
    };
    (
        wrap(grads.q, q.shape()),
        wrap(grads.k, k.shape()),
        wrap(grads.v, v.shape()),
        wrap(grads.bias, bias.shape()),
    )
}

/// What the forward kept, and the output's gradient, as host slices (f32).
pub(crate) struct Saved<'a> {
    /// `[batch, n_heads, seq_q, d_v]`.
    pub output: &'a [f32],
    /// `[batch, n_heads, seq_q]`.
    pub lse: &'a [f32],
    /// `[batch, n_heads, seq_q, d_v]`.
    pub grad: &'a [f32],
}

/// The four gradients, row-major, f32 (zeros where not wanted).
pub(crate) struct Grads {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub bias: Vec<f32>,
}

/// A worker's scratch, reused across its tasks.
struct Scratch {
    /// Probabilities of a tile, `[QUERY_TILE, KEY_BLOCK]`.
    p: Vec<f32>,
    /// `tanh` of the tile's scores under a softcap.
    t: Vec<f32>,
    /// Score gradients of a tile.
    ds: Vec<f32>,
    /// The block's dK and dV.
    dk: Vec<f32>,
    dv: Vec<f32>,
}

/// The gradients on host slices (see the module's formulas).
pub(crate) fn backward(
    inputs: &Inputs<'_>,
    saved: &Saved<'_>,
    sizes: Sizes,
    args: &TileArgs,
    wanted: Wanted,
) -> Grads {
    let Sizes {
        batch,
        n_heads,
        n_kv_heads,
        seq_q,
        seq_k,
        d_head,
        d_v,
    } = sizes;
    let group = n_heads / n_kv_heads;
    let bias_width = match args.kind {
        BiasKind::None => 0,
        BiasKind::Alibi => 1,
        BiasKind::ByDistance { reach } => 2 * reach + 1,
    };
    let wants_bias = wanted.bias && bias_width > 0;
    let mut grads = Grads {
        q: Vec::new(),
        k: Vec::new(),
        v: Vec::new(),
        bias: vec![0.0; inputs.bias.len()],
    };
    let zeros = |len: usize| vec![0.0f32; len];
    if batch * n_heads * seq_q * seq_k == 0 || !(wanted.q || wanted.k || wanted.v || wants_bias) {
        grads.q = zeros(inputs.q.len());
        grads.k = zeros(inputs.k.len());
        grads.v = zeros(inputs.v.len());
        return grads;
    }
    // D = rowsum(dO * O), one per query row.
    let delta: Vec<f32> = if wanted.q || wanted.k || wants_bias {
        let rows = saved
            .grad
            .chunks(d_v.max(1))
            .zip(saved.output.chunks(d_v.max(1)));
        if saved.grad.len() >= crate::host_io::PARALLEL_FROM {
            saved
                .grad
                .par_chunks(d_v.max(1))
                .zip(saved.output.par_chunks(d_v.max(1)))
                .map(|(g, o)| dot(g, o))
                .collect()
        } else {
            rows.map(|(g, o)| dot(g, o)).collect()
        }
    } else {
        Vec::new()
    };
    let blocks = seq_k.div_ceil(KEY_BLOCK);
    let heads = batch * n_kv_heads;
    let threads = rayon::current_num_threads().max(1);
    let chunks = (threads * TASKS_PER_THREAD)
        .div_ceil(heads)
        .clamp(1, blocks);
    let tasks = heads * chunks;
    let dq_len = batch * n_heads * seq_q * d_head;
    // One dQ per chunk (zeros: a chunk adds into the rows its keys are seen by).
    let mut dq = if wanted.q {
        vec![0.0f32; chunks * dq_len]
    } else {
        Vec::new()
    };
    let mut dk = if wanted.k {
        output_buffer(inputs.k.len())
    } else {
        Vec::new()
    };
    let mut dv = if wanted.v {
        output_buffer(inputs.v.len())
    } else {
        Vec::new()
    };
    let (dq_out, dk_out, dv_out) = (
        Out(dq.as_mut_ptr().cast::<MaybeUninit<f32>>()),
        Out(dk.as_mut_ptr()),
        Out(dv.as_mut_ptr()),
    );
    let job = Job {
        inputs,
        saved,
        delta: &delta,
        sizes,
        args,
        wanted: Wanted {
            bias: wants_bias,
            ..wanted
        },
        group,
        chunks,
        bias_width,
        dq_len,
    };
    let scratch = || Scratch {
        p: vec![0.0; QUERY_TILE * KEY_BLOCK],
        t: vec![
            0.0;
            if args.softcap.is_some() {
                QUERY_TILE * KEY_BLOCK
            } else {
                0
            }
        ],
        ds: vec![0.0; QUERY_TILE * KEY_BLOCK],
        dk: vec![0.0; KEY_BLOCK * d_head],
        dv: vec![0.0; KEY_BLOCK * d_v],
    };
    let work = batch * n_heads * seq_q * seq_k * (d_head + d_v);
    // Each task returns its bias gradient, `[group, bias_width]` for its heads.
    let partials: Vec<(usize, Vec<f32>)> = if tasks > 1 && work >= 1 << 16 {
        (0..tasks)
            .into_par_iter()
            .map_init(scratch, |s, task| {
                (task, job.run(task, s, dq_out, dk_out, dv_out))
            })
            .collect()
    } else {
        let mut s = scratch();
        (0..tasks)
            .map(|task| (task, job.run(task, &mut s, dq_out, dk_out, dv_out)))
            .collect()
    };
    if wants_bias {
        for (task, partial) in partials {
            let kv_head = task / chunks % n_kv_heads;
            let first = kv_head * group * bias_width;
            for (acc, x) in grads.bias[first..first + group * bias_width]
                .iter_mut()
                .zip(&partial)
            {
                *acc += x;
            }
        }
    }
    grads.q = if !wanted.q {
        zeros(inputs.q.len())
    } else if chunks == 1 {
        dq
    } else {
        let (first, rest) = dq.split_at_mut(dq_len);
        let add = |(i, acc): (usize, &mut [f32])| {
            let at = i * 4096;
            for c in 0..chunks - 1 {
                let part = &rest[c * dq_len + at..c * dq_len + at + acc.len()];
                add_assign(acc, part);
            }
        };
        first.par_chunks_mut(4096).enumerate().for_each(add);
        dq.truncate(dq_len);
        dq
    };
    // SAFETY: every key block belongs to one task (sequence, kv head, chunk), which writes all
    // of its dK and dV rows, every column; `MaybeUninit<f32>` has f32's layout.
    grads.k = if wanted.k {
        unsafe { assume_init(dk) }
    } else {
        zeros(inputs.k.len())
    };
    grads.v = if wanted.v {
        unsafe { assume_init(dv) }
    } else {
        zeros(inputs.v.len())
    };
    grads
}

/// What every task reads.
struct Job<'a> {
    inputs: &'a Inputs<'a>,
    saved: &'a Saved<'a>,
    delta: &'a [f32],
    sizes: Sizes,
    args: &'a TileArgs,
    wanted: Wanted,
    group: usize,
    chunks: usize,
    bias_width: usize,
    dq_len: usize,
}

/// `C = beta A B (+ C)`, row-major `C` (`[m, n]`, row stride `c_rs`) from `A` (`[m, k]`) and
/// `B` (`[k, n]`) given by their column and row strides.
///
/// # Safety
///
/// Every pointer must cover its matrix's extent under its strides.
#[allow(clippy::too_many_arguments)]
unsafe fn matmul(
    (m, n, k): (usize, usize, usize),
    c: *mut f32,
    c_rs: usize,
    accumulate: bool,
    (a, a_cs, a_rs): (*const f32, usize, usize),
    (b, b_cs, b_rs): (*const f32, usize, usize),
    beta: f32,
) {
    // SAFETY: the caller's.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            1,
            c_rs as isize,
            accumulate,
            a,
            a_cs as isize,
            a_rs as isize,
            b,
            b_cs as isize,
            b_rs as isize,
            1.0,
            beta,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

impl Job<'_> {
    /// Task `task` = (sequence, kv head, chunk): its key blocks' dK and dV rows, its chunk's dQ,
    /// and its heads' bias gradient (returned).
    fn run(&self, task: usize, s: &mut Scratch, dq: Out, dk: Out, dv: Out) -> Vec<f32> {
        let Sizes {
            n_heads,
            n_kv_heads,
            seq_q,
            seq_k,
            d_head,
            d_v,
            ..
        } = self.sizes;
        let (inputs, saved, args, wanted) = (self.inputs, self.saved, self.args, self.wanted);
        let chunk = task % self.chunks;
        let kv_head = task / self.chunks % n_kv_heads;
        let b = task / (self.chunks * n_kv_heads);
        let mut dbias = vec![
            0.0f32;
            if wanted.bias {
                self.group * self.bias_width
            } else {
                0
            }
        ];
        let scale = args.scale as f32;
        let wants_ds = wanted.q || wanted.k || wanted.bias;
        let blocks = seq_k.div_ceil(KEY_BLOCK);
        let kv_base = (b * n_kv_heads + kv_head) * seq_k;
        for block in (chunk..blocks).step_by(self.chunks) {
            let j0 = block * KEY_BLOCK;
            let kb = KEY_BLOCK.min(seq_k - j0);
            let (dk_acc, dv_acc) = (&mut s.dk[..kb * d_head], &mut s.dv[..kb * d_v]);
            dk_acc.fill(0.0);
            dv_acc.fill(0.0);
            let k_block = inputs.k[(kv_base + j0) * d_head..].as_ptr();
            let v_block = inputs.v[(kv_base + j0) * d_v..].as_ptr();
            let (i_lo, i_hi) = query_range(args, j0, kb, seq_q);
            for g in 0..self.group {
                let head = kv_head * self.group + g;
                let row_base = (b * n_heads + head) * seq_q;
                let mut i0 = i_lo;
                while i0 < i_hi {
                    let qr = QUERY_TILE.min(i_hi - i0);
                    let q_tile = inputs.q[(row_base + i0) * d_head..].as_ptr();
                    let do_tile = saved.grad[(row_base + i0) * d_v..].as_ptr();
                    let p = &mut s.p[..qr * kb];
                    // SAFETY: q's rows i0..i0 + qr of this head ([qr, d_head], row stride
                    // d_head), the key block read as its transpose ([d_head, kb]), p [qr, kb].
                    unsafe {
                        matmul(
                            (qr, kb, d_head),
                            p.as_mut_ptr(),
                            kb,
                            false,
                            (q_tile, 1, d_head),
                            (k_block, d_head, 1),
                            scale,
                        );
                    }
                    if d_head == 0 {
                        p.fill(0.0);
                    }
                    if let Some(c) = args.softcap {
                        let c = c as f32;
                        let t = &mut s.t[..qr * kb];
                        for (x, t) in p.iter_mut().zip(t.iter_mut()) {
                            *t = (*x / c).tanh();
                            *x = c * *t;
                        }
                    }
                    let mut any = false;
                    for r in 0..qr {
                        let i = i0 + r;
                        let row = Row::at(inputs, self.sizes, args, b, head, i);
                        let rel = Relative::new(inputs, self.sizes, args, b, j0, row);
                        let p_row = &mut p[r * kb..(r + 1) * kb];
                        mask_and_bias(p_row, &rel, row, b, j0, inputs, self.sizes, args);
                        any |= exp_shifted(p_row, saved.lse[row_base + i]);
                    }
                    if !any {
                        i0 += qr;
                        continue;
                    }
                    if wanted.v {
                        // SAFETY: p read as its transpose ([kb, qr]), dO's rows [qr, d_v],
                        // dv_acc [kb, d_v].
                        unsafe {
                            matmul(
                                (kb, d_v, qr),
                                dv_acc.as_mut_ptr(),
                                d_v,
                                true,
                                (p.as_ptr(), kb, 1),
                                (do_tile, 1, d_v),
                                1.0,
                            );
                        }
                    }
                    if wants_ds {
                        let ds = &mut s.ds[..qr * kb];
                        // SAFETY: dO's rows [qr, d_v], the value block read as its transpose
                        // ([d_v, kb]), ds [qr, kb].
                        unsafe {
                            matmul(
                                (qr, kb, d_v),
                                ds.as_mut_ptr(),
                                kb,
                                false,
                                (do_tile, 1, d_v),
                                (v_block, d_v, 1),
                                1.0,
                            );
                        }
                        if d_v == 0 {
                            ds.fill(0.0);
                        }
                        for r in 0..qr {
                            let i = i0 + r;
                            let ds_row = &mut ds[r * kb..(r + 1) * kb];
                            score_grad(ds_row, &p[r * kb..(r + 1) * kb], self.delta[row_base + i]);
                            if wanted.bias {
                                let row = Row::at(inputs, self.sizes, args, b, head, i);
                                let rel = Relative::new(inputs, self.sizes, args, b, j0, row);
                                let w = self.bias_width;
                                bias_grad(ds_row, &rel, args.kind, &mut dbias[g * w..(g + 1) * w]);
                            }
                        }
                        if args.softcap.is_some() {
                            softcap_grad(ds, &s.t[..qr * kb]);
                        }
                        if wanted.q {
                            // SAFETY: ds [qr, kb], the key block [kb, d_head], this chunk's dQ
                            // rows i0..i0 + qr of this head, which no other task of the chunk
                            // writes (tasks of one chunk differ in sequence or kv head).
                            unsafe {
                                let dst =
                                    dq.0.cast::<f32>()
                                        .add(chunk * self.dq_len + (row_base + i0) * d_head);
                                matmul(
                                    (qr, d_head, kb),
                                    dst,
                                    d_head,
                                    true,
                                    (ds.as_ptr(), 1, kb),
                                    (k_block, 1, d_head),
                                    scale,
                                );
                            }
                        }
                        if wanted.k {
                            // SAFETY: ds read as its transpose ([kb, qr]), q's rows [qr,
                            // d_head], dk_acc [kb, d_head].
                            unsafe {
                                matmul(
                                    (kb, d_head, qr),
                                    dk_acc.as_mut_ptr(),
                                    d_head,
                                    true,
                                    (ds.as_ptr(), kb, 1),
                                    (q_tile, 1, d_head),
                                    scale,
                                );
                            }
                        }
                    }
                    i0 += qr;
                }
            }
            // SAFETY: rows j0..j0 + kb of this (sequence, kv head) belong to this task alone.
            unsafe {
                if wanted.k {
                    let dst = std::slice::from_raw_parts_mut(
                        dk.0.add((kv_base + j0) * d_head),
                        kb * d_head,
                    );
                    for (d, &x) in dst.iter_mut().zip(dk_acc.iter()) {
                        d.write(x);
                    }
                }
                if wanted.v {
                    let dst =
                        std::slice::from_raw_parts_mut(dv.0.add((kv_base + j0) * d_v), kb * d_v);
                    for (d, &x) in dst.iter_mut().zip(dv_acc.iter()) {
                        d.write(x);
                    }
                }
            }
        }
        dbias
    }
}

/// The query rows that can see some key of `j0..j0 + kb` (sequential positions: the causal mask
/// and the window prune them; explicit ones: all).
fn query_range(args: &TileArgs, j0: usize, kb: usize, seq_q: usize) -> (usize, usize) {
    if args.explicit {
        return (0, seq_q);
    }
    let first = (args.key_offset + j0) as i64 - args.query_offset as i64;
    let last = first + kb as i64 - 1;
    let (mut lo, mut hi) = (i64::MIN, i64::MAX);
    if args.causal {
        // Query i sees key j when its position is at or after the key's.
        lo = first;
    }
    if let Some(w) = args.window {
        hi = last.saturating_add(w.before.min(i64::MAX as usize) as i64);
        if !args.causal {
            lo = lo.max(first.saturating_sub(w.after.min(i64::MAX as usize) as i64));
        }
    }
    let clamp = |p: i64| p.clamp(0, seq_q as i64) as usize;
    let (i0, i1) = (clamp(lo), clamp(hi.saturating_add(1)));
    (i0, i1.max(i0))
}

/// `x <- exp(x - lse)` (0 where hidden, -inf; see [`exp_nonpositive`]); whether any is
/// nonzero.
#[multiversion(targets = "simd")]
fn exp_shifted(s: &mut [f32], lse: f32) -> bool {
    for x in s.iter_mut() {
        *x = exp_nonpositive(*x - lse);
    }
    sum_of(s) > 0.0
}

/// `ds <- p (ds - delta)`: the score gradient from `dP` (in `ds`).
#[multiversion(targets = "simd")]
fn score_grad(ds: &mut [f32], p: &[f32], delta: f32) {
    for (x, &p) in ds.iter_mut().zip(p) {
        *x = p * (*x - delta);
    }
}

/// `ds <- ds (1 - t^2)`: through `c tanh(x / c)`.
#[multiversion(targets = "simd")]
fn softcap_grad(ds: &mut [f32], t: &[f32]) {
    for (x, &t) in ds.iter_mut().zip(t) {
        *x *= 1.0 - t * t;
    }
}

/// One row's score gradients `ds` into its head's bias gradient `acc`: ALiBi's slope
/// (`-sum ds |rel|`, `acc` one entry) or the table by clamped distance (`acc` `2 reach + 1`
/// entries; with sequential positions a run of the table, as the forward reads it).
fn bias_grad(ds: &[f32], rel: &Relative<'_>, kind: BiasKind, acc: &mut [f32]) {
    match kind {
        BiasKind::None => {}
        BiasKind::Alibi => {
            let sum = if rel.is_explicit() {
                ds.iter()
                    .enumerate()
                    .map(|(jj, &x)| x * rel.at(jj).unsigned_abs() as f32)
                    .sum::<f32>()
            } else {
                alibi_weighted(ds, rel.rel0 as f32)
            };
            acc[0] -= sum;
        }
        BiasKind::ByDistance { reach } => {
            let r = reach as i64;
            if rel.is_explicit() {
                for (jj, &x) in ds.iter().enumerate() {
                    acc[(rel.at(jj).clamp(-r, r) + r) as usize] += x;
                }
            } else {
                by_distance_grad_sequential(ds, acc, rel.rel0, r);
            }
        }
    }
}

/// `sum_j ds_j |rel0 + j|`.
#[multiversion(targets = "simd")]
fn alibi_weighted(ds: &[f32], rel0: f32) -> f32 {
    let mut sum = 0.0;
    for (j, &x) in ds.iter().enumerate() {
        sum += x * (rel0 + j as f32).abs();
    }
    sum
}

/// The transpose of [`by_distance_sequential`]: key `j` at distance `rel0 + j` adds its score
/// gradient to the table's entry for that clamped distance: the keys before the run to the
/// first entry, the run to a contiguous run of the table, the keys after it to the last entry.
fn by_distance_grad_sequential(ds: &[f32], acc: &mut [f32], rel0: i64, reach: i64) {
    let n = ds.len() as i64;
    let start = (-reach - rel0).clamp(0, n) as usize;
    let end = ((reach + 1 - rel0).clamp(0, n) as usize).max(start);
    let last = acc.len() - 1;
    acc[0] += ds[..start].iter().sum::<f32>();
    acc[last] += ds[end..].iter().sum::<f32>();
    if end > start {
        let from = (rel0 + start as i64 + reach) as usize;
        add_assign(&mut acc[from..from + end - start], &ds[start..end]);
    }
}

#[multiversion(targets = "simd")]
fn add_assign(acc: &mut [f32], x: &[f32]) {
    for (a, &b) in acc.iter_mut().zip(x) {
        *a += b;
    }
}

#[multiversion(targets = "simd")]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

// `by_distance_sequential` is the forward this module's `by_distance_grad_sequential`
// transposes; a unit test pins the pair.
#[cfg(test)]
mod tests {
    use super::super::host::by_distance_sequential;
    use super::*;

    /// The softmax's exponential against f64's, over every exponent it meets: within 2 ulp
    /// (relative 2.4e-7), and exactly 0 below -87 and at -inf.
    #[test]
    fn the_exponential_is_within_two_ulp() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 0.5 {
            let want = (x as f64).exp();
            let got = exp_nonpositive(x) as f64;
            worst = worst.max((got - want).abs() / want);
            x += 0.000_37;
        }
        assert!(worst < 2.4e-7, "relative error {worst}");
        assert_eq!(exp_nonpositive(-87.01), 0.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(0.0), 1.0);
    }

    /// `<forward(table), ds> = <table, backward(ds)>` for every placement of a block against
    /// the table's run: the gradient is the forward's transpose.
    #[test]
    fn the_table_gradient_is_the_forward_transposed() {
        let reach = 3i64;
        let table: Vec<f32> = (0..7).map(|i| (i as f32 * 0.37).sin()).collect();
        for rel0 in -12..12 {
            let ds: Vec<f32> = (0..9)
                .map(|j| (j as f32 * 1.3 + rel0 as f32).cos())
                .collect();
            let mut s = vec![0.0f32; 9];
            by_distance_sequential(&mut s, &table, rel0, reach);
            let forward: f32 = s.iter().zip(&ds).map(|(a, b)| a * b).sum();
            let mut acc = vec![0.0f32; 7];
            by_distance_grad_sequential(&ds, &mut acc, rel0, reach);
            let backward: f32 = acc.iter().zip(&table).map(|(a, b)| a * b).sum();
            assert!(
                (forward - backward).abs() < 1e-5,
                "rel0 {rel0}: {forward} vs {backward}"
            );
        }
    }
}
