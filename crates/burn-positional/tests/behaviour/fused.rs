//! The fused forward (the default) against the reference forward made of burn tensor ops, for
//! every combination of options, on every device: values, gradients and errors.
//!
//! Sizes are odd on purpose (vocab 13, batch 3, seq 7, widths 10 = 4 + 6), so they divide no
//! kernel tile; the ids include both edges of the table (0 and 12).

use burn::prelude::*;
use burn::tensor::Tolerance;
use burn_positional::testing::fused_calls;
use burn_positional::{
    AbsolutePosition, AbsolutePositionConfig, Combine, EmbeddingWithPosition,
    EmbeddingWithPositionConfig, LearnedConfig, Positions, SinusoidalConfig,
};

const VOCAB: usize = 13;
const D_MODEL: usize = 10;

fn ids(device: &Device) -> Tensor<2, Int> {
    Tensor::from_data(
        [
            [0, 12, 5, 5, 1, 0, 7],
            [12, 12, 3, 0, 9, 11, 2],
            [4, 6, 8, 10, 12, 0, 1],
        ],
        device,
    )
}

fn explicit(device: &Device) -> Tensor<2, Int> {
    // Left-padded rows and one row reaching the learned table's last row (15).
    Tensor::from_data(
        [
            [0, 1, 2, 3, 4, 5, 6],
            [0, 0, 0, 1, 2, 3, 4],
            [9, 10, 11, 12, 13, 14, 15],
        ],
        device,
    )
}

/// Every combination: scheme x combine x scale x padding.
fn configs() -> Vec<EmbeddingWithPositionConfig> {
    let schemes: [AbsolutePositionConfig; 2] = [
        SinusoidalConfig::new().into(),
        LearnedConfig::new(16).into(),
    ];
    let combines = [
        Combine::Add,
        Combine::Concat {
            d_token: 4,
            d_position: 6,
        },
    ];
    let mut all = Vec::new();
    for scheme in &schemes {
        for combine in &combines {
            for scale in [false, true] {
                for padding in [None, Some(0)] {
                    all.push(
                        EmbeddingWithPositionConfig::new(VOCAB, D_MODEL)
                            .with_scheme(scheme.clone())
                            .with_combine(combine.clone())
                            .with_scale_tokens(scale)
                            .with_padding_idx(padding),
                    );
                }
            }
        }
    }
    all
}

fn positions(device: &Device) -> Vec<Positions> {
    vec![
        Positions::Offset(0),
        Positions::Offset(5),
        Positions::Explicit(explicit(device)),
    ]
}

fn describe(config: &EmbeddingWithPositionConfig, positions: &Positions) -> String {
    let at = match positions {
        Positions::Offset(k) => format!("offset {k}"),
        Positions::Explicit(_) => "explicit positions".into(),
        other => format!("{other:?}"),
    };
    format!(
        "{:?}, {:?}, scale {}, padding {:?}, {at}",
        config.scheme, config.combine, config.scale_tokens, config.padding_idx
    )
}

fn fused_equals_reference(device: &Device) {
    for config in configs() {
        let embed = config.init(device);
        for at in positions(device) {
            let what = describe(&config, &at);
            // The default path, and proof that it is the fused one (a fallback to the reference
            // would pass the comparison below).
            let before = fused_calls();
            let fused = embed.forward_at(ids(device), at.clone());
            assert_eq!(fused_calls(), before + 1, "{what}: the fused kernel ran");
            embed.check_inputs().expect(&what);
            let reference = embed.try_forward_reference(ids(device), at).expect(&what);
            assert_eq!(fused.dims(), [3, 7, D_MODEL], "{what}");
            fused
                .into_data()
                .assert_approx_eq::<f32>(&reference.into_data(), Tolerance::absolute(1e-6));
        }
    }
}

fn bad_ids_give_the_same_error_fused_or_not(device: &Device) {
    for config in configs() {
        let embed = config.init(device);
        for bad in [VOCAB as i64, -1] {
            let ids = Tensor::<2, Int>::from_data([[1, 2, bad]], device);
            let fused = embed.try_forward(ids.clone()).unwrap_err();
            let reference = embed
                .try_forward_reference(ids, Positions::default())
                .unwrap_err();
            assert_eq!(fused.to_string(), reference.to_string());
            assert!(fused.to_string().contains(&bad.to_string()), "{fused}");
        }
    }
    // Past the learned table, fused or not.
    let embed = EmbeddingWithPositionConfig::new(VOCAB, D_MODEL)
        .with_scheme(LearnedConfig::new(16).into())
        .init(device);
    let err = embed
        .try_forward_at(ids(device), Positions::Offset(10))
        .unwrap_err();
    assert!(err.to_string().contains("max_len = 16"), "{err}");
}

