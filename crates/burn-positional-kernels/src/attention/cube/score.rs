//! The per-score formula every attention kernel applies, forward and backward, in three parts:
//! the softcap ([`capped`]), the masks ([`visible`]: causal, window, segments) and the bias
//! ([`with_bias`]: ALiBi's slope, or the distance table), which [`final_score`] composes in that
//! order and the tensor-core forward (`mma.rs`) takes where its blocks need them
//! ([`biased_score`] on blocks every row sees whole).

use cubecl::prelude::*;

use super::{ALIBI, BY_DISTANCE, CAPPED, CAUSAL, HIDDEN, SEGMENTED, Scalars, WINDOW, fragment};

/// The softcap on a score `x = scale q . k` (none without it). `fast`: its `tanh` as one
/// approximate instruction ([`fragment::tanh`], native on CUDA only), else CubeCL's `Tanh`.
#[cube]
pub(super) fn capped<C: Float>(x: C, p: &Scalars, #[comptime] fast: bool) -> C {
    let mut x = x;
    if (p.flags & CAPPED) != 0 {
        let cap = C::cast_from(p.softcap);
        if comptime!(fast) {
            // A product by the reciprocal, which the compiler computes once for every score
            // (a division a score is a slow-path call each).
            let inv = C::new(1.0) / cap;
            x = C::cast_from(fragment::tanh(f32::cast_from(x * inv), false)) * cap;
        } else {
            x = C::tanh(x / cap) * cap;
        }
    }
    x
}

/// A (capped) score plus its bias from `rel = key position - query position`: ALiBi's slope
/// times the distance taken off, or the distance table's entry added.
#[cube]
pub(super) fn with_bias<F: Float, C: Float>(
    x: C,
    rel: i32,
    bias: &Tensor<F>,
    slope: C,
    table_base: usize,
    p: &Scalars,
) -> C {
    let flags = p.flags;
    let mut x = x;
    if (flags & ALIBI) != 0 {
        let mut distance = rel;
        if rel < 0 {
            distance = -rel;
        }
        x -= slope * C::cast_from(distance);
    }
    if (flags & BY_DISTANCE) != 0 {
        let at = min(max(rel, -p.reach), p.reach) + p.reach;
        x += C::cast_from(bias[table_base + at as usize]);
    }
    x
}

/// Whether the masks leave a key to a query (`seen`: the key is in range, not padding, and the
/// query row exists): the causal mask, the window and the segments, from `rel`.
#[cube]
pub(super) fn visible(rel: i32, seen: bool, q_segment: i32, k_segment: i32, p: &Scalars) -> bool {
    let flags = p.flags;
    let mut seen = seen;
    let causal = (flags & CAUSAL) != 0;
    if causal {
        seen = seen && rel <= 0;
    }
    if (flags & WINDOW) != 0 {
        seen = seen && rel >= -p.before;
        if !causal {
            seen = seen && rel <= p.after;
        }
    }
    if (flags & SEGMENTED) != 0 {
        seen = seen && k_segment == q_segment;
    }
    seen
}

/// What every visible pair's score gets: [`capped`], then [`with_bias`]. A block every row sees
/// whole (the tensor-core forward's classification) needs only this.
#[cube]
pub(super) fn biased_score<F: Float, C: Float>(
    x: C,
    rel: i32,
    bias: &Tensor<F>,
    slope: C,
    table_base: usize,
    p: &Scalars,
    #[comptime] fast: bool,
) -> C {
    with_bias::<F, C>(capped::<C>(x, p, fast), rel, bias, slope, table_base, p)
}

/// The score `x = scale q . k` of a query and a key made final: [`capped`], [`visible`],
/// [`with_bias`], and [`HIDDEN`] where a mask hides the key. Every kernel's scores, forward and
/// backward (the tensor-core forward takes the same three where its blocks need them).
#[cube]
pub(super) fn final_score<F: Float, C: Float>(
    x: C,
    rel: i32,
    seen: bool,
    q_segment: i32,
    k_segment: i32,
    bias: &Tensor<F>,
    slope: C,
    table_base: usize,
    p: &Scalars,
) -> C {
    let x = capped::<C>(x, p, false);
    let seen = visible(rel, seen, q_segment, k_segment, p);
    let mut x = with_bias::<F, C>(x, rel, bias, slope, table_base, p);
    if !seen {
        x = C::new(HIDDEN);
    }
    x
}
