//! Every flash kernel across the boundaries of its plan: for each variant (the register, shared,
//! register-blocked and tensor-core kernels, and the shared forward with its keys split), head
//! widths 32, 40, 64, 96 and 128 (the tensor cores) or one per plan (32, 40, 64 and 128 for the
//! shared kernel, its split keys and the blocked forward, 32, 64 and 128 for the register
//! kernel), the key and
//! query counts on both sides of every stage, key block, cube of
//! rows and split the plan chose on this device (`flash_boundaries`, read from the plan code;
//! every row count with gradients, f32, for the tensor-core kernels; f32 and the most
//! rows for the others, where each row count and width compiles kernels of its own),
//! the long lengths 1024, 1025, 2048, 2049 and 3000, and on lavapipe the most keys the
//! tensor-core forward takes under llvmpipe's loop limit and one past it. Outputs and gradients
//! against the slow twin (`reference_attention`, burn's own ops per tile), f32 (f16 in `issue_rows`).
//!
//! The tensor-core forward at head width 64 gave wrong numbers from 1,640 keys on lavapipe, and
//! its backward with grouped heads from about 700 tokens (issue 61): llvmpipe stops every loop
//! of an invocation once their iterations add up to 65,535, which the emulated products
//! reached. The cases the issue reported are [`issue_rows`].

use burn::tensor::{DType, Device, Distribution, Int, Tensor, TensorData};
use burn_positional_kernels::{
    AttendOptions, AttentionBias, FlashVariant, Window, flash_attention_backward_calls,
    flash_boundaries, flash_variant_backward_launches, flash_variant_launches, reference_attention,
    set_thread_flash_key_splits, set_thread_flash_variant, tiled_attention,
};

#[allow(dead_code)]
mod common;
use common::{twin_device, wgpu_devices};

/// Every head width the tensor-core sweep takes: its plans pad to 16 (40 to 48, 96 stays), so
/// the odd widths are plans of their own.
const WIDTHS: [usize; 5] = [32, 40, 64, 96, 128];
/// The widths the tensor-core sweep takes every row count at, with gradients: one per plan of
/// its backward (two m-tiles a warp at 32; one, padded, at 40; one and the narrow dK/dV steps at
/// 128). Widths 64 and 96 repeat the plans of 40 at more seconds of LLVM a kernel (the emulated
/// backward's two kernels a width, issue 72: the kernels binary took 2,591 s on this machine with
/// every width), and take their gradients in `flash.rs` (64) and `issue_rows` (64) instead.
const GRADIENT_WIDTHS: [usize; 3] = [32, 40, 128];
/// The widths the register, shared and split sweeps take: one per plan of theirs (f32 on
/// lavapipe). Rows a register unit: 8 at widths 32 and 40, 2 at 64 and 96, 1 at 128; a shared
/// unit's rows and keys a stage: 2 and 64 at 32, 1 and 64 at 40, 1 and 32 at 64 and 96, 1 and
/// 16 at 128. Width 96 repeats width 64's plans at more seconds of LLVM than any other (its
/// shared kernels: 135 s of this sweep's cold 980, issue 61); the tensor-core sweep keeps it.
const PLAN_WIDTHS: [usize; 4] = [32, 40, 64, 128];
/// The register sweep's widths: one per plan of the register kernel alone (8 rows a unit at 32,
/// 2 at 64, 1 at 128). Width 40 repeats width 32's register plan (8 rows a unit, no padding:
/// its loops are unrolled to the width exactly); it is a plan of its own for the shared kernel
/// only (one row a unit), which the shared and split sweeps take (issue 70: 49 s of this
/// sweep's 235 with Mesa's cache empty).
const REGISTER_WIDTHS: [usize; 3] = [32, 64, 128];
const HEADS: usize = 4;
const KV_HEADS: usize = 2;

/// The worst difference relative to the largest value of `want`, or to 1 where that is smaller
/// (a gradient that is zero, as dq over one key); NaN and infinities fail.
fn relative(got: Tensor<4>, want: Tensor<4>) -> f32 {
    let got = got
        .cast(DType::F32)
        .into_data()
        .iter::<f32>()
        .collect::<Vec<f32>>();
    let want = want.into_data().iter::<f32>().collect::<Vec<f32>>();
    assert!(
        got.iter().all(|x| x.is_finite()),
        "NaN or infinity in the kernel's numbers"
    );
    let size = want.iter().fold(1.0f32, |m, x| m.max(x.abs()));
    got.iter()
        .zip(&want)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()))
        / size
}

