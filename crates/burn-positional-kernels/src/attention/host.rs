//! The attention on the CPU backends (flex, ndarray): FlashAttention-2's loop with the bias and
//! the masks computed inside it, one call per op.
//!
//! Work is cut into tasks of (sequence, key/value head, tile of query rows); rayon runs them.
//! A task stacks the tile's queries of every head that shares its key/value head (a group of
//! grouped-query attention), so each key and value row is read once per group, and walks the
//! keys its rows can see in blocks of [`KEY_BLOCK`]:
//!
//! ```text
//! S = (scale Q) K_block^T                  one gemm, [group x rows, block]
//! S = c tanh(S / c); S += bias(rel)        per score; hidden scores at -inf
//! m' = max(m, rowmax S); P = exp(S - m')   the online softmax
//! O = O exp(m - m') + P V_block            one gemm
//! ```
//!
//! and writes `O / l` and `lse = m + ln l`. No `rows x seq_k` block exists: the scratch is
//! `group x rows x (d_head + block + d_v)` floats per worker. With sequential positions a
//! tile walks only the key blocks its causal mask or window lets it see.

use std::mem::MaybeUninit;

use burn::backend::TensorMetadata;
use burn::tensor::TensorData;
use multiversion::multiversion;
use rayon::prelude::*;

use super::Sizes;
use super::tile::{BiasKind, TileArgs};
use crate::host_io::{HostTensors, Ints, assume_init, in_dtype, output_buffer};

/// Keys per block: a block's scores (`group x rows x 64` floats) and its `64 x d_v` values stay
/// in L1/L2 (flex's own flash kernel uses the same block).
pub(super) const KEY_BLOCK: usize = 64;

/// Query rows a task stacks across the heads of its group: `group x rows` near this.
const TASK_ROWS: usize = 64;

/// The op's tensors as host slices (f32; ints as stored).
pub(crate) struct Inputs<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    /// Slopes `[n_heads]`, or the table `[n_heads, 2 reach + 1]`.
    pub bias: &'a [f32],
    /// `[batch, seq_k]`, true at padding.
    pub padding: Option<&'a [bool]>,
    /// `[n, seq_q + seq_k]`, `n` 1 or batch.
    pub positions: Option<&'a Ints<'a>>,
    /// `[batch, seq_q + seq_k]`.
    pub segments: Option<&'a Ints<'a>>,
}

/// A raw pointer the tasks write disjoint rows through.
#[derive(Clone, Copy)]
pub(super) struct Out(pub(super) *mut MaybeUninit<f32>);
// SAFETY: every task writes only the rows of its own (sequence, head group, query tile), which
// no other task writes; the buffers outlive the parallel loop.
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

/// A worker's scratch, reused across its tasks.
struct Scratch {
    q: Vec<f32>,
    s: Vec<f32>,
    o: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
}

/// The op on a host backend: output `[batch, n_heads, seq_q, d_v]` and the log-sum-exp
/// `[batch, n_heads, seq_q, 1]`, both in the dtype of `q`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<B: HostTensors>(
    q: &B::Primitive,
    k: &B::Primitive,
    v: &B::Primitive,
    bias: &B::Primitive,
    padding: &B::Primitive,
    positions: &B::Primitive,
    segments: &B::Primitive,
    args: &TileArgs,
) -> (B::Primitive, B::Primitive)
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
    let lowest = dtype.finfo().map_or(f32::MIN, |f| f.min as f32);
    let (output, lse) = attention(&inputs, sizes, args, lowest);
    let Sizes {
        batch,
        n_heads,
        seq_q,
        d_v,
        ..
    } = sizes;
    (
        B::from_data(in_dtype(
            TensorData::new(output, [batch, n_heads, seq_q, d_v]),
            dtype,
        )),
        B::from_data(in_dtype(
            TensorData::new(lse, [batch, n_heads, seq_q, 1]),
            dtype,
        )),
    )
}

