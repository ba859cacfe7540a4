//! What an attention block of one's own (a model port) builds on, on every device:
//!
//! - `Rope::apply_at_len` rotates explicit positions with the frequency set of the length it is
//!   given, as transformers picks it from `max(position_ids) + 1`: the same numbers as
//!   `Rope::apply` for that sequence, for `longrope` on both sides of its switch and `dynamic`
//!   past its limit;
//! - `KvCache::append` returns the cached keys and the new ones; `append_window` rolls to the
//!   last `w - 1`;
//! - `SelfAttentionConfig::cache_rotated_keys` (transformers' cache under a length-dependent
//!   rope): the same as the default for a plain rope and before a longrope switch, keys of
//!   another rotation after it, while the default equals the full forward.

use crate::attend::{agree, ints};
use crate::panic_message;

use burn::prelude::*;
use burn::tensor::{Distribution, Tolerance};
use burn_positional::{
    AttentionInput, DynamicScaling, KvCache, LongRopeScaling, RopeConfig, RopeScaling,
    SelfAttentionConfig,
};

/// A longrope with a switch at 8 (factors 1 below, 1.5 to 4 past it).
fn longrope(pairs: usize) -> RopeScaling {
    let long = (0..pairs).map(|i| 1.5 + i as f64 * 0.5).collect();
    RopeScaling::LongRope(LongRopeScaling::new(vec![1.0; pairs], long, 8, 4.0))
}

/// `apply_at_len(x, [offset, offset + seq), offset + seq)` equals `apply(x, offset)`, which
/// picks the frequencies of `offset + seq`; and a length below a switch gives `apply_at`.
pub fn rope_apply_at_len_follows_the_length(device: &Device) {
    device.seed(41);
    let (heads, seq, d_head) = (2, 3, 8);
    let x = Tensor::<4>::random(
        [1, heads, seq, d_head],
        Distribution::Normal(0.0, 1.0),
        device,
    );
    let scalings = [
        ("longrope", longrope(d_head / 2)),
        ("dynamic", RopeScaling::Dynamic(DynamicScaling::new(2.0, 8))),
        ("default", RopeScaling::None),
    ];
    for (name, scaling) in scalings {
        let rope = RopeConfig::new(d_head)
            .with_scaling(scaling)
            .with_cache_len(16)
            .init(device);
        for offset in [0usize, 4, 6, 9, 30] {
            let positions = ints(
                vec![(offset as i64..(offset + seq) as i64).collect()],
                device,
            );
            agree(
                rope.apply_at_len(x.clone(), positions.clone(), offset + seq),
                rope.apply(x.clone(), offset),
                Tolerance::absolute(1e-4),
                &format!("{name}: positions {offset}..{}", offset + seq),
            );
            if offset + seq <= 8 {
                agree(
                    rope.apply_at_len(x.clone(), positions.clone(), offset + seq),
                    rope.apply_at(x.clone(), positions),
                    Tolerance::absolute(1e-6),
                    &format!("{name}: below the switch, apply_at"),
                );
            }
        }
    }
}

/// `append` returns every key so far; `append_window(.., w)` returns the kept keys and the new
/// ones, then keeps the last `w - 1`.
pub fn kv_cache_append_and_roll(device: &Device) {
    device.seed(42);
    let step = |n| Tensor::<4>::random([2, 1, n, 4], Distribution::Normal(0.0, 1.0), device);
    let (a, b) = (step(3), step(2));
    let mut cache = KvCache::new();
    let _ = cache.append(a.clone(), a.clone());
    let (k, v) = cache.append(b.clone(), b.clone() * 2.0);
    let expected = Tensor::cat(vec![a.clone(), b.clone()], 2);
    agree(
        k,
        expected.clone(),
        Tolerance::absolute(0.0),
        "append: keys",
    );
    agree(
        v,
        Tensor::cat(vec![a.clone(), b.clone() * 2.0], 2),
        Tolerance::absolute(0.0),
        "append: values",
    );
    assert_eq!((cache.len(), cache.kept(), cache.start()), (5, 5, 0));

    let mut rolling = KvCache::new();
    let (k, _) = rolling.append_window(a.clone(), a.clone(), 3);
    agree(
        k,
        a.clone(),
        Tolerance::absolute(0.0),
        "window: the prompt sees itself",
    );
    assert_eq!((rolling.len(), rolling.kept(), rolling.start()), (3, 2, 1));
    let (k, _) = rolling.append_window(b.clone(), b.clone(), 3);
    let kept = expected.clone().slice([0..2, 0..1, 1..5, 0..4]);
    agree(k, kept, Tolerance::absolute(0.0), "window: keys 1..5");
    assert_eq!((rolling.len(), rolling.kept(), rolling.start()), (5, 2, 3));
}

