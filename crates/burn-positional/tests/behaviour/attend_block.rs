//! What the block builds on [`attend`](burn_positional::attend), checked on every device:
//!
//! - a grouped, windowed causal block decoding token by token (and two tokens at a time) with
//!   a [`KvCache`] gives the rows of its full forward, which equals its spelled-out path
//!   (`forward_weights`), while the cache keeps at most `w - 1` keys; a packed row gives each
//!   document what the document gives alone; the cache of a grouped block holds its key/value
//!   heads only;
//! - refusals (flex only: they are checks on shapes and configs, before any device work): each
//!   names the values and a fix;
//! - `Rope::apply_at` with sequential positions equals `Rope::apply` at that offset, inside the
//!   precomputed table and past it.

use crate::attend::{D_HEAD, N_HEADS, agree, ints};
use crate::panic_message;

use burn::prelude::*;
use burn::tensor::{Distribution, Tolerance};
use burn_positional::{
    AttendOptions, AttentionBias, AttentionInput, KvCache, RopeConfig, RopeLayout, ScoreBiasConfig,
    SelfAttention, SelfAttentionConfig, attend, try_attend,
};

#[derive(Clone, Copy, Debug)]
enum Scheme {
    None,
    Rope,
    Alibi,
    T5,
}

const SCHEMES: [Scheme; 4] = [Scheme::None, Scheme::Rope, Scheme::Alibi, Scheme::T5];

/// `config` with the scheme's parts sized from the block. T5's table is drawn far from zero
/// (std 1, not 0.02) with 8 buckets up to distance 20, so that its bias shows.
fn with_scheme(config: SelfAttentionConfig, scheme: Scheme) -> SelfAttentionConfig {
    match scheme {
        Scheme::None => config,
        Scheme::Rope => config.with_rotary(),
        Scheme::Alibi => config.with_alibi(),
        Scheme::T5 => {
            let mut config = config.with_t5();
            if let Some(ScoreBiasConfig::T5(t5)) = &mut config.score_bias {
                t5.num_buckets = 8;
                t5.max_distance = 20;
                t5.initializer = burn::nn::Initializer::Normal {
                    mean: 0.0,
                    std: 1.0,
                };
            }
            config
        }
    }
}

/// `x[.., rows, ..]`.
fn rows(x: &Tensor<3>, range: std::ops::Range<usize>) -> Tensor<3> {
    let [batch, _, d] = x.dims();
    x.clone().slice([0..batch, range, 0..d])
}

/// A causal block with 4 query heads over 2 and over 1 key/value heads and
/// `sliding_window = 3`, for every scheme: its full forward equals its spelled-out path, and
/// decoding with one cache, token by token and two tokens at a time, gives the full forward's
/// rows while the cache holds at most `w - 1 = 2` keys.
pub fn grouped_windowed_decoding_equals_the_full_forward(device: &Device) {
    device.seed(33);
    let seq = 6;
    for scheme in SCHEMES {
        for n_kv_heads in [2, 1] {
            let config = SelfAttentionConfig::new(16, N_HEADS)
                .with_causal(true)
                .with_n_kv_heads(Some(n_kv_heads))
                .with_sliding_window(Some(3));
            let block = with_scheme(config, scheme).init(device);
            let x = Tensor::<3>::random([2, seq, 16], Distribution::Normal(0.0, 1.0), device);
            let full = block.forward(x.clone());
            let what = format!("{scheme:?}, n_kv_heads {n_kv_heads}");
            agree(
                full.clone(),
                block.forward_weights(AttentionInput::new(x.clone())).output,
                Tolerance::absolute(2e-4),
                &format!("{what}: forward against forward_weights"),
            );
            for chunk in [1, 2] {
                let mut cache = KvCache::new();
                let mut steps = Vec::new();
                for start in (0..seq).step_by(chunk) {
                    let end = (start + chunk).min(seq);
                    let input = AttentionInput::new(rows(&x, start..end));
                    steps.push(block.forward_cache(input, &mut cache));
                    assert_eq!(cache.len(), end, "{what}, chunks of {chunk}: len");
                    assert_eq!(
                        cache.kept(),
                        end.min(2),
                        "{what}, chunks of {chunk}: kept after {end} tokens"
                    );
                    assert_eq!(cache.start(), end - cache.kept(), "{what}: start");
                }
                agree(
                    Tensor::cat(steps, 1),
                    full.clone(),
                    Tolerance::absolute(2e-4),
                    &format!("{what}, chunks of {chunk}: decoding against the full forward"),
                );
            }
        }
    }
}