fn tolerance(dtype: DType) -> f32 {
    if dtype == DType::F32 { 2e-5 } else { 1e-2 }
}

/// One call of `seq_q` query rows over `seq_k` keys (the last `seq_q` positions: a decoding
/// step or a chunk), causal, the options `extra` adds (built on the device it is given): the
/// kernel on `device` in `dtype` against the slow twin in f32 on the same (rounded) inputs; with
/// `grads`, the gradients of q, k, v too. The twin runs on flex: burn's own ops there compile
/// nothing, where on lavapipe each new length compiled its fused kernels anew (the sweep's cost
/// with Mesa's cache empty).
#[allow(clippy::too_many_arguments)]
fn check(
    device: &Device,
    dtype: DType,
    heads: (usize, usize),
    seq_q: usize,
    seq_k: usize,
    d: usize,
    extra: impl Fn(AttendOptions, &Device) -> AttendOptions,
    grads: bool,
    what: &str,
) {
    let (n_heads, n_kv) = heads;
    let twin_device = twin_device(grads);
    // Drawn and rounded to `dtype` on flex: on lavapipe each new shape would compile its own
    // draw and casts.
    let normal = |h: usize, n: usize| {
        Tensor::<4>::random([1, h, n, d], Distribution::Normal(0.0, 1.0), &twin_device)
            .cast(dtype)
            .cast(DType::F32)
            .into_data()
    };
    let inputs = [
        normal(n_heads, seq_q),
        normal(n_kv, seq_k),
        normal(n_kv, seq_k),
    ];
    let on = |dev: &Device| {
        inputs.clone().map(|data| {
            let t = Tensor::<4>::from_data(data, dev);
            if grads { t.require_grad() } else { t }
        })
    };
    let options =
        |dev: &Device| extra(AttendOptions::new().causal(true).offset(seq_k - seq_q), dev);
    let [qf, kf, vf] = on(device);
    let fast = tiled_attention(
        qf.clone().cast(dtype),
        kf.clone().cast(dtype),
        vf.clone().cast(dtype),
        &options(device),
    )
    .cast(DType::F32);
    let [qs, ks, vs] = on(&twin_device);
    let slow = reference_attention(
        qs.clone(),
        ks.clone(),
        vs.clone(),
        &options(&twin_device).tile_rows(16),
    );
    let tol = tolerance(dtype);
    let out = relative(fast.clone(), slow.clone());
    assert!(
        out <= tol,
        "{what}: output off by {out:.2e} of its size (tolerance {tol:.0e})"
    );
    if !grads {
        return;
    }
    let w_twin = Tensor::<4>::random(fast.dims(), Distribution::Normal(0.0, 1.0), &twin_device);
    let w = Tensor::<4>::from_data(w_twin.to_data(), device);
    let g_fast = (fast * w).sum().backward();
    let g_slow = (slow * w_twin).sum().backward();
    for (name, f, s) in [("dq", &qf, &qs), ("dk", &kf, &ks), ("dv", &vf, &vs)] {
        let off = relative(f.grad(&g_fast).unwrap(), s.grad(&g_slow).unwrap());
        assert!(
            off <= tol,
            "{what}: {name} off by {off:.2e} of its size (tolerance {tol:.0e})"
        );
    }
}