fn sinusoidal_positions_past_the_cache_match_the_reference(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(VOCAB, D_MODEL)
        .with_scheme(SinusoidalConfig::new().with_cache_len(8).into())
        .init(device);
    for at in [Positions::Offset(3), Positions::Explicit(explicit(device))] {
        let fused = embed.try_forward_at(ids(device), at.clone()).unwrap();
        let reference = embed.try_forward_reference(ids(device), at).unwrap();
        fused
            .into_data()
            .assert_approx_eq::<f32>(&reference.into_data(), Tolerance::absolute(1e-6));
    }
}

/// Large enough (4 x 300 x 256 > 2^18 elements) for the CPU implementations' multi-threaded
/// path, with rows that split across workers unevenly.
fn large_outputs_match_the_reference(device: &Device) {
    let (vocab, d_model, batch, seq) = (1001, 256, 4, 300);
    let ids: Vec<i64> = (0..batch * seq)
        .map(|i| (i * 7919 % vocab) as i64)
        .collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [batch, seq]), device);
    for scheme in [
        SinusoidalConfig::new().into(),
        LearnedConfig::new(seq + 5).into(),
    ] {
        let embed = EmbeddingWithPositionConfig::new(vocab, d_model)
            .with_scheme(scheme)
            .with_padding_idx(Some(3))
            .init(device);
        let fused = embed
            .try_forward_at(ids.clone(), Positions::Offset(5))
            .unwrap();
        let reference = embed
            .try_forward_reference(ids.clone(), Positions::Offset(5))
            .unwrap();
        fused
            .into_data()
            .assert_approx_eq::<f32>(&reference.into_data(), Tolerance::absolute(1e-6));
    }
}

/// Every float dtype the device supports: the token table (and a learned table) cast to it, the
/// sinusoid table following it, the output in it and close to f32's, gradients on autodiff
/// devices. Ids in i32 and i64 where the device has them.
fn dtypes_follow_the_token_table(device: &Device) {
    use burn::module::Param;
    use burn::tensor::DType;
    for scheme in [
        AbsolutePositionConfig::from(SinusoidalConfig::new()),
        LearnedConfig::new(16).into(),
    ] {
        let config = EmbeddingWithPositionConfig::new(VOCAB, D_MODEL).with_scheme(scheme);
        let reference = config.init(device);
        let want = reference.forward(ids(device));
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64] {
            if !device.supports_dtype(dtype) {
                continue; // refusals are tested in the kernels crate (`dtypes`)
            }
            let mut embed = config.init(device);
            embed.tokens = Param::from_tensor(reference.tokens.val().cast(dtype).detach());
            if let (AbsolutePosition::Learned(mine), AbsolutePosition::Learned(theirs)) =
                (&mut embed.position, &reference.position)
            {
                mine.table = Param::from_tensor(theirs.table.val().cast(dtype).detach());
            }
            for int in [DType::I32, DType::I64] {
                if !device.supports_dtype(int) {
                    continue;
                }
                let before = fused_calls();
                let out = embed.forward(ids(device).cast(int));
                assert_eq!(fused_calls(), before + 1, "{dtype:?} {int:?}: fused");
                assert_eq!(out.dtype(), dtype);
                let tolerance = if matches!(dtype, DType::F16 | DType::BF16) {
                    3e-2
                } else {
                    1e-5
                };
                out.clone()
                    .cast(DType::F32)
                    .into_data()
                    .assert_approx_eq::<f32>(
                        &want.clone().into_data(),
                        Tolerance::absolute(tolerance),
                    );
                embed.check_inputs().unwrap();
                if device.is_autodiff() {
                    let grads = out.sum().backward();
                    let grad = embed.tokens.grad(&grads).expect("token gradient");
                    assert_eq!(grad.dtype(), dtype, "{dtype:?} {int:?}: token gradient");
                }
            }
        }
    }
}