/// Two documents in each of two rows (split after 3 and after 4 of 7 tokens), positions
/// restarting at the second: the packed forward gives each document's tokens what the block
/// gives the document alone, for causal blocks (RoPE, ALiBi, T5; and RoPE grouped and
/// windowed) and blocks that are not causal.
pub fn packed_rows_equal_their_documents_alone(device: &Device) {
    device.seed(34);
    let (seq, splits) = (7, [3, 4]);
    let segments: Vec<Vec<i64>> = splits
        .iter()
        .map(|&s| (0..seq).map(|i| (i >= s) as i64).collect())
        .collect();
    let positions: Vec<Vec<i64>> = splits
        .iter()
        .map(|&s| (0..s as i64).chain(0..(seq - s) as i64).collect())
        .collect();
    let mut blocks = Vec::new();
    for causal in [true, false] {
        for scheme in [Scheme::Rope, Scheme::Alibi, Scheme::T5] {
            let config = SelfAttentionConfig::new(16, N_HEADS).with_causal(causal);
            blocks.push((
                format!("{scheme:?}, causal {causal}"),
                with_scheme(config, scheme),
            ));
        }
    }
    let grouped = SelfAttentionConfig::new(16, N_HEADS)
        .with_causal(true)
        .with_n_kv_heads(Some(2))
        .with_sliding_window(Some(3))
        .with_rotary();
    blocks.push(("Rope, causal, 2 kv heads, window 3".into(), grouped));
    for (what, config) in blocks {
        let block: SelfAttention = config.init(device);
        let x = Tensor::<3>::random([2, seq, 16], Distribution::Normal(0.0, 1.0), device);
        let input = AttentionInput::new(x.clone()).packed(
            ints(segments.clone(), device),
            ints(positions.clone(), device),
        );
        let packed = block.forward_input(input);
        for (b, &split) in splits.iter().enumerate() {
            for doc in [0..split, split..seq] {
                let alone = block.forward(x.clone().slice([b..b + 1, doc.clone(), 0..16]));
                agree(
                    packed.clone().slice([b..b + 1, doc.clone(), 0..16]),
                    alone,
                    Tolerance::absolute(1e-4),
                    &format!("{what}: row {b}, tokens {doc:?}"),
                );
            }
        }
    }
}

/// The cache of a block with 2 key/value heads for 4 query heads holds 2 heads, not 4. Its
/// tensors are not public, so this is shown through a clone of the block (a clone may use the
/// cache) whose key and value projections give 4 heads: appending them to the cache panics in
/// burn's concatenation, whose message names the cached keys' shape `[2, 2, 2, 4]`; the block
/// itself decodes on.
pub fn grouped_heads_cache_holds_kv_heads(device: &Device) {
    device.seed(35);
    let block = SelfAttentionConfig::new(16, N_HEADS)
        .with_causal(true)
        .with_n_kv_heads(Some(2))
        .init(device);
    assert_eq!(block.n_kv_heads, 2);
    assert_eq!(block.key.weight.dims(), [16, 8], "2 heads of 4: 8 wide");
    let x = Tensor::<3>::random([2, 3, 16], Distribution::Normal(0.0, 1.0), device);
    let mut cache = KvCache::new();
    let _ = block.forward_cache(AttentionInput::new(rows(&x, 0..2)), &mut cache);
    assert_eq!((cache.len(), cache.kept()), (2, 2));
    // The same block (a clone shares its cache binding), widened to one kv head per query head.
    let mut widened = block.clone();
    widened.n_kv_heads = N_HEADS;
    widened.key = burn::nn::LinearConfig::new(16, 16).init(device);
    widened.value = burn::nn::LinearConfig::new(16, 16).init(device);
    let mut probe = cache.clone();
    let message = panic_message(|| {
        let _ = widened.forward_cache(AttentionInput::new(rows(&x, 2..3)), &mut probe);
    });
    // burn's refusal names both shapes: the cached keys are [batch 2, 2 heads, 2 tokens, 4].
    assert!(
        message.contains("Cat") && message.contains("[2, 2, 2, 4]"),
        "4 heads appended to a cache of 2: {message}"
    );
    // The block itself appends its 2 heads.
    let _ = block.forward_cache(AttentionInput::new(rows(&x, 2..3)), &mut cache);
    assert_eq!((cache.len(), cache.kept()), (3, 3));
}

