//! [`attend`]: softmax attention with positions in compact form, for attention a user writes.
//! The computation is the kernels crate's tiled op; this file checks the call first and names
//! the fix, on every backend, without reading from the device.

use burn::tensor::Tensor;

pub use burn_positional_kernels::{AttendOptions, AttentionBias, AttentionPositions, Window};

use crate::PositionError;

/// A score bias in compact form, as the block and the score-bias schemes name it.
pub(crate) type CompactBias = AttentionBias;

/// Softmax attention of `q` over `k` and `v` with positions in compact form: the way to use
/// this crate's positions inside attention you write (the [`SelfAttention`](crate::SelfAttention)
/// block calls it too). See [`AttendOptions`] for what it takes:
///
/// - grouped heads: `k` and `v` with `n_kv_heads` heads for `q`'s `n_heads` (multi-head,
///   grouped-query, multi-query), never repeated in memory; query head `h` reads kv head
///   `h / (n_heads / n_kv_heads)`, as transformers' `repeat_kv`;
/// - a score bias from relative positions: ALiBi slopes, or a table per clamped distance
///   (T5's buckets, [`T5Bias::by_distance`](crate::T5Bias::by_distance)), with gradients to
///   the table;
/// - masks from positions: causal, a sliding [`Window`], key padding, segment ids (packed
///   documents), combinable;
/// - positions: sequential from an offset (decoding), or explicit per token
///   (`[batch or 1, seq]`: packed sequences, left padding); the bias and the window are
///   measured with them;
/// - any scale (T5: 1), and a softcap (Gemma 2).
///
/// Memory is linear in the sequence in the forward and the backward: scores exist one tile
/// of query rows at a time, and on an autodiff device the op is one graph node whose backward
/// recomputes each tile. A query that sees no key gets zeros.
///
/// ```text
/// S = scale q.k  ->  c tanh(S / c)  ->  + bias(key position - query position)
///   ->  -inf where hidden  ->  softmax  ->  . v
/// ```
///
/// # Shapes
///
/// - `q`: `[batch, n_heads, seq_q, d_head]`
/// - `k`: `[batch, n_kv_heads, seq_k, d_head]`, `v`: `[batch, n_kv_heads, seq_k, d_v]`
/// - output: `[batch, n_heads, seq_q, d_v]`
///
/// # Panics
///
/// With [`try_attend`]'s message when a shape or option does not fit.
///
/// # Example
///
/// A grouped, windowed, packed call: 4 query heads over 2 key/value heads, Mistral's sliding
/// window of 3, two documents in one row with positions restarting at the second.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::{AlibiConfig, AttendOptions, AttentionBias, Window, attend};
///
/// let device = Device::flex();
/// let q = Tensor::<4>::random([1, 4, 6, 8], burn::tensor::Distribution::Default, &device);
/// let kv = Tensor::<4>::random([1, 2, 6, 8], burn::tensor::Distribution::Default, &device);
/// let slopes = AlibiConfig::new(4).init(&device).slopes();
/// let segments = Tensor::<2, Int>::from_data([[0, 0, 0, 1, 1, 1]], &device);
/// let positions = Tensor::<2, Int>::from_data([[0, 1, 2, 0, 1, 2]], &device);
/// let options = AttendOptions::new()
///     .bias(AttentionBias::Alibi(slopes))
///     .causal(true)
///     .window(Window::hf(3))
///     .segments(segments.clone(), segments)
///     .positions(positions.clone(), positions);
/// let out = attend(q, kv.clone(), kv, &options);
/// assert_eq!(out.dims(), [1, 4, 6, 8]);
/// ```
pub fn attend(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, options: &AttendOptions) -> Tensor<4> {
    try_attend(q, k, v, options).unwrap_or_else(|e| panic!("{e}"))
}

/// [`attend`], or the error that says which shape or option does not fit and how to fix it.
/// Checks shapes and options only: nothing is read from the device.
///
/// # Shapes
///
/// As [`attend`].
///
/// # Errors
///
/// [`PositionError::ShapeMismatch`] for tensors that do not fit together,
/// [`PositionError::InvalidConfig`] for `n_heads` not a multiple of `n_kv_heads`, a scale or
/// softcap that is not a positive finite number, or 0 rows per tile.
pub fn try_attend(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    options: &AttendOptions,
) -> Result<Tensor<4>, PositionError> {
    check(q.dims(), k.dims(), v.dims(), options)?;
    Ok(burn_positional_kernels::tiled_attention(q, k, v, options))
}