on_every_device!(
    empty_batches_keep_the_tables_dtype,
    dtypes_follow_the_token_table,
    large_outputs_match_the_reference,
    fused_equals_reference,
    bad_ids_give_the_same_error_fused_or_not,
    sinusoidal_positions_past_the_cache_match_the_reference,
);

/// Gradients of the fused path's hand-written backward against autodiff through the reference.
mod gradients {
    use super::*;

    use crate::gradients::loss_of;

    fn grads_of(embed: &EmbeddingWithPosition, out: Tensor<3>) -> (Tensor<2>, Option<Tensor<2>>) {
        let grads = loss_of(out).backward();
        let tokens = embed.tokens.grad(&grads).expect("token gradient");
        let table = match &embed.position {
            AbsolutePosition::Learned(t) => Some(t.table.grad(&grads).expect("table gradient")),
            _ => None,
        };
        (tokens, table)
    }

    fn fused_gradients_equal_reference(device: &Device) {
        for config in configs() {
            let embed = config.init(device);
            for at in positions(device) {
                let what = describe(&config, &at);
                let fused = grads_of(
                    &embed,
                    embed.try_forward_at(ids(device), at.clone()).unwrap(),
                );
                let reference = grads_of(
                    &embed,
                    embed.try_forward_reference(ids(device), at).unwrap(),
                );
                let close = |a: Tensor<2>, b: Tensor<2>, part: &str| {
                    let diff = (a - b).abs().max().into_scalar::<f32>();
                    assert!(diff <= 1e-5, "{what}: {part} gradients differ by {diff}");
                };
                close(fused.0.clone(), reference.0, "token");
                if let Some(padding) = config.padding_idx {
                    let width = fused.0.dims()[1];
                    let row = fused.0.slice([padding..padding + 1, 0..width]);
                    assert_eq!(
                        row.abs().sum().into_scalar::<f32>(),
                        0.0,
                        "{what}: padding row"
                    );
                }
                if let (Some(a), Some(b)) = (fused.1, reference.1) {
                    close(a, b, "learned table");
                }
            }
        }
    }

    on_every_autodiff_device!(fused_gradients_equal_reference);
}

/// Explicit positions of shape `[1, seq]` are shared by the batch, on every path: the fused
/// `forward_at` and `try_forward_at` and the reference twin give what the same positions
/// expanded to `[batch, seq]` give (gradients too), and refuse the same bad positions alike.
mod shared_positions {
    use super::*;

    fn shared(device: &Device) -> Tensor<2, Int> {
        // Reaches the learned table's last row (15), past the sinusoid cache of 8 below.
        Tensor::from_data([[9, 10, 11, 12, 13, 14, 15]], device)
    }

    use crate::gradients::loss_of;

    fn close(a: Tensor<3>, b: Tensor<3>, what: &str) {
        let diff = (a - b).abs().max().into_scalar::<f32>();
        assert!(diff <= 1e-6, "{what}: differs by {diff}");
    }

