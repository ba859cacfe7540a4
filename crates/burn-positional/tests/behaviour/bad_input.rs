//! One test per bad input: each names the value, the limit and the fix, on every backend.
//! (On wgpu an unchecked gather returns zeros or stray data; these prove our check runs there.)
//!
//! `try_forward` refuses bad input at once. `forward` reads nothing back: it writes the bad
//! token's row as NaN and `check_inputs` names it later, with the same message.

use crate::panic_message;

use burn::prelude::*;
use burn_positional::embedding::check_token_ids;
use burn_positional::testing::KEPT_STATUSES;
use burn_positional::{
    Combine, EmbeddingWithPosition, EmbeddingWithPositionConfig, LearnedConfig, PositionError,
    Positions,
};

fn assert_mentions(msg: &str, parts: &[&str]) {
    for part in parts {
        assert!(msg.contains(part), "message lacks {part:?}: {msg}");
    }
}

/// `[batch, seq]`: whether each token's output row holds a NaN.
fn nan_rows(out: Tensor<3>) -> Vec<bool> {
    let [batch, seq, _] = out.dims();
    out.is_nan()
        .int()
        .sum_dim(2)
        .reshape([batch * seq])
        .into_data()
        .iter::<i64>()
        .map(|n| n > 0)
        .collect()
}

/// `forward` does not refuse: the bad rows (and only they) are NaN, and the deferred check
/// reports `err`.
fn forward_defers(
    embed: &EmbeddingWithPosition,
    x: Tensor<2, Int>,
    at: Positions,
    bad: &[usize],
    err: &PositionError,
) {
    assert!(embed.check_inputs().is_ok(), "nothing pending before");
    let out = embed.forward_at(x, at);
    let [batch, seq, _] = out.dims();
    let want: Vec<bool> = (0..batch * seq).map(|i| bad.contains(&i)).collect();
    assert_eq!(nan_rows(out), want, "NaN rows");
    assert_eq!(embed.unchecked_forwards(), 1);
    assert_eq!(&embed.check_inputs().unwrap_err(), err);
    assert_eq!(embed.unchecked_forwards(), 0);
    assert!(
        embed.check_inputs().is_ok(),
        "the check clears what it reported"
    );
}

pub fn token_id_past_the_vocabulary(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8).init(device);
    let x = Tensor::<2, Int>::from_data([[1, 2, 3], [4, 10, 5]], device);
    let err = embed.try_forward(x.clone()).unwrap_err();
    assert_eq!(
        err,
        PositionError::TokenIdOutOfRange {
            id: 10,
            at: [1, 1],
            vocab_size: 10
        }
    );
    let msg = err.to_string();
    assert_mentions(&msg, &["token id 10", "[batch 1, index 1]", "0..10", "Fix"]);
    forward_defers(&embed, x.clone(), Positions::default(), &[4], &err);
    assert_eq!(check_token_ids(&x, 10).unwrap_err(), err);
}

pub fn negative_token_id(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8).init(device);
    let x = Tensor::<2, Int>::from_data([[-3, 2]], device);
    let msg = embed.try_forward(x).unwrap_err().to_string();
    assert_mentions(&msg, &["token id -3", "[batch 0, index 0]", "0..10"]);
}

pub fn sequence_longer_than_the_learned_table(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(LearnedConfig::new(8).into())
        .init(device);
    let too_long = Tensor::<2, Int>::ones([1, 9], device);
    let err = embed.try_forward(too_long.clone()).unwrap_err();
    assert_eq!(
        err,
        PositionError::PositionPastTable {
            position: 8,
            at: None,
            max_len: 8,
            needed: 9
        }
    );
    let msg = err.to_string();
    assert_mentions(
        &msg,
        &["position 8", "max_len = 8", "at least 9", "sinusoidal"],
    );
    // Known from the shape alone: the read-free forward fails at once, with the same words.
    assert_eq!(
        panic_message(|| drop(embed.forward(too_long))),
        err.to_string()
    );

    // The same limit by offset and by explicit positions.
    let x = Tensor::<2, Int>::ones([1, 4], device);
    let err = embed
        .try_forward_at(x.clone(), Positions::Offset(5))
        .unwrap_err();
    assert_eq!(
        err,
        PositionError::PositionPastTable {
            position: 8,
            at: None,
            max_len: 8,
            needed: 9
        }
    );
    let p = Tensor::<2, Int>::from_data([[0, 1, 12, 2]], device);
    let err = embed
        .try_forward_at(x.clone(), Positions::Explicit(p.clone()))
        .unwrap_err();
    assert_eq!(
        err,
        PositionError::PositionPastTable {
            position: 12,
            at: Some([0, 2]),
            max_len: 8,
            needed: 13
        }
    );
    forward_defers(&embed, x.clone(), Positions::Explicit(p), &[2], &err);
    // The last row is fine.
    assert!(embed.try_forward_at(x, Positions::Offset(4)).is_ok());
}