/// `Rope::apply_at` with the positions `apply` uses gives what `apply` gives, in both layouts:
/// `[1, seq]` positions from 0, `[batch, seq]` rows from their own offsets inside the
/// precomputed table (16 rows), and rows that cross it and lie far past it (computed on the
/// device in f32 there, by `apply` on the host in f64), to 1e-4.
pub fn rope_apply_at_equals_apply(device: &Device) {
    device.seed(36);
    let (batch, heads, seq, d_head) = (3, 2, 6, 8);
    for layout in [RopeLayout::Interleaved, RopeLayout::HalfSplit] {
        let rope = RopeConfig::new(d_head)
            .with_layout(layout)
            .with_cache_len(16)
            .init(device);
        let x = Tensor::<4>::random(
            [batch, heads, seq, d_head],
            Distribution::Normal(0.0, 1.0),
            device,
        );
        let from_zero = ints(vec![(0..seq as i64).collect()], device);
        agree(
            rope.apply_at(x.clone(), from_zero),
            rope.apply(x.clone(), 0),
            Tolerance::absolute(1e-4),
            &format!("{layout:?}: positions [1, seq] from 0"),
        );
        for offsets in [[0, 5, 10], [3, 13, 100]] {
            let positions = offsets
                .iter()
                .map(|&o| (o..o + seq as i64).collect())
                .collect();
            let rotated = rope.apply_at(x.clone(), ints(positions, device));
            for (b, &offset) in offsets.iter().enumerate() {
                let one = |t: Tensor<4>| t.slice([b..b + 1, 0..heads, 0..seq, 0..d_head]);
                agree(
                    one(rotated.clone()),
                    rope.apply(one(x.clone()), offset as usize),
                    Tolerance::absolute(1e-4),
                    &format!("{layout:?}: row {b} from {offset}"),
                );
            }
        }
    }
}

on_every_device!(
    grouped_windowed_decoding_equals_the_full_forward,
    packed_rows_equal_their_documents_alone,
    grouped_heads_cache_holds_kv_heads,
    rope_apply_at_equals_apply,
);

/// Bad configs and calls are refused with a message naming the values and a fix. Checks on
/// shapes and configs only, so on one device.
mod refusals {
    use super::*;

    fn assert_mentions(message: &str, parts: &[&str]) {
        for part in parts {
            assert!(message.contains(part), "message lacks {part:?}: {message}");
        }
    }

    /// q `[2, 4, 6, 4]`, k and v with `kv_heads` heads.
    fn qkv(kv_heads: usize) -> (Tensor<4>, Tensor<4>, Tensor<4>) {
        let device = crate::devices::flex();
        let q = Tensor::<4>::zeros([2, N_HEADS, 6, D_HEAD], &device);
        let kv = Tensor::<4>::zeros([2, kv_heads, 6, D_HEAD], &device);
        (q, kv.clone(), kv)
    }

    fn refusal(kv_heads: usize, options: AttendOptions) -> String {
        let (q, k, v) = qkv(kv_heads);
        try_attend(q, k, v, &options)
            .expect_err("must be refused")
            .to_string()
    }

    #[test]
    fn kv_heads_that_do_not_divide_the_heads_are_refused_with_the_divisors() {
        let config = SelfAttentionConfig::new(16, 4).with_n_kv_heads(Some(3));
        let message = config.validate().expect_err("must be refused").to_string();
        assert_mentions(
            &message,
            &["n_kv_heads", "Some(3)", "n_heads = 4", "1, 2, 4", "Fix:"],
        );
        let init = panic_message(|| {
            let _ = config.init(&crate::devices::flex());
        });
        assert_eq!(init, message, "init panics with validate's message");
    }

    #[test]
    fn a_window_of_zero_is_refused() {
        let config = SelfAttentionConfig::new(16, 4).with_sliding_window(Some(0));
        let message = config.validate().expect_err("must be refused").to_string();
        assert_mentions(&message, &["sliding_window", "Some(0)", "Fix:"]);
    }

    #[test]
    fn attend_refuses_kv_heads_that_do_not_divide_the_heads() {
        let message = refusal(3, AttendOptions::new());
        assert_mentions(
            &message,
            &["n_kv_heads", "3", "n_heads = 4", "1, 2, 4", "Fix:"],
        );
        let (q, k, v) = qkv(3);
        let panicked = panic_message(|| {
            let _ = attend(q, k, v, &AttendOptions::new());
        });
        assert_eq!(panicked, message, "attend panics with try_attend's message");
    }

    #[test]
    fn attend_refuses_a_key_padding_of_another_shape() {
        let mask = Tensor::<2, Bool>::from_data(
            TensorData::new(vec![false; 10], [2, 5]),
            &crate::devices::flex(),
        );
        let message = refusal(2, AttendOptions::new().key_padding(mask));
        assert_mentions(&message, &["key padding", "[2, 6]", "[2, 5]", "Fix:"]);
    }

    #[test]
    fn attend_refuses_alibi_slopes_of_another_length() {
        let slopes = Tensor::<1>::from_floats([0.5, 0.25, 0.125], &crate::devices::flex());
        let message = refusal(2, AttendOptions::new().bias(AttentionBias::Alibi(slopes)));
        assert_mentions(&message, &["ALiBi slopes", "[4]", "[3]", "Fix:"]);
    }

    #[test]
    fn attend_refuses_a_negative_scale() {
        let message = refusal(2, AttendOptions::new().scale(-0.5));
        assert_mentions(&message, &["scale", "-0.5", "positive", "Fix:"]);
    }
}