/// `variant` (and `splits`) forced on this thread, each of `widths` (the row counts at `rows_at`),
/// f32 and the halves the device has (wgpu's GL fallback has none; the GPU kit's
/// `--check-tensor-cores` takes f16 and bf16 through the same boundaries with a GPU's plans),
/// across the boundaries of its plans; and proof that the forced kernels ran.
fn sweep(
    variant: FlashVariant,
    splits: Option<usize>,
    widths: &[usize],
    rows_at: &[usize],
    dtypes: &[DType],
) {
    let _forcing = crate::forcing(variant);
    set_thread_flash_variant(Some(variant));
    set_thread_flash_key_splits(splits);
    let devices = wgpu_devices();
    let (plain, autodiff) = (&devices[0], &devices[1]);
    let launches = flash_variant_launches(variant);
    let backward_launches = flash_variant_backward_launches(variant);
    let backward_calls = flash_attention_backward_calls();
    let (mut calls, mut past_limit, mut limited) = (0u64, 0u64, false);
    let started = std::time::Instant::now();
    for &dtype in dtypes {
        if !plain.supports_dtype(dtype) {
            assert_ne!(dtype, DType::F32);
            eprintln!("{plain:?} has no {dtype:?}: the halves are the GPU kit's check");
            continue;
        }
        // The inputs are drawn on flex (`check`).
        Device::flex().seed(11);
        for &d in widths {
            let b = flash_boundaries(plain, variant, dtype, HEADS, KV_HEADS, d, d);
            limited |= b.fits && b.loop_limit_keys.is_some();
            let what = |seq_q: usize, seq_k: usize| {
                format!(
                    "{variant:?} splits {splits:?} {dtype:?} d {d}: {seq_q} rows over {seq_k} keys"
                )
            };
            // Each call ran the forced kernel where its plan fits (and llvmpipe's loop limit lets
            // it through), and never past that limit.
            let mut forward = |device: &Device, rows: usize, keys: usize, grads: bool| {
                let before = flash_variant_launches(variant);
                check(
                    device,
                    dtype,
                    (HEADS, KV_HEADS),
                    rows,
                    keys,
                    d,
                    |o, _| o,
                    grads,
                    &what(rows, keys),
                );
                let ran = flash_variant_launches(variant) - before;
                if !b.fits {
                    return;
                }
                if b.loop_limit_keys.is_none_or(|most| keys <= most) {
                    assert!(
                        ran >= 1,
                        "{}: the forced kernel did not run",
                        what(rows, keys)
                    );
                    calls += 1;
                } else {
                    assert_eq!(
                        ran,
                        0,
                        "{}: ran past llvmpipe's loop limit",
                        what(rows, keys)
                    );
                    past_limit += 1;
                }
            };
            // One query row over every key count (a decoding step), the forward.
            for &keys in &b.keys {
                forward(plain, 1, keys, false);
            }
            // Every row count over as many keys, forward and gradients (the backward's cubes of
            // rows and of keys), at the widths `rows_at`; at every width, the most rows over
            // 2,049 keys. Each row count and width is a kernel of its own for the register and
            // shared kernels, forward and backward: on lavapipe with Mesa's cache empty the
            // register kernels' row counts took 180 s at width 40 alone. Those take the most rows
            // (forward) here, and their row counts and halves in `flash.rs` (1, 7, 63, 65 and
            // 1,000 rows); the tensor-core kernels, one kernel per width whatever the lengths,
            // take every row count at one width per plan of their backward (`GRADIENT_WIDTHS`).
            if rows_at.contains(&d) {
                for &rows in &b.queries {
                    forward(autodiff, rows, rows, true);
                }
            }
            forward(plain, *b.queries.last().unwrap(), 2049, false);
            eprintln!(
                "{} after d {d} {dtype:?}: {:.1} s",
                what(0, 0),
                started.elapsed().as_secs_f32()
            );
        }
    }
    let launched = flash_variant_launches(variant) - launches;
    let backward = flash_variant_backward_launches(variant) - backward_launches;
    let backward_calls = flash_attention_backward_calls() - backward_calls;
    set_thread_flash_variant(None);
    set_thread_flash_key_splits(None);
    // Every forward call the plan fits (and llvmpipe's loop limit lets through) ran the forced
    // kernel, and the backward calls its backward.
    assert!(
        launched >= calls && calls > 0,
        "{variant:?}: {launched} launches for {calls} calls"
    );
    assert!(
        !limited || past_limit > 0,
        "{variant:?}: no call past llvmpipe's loop limit, where the boundaries name one"
    );
    // The backward where this sweep takes gradients.
    assert!(
        rows_at.is_empty() || (backward > 0 && backward_calls > 0),
        "{variant:?}: {backward} backward launches for {backward_calls} calls"
    );
}

#[test]
fn register_kernel_across_its_boundaries() {
    sweep(
        FlashVariant::Registers,
        None,
        &REGISTER_WIDTHS,
        &[],
        &[DType::F32],
    );
}

#[test]
fn shared_kernel_across_its_boundaries() {
    sweep(FlashVariant::Shared, None, &PLAN_WIDTHS, &[], &[DType::F32]);
}