/// Sinusoidal positions grow the table up to its `max_len`, but a read-free forward cannot grow it to
/// explicit positions it does not read: past the table (past `cache_len` and `seq`) they are
/// NaN and named by the check with the fix; `try_forward` grows the table and embeds them. A
/// forward after that still answers as before it (the same input, the same answer).
pub fn explicit_positions_past_the_sinusoidal_table(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(
            burn_positional::SinusoidalConfig::new()
                .with_cache_len(16)
                .into(),
        )
        .init(device);
    let x = Tensor::<2, Int>::ones([1, 3], device);
    let p = Tensor::<2, Int>::from_data([[0, 40, 2]], device);
    let err = PositionError::PositionPastSinusoidTable {
        position: 40,
        at: [0, 1],
        table_len: 16,
        needed: 41,
        max_len: sinusoid_max_len(&embed),
    };
    assert_mentions(
        &err.to_string(),
        &[
            "position 40",
            "16 rows",
            "cache_len",
            "at least 41",
            "try_forward",
        ],
    );
    forward_defers(
        &embed,
        x.clone(),
        Positions::Explicit(p.clone()),
        &[1],
        &err,
    );
    let grown = embed
        .try_forward_at(x.clone(), Positions::Explicit(p.clone()))
        .unwrap();
    let reference = embed
        .try_forward_reference(x.clone(), Positions::Explicit(p.clone()))
        .unwrap();
    grown.clone().into_data().assert_approx_eq::<f32>(
        &reference.into_data(),
        burn::tensor::Tolerance::absolute(1e-6),
    );
    // Grown for `try_forward`, yet a forward that reads nothing still sees the same rows as
    // before (what it accepts does not depend on the calls before it).
    forward_defers(&embed, x, Positions::Explicit(p), &[1], &err);
}

fn sinusoid_max_len(embed: &EmbeddingWithPosition) -> usize {
    match &embed.position {
        burn_positional::AbsolutePosition::Sinusoidal(table) => table.max_len(),
        _ => unreachable!("a sinusoidal embedding"),
    }
}

/// A position past the table and past an explicit `max_len` too: the fix named is one that
/// `validate` accepts and that works (raise `max_len`), not `cache_len` alone (which may not
/// pass `max_len`).
pub fn explicit_positions_past_the_sinusoidal_max_len(device: &Device) {
    let sinusoidal = burn_positional::SinusoidalConfig::new()
        .with_cache_len(16)
        .with_max_len(Some(32));
    let embed = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(sinusoidal.clone().into())
        .init(device);
    let x = Tensor::<2, Int>::ones([1, 3], device);
    let p = Tensor::<2, Int>::from_data([[0, 40, 2]], device);
    let err = PositionError::PositionPastSinusoidTable {
        position: 40,
        at: [0, 1],
        table_len: 16,
        needed: 41,
        max_len: 32,
    };
    forward_defers(
        &embed,
        x.clone(),
        Positions::Explicit(p.clone()),
        &[1],
        &err,
    );
    let msg = err.to_string();
    assert_mentions(
        &msg,
        &[
            "position 40",
            "16 rows",
            "max_len = 32",
            "`SinusoidalConfig::max_len` to at least 41",
        ],
    );
    // The fix `cache_len` alone would be refused.
    assert!(sinusoidal.clone().with_cache_len(41).validate(8).is_err());
    // The fix named works: with max_len and cache_len raised, the same forward is clean.
    let fixed = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(sinusoidal.with_max_len(Some(41)).with_cache_len(41).into())
        .init(device);
    assert_eq!(
        nan_rows(fixed.forward_at(x.clone(), Positions::Explicit(p.clone()))),
        [false; 3]
    );
    fixed.check_inputs().unwrap();
    // `try_forward` refuses it, naming the limit.
    let refused = embed.try_forward_at(x, Positions::Explicit(p)).unwrap_err();
    assert_mentions(
        &refused.to_string(),
        &["position 40", "max_len = 32", "at least 41"],
    );
}

/// The deferred check names the first bad token of the oldest bad forward, across many
/// forwards, and folds forwards past the kept window into a count (still never silent).
pub fn deferred_check_over_many_forwards(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8).init(device);
    let good = Tensor::<2, Int>::from_data([[1, 2, 3]], device);
    let bad = |id: i64| Tensor::<2, Int>::from_data([[1, id, 3]], device);
    embed.forward(good.clone());
    embed.forward(bad(11));
    embed.forward(bad(12));
    embed.forward(good.clone());
    let err = embed.check_inputs().unwrap_err();
    assert_eq!(
        err,
        PositionError::TokenIdOutOfRange {
            id: 11,
            at: [0, 1],
            vocab_size: 10
        }
    );
    // One bad forward, then enough good ones to fold it out of the kept window.
    embed.forward(bad(13));
    for _ in 0..2 * KEPT_STATUSES {
        embed.forward(good.clone());
    }
    let err = embed.check_inputs().unwrap_err();
    assert!(
        matches!(
            err,
            PositionError::BadInputInOlderForwards { tokens: 1, .. }
        ),
        "{err}"
    );
    assert_mentions(
        &err.to_string(),
        &["1 tokens", "check_inputs", "try_forward"],
    );
    for _ in 0..3 * KEPT_STATUSES {
        embed.forward(good.clone());
    }
    assert!(embed.check_inputs().is_ok());
}