fn mismatch(
    what: &'static str,
    expected: Vec<usize>,
    got: Vec<usize>,
    fix: &'static str,
) -> PositionError {
    PositionError::ShapeMismatch {
        what,
        expected,
        got,
        fix,
    }
}

/// Every check of [`try_attend`], on shapes and options.
pub(crate) fn check(
    q: [usize; 4],
    k: [usize; 4],
    v: [usize; 4],
    options: &AttendOptions,
) -> Result<(), PositionError> {
    let [batch, n_heads, seq_q, d_head] = q;
    let [_, n_kv_heads, seq_k, _] = k;
    if k[0] != batch || k[3] != d_head {
        return Err(mismatch(
            "keys [batch, n_kv_heads, seq_k, d_head] against queries [batch, n_heads, seq_q, d_head]",
            vec![batch, n_kv_heads, seq_k, d_head],
            k.to_vec(),
            "give keys the queries' batch and head width",
        ));
    }
    if v[..3] != k[..3] {
        return Err(mismatch(
            "values [batch, n_kv_heads, seq_k, d_v] against keys",
            vec![batch, n_kv_heads, seq_k, v[3]],
            v.to_vec(),
            "one value per key, with the keys' heads",
        ));
    }
    if n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
        return Err(PositionError::InvalidConfig {
            field: "n_kv_heads",
            value: n_kv_heads.to_string(),
            rule: "the query heads must be a whole number of groups of key/value heads",
            fix: format!(
                "give keys and values a head count that divides n_heads = {n_heads} (for \
                 example {}), or repeat them",
                divisors(n_heads)
            ),
        });
    }
    if let Some(mask) = &options.key_padding
        && mask.dims() != [batch, seq_k]
    {
        return Err(mismatch(
            "key padding mask [batch, seq_k]",
            vec![batch, seq_k],
            mask.dims().to_vec(),
            "one flag per key, true at padding",
        ));
    }
    if let Some((query, key)) = &options.segments {
        for (t, seq, what) in [
            (query, seq_q, "query segment ids [batch, seq_q]"),
            (key, seq_k, "key segment ids [batch, seq_k]"),
        ] {
            if t.dims() != [batch, seq] {
                return Err(mismatch(
                    what,
                    vec![batch, seq],
                    t.dims().to_vec(),
                    "one segment id per token (for self-attention, the same ids twice)",
                ));
            }
        }
    }
    if let AttentionPositions::Explicit { query, key } = &options.positions {
        for (t, seq, what) in [
            (query, seq_q, "query positions [batch or 1, seq_q]"),
            (key, seq_k, "key positions [batch or 1, seq_k]"),
        ] {
            let [b, s] = t.dims();
            if s != seq || (b != 1 && b != batch) {
                return Err(mismatch(
                    what,
                    vec![batch, seq],
                    t.dims().to_vec(),
                    "one position per token, for every sequence or shared ([1, seq])",
                ));
            }
        }
    }
    match &options.bias {
        AttentionBias::None => {}
        AttentionBias::Alibi(slopes) => {
            if slopes.dims() != [n_heads] {
                return Err(mismatch(
                    "ALiBi slopes [n_heads]",
                    vec![n_heads],
                    slopes.dims().to_vec(),
                    "one slope per query head (`alibi_slopes(n_heads)`)",
                ));
            }
        }
        AttentionBias::ByDistance { bias, reach } => {
            if bias.dims() != [n_heads, 2 * reach + 1] {
                return Err(mismatch(
                    "bias by distance [n_heads, 2 reach + 1]",
                    vec![n_heads, 2 * reach + 1],
                    bias.dims().to_vec(),
                    "one bias per query head and clamped distance (`T5Bias::by_distance`)",
                ));
            }
        }
    }
    for (field, value) in [("scale", options.scale), ("softcap", options.softcap)] {
        if let Some(x) = value
            && !(x.is_finite() && x > 0.0)
        {
            return Err(PositionError::InvalidConfig {
                field,
                value: x.to_string(),
                rule: "it must be a positive finite number",
                fix: format!("leave `{field}` unset, or give it a positive value"),
            });
        }
    }
    if options.tile_rows == Some(0) {
        return Err(PositionError::InvalidConfig {
            field: "tile_rows",
            value: "0".into(),
            rule: "a tile holds at least one query row",
            fix: "leave `tile_rows` unset (tiles sized to 2^22 scores), or give at least 1".into(),
        });
    }
    Ok(())
}

/// The divisors of `n`, for a message.
pub(crate) fn divisors(n: usize) -> String {
    let all: Vec<String> = (1..=n)
        .filter(|d| n % d == 0)
        .map(|d| d.to_string())
        .collect();
    all.join(", ")
}