    fn shared_positions_broadcast_over_the_batch(device: &Device) {
        let mut all = configs();
        all.push(
            EmbeddingWithPositionConfig::new(VOCAB, D_MODEL)
                .with_scheme(SinusoidalConfig::new().with_cache_len(8).into()),
        );
        for config in all {
            let embed = config.init(device);
            let one = Positions::Explicit(shared(device));
            let expanded = Positions::Explicit(shared(device).expand([3, 7]));
            let what = describe(&config, &one);
            let want = embed
                .try_forward_reference(ids(device), expanded.clone())
                .expect(&what);
            type Run = fn(&EmbeddingWithPosition, Tensor<2, Int>, Positions) -> Tensor<3>;
            let paths: [(&str, Run); 3] = [
                ("try_forward_at", |e, ids, at| {
                    e.try_forward_at(ids, at).unwrap()
                }),
                ("reference", |e, ids, at| {
                    e.try_forward_reference(ids, at).unwrap()
                }),
                ("forward_at", |e, ids, at| e.forward_at(ids, at)),
            ];
            // A read-free forward sees `cache_len` (8) or `seq` rows of the short sinusoid table,
            // whatever was grown before: position 15 is deferred there (see `bad_input`).
            let short = matches!(&embed.position, AbsolutePosition::Sinusoidal(t) if t.cache().dims()[0] < 16);
            for (path, run) in paths {
                let what = format!("{what}, {path}");
                let before = fused_calls();
                let out = run(&embed, ids(device), one.clone());
                // `try_forward_at` past the rows a read-free forward sees: a second pass on the
                // grown table.
                let passes = match path {
                    "reference" => 0,
                    "try_forward_at" if short => 2,
                    _ => 1,
                };
                assert_eq!(
                    fused_calls(),
                    before + passes,
                    "{what}: the fused kernel ran"
                );
                if short && path == "forward_at" {
                    assert!(embed.check_inputs().is_err(), "{what}: deferred");
                    continue;
                }
                embed.check_inputs().expect(&what);
                assert_eq!(out.dims(), [3, 7, D_MODEL], "{what}");
                close(out.clone(), want.clone(), &what);
                if device.is_autodiff() {
                    let grads = loss_of(out).backward();
                    let want_grads = loss_of(
                        embed
                            .try_forward_reference(ids(device), expanded.clone())
                            .unwrap(),
                    )
                    .backward();
                    let token = |g| embed.tokens.grad(g).unwrap().unsqueeze::<3>();
                    close(
                        token(&grads),
                        token(&want_grads),
                        &format!("{what}: token grad"),
                    );
                    if let AbsolutePosition::Learned(t) = &embed.position {
                        let table = |g| t.table.grad(g).unwrap().unsqueeze::<3>();
                        close(
                            table(&grads),
                            table(&want_grads),
                            &format!("{what}: table grad"),
                        );
                    }
                }
            }
        }
        // Bad shared positions: the same error fused or not, naming the first bad token.
        let embed = EmbeddingWithPositionConfig::new(VOCAB, D_MODEL)
            .with_scheme(LearnedConfig::new(12).into())
            .init(device);
        for bad in [-1, 12] {
            let p = Tensor::<2, Int>::from_data([[0, 1, 2, bad, 4, 5, 6]], device);
            let fused = embed
                .try_forward_at(ids(device), Positions::Explicit(p.clone()))
                .unwrap_err();
            let reference = embed
                .try_forward_reference(ids(device), Positions::Explicit(p))
                .unwrap_err();
            assert_eq!(
                std::mem::discriminant(&fused),
                std::mem::discriminant(&reference),
                "{fused} vs {reference}"
            );
            for err in [fused, reference] {
                assert!(err.to_string().contains(&format!(" {bad} ")), "{err}");
            }
        }
    }

    on_every_device!(shared_positions_broadcast_over_the_batch);
}

/// An empty batch (no rows, or rows of no tokens) comes out empty, in the tables' dtype, on
/// every path.
fn empty_batches_keep_the_tables_dtype(device: &Device) {
    use burn::module::Param;
    use burn::tensor::DType;
    for config in configs() {
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64] {
            if !device.supports_dtype(dtype) {
                continue;
            }
            let mut embed = config.init(device);
            embed.tokens = Param::from_tensor(embed.tokens.val().cast(dtype).detach());
            if let AbsolutePosition::Learned(table) = &mut embed.position {
                table.table = Param::from_tensor(table.table.val().cast(dtype).detach());
            }
            for [batch, seq] in [[0, 5], [3, 0], [0, 0]] {
                let ids = Tensor::<2, Int>::zeros([batch, seq], device);
                let explicit = Positions::Explicit(Tensor::zeros([batch, seq], device));
                let what = format!(
                    "{}, {dtype:?}, [{batch}, {seq}]",
                    describe(&config, &explicit)
                );
                let outs = [
                    ("forward", embed.forward(ids.clone())),
                    (
                        "forward_at",
                        embed.forward_at(ids.clone(), explicit.clone()),
                    ),
                    ("try_forward", embed.try_forward(ids.clone()).unwrap()),
                    (
                        "reference",
                        embed
                            .try_forward_reference(ids.clone(), explicit.clone())
                            .unwrap(),
                    ),
                ];
                for (path, out) in outs {
                    assert_eq!(out.dims(), [batch, seq, D_MODEL], "{what}, {path}");
                    assert_eq!(out.dtype(), dtype, "{what}, {path}");
                }
                embed.check_inputs().expect(&what);
            }
        }
    }
}