/// Output and log-sum-exp, row-major, f32. A row that sees no key gets zeros and `lowest` (the
/// dtype's lowest finite value: `exp(-inf - lowest)` is 0 in the backward, never NaN).
pub(crate) fn attention(
    inputs: &Inputs<'_>,
    sizes: Sizes,
    args: &TileArgs,
    lowest: f32,
) -> (Vec<f32>, Vec<f32>) {
    let Sizes {
        batch,
        n_heads,
        n_kv_heads,
        seq_q,
        d_head,
        d_v,
        ..
    } = sizes;
    let group = n_heads / n_kv_heads;
    let rows = (TASK_ROWS / group).clamp(1, seq_q.max(1));
    let tiles = seq_q.div_ceil(rows);
    let tasks = batch * n_kv_heads * tiles;
    let mut output = output_buffer(batch * n_heads * seq_q * d_v);
    let mut lse = output_buffer(batch * n_heads * seq_q);
    let (out, lse_out) = (Out(output.as_mut_ptr()), Out(lse.as_mut_ptr()));
    let scratch = || Scratch {
        q: vec![0.0; group * rows * d_head],
        s: vec![0.0; group * rows * KEY_BLOCK],
        o: vec![0.0; group * rows * d_v],
        m: vec![0.0; group * rows],
        l: vec![0.0; group * rows],
    };
    let run_task = |scratch: &mut Scratch, task: usize| {
        let tile = task % tiles;
        let kv_head = task / tiles % n_kv_heads;
        let b = task / (tiles * n_kv_heads);
        let r0 = tile * rows;
        let n = rows.min(seq_q - r0);
        let job = Task {
            b,
            kv_head,
            r0,
            rows: n,
            group,
        };
        job.run(inputs, sizes, args, scratch, lowest, out, lse_out);
    };
    let work = batch * n_heads * seq_q * sizes.seq_k * (d_head + d_v);
    if tasks > 1 && work >= 1 << 18 {
        (0..tasks)
            .into_par_iter()
            .for_each_init(scratch, |s, task| run_task(s, task));
    } else {
        let mut s = scratch();
        (0..tasks).for_each(|task| run_task(&mut s, task));
    }
    // SAFETY: the tasks cover every (sequence, head, query row) once, and each writes all `d_v`
    // columns of its output rows and its log-sum-exp; `MaybeUninit<f32>` has f32's layout.
    unsafe { (assume_init(output), assume_init(lse)) }
}

/// One task: query rows `r0..r0 + rows` of the `group` heads that share key/value head
/// `kv_head` of sequence `b`.
struct Task {
    b: usize,
    kv_head: usize,
    r0: usize,
    rows: usize,
    group: usize,
}

/// What a score row needs: its head, its query's position and segment.
#[derive(Clone, Copy)]
pub(super) struct Row {
    pub head: usize,
    pub position: i64,
    pub segment: i64,
}

impl Row {
    /// Query row `i` of head `head` of sequence `b`.
    pub(super) fn at(
        inputs: &Inputs<'_>,
        sizes: Sizes,
        args: &TileArgs,
        b: usize,
        head: usize,
        i: usize,
    ) -> Self {
        let width = sizes.seq_q + sizes.seq_k;
        Self {
            head,
            position: match inputs.positions {
                // Explicit positions are [1 or batch, seq_q + seq_k].
                Some(p) => {
                    let shared = p.len() == width;
                    p.at((if shared { 0 } else { b }) * width + i)
                }
                None => (args.query_offset + i) as i64,
            },
            segment: inputs.segments.map_or(0, |s| s.at(b * width + i)),
        }
    }
}

/// `key position - query position` for the keys of a block from key `j0`, seen from one row.
pub(super) struct Relative<'a> {
    /// Sequential positions: the block's first key's.
    pub rel0: i64,
    /// Explicit positions: the keys' row of the positions tensor, from key `j0`, and the row's.
    explicit: Option<(&'a Ints<'a>, usize, i64)>,
}

impl<'a> Relative<'a> {
    pub(super) fn new(
        inputs: &Inputs<'a>,
        sizes: Sizes,
        args: &TileArgs,
        b: usize,
        j0: usize,
        row: Row,
    ) -> Self {
        let Sizes { seq_q, seq_k, .. } = sizes;
        let explicit = inputs.positions.filter(|_| args.explicit).map(|p| {
            let n = p.len() / (seq_q + seq_k);
            let base = (if n == 1 { 0 } else { b }) * (seq_q + seq_k) + seq_q + j0;
            (p, base, row.position)
        });
        Self {
            rel0: (args.key_offset + j0) as i64 - row.position,
            explicit,
        }
    }

    /// Whether positions are explicit (else key `jj` is at `rel0 + jj`).
    pub(super) fn is_explicit(&self) -> bool {
        self.explicit.is_some()
    }

    /// Key `jj` of the block.
    #[inline]
    pub(super) fn at(&self, jj: usize) -> i64 {
        match self.explicit {
            Some((p, base, position)) => p.at(base + jj) - position,
            None => self.rel0 + jj as i64,
        }
    }
}