/// A causal block decoding token by token, each step against one forward over the sequence
/// so far (which picks the frequencies of its length): with a plain rope both caches agree with
/// it; with a longrope switching at 8, the default (every key re-rotated) agrees at every step,
/// `cache_rotated_keys` up to the switch, and after it its old keys keep the short factors.
pub fn cache_rotated_keys_is_transformers_cache(device: &Device) {
    device.seed(43);
    let (d_model, heads, seq) = (16, 2, 12);
    let x = Tensor::<3>::random([1, seq, d_model], Distribution::Normal(0.0, 1.0), device);
    let prefix = |i: usize| x.clone().slice([0..1, 0..i + 1, 0..d_model]);
    for scaling in [RopeScaling::None, longrope(d_model / heads / 2)] {
        let length_dependent = !matches!(scaling, RopeScaling::None);
        for rotated in [false, true] {
            device.seed(44);
            let block = SelfAttentionConfig::new(d_model, heads)
                .with_causal(true)
                .with_cache_rotated_keys(rotated)
                .with_rope(Some(
                    RopeConfig::new(d_model / heads).with_scaling(scaling.clone()),
                ))
                .init(device);
            let mut cache = KvCache::new();
            for i in 0..seq {
                let input = AttentionInput::new(x.clone().slice([0..1, i..i + 1, 0..d_model]));
                let step = block.forward_cache(input, &mut cache);
                let full = block.forward(prefix(i)).slice([0..1, i..i + 1, 0..d_model]);
                let what =
                    format!("length-dependent {length_dependent}, rotated {rotated}, token {i}");
                // Tokens 0..8 make sequences of at most 8: before the switch.
                if !(rotated && length_dependent) || i < 8 {
                    agree(step, full, Tolerance::absolute(2e-4), &what);
                } else {
                    let gap = (step - full).abs().max().into_scalar::<f32>();
                    assert!(
                        gap > 1e-3,
                        "{what}: keys of the short factors should show ({gap})"
                    );
                }
            }
        }
    }
}

on_every_device!(
    rope_apply_at_len_follows_the_length,
    kv_cache_append_and_roll,
    cache_rotated_keys_is_transformers_cache,
);

/// A cache filled by a `SelfAttention` block, or of another shape, is refused with the fix.
#[test]
fn kv_cache_append_refuses_what_does_not_fit() {
    let device = crate::devices::flex();
    let block = SelfAttentionConfig::new(8, 2)
        .with_causal(true)
        .init(&device);
    let mut cache = KvCache::new();
    let _ = block.forward_cache(
        AttentionInput::new(Tensor::zeros([1, 2, 8], &device)),
        &mut cache,
    );
    let step = || Tensor::<4>::zeros([1, 2, 1, 4], &device);
    let message = panic_message(|| {
        let _ = cache.append(step(), step());
    });
    assert!(
        message.contains("SelfAttention") && message.contains("Fix"),
        "{message}"
    );

    let mut cache = KvCache::new();
    let _ = cache.append(step(), step());
    let message = panic_message(|| {
        let _ = cache.append(
            Tensor::zeros([3, 2, 1, 4], &device),
            Tensor::zeros([3, 2, 1, 4], &device),
        );
    });
    assert!(
        message.contains("batch 1") && message.contains("batch 3"),
        "{message}"
    );
    assert_eq!(cache.len(), 1, "the cache is left as it was");
    let message = panic_message(|| {
        let _ = cache.append(step(), Tensor::zeros([1, 2, 1, 8], &device));
    });
    assert!(message.contains("same shape"), "{message}");
}