/// Ids past 2^31 are compared in their own width (never narrowed to a valid id), and an offset
/// past 2^31 is refused against the nearest limit the user can act on (the table's), on every
/// backend.
pub fn wide_ids_and_offsets(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(LearnedConfig::new(8).into())
        .init(device);
    let err = embed
        .try_forward_at(
            Tensor::<2, Int>::ones([1, 2], device),
            Positions::Offset(1 << 31),
        )
        .unwrap_err();
    assert_eq!(
        err,
        PositionError::PositionPastTable {
            position: 1 << 31,
            at: None,
            max_len: 8,
            needed: (1 << 31) + 2,
        }
    );
    assert_mentions(&err.to_string(), &["2147483648", "max_len = 8", "Fix"]);
    // A sinusoidal embedding refuses it against its own limit, with no table of 2^31 rows built.
    let sinusoidal = EmbeddingWithPositionConfig::new(10, 8).init(device);
    assert!(matches!(
        sinusoidal.try_forward_at(
            Tensor::<2, Int>::ones([1, 2], device),
            Positions::Offset(1 << 31)
        ),
        Err(PositionError::PositionPastSinusoidLimit { .. })
    ));
    if device.supports_dtype(burn::tensor::DType::I64) {
        // 2^32 + 5 narrowed to 32 bits would be 5, a valid id.
        let wide = Tensor::<2, Int>::from_data(
            TensorData::new(vec![1i64, (1i64 << 32) + 5], [1, 2]),
            (device, burn::tensor::DType::I64),
        );
        let err = embed.try_forward(wide).unwrap_err();
        assert_eq!(
            err,
            PositionError::TokenIdOutOfRange {
                id: (1i64 << 32) + 5,
                at: [0, 1],
                vocab_size: 10
            }
        );
    }
}

pub fn negative_explicit_position(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8).init(device);
    let x = Tensor::<2, Int>::ones([1, 2], device);
    let p = Tensor::<2, Int>::from_data([[0, -1]], device);
    let msg = embed
        .try_forward_at(x, Positions::Explicit(p))
        .unwrap_err()
        .to_string();
    assert_mentions(&msg, &["position id -1", "from 0"]);
}

pub fn explicit_positions_of_another_shape(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8).init(device);
    let x = Tensor::<2, Int>::ones([2, 3], device);
    let p = Tensor::<2, Int>::zeros([2, 4], device);
    let msg = embed
        .try_forward_at(x, Positions::Explicit(p))
        .unwrap_err()
        .to_string();
    assert_mentions(&msg, &["[2, 3]", "[2, 4]", "one position per token"]);
}

pub fn odd_width_for_sinusoidal(device: &Device) {
    let err = EmbeddingWithPositionConfig::new(10, 7)
        .try_init(device)
        .unwrap_err();
    assert_mentions(&err.to_string(), &["d_model is 7", "even", "use 6 or 8"]);
    assert_eq!(
        panic_message(|| drop(EmbeddingWithPositionConfig::new(10, 7).init(device))),
        err.to_string()
    );
    let concat = EmbeddingWithPositionConfig::new(10, 12).with_combine(Combine::Concat {
        d_token: 7,
        d_position: 5,
    });
    assert_mentions(
        &concat.try_init(device).unwrap_err().to_string(),
        &["d_position is 5", "use 4 or 6"],
    );
    // Odd widths are fine where nothing pairs sines with cosines.
    assert!(
        EmbeddingWithPositionConfig::new(10, 7)
            .with_scheme(LearnedConfig::new(4).into())
            .try_init(device)
            .is_ok()
    );
}

pub fn concat_sizes_that_do_not_add_up(device: &Device) {
    let config = EmbeddingWithPositionConfig::new(10, 16).with_combine(Combine::Concat {
        d_token: 10,
        d_position: 8,
    });
    let msg = config.try_init(device).unwrap_err().to_string();
    assert_mentions(
        &msg,
        &[
            "10",
            "+ d_position (8) = 18",
            "d_model is 16",
            "d_token = 8",
        ],
    );
}

pub fn padding_idx_outside_the_vocabulary(device: &Device) {
    let config = EmbeddingWithPositionConfig::new(10, 8).with_padding_idx(Some(10));
    let msg = config.try_init(device).unwrap_err().to_string();
    assert_mentions(&msg, &["padding_idx", "10", "below vocab_size = 10"]);
}

on_every_device!(
    token_id_past_the_vocabulary,
    negative_token_id,
    sequence_longer_than_the_learned_table,
    negative_explicit_position,
    explicit_positions_of_another_shape,
    deferred_check_over_many_forwards,
    wide_ids_and_offsets,
    explicit_positions_past_the_sinusoidal_table,
    odd_width_for_sinusoidal,
    concat_sizes_that_do_not_add_up,
    padding_idx_outside_the_vocabulary,
    explicit_positions_past_the_sinusoidal_max_len,
);