#[test]
fn split_keys_across_their_boundaries() {
    sweep(
        FlashVariant::Shared,
        Some(3),
        &PLAN_WIDTHS,
        &[],
        &[DType::F32],
    );
}

/// The register-blocked kernels (issue 73) across their boundaries: one query row over every
/// key count (blocks of 64 keys, stages of values, splits), every row count with gradients (the
/// forward's cubes of 64 rows at widths 32, 40 and 64, of 32 at 128, four rows a unit; the
/// backward's cubes of 32 rows and of 32 keys, its blocks of 64 and stages) and the most rows
/// over 2,049 keys, at one width per plan (32: one stage of 32 dimensions; 40: stages of 16,
/// values padded to 64; 64: two stages; 128: cubes of 32 rows, values in 16 units' columns).
/// Every length shares a width's kernels, so the gradients cost no compile of their own.
#[test]
fn blocked_kernel_across_its_boundaries() {
    sweep(
        FlashVariant::Blocked,
        None,
        &PLAN_WIDTHS,
        &PLAN_WIDTHS,
        &[DType::F32],
    );
}

/// f32 alone: the emulated kernels (issue 72) hold a barrier per exchange of their virtual
/// warps, each a suspend point of llvmpipe's coroutines, and in f16 LLVM took minutes a width
/// (245 s for the forward at width 64 with a bias, `issue_rows`, at one exchange a product).
/// The index logic is the dtype's only through the plan (the stages that fit), which f32 takes
/// across every boundary (the forward at every width, the gradients at one width a plan); f16
/// and bf16 go through the emulation in `flash.rs` (`check_half`) and `issue_rows`, and through
/// these boundaries natively in the GPU kit's `--check-tensor-cores`.
#[test]
fn tensor_core_kernel_across_its_boundaries() {
    sweep(
        FlashVariant::TensorCores,
        None,
        &WIDTHS,
        &GRADIENT_WIDTHS,
        &[DType::F32],
    );
}

/// The calls issue 61 reported wrong with the tensor-core kernels forced, forward and
/// gradients, f32 and f16: 700 tokens of packed documents (300, 250, 150) with a softcap and a
/// window over one key/value head of four, and 1,024 tokens with ALiBi over two of four.
#[test]
fn issue_rows() {
    let _forcing = crate::forcing(FlashVariant::TensorCores);
    set_thread_flash_variant(Some(FlashVariant::TensorCores));
    let device = &wgpu_devices()[1];
    Device::flex().seed(13);
    let before = flash_variant_backward_launches(FlashVariant::TensorCores);
    let mut calls = 0;
    for dtype in [DType::F32, DType::F16] {
        if !device.supports_dtype(dtype) {
            eprintln!("{device:?} has no {dtype:?}: the GPU kit's check takes these calls in it");
            continue;
        }
        calls += 2;
        let packed = |o: AttendOptions, device: &Device| {
            let ids: Vec<i64> = (0..700)
                .map(|i| (i >= 300) as i64 + (i >= 550) as i64)
                .collect();
            let pos: Vec<i64> = (0..700)
                .map(|i| {
                    if i < 300 {
                        i
                    } else if i < 550 {
                        i - 300
                    } else {
                        i - 550
                    }
                })
                .collect();
            let ints = |v: &Vec<i64>| {
                Tensor::<2, Int>::from_data(TensorData::new(v.clone(), [1, 700]), device)
            };
            o.segments(ints(&ids), ints(&ids))
                .positions(ints(&pos), ints(&pos))
                .softcap(20.0)
                .window(Window::hf(256))
        };
        check(
            device,
            dtype,
            (4, 1),
            700,
            700,
            40,
            packed,
            true,
            &format!("{dtype:?} 700 tokens, 4/1, d 40, packed"),
        );
        let alibi = |o: AttendOptions, device: &Device| {
            let slopes = Tensor::<1>::from_floats([0.5, 0.25, 0.125, 0.0625], device);
            o.bias(AttentionBias::Alibi(slopes))
        };
        check(
            device,
            dtype,
            (4, 2),
            1024,
            1024,
            64,
            alibi,
            true,
            &format!("{dtype:?} 1024 tokens, 4/2, d 64, alibi"),
        );
    }
    let launched = flash_variant_backward_launches(FlashVariant::TensorCores) - before;
    set_thread_flash_variant(None);
    assert_eq!(launched, calls, "the tensor-core backward ran each call");
}
