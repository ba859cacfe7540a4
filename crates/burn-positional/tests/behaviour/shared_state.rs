//! State shared by clones and threads, on every device: the deferred check's pending statuses,
//! the grown sinusoid table, and a decoding cache. Each case is a sequence of calls that used to
//! lose a report, mangle it or give silently wrong output (issue 24).

use crate::panic_message;
use std::sync::Barrier;

use burn::prelude::*;
use burn::tensor::{DType, TensorData};
use burn_positional::testing::KEPT_STATUSES;
use burn_positional::{
    AttentionInput, EmbeddingWithPositionConfig, KvCache, PositionError, Positions,
    SelfAttentionConfig, SinusoidalConfig,
};

fn bad_id(id: i64) -> PositionError {
    PositionError::TokenIdOutOfRange {
        id,
        at: [0, 1],
        vocab_size: 10,
    }
}

/// A bad i32 id, then i64 ids, then the check: the bad id is named (before: a panic in `cat`
/// on the mixed dtypes, and a second check returned `Ok`, the report gone). Also past the kept
/// window, where forwards of both dtypes are folded into a count.
pub fn mixed_id_dtypes_keep_the_report(device: &Device) {
    if !device.supports_dtype(DType::I64) || !device.supports_dtype(DType::I32) {
        eprintln!("{device:?} has one int dtype: ids cannot mix on it");
        return;
    }
    let embed = EmbeddingWithPositionConfig::new(10, 8).init(device);
    let ids = |values: [i64; 3], dtype| {
        Tensor::<2, Int>::from_data(TensorData::new(values.to_vec(), [1, 3]), (device, dtype))
    };
    embed.forward(ids([1, 11, 2], DType::I32));
    embed.forward(ids([1, 2, 3], DType::I64));
    assert_eq!(embed.check_inputs().unwrap_err(), bad_id(11));
    assert!(embed.check_inputs().is_ok(), "reported once, then cleared");

    embed.forward(ids([1, 12, 2], DType::I64));
    for i in 0..2 * KEPT_STATUSES {
        let dtype = if i % 2 == 0 { DType::I32 } else { DType::I64 };
        embed.forward(ids([1, 2, 3], dtype));
    }
    let err = embed.check_inputs().unwrap_err();
    assert!(
        matches!(
            err,
            PositionError::BadInputInOlderForwards { tokens: 1, .. }
        ),
        "{err}"
    );
}

/// Thread A forwards a bad id through a clone; thread B forwards good ids and checks: B is told
/// nothing of A's forward, and A's own check names its bad id (before: B was told and A's check
/// returned `Ok` on its NaN output). A forward on a thread that has ended is reported to the
/// next check on any thread.
pub fn a_check_covers_its_thread_and_ended_threads(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8).init(device);
    let good = Tensor::<2, Int>::from_data([[1, 2, 3]], device);
    let bad = Tensor::<2, Int>::from_data([[1, 11, 3]], device);
    let (a_forwarded, b_checked) = (Barrier::new(2), Barrier::new(2));
    std::thread::scope(|scope| {
        let a = scope.spawn(|| {
            let mine = embed.clone();
            mine.forward(bad.clone());
            a_forwarded.wait();
            b_checked.wait();
            mine.check_inputs()
        });
        let b = scope.spawn(|| {
            let mine = embed.clone();
            mine.forward(good.clone());
            a_forwarded.wait();
            let checked = mine.check_inputs();
            b_checked.wait();
            checked
        });
        assert_eq!(
            b.join().unwrap(),
            Ok(()),
            "B's check covers B's forward only"
        );
        assert_eq!(
            a.join().unwrap(),
            Err(bad_id(11)),
            "A's check reports A's bad id"
        );
    });
    assert!(embed.check_inputs().is_ok(), "nothing left over");

    // Joined (the OS thread has exited), not only returned: a thread counts as ended once its
    // thread-locals are gone.
    let (worker, ids) = (embed.clone(), bad.clone());
    std::thread::spawn(move || drop(worker.forward(ids)))
        .join()
        .unwrap();
    assert_eq!(
        embed.unchecked_forwards(),
        1,
        "an ended thread's forward is ours to check"
    );
    assert_eq!(embed.check_inputs().unwrap_err(), bad_id(11));
}

/// Training past `cache_len` grows the sinusoid table on the autodiff device; `valid()` (what
/// burn-train validates with, its constant tables moved off autodiff) then embeds from a table
/// of its own key (device, autodiff flag, dtype: the one rule of every cache), with the values
/// training saw, and training goes on after it.
pub fn training_past_the_cache_then_valid(device: &Device) {
    assert!(device.is_autodiff());
    let config = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(SinusoidalConfig::new().with_cache_len(4).into());
    device.seed(5);
    let train = config.init(device);
    let ids = Tensor::<2, Int>::from_data([[1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3]], device);
    let trained = train.forward(ids.clone());
    let valid = train.valid();
    let inner = ids.clone().to_device(&valid.tokens.val().device());
    let validated = valid.forward(inner.clone());
    validated.into_data().assert_approx_eq::<f32>(
        &trained.clone().into_data(),
        burn::tensor::Tolerance::absolute(1e-6),
    );
    // Further out on both, in either order.
    let far = valid.forward_at(inner, Positions::Offset(40));
    let again = train.forward_at(ids, Positions::Offset(40));
    far.into_data()
        .assert_approx_eq::<f32>(&again.into_data(), burn::tensor::Tolerance::absolute(1e-6));
    train.check_inputs().unwrap();
}

/// A cache filled by one block and passed to another is refused before it is touched (before:
/// silently wrong output); a batch of another size is refused with the cache left as it was
/// (before: the cache was emptied by the failed call). A clone of the block that filled it
/// decodes on.
pub fn a_kv_cache_is_bound_to_its_block_and_batch(device: &Device) {
    let config = SelfAttentionConfig::new(16, 2)
        .with_causal(true)
        .with_rotary();
    let (a, b) = (config.init(device), config.init(device));
    let x = |batch, seq| Tensor::<3>::ones([batch, seq, 16], device);
    let mut cache = KvCache::new();
    a.forward_cache(AttentionInput::new(x(2, 3)), &mut cache);
    let message = panic_message(|| drop(b.forward_cache(AttentionInput::new(x(2, 1)), &mut cache)));
    assert!(
        message.contains("another attention block") && message.contains("Fix"),
        "{message}"
    );
    assert_eq!(cache.len(), 3, "left as it was");
    let message = panic_message(|| drop(a.forward_cache(AttentionInput::new(x(1, 1)), &mut cache)));
    assert!(
        message.contains("holds 2 sequences, the input has 1"),
        "{message}"
    );
    assert_eq!(cache.len(), 3, "left as it was");
    a.clone()
        .forward_cache(AttentionInput::new(x(2, 1)), &mut cache);
    assert_eq!(cache.len(), 4);
    cache.clear();
    b.forward_cache(AttentionInput::new(x(1, 2)), &mut cache);
    assert_eq!(cache.len(), 2, "a cleared cache serves any block");
}

on_every_device!(
    mixed_id_dtypes_keep_the_report,
    a_check_covers_its_thread_and_ended_threads,
    a_kv_cache_is_bound_to_its_block_and_batch,
);

mod autodiff_only {
    use super::*;
    on_every_autodiff_device!(training_past_the_cache_then_valid);
}