impl Task {
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        inputs: &Inputs<'_>,
        sizes: Sizes,
        args: &TileArgs,
        scratch: &mut Scratch,
        lowest: f32,
        out: Out,
        lse_out: Out,
    ) {
        let Sizes {
            n_heads,
            n_kv_heads,
            seq_q,
            seq_k,
            d_head,
            d_v,
            ..
        } = sizes;
        let Self {
            b,
            kv_head,
            r0,
            rows,
            group,
        } = *self;
        let m_rows = group * rows;
        let scale = args.scale as f32;
        // The tile's queries, scaled, stacked head by head: [group x rows, d_head].
        for g in 0..group {
            let head = kv_head * group + g;
            let from = ((b * n_heads + head) * seq_q + r0) * d_head;
            let dst = &mut scratch.q[g * rows * d_head..(g + 1) * rows * d_head];
            scaled_copy(dst, &inputs.q[from..from + rows * d_head], scale);
        }
        let row_of = |rr: usize| {
            Row::at(
                inputs,
                sizes,
                args,
                b,
                kv_head * group + rr / rows,
                r0 + rr % rows,
            )
        };
        scratch.o[..m_rows * d_v].fill(0.0);
        scratch.m[..m_rows].fill(f32::NEG_INFINITY);
        scratch.l[..m_rows].fill(0.0);
        let (k_lo, k_hi) = key_range(args, r0, rows, seq_k);
        let k_base = (b * n_kv_heads + kv_head) * seq_k;
        let mut j0 = k_lo;
        while j0 < k_hi {
            let kb = KEY_BLOCK.min(k_hi - j0);
            let s = &mut scratch.s[..m_rows * kb];
            // SAFETY: q is [m_rows, d_head] row-major, k's block [kb, d_head] row-major (read as
            // its transpose), s [m_rows, kb]: every pointer covers its extent.
            unsafe {
                gemm::gemm(
                    m_rows,
                    kb,
                    d_head,
                    s.as_mut_ptr(),
                    1,
                    kb as isize,
                    false,
                    scratch.q.as_ptr(),
                    1,
                    d_head as isize,
                    inputs.k.as_ptr().add((k_base + j0) * d_head),
                    d_head as isize,
                    1,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
            if d_head == 0 {
                s.fill(0.0);
            }
            let mut any = false;
            for rr in 0..m_rows {
                let row = row_of(rr);
                let scores = &mut s[rr * kb..(rr + 1) * kb];
                let max = score_row(scores, j0, row, b, inputs, sizes, args);
                let (m_old, o_row) = (scratch.m[rr], &mut scratch.o[rr * d_v..(rr + 1) * d_v]);
                if max == f32::NEG_INFINITY {
                    scores.fill(0.0);
                    continue;
                }
                any = true;
                let m_new = m_old.max(max);
                let sum = exp_row(scores, m_new);
                if m_old != f32::NEG_INFINITY && m_old != m_new {
                    let c = (m_old - m_new).exp();
                    scale_row(o_row, c);
                    scratch.l[rr] *= c;
                }
                scratch.l[rr] += sum;
                scratch.m[rr] = m_new;
            }
            if any {
                // SAFETY: p is [m_rows, kb], v's block [kb, d_v], o [m_rows, d_v], row-major.
                unsafe {
                    gemm::gemm(
                        m_rows,
                        d_v,
                        kb,
                        scratch.o.as_mut_ptr(),
                        1,
                        d_v as isize,
                        true,
                        s.as_ptr(),
                        1,
                        kb as isize,
                        inputs.v.as_ptr().add((k_base + j0) * d_v),
                        1,
                        d_v as isize,
                        1.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    );
                }
            }
            j0 += kb;
        }
        for rr in 0..m_rows {
            let (g, i) = (rr / rows, r0 + rr % rows);
            let at = (b * n_heads + kv_head * group + g) * seq_q + i;
            let (m, l) = (scratch.m[rr], scratch.l[rr]);
            let seen = l > 0.0;
            let inv = if seen { 1.0 / l } else { 0.0 };
            let o_row = &scratch.o[rr * d_v..(rr + 1) * d_v];
            // SAFETY: row `at` of the output and of the log-sum-exp belongs to this task alone.
            unsafe {
                let dst = std::slice::from_raw_parts_mut(out.0.add(at * d_v), d_v);
                for (d, &o) in dst.iter_mut().zip(o_row) {
                    d.write(o * inv);
                }
                (*lse_out.0.add(at)).write(if seen { m + l.ln() } else { lowest });
            }
        }
    }
}

/// The keys rows `r0..r0 + rows` can see, from their sequential positions (causal: none after
/// the last query; a window: none outside it). All keys with explicit positions.
pub(super) fn key_range(args: &TileArgs, r0: usize, rows: usize, seq_k: usize) -> (usize, usize) {
    if args.explicit {
        return (0, seq_k);
    }
    let first = (args.query_offset + r0) as i64;
    let last = first + rows as i64 - 1;
    let key = args.key_offset as i64;
    let (mut lo, mut hi) = (i64::MIN, i64::MAX);
    if args.causal {
        hi = last;
    }
    if let Some(w) = args.window {
        hi = hi.min(last.saturating_add(w.after.min(i64::MAX as usize) as i64));
        lo = first.saturating_sub(w.before.min(i64::MAX as usize) as i64);
    }
    let clamp = |p: i64| p.clamp(0, seq_k as i64) as usize;
    let (k0, k1) = (
        clamp(lo.saturating_sub(key)),
        clamp(hi.saturating_sub(key).saturating_add(1)),
    );
    (k0, k1.max(k0))
}

/// Softcap, bias and masks for one row of a key block starting at key `j0`, in place; returns
/// the row's largest score (-inf when every key is hidden).
fn score_row(
    s: &mut [f32],
    j0: usize,
    row: Row,
    b: usize,
    inputs: &Inputs<'_>,
    sizes: Sizes,
    args: &TileArgs,
) -> f32 {
    if let Some(c) = args.softcap {
        softcap(s, c as f32);
    }
    mask_and_bias(
        s,
        &Relative::new(inputs, sizes, args, b, j0, row),
        row,
        b,
        j0,
        inputs,
        sizes,
        args,
    );
    max_of(s)
}

/// Bias and masks for one row of a key block starting at key `j0` (`rel`: its keys' relative
/// positions), in place: hidden scores become -inf.
#[allow(clippy::too_many_arguments)]
pub(super) fn mask_and_bias(
    s: &mut [f32],
    rel: &Relative<'_>,
    row: Row,
    b: usize,
    j0: usize,
    inputs: &Inputs<'_>,
    sizes: Sizes,
    args: &TileArgs,
) {
    let Sizes { seq_q, seq_k, .. } = sizes;
    let kb = s.len();
    let rel0 = rel.rel0;
    // Masks from sequential positions are a range of the block.
    let (mut lo, mut hi) = (0i64, kb as i64);
    if !args.explicit {
        if args.causal {
            hi = hi.min(1i64.saturating_sub(rel0));
        }
        if let Some(w) = args.window {
            lo = lo.max((-(w.before.min(i64::MAX as usize) as i64)).saturating_sub(rel0));
            if !args.causal {
                let after = w.after.min(i64::MAX as usize) as i64;
                hi = hi.min(after.saturating_add(1).saturating_sub(rel0));
            }
        }
    }
    let (lo, hi) = (
        lo.clamp(0, kb as i64) as usize,
        hi.clamp(0, kb as i64) as usize,
    );
    let hi = hi.max(lo);
    s[..lo].fill(f32::NEG_INFINITY);
    s[hi..].fill(f32::NEG_INFINITY);
    let explicit = rel.is_explicit();
    if explicit {
        for (jj, x) in s.iter_mut().enumerate() {
            let r = rel.at(jj);
            let hidden = (args.causal && r > 0)
                || args.window.is_some_and(|w| {
                    r < -(w.before.min(i64::MAX as usize) as i64)
                        || (!args.causal && r > w.after.min(i64::MAX as usize) as i64)
                });
            if hidden {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    if let Some(pad) = inputs.padding {
        let pad = &pad[b * seq_k + j0..b * seq_k + j0 + kb];
        for (x, &p) in s.iter_mut().zip(pad) {
            if p {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    if let Some(seg) = inputs.segments {
        let base = b * (seq_q + seq_k) + seq_q + j0;
        for (jj, x) in s.iter_mut().enumerate() {
            if seg.at(base + jj) != row.segment {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    match args.kind {
        BiasKind::None => {}
        BiasKind::Alibi => {
            let slope = inputs.bias[row.head];
            if explicit {
                for (jj, x) in s.iter_mut().enumerate() {
                    *x -= slope * rel.at(jj).unsigned_abs() as f32;
                }
            } else {
                alibi_sequential(s, slope, rel0 as f32);
            }
        }
        BiasKind::ByDistance { reach } => {
            let width = 2 * reach + 1;
            let table = &inputs.bias[row.head * width..(row.head + 1) * width];
            let r = reach as i64;
            if explicit {
                for (jj, x) in s.iter_mut().enumerate() {
                    *x += table[(rel.at(jj).clamp(-r, r) + r) as usize];
                }
            } else {
                by_distance_sequential(s, table, rel0, r);
            }
        }
    }
}

/// `x <- c tanh(x / c)`.
fn softcap(s: &mut [f32], c: f32) {
    for x in s {
        *x = c * (*x / c).tanh();
    }
}

/// ALiBi with sequential positions: `x_j <- x_j - slope |rel0 + j|` (-inf stays -inf).
#[multiversion(targets = "simd")]
fn alibi_sequential(s: &mut [f32], slope: f32, rel0: f32) {
    for (j, x) in s.iter_mut().enumerate() {
        *x -= slope * (rel0 + j as f32).abs();
    }
}

/// A bias by clamped distance with sequential positions: key `j` of the block is at distance
/// `rel0 + j`, so the block reads the table's first entry, then a contiguous run of it, then its
/// last entry (an add of slices in the middle, not a gather).
pub(super) fn by_distance_sequential(s: &mut [f32], table: &[f32], rel0: i64, reach: i64) {
    let n = s.len() as i64;
    // Keys before the run (rel < -reach) and the first key past it (rel > reach).
    let start = (-reach - rel0).clamp(0, n) as usize;
    let end = (reach + 1 - rel0).clamp(0, n) as usize;
    let end = end.max(start);
    let (head, rest) = s.split_at_mut(start);
    let (run, tail) = rest.split_at_mut(end - start);
    add_scalar(head, table[0]);
    add_scalar(tail, table[table.len() - 1]);
    if !run.is_empty() {
        let from = (rel0 + start as i64 + reach) as usize;
        add_slice(run, &table[from..from + run.len()]);
    }
}

#[multiversion(targets = "simd")]
fn add_scalar(s: &mut [f32], c: f32) {
    for x in s {
        *x += c;
    }
}

#[multiversion(targets = "simd")]
fn add_slice(s: &mut [f32], t: &[f32]) {
    for (x, &b) in s.iter_mut().zip(t) {
        *x += b;
    }
}

#[multiversion(targets = "simd")]
fn max_of(s: &[f32]) -> f32 {
    s.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x))
}

/// `x <- exp(x - m)` ([`exp_nonpositive`]), returning the sum.
#[multiversion(targets = "simd")]
pub(super) fn exp_row(s: &mut [f32], m: f32) -> f32 {
    for x in s.iter_mut() {
        *x = exp_nonpositive(*x - m);
    }
    sum_of(s)
}

/// `e^x` for the softmax's shifted scores (`x <= 0`, a little above after rounding), within
/// 2 ulp of the exact value, in plain arithmetic that vectorizes (libm's `expf` is one value
/// per call); 0 below -87 and for -inf. Nothing below `f32::MIN_POSITIVE` (1.2e-38): a
/// subnormal weight costs a microcode assist in each product it enters (ALiBi's steep heads
/// made the backward's products three times slower).
///
/// Cephes' `expf`: `x = n ln 2 + r`, `|r| <= ln 2 / 2`, `e^r` by its degree-7 polynomial,
/// `2^n` by the exponent bits.
#[inline(always)]
pub(super) fn exp_nonpositive(x: f32) -> f32 {
    let xc = x.clamp(-87.0, 88.0);
    let n = (xc * std::f32::consts::LOG2_E + 0.5).floor();
    let r = xc - n * 0.693_359_375 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5.000_000_1e-1;
    let y = p * r * r + r + 1.0;
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if x < -87.0 { 0.0 } else { y * scale }
}

/// The sum of `s`, in 16 running sums (so that it vectorizes).
#[inline(always)]
pub(super) fn sum_of(s: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let chunks = s.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().sum();
    for chunk in chunks {
        for (l, &x) in lanes.iter_mut().zip(chunk) {
            *l += x;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

#[multiversion(targets = "simd")]
fn scale_row(o: &mut [f32], c: f32) {
    for x in o {
        *x *= c;
    }
}

#[multiversion(targets = "simd")]
fn scaled_copy(dst: &mut [f32], src: &[f32], scale: f32) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s * scale;
    }
}
