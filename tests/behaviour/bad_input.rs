//! One test per bad input: each names the value, the limit and the fix, on every backend.
//! (On wgpu an unchecked gather returns zeros or stray data; these prove our check runs there.)

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::prelude::*;
use burn_positional::{
    Combine, EmbeddingWithPositionConfig, LearnedConfig, PositionError, Positions, check_token_ids,
};

fn panic_message(f: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

fn assert_mentions(msg: &str, parts: &[&str]) {
    for part in parts {
        assert!(msg.contains(part), "message lacks {part:?}: {msg}");
    }
}

pub fn token_id_past_the_vocabulary(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8).init(device);
    let x = Tensor::<2, Int>::from_data([[1, 2, 3], [4, 10, 5]], device);
    let err = embed
        .try_forward(x.clone(), Positions::default())
        .unwrap_err();
    assert_eq!(
        err,
        PositionError::TokenIdOutOfRange {
            id: 10,
            batch: 1,
            position: 1,
            vocab_size: 10
        }
    );
    let msg = err.to_string();
    assert_mentions(
        &msg,
        &["token id 10", "[batch 1, position 1]", "0..10", "Fix"],
    );
    assert_eq!(panic_message(|| drop(embed.forward(x.clone()))), msg);
    assert_eq!(check_token_ids(&x, 10).unwrap_err(), err);
}

pub fn negative_token_id(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8).init(device);
    let x = Tensor::<2, Int>::from_data([[-3, 2]], device);
    let msg = embed
        .try_forward(x, Positions::default())
        .unwrap_err()
        .to_string();
    assert_mentions(&msg, &["token id -3", "[batch 0, position 0]", "0..10"]);
}

pub fn sequence_longer_than_the_learned_table(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(LearnedConfig::new(8).into())
        .init(device);
    let too_long = Tensor::<2, Int>::ones([1, 9], device);
    let err = embed
        .try_forward(too_long.clone(), Positions::default())
        .unwrap_err();
    assert_eq!(
        err,
        PositionError::PositionPastTable {
            position: 8,
            max_len: 8,
            needed: 9
        }
    );
    let msg = err.to_string();
    assert_mentions(
        &msg,
        &["position 8", "max_len = 8", "at least 9", "sinusoidal"],
    );
    assert_eq!(panic_message(|| drop(embed.forward(too_long))), msg);

    // The same limit by offset and by explicit positions.
    let x = Tensor::<2, Int>::ones([1, 4], device);
    let err = embed
        .try_forward(x.clone(), Positions::Offset(5))
        .unwrap_err();
    assert_eq!(
        err,
        PositionError::PositionPastTable {
            position: 8,
            max_len: 8,
            needed: 9
        }
    );
    let p = Tensor::<2, Int>::from_data([[0, 1, 12, 2]], device);
    let err = embed
        .try_forward(x.clone(), Positions::Explicit(p))
        .unwrap_err();
    assert_eq!(
        err,
        PositionError::PositionPastTable {
            position: 12,
            max_len: 8,
            needed: 13
        }
    );
    // The last row is fine.
    assert!(embed.try_forward(x, Positions::Offset(4)).is_ok());
}

pub fn negative_explicit_position(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8).init(device);
    let x = Tensor::<2, Int>::ones([1, 2], device);
    let p = Tensor::<2, Int>::from_data([[0, -1]], device);
    let msg = embed
        .try_forward(x, Positions::Explicit(p))
        .unwrap_err()
        .to_string();
    assert_mentions(&msg, &["position id -1", "from 0"]);
}

pub fn explicit_positions_of_another_shape(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8).init(device);
    let x = Tensor::<2, Int>::ones([2, 3], device);
    let p = Tensor::<2, Int>::zeros([2, 4], device);
    let msg = embed
        .try_forward(x, Positions::Explicit(p))
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
    odd_width_for_sinusoidal,
    concat_sizes_that_do_not_add_up,
    padding_idx_outside_the_vocabulary,
);