/// The rope rotates queries and keys with the kernels' fused op on every device (one launch
/// per call, whether positions are an offset or explicit), and its gradient flows back
/// through the fused op's own backward.
mod rope {
    use burn::prelude::*;
    use burn_positional::testing::fused_rope_calls;
    use burn_positional::{RopeConfig, RopeLayout};

    fn one_launch_per_call(device: &Device) {
        for layout in [RopeLayout::Interleaved, RopeLayout::HalfSplit] {
            let rope = RopeConfig::new(10)
                .with_rotary_dims(Some(6))
                .with_layout(layout)
                .init(device);
            let x = Tensor::<4>::random([2, 3, 5, 10], burn::tensor::Distribution::Default, device);
            let before = fused_rope_calls();
            let offset = rope.apply(x.clone(), 3);
            assert_eq!(fused_rope_calls(), before + 1, "apply on {device:?}");
            let positions = Tensor::<1, Int>::arange(3..8, device).reshape([1, 5]);
            let explicit = rope.apply_at(x.clone(), positions);
            assert_eq!(fused_rope_calls(), before + 2, "apply_at on {device:?}");
            offset.clone().into_data().assert_approx_eq::<f32>(
                &explicit.into_data(),
                burn::tensor::Tolerance::absolute(1e-6),
            );
            // Partial rotary: the last 4 dimensions pass through.
            offset
                .slice([0..2, 0..3, 0..5, 6..10])
                .into_data()
                .assert_eq(
                    &x.clone().slice([0..2, 0..3, 0..5, 6..10]).into_data(),
                    true,
                );
            if device.is_autodiff() {
                // A rotation keeps lengths, so the gradient of |rotated x|² is 2x.
                let leaf = x.detach().require_grad();
                let grads = rope.apply(leaf.clone(), 3).powi_scalar(2).sum().backward();
                leaf.grad(&grads)
                    .unwrap()
                    .into_data()
                    .assert_approx_eq::<f32>(
                        &(leaf.clone() * 2.0).into_data(),
                        burn::tensor::Tolerance::absolute(1e-5),
                    );
            }
        }
    }

    on_every_device!(one_launch_per_call);
}

/// Every block's attention is one call of the attention kernel on every device the kernels
/// cover (all the test devices): without positions, with RoPE, ALiBi and T5, causal or not,
/// with grouped heads, a window, key padding, and while decoding from a cache; in training
/// too (the kernel's forward, the op's backward).
mod flash_attention {
    use burn::prelude::*;
    use burn_positional::testing::flash_attention_calls;
    use burn_positional::{AttentionInput, KvCache, SelfAttentionConfig};

    fn one_call_per_forward(device: &Device) {
        let base = SelfAttentionConfig::new(16, 4);
        let blocks = [
            base.clone(),
            base.clone().with_causal(true).with_rotary(),
            base.clone().with_causal(true).with_alibi(),
            base.clone().with_t5(),
            base.clone()
                .with_causal(true)
                .with_rotary()
                .with_n_kv_heads(Some(2))
                .with_sliding_window(Some(3)),
        ];
        for config in blocks {
            let block = config.init(device);
            let x = Tensor::<3>::random([2, 6, 16], burn::tensor::Distribution::Default, device);
            let before = flash_attention_calls();
            let out = block.forward(x.clone());
            assert_eq!(flash_attention_calls(), before + 1, "forward on {device:?}");
            let padding = Tensor::<2, Bool>::from_data(
                TensorData::new(
                    vec![[false; 6], [true, true, false, false, false, false]].concat(),
                    [2, 6],
                ),
                device,
            );
            let _ = block.forward_input(AttentionInput::new(x.clone()).key_padding(padding));
            assert_eq!(flash_attention_calls(), before + 2, "padded on {device:?}");
            if block.causal {
                let mut cache = KvCache::new();
                let _ = block.forward_cache(
                    AttentionInput::new(x.clone().slice([0..2, 0..5])),
                    &mut cache,
                );
                let _ = block.forward_cache(
                    AttentionInput::new(x.clone().slice([0..2, 5..6])),
                    &mut cache,
                );
                assert_eq!(
                    flash_attention_calls(),
                    before + 4,
                    "decoding on {device:?}"
                );
            }
            if device.is_autodiff() {
                let grads = out.sum().backward();
                assert!(
                    block.query.weight.grad(&grads).is_some(),
                    "{device:?}: no gradient"
                );
            }
        }
    }

    on_every_device!(one_call_per_forward);
}
