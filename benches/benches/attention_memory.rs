//! Past 700 lines for one reason: what the GPU kit runs of attention on a device, in the one
//! binary the kit carries (`tools/gpu/kit/main.rs` links each bench's `main`), the tables and the
//! tensor-core check with its sweep.
//!
//! Memory against length: how much memory one forward, and one forward plus backward, of a
//! causal block at batch 1, d_model 256, 8 heads takes, for each scheme, beside burn's own
//! `attention` without a bias on q, k, v of the same shapes. On flex and ndarray that is the
//! growth of the process's peak resident memory (`VmHWM` minus `VmRSS` after setup, Linux); on
//! wgpu and CUDA, the growth of the memory cubecl's allocator has reserved on the device (its
//! pools keep every page they took until a cleanup, so after the step they hold the step's
//! peak). Each case runs in a process of its own (this binary, re-invoked), so no case inherits
//! another's allocations. Also the wall time of the same step (median of `REPS` more steps,
//! default 3; `REPS=0` reports the measured step itself), synced inside the timed region;
//! `LAUNCHES=N` times groups of N steps queued with one sync (the GPU kit's way).
//!
//! A third table (`TABLE=kernel`) times the attention op alone: causal `attend` on q, k, v
//! `[1, 8, seq, 32]` without a bias, with ALiBi's slopes and with a T5-style table by distance,
//! beside burn's own `attention` without a bias (no projections on either side).
//!
//! `DTYPE=f16` (or `bf16`) stores the op-alone cases' q, k, v and bias in that dtype;
//! `HEADS` and `HEAD_DIM` set their query heads and width (8 and 32), `QUERIES` their query
//! rows (the last of `seq`: a decoding step over a cache), as the GPU kit's tensor-core call
//! takes issue 72's shapes. `--adapter wgpu` prints the adapter a device name opens and whether
//! it is a GPU (the GPU kit's first check, `tools/gpu/`). `--check-tensor-cores cuda` checks
//! the tensor-core attention kernels on that device against the register kernel and the slow
//! twin, forward and backward, in f16 and bf16, then (without `--no-sweep`) sweeps the
//! boundaries of their plans there (`flash_boundaries`): the GPU kit's check of the `mma.sync`
//! path, which no CI machine can run; it exits non-zero on a mismatch.
//!
//! A second table (`TABLE=grouped`; both by default, `TABLE=schemes` the first alone) sets
//! grouped heads against repeating keys and values, a windowed block against the sequence
//! length, and what a `KvCache` holds after a prefill: 8 key/value heads, 2, and a window.
//!
//! ```text
//! cargo bench -p burn-positional-benches --bench attention_memory
//! BENCH_DEVICES=wgpu REPS=0 cargo bench -p burn-positional-benches --bench attention_memory
//! TABLE=grouped cargo bench -p burn-positional-benches --bench attention_memory
//! TABLE=kernel BENCH_DEVICES=flex,wgpu MAX_SEQ=8192 cargo bench -p burn-positional-benches --bench attention_memory
//! ```
//!
//! On wgpu without a GPU (Mesa's lavapipe) the device is the CPU: those figures are
//! CPU-emulated. Forward plus backward stops at `MAX_BACKWARD` (4096 by default) for burn's
//! attention and the spelled-out block, which keep `n_heads x seq^2` floats per saved tensor,
//! and the spelled-out forward at `MAX_SPELLED` (8192); the tiled blocks go up to `MAX_SEQ`
//! (16384).

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Instant;

use burn::prelude::*;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{DType, Distribution, TensorData};
use burn_positional::{AttendOptions, AttentionInput, KvCache, SelfAttentionConfig, attend};
use burn_positional_examples::device::{DeviceChoice, open};

const D_MODEL: usize = 256;
const N_HEADS: usize = 8;
const SCHEMES: [&str; 6] = [
    "burn attention",
    "none, spelled out",
    "none",
    "rope",
    "alibi",
    "t5",
];

/// The second table: grouped heads and a sliding window. Causal `attend` on q `[1, 8, seq, 32]`
/// over k, v with 8 or 2 heads (and the 2 repeated to 8 in the step, as a user without grouped
/// heads would), the 8 with a window of `WINDOW`, and what the `KvCache` of a causal RoPE
/// block keeps after a prefill of `seq` tokens: the size of the keys and values it holds
/// (`kept() x n_kv_heads x d_head x 2` f32), and on wgpu the device allocator's bytes still in
/// use after the step.
const GROUPED: [&str; 7] = [
    "8 kv heads",
    "2 kv heads",
    "2 kv heads, repeated",
    "8 kv heads, window 256",
    "cache, 8 kv heads",
    "cache, 2 kv heads",
    "cache, window 256",
];
const WINDOW: usize = 256;

/// The third table: the attention op alone (no projections) with each bias in compact form,
/// beside burn's own `attention` without a bias: causal `attend` on q, k, v `[1, 8, seq, 32]`.
const KERNEL: [&str; 4] = [
    "burn attention",
    "8 kv heads",
    "8 kv heads, alibi",
    "8 kv heads, t5",
];

fn kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// Bytes the device's allocator has reserved (cubecl's pools), or 0 on a backend that does not
/// report it (flex, ndarray: their tensors are plain host memory, which `VmHWM` sees).
fn reserved(device: &Device) -> u64 {
    device
        .memory_pool_usage()
        .map_or(0, |usage| usage.bytes_reserved)
}

/// Bytes the device's allocator has handed out and not taken back (0 on flex and ndarray).
fn in_use(device: &Device) -> u64 {
    device
        .memory_pool_usage()
        .map_or(0, |usage| usage.bytes_in_use)
}

/// A causal RoPE block of the grouped table: `n_kv_heads` key/value heads, an optional window.
fn grouped_block(
    n_kv_heads: usize,
    window: Option<usize>,
    device: &Device,
) -> burn_positional::SelfAttention {
    SelfAttentionConfig::new(D_MODEL, N_HEADS)
        .with_causal(true)
        .with_rotary()
        .with_n_kv_heads(Some(n_kv_heads))
        .with_sliding_window(window)
        .init(device)
}

/// The child of a `cache, ..` case: a prefill of `seq` tokens through `forward_cache`, then
/// what stays held (the cache) in MiB, the step's time, and the device allocator's bytes in
/// use, in MiB.
fn cache_case(device: &Device, scheme: &str, seq: usize) {
    let (n_kv, window) = match scheme {
        "cache, 8 kv heads" => (N_HEADS, None),
        "cache, 2 kv heads" => (2, None),
        "cache, window 256" => (N_HEADS, Some(WINDOW)),
        other => panic!("unknown scheme {other}"),
    };
    let block = grouped_block(n_kv, window, device);
    let x = Tensor::<3>::random([1, seq, D_MODEL], Distribution::Normal(0.0, 1.0), device);
    let mut cache = KvCache::new();
    device.sync().expect("the device syncs");
    let in_use_before = in_use(device);
    let start = Instant::now();
    let out = block.forward_cache(AttentionInput::new(x), &mut cache);
    let _ = out.sum().into_scalar::<f32>();
    device.sync().expect("the device syncs");
    let ms = start.elapsed().as_secs_f64() * 1e3;
    assert_eq!(cache.len(), seq);
    // The keys and values the cache holds: kept tokens x kv heads x d_head, f32, twice.
    let held = (cache.kept() * n_kv * (D_MODEL / N_HEADS) * 2 * 4) as f64 / (1 << 20) as f64;
    let device_held = in_use(device).saturating_sub(in_use_before) as f64 / (1 << 20) as f64;
    println!("{held:.1} {ms} {device_held:.1}");
}

/// The child: one case, prints `growth_mib time_ms device_mib`.
fn case(device_name: &str, scheme: &str, seq: usize, backward: bool) {
    let choice: DeviceChoice = device_name
        .parse()
        .unwrap_or_else(|e: String| panic!("{e}"));
    let device = open(choice)
        .unwrap_or_else(|reason| panic!("{reason}"))
        .device;
    let device = if backward { device.autodiff() } else { device };
    device.seed(1);
    // `DTYPE=f16|bf16` stores q, k, v and the bias of the op-alone cases in that dtype (f32
    // by default); the kernels compute in f32 whatever the storage.
    let dtype = match std::env::var("DTYPE").as_deref() {
        Ok("f16") => DType::F16,
        Ok("bf16") => DType::BF16,
        Ok("f32") | Err(_) => DType::F32,
        Ok(other) => panic!("DTYPE={other}: expected f32, f16 or bf16"),
    };
    if scheme.starts_with("cache, ") {
        return cache_case(&device, scheme, seq);
    }
    // "8 kv heads", "2 kv heads", "2 kv heads, repeated", "8 kv heads, window 256". The op
    // alone takes `HEADS` query heads (8) of `HEAD_DIM` (32), and `QUERIES` query rows (all
    // `seq`; fewer: the last rows, a decoding step over a cache of `seq` keys).
    let env = |name: &str, default: usize| match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: expected a count")),
        Err(_) => default,
    };
    let (n_heads, d_head) = (env("HEADS", N_HEADS), env("HEAD_DIM", D_MODEL / N_HEADS));
    let queries = env("QUERIES", seq).min(seq);
    let (heads, variant) = scheme.split_once(", ").unwrap_or((scheme, ""));
    let run: Box<dyn Fn() -> Tensor<3>> = if let Some(heads) = heads.strip_suffix(" kv heads") {
        let n_kv: usize = heads.parse().expect("a head count");
        assert!(
            n_kv > 0 && n_heads % n_kv == 0,
            "{scheme}: {n_kv} key/value heads must divide HEADS = {n_heads}"
        );
        let mut options = AttendOptions::new().causal(true).offset(seq - queries);
        match variant {
            "window 256" => options = options.window(burn_positional::Window::hf(WINDOW)),
            "alibi" => {
                let slopes: Vec<f32> = burn_positional::score_bias::alibi_slopes(n_heads)
                    .into_iter()
                    .map(|m| m as f32)
                    .collect();
                let slopes = Tensor::<1>::from_floats(slopes.as_slice(), &device).cast(dtype);
                options = options.bias(burn_positional::AttentionBias::Alibi(slopes));
            }
            "t5" => {
                // T5's table by clamped distance: 128 each way (its max_distance).
                let reach = 128;
                let bias = Tensor::<2>::random(
                    [n_heads, 2 * reach + 1],
                    Distribution::Normal(0.0, 1.0),
                    &device,
                )
                .cast(dtype);
                let bias = if backward { bias.require_grad() } else { bias };
                options = options.bias(burn_positional::AttentionBias::ByDistance { bias, reach });
            }
            _ => {}
        }
        let normal = |heads: usize, rows: usize| {
            let t = Tensor::<4>::random(
                [1, heads, rows, d_head],
                Distribution::Normal(0.0, 1.0),
                &device,
            )
            .cast(dtype);
            if backward { t.require_grad() } else { t }
        };
        let (q, k, v) = (
            normal(n_heads, queries),
            normal(n_kv, seq),
            normal(n_kv, seq),
        );
        // transformers' repeat_kv: each kv head copied for its query heads, in the step.
        let repeated = variant == "repeated";
        let repeat = move |t: Tensor<4>| {
            if !repeated {
                return t;
            }
            t.unsqueeze_dim::<5>(2)
                .expand([1, n_kv, n_heads / n_kv, seq, d_head])
                .reshape([1, n_heads, seq, d_head])
        };
        let width = n_heads * d_head;
        Box::new(move || {
            attend(q.clone(), repeat(k.clone()), repeat(v.clone()), &options)
                .reshape([1, queries, width])
        })
    } else if scheme == "burn attention" {
        let qkv = || {
            let t = Tensor::<4>::random(
                [1, n_heads, seq, d_head],
                Distribution::Normal(0.0, 1.0),
                &device,
            )
            .cast(dtype);
            if backward { t.require_grad() } else { t }
        };
        let (q, k, v) = (qkv(), qkv(), qkv());
        let width = n_heads * d_head;
        Box::new(move || {
            let options = AttentionModuleOptions {
                is_causal: true,
                ..Default::default()
            };
            attention(q.clone(), k.clone(), v.clone(), None, None, options).reshape([1, seq, width])
        })
    } else {
        // `TILE_ROWS` sets the tiled attention's rows per tile (default: the block's budget).
        let tile_rows = std::env::var("TILE_ROWS").ok().and_then(|v| v.parse().ok());
        let config = SelfAttentionConfig::new(D_MODEL, N_HEADS)
            .with_causal(true)
            .with_tile_rows(tile_rows);
        let config = match scheme {
            "none" | "none, spelled out" => config,
            "rope" => config.with_rotary(),
            "alibi" => config.with_alibi(),
            "t5" => config.with_t5(),
            other => panic!("unknown scheme {other}"),
        };
        let block = config.init(&device);
        let x = Tensor::<3>::random([1, seq, D_MODEL], Distribution::Normal(0.0, 1.0), &device);
        let x = if backward { x.require_grad() } else { x };
        if scheme == "none, spelled out" {
            // The scores written out in full (`forward_weights`): the reference path, and what
            // `forward` ran on autodiff devices before the tiled backward.
            Box::new(move || block.forward_weights(AttentionInput::new(x.clone())).output)
        } else {
            Box::new(move || block.forward(x.clone()))
        }
    };
    let step = || {
        let out = run();
        if backward {
            let grads = out.sum().backward();
            drop(grads);
        } else {
            let _ = out.sum().into_scalar::<f32>();
        }
        device.sync().expect("the device syncs");
    };
    // Setup done: the growth from here is the case's.
    device.sync().expect("the device syncs");
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak (Linux)");
    let base = kib("VmRSS");
    let reserved_before = reserved(&device);
    let start = Instant::now();
    step();
    let first = start.elapsed().as_secs_f64() * 1e3;
    let growth = kib("VmHWM").saturating_sub(base);
    // cubecl's pools keep the pages they took for reuse (memory is given back only on
    // `memory_cleanup` or under pressure), so what they hold after the step is what the step
    // needed at its peak.
    let device_growth = reserved(&device).saturating_sub(reserved_before);
    // The median of `REPS` more steps (default 3); with `REPS=0`, the measured step's own time
    // (which includes compiling the shaders of new shapes on wgpu).
    let reps = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    // `LAUNCHES` steps per sync (default 1): each queued without the step's read, then one
    // sync, the time divided by their number; the host's round trip to the device is then
    // paid once per group, as in the PyTorch twin's timing (tools/gpu/torch_twin.py).
    let launches: usize = std::env::var("LAUNCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1);
    // Outputs (and gradients) are held until the sync: nothing queued is dropped unrun.
    let queued = || {
        let out = run();
        if backward {
            (None, Some(out.sum().backward()))
        } else {
            (Some(out), None)
        }
    };
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            if launches == 1 {
                step();
            } else {
                let held: Vec<_> = (0..launches).map(|_| queued()).collect();
                device.sync().expect("the device syncs");
                drop(held);
            }
            start.elapsed().as_secs_f64() * 1e3 / launches as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "{} {} {}",
        growth / 1024,
        times.get(times.len() / 2).copied().unwrap_or(first),
        device_growth >> 20
    );
}

/// The tensor-core kernels ([`FlashVariant::TensorCores`], `mma.sync` where the device has it
/// for the dtype) against the register kernel on the same device, forward and backward, in f16 and
/// bf16: heads of 32 (8 of 8), 64 (8 over 2 key/value heads) and 128 (4), 300 tokens (not a
/// multiple of 16), causal with ALiBi, and a T5 table with a window. Prints each case's largest
/// difference relative to the largest value; panics past the dtype's tolerance (f16 1e-2, bf16
/// 6e-2, as `tests/flash.rs`).
/// With `sweep`, then the sweep of their plans' boundaries ([`sweep_tensor_cores`]: minutes on a
/// GPU); without, the 300-token cases alone.
fn check_tensor_cores(device_name: &str, sweep: bool) {
    use burn_positional_kernels::{FlashVariant, flash_variant_for, set_flash_variant};
    let choice: DeviceChoice = device_name
        .parse()
        .unwrap_or_else(|e: String| panic!("{e}"));
    let device = open(choice)
        .unwrap_or_else(|reason| panic!("{reason}"))
        .device
        .autodiff();
    device.seed(7);
    let seq = 300;
    let mut failed = Vec::new();
    for (dtype, tolerance) in [(DType::F16, 1e-2f32), (DType::BF16, 6e-2)] {
        if !device.supports_dtype(dtype) {
            println!("{dtype:?}: not supported by the device, skipped");
            continue;
        }
        set_flash_variant(FlashVariant::Auto);
        println!(
            "{dtype:?}: Auto picks {:?}",
            flash_variant_for(&device, dtype)
        );
        for (heads, kv, d_head, t5) in [(8, 8, 32, false), (8, 2, 64, true), (4, 4, 128, false)] {
            let normal = |h: usize| {
                Tensor::<4>::random([1, h, seq, d_head], Distribution::Normal(0.0, 1.0), &device)
                    .cast(dtype)
            };
            let (q, k, v) = (normal(heads), normal(kv), normal(kv));
            let w = Tensor::<4>::random(
                [1, heads, seq, d_head],
                Distribution::Normal(0.0, 1.0),
                &device,
            );
            let bias = if t5 {
                Tensor::<2>::random(
                    [heads, 2 * 128 + 1],
                    Distribution::Normal(0.0, 1.0),
                    &device,
                )
            } else {
                let slopes: Vec<f32> = burn_positional::score_bias::alibi_slopes(heads)
                    .into_iter()
                    .map(|m| m as f32)
                    .collect();
                Tensor::<1>::from_floats(slopes.as_slice(), &device).reshape([heads, 1])
            }
            .cast(dtype);
            let run = |variant: FlashVariant| {
                set_flash_variant(variant);
                let (q, k, v) = (
                    q.clone().require_grad(),
                    k.clone().require_grad(),
                    v.clone().require_grad(),
                );
                let bias = bias.clone().require_grad();
                let options =
                    if t5 {
                        AttendOptions::new()
                            .causal(true)
                            .window(burn_positional::Window::hf(100))
                            .bias(burn_positional::AttentionBias::ByDistance {
                                bias: bias.clone(),
                                reach: 128,
                            })
                    } else {
                        AttendOptions::new().causal(true).bias(
                            burn_positional::AttentionBias::Alibi(bias.clone().reshape([heads])),
                        )
                    };
                let out = attend(q.clone(), k.clone(), v.clone(), &options);
                let grads = (out.clone().cast(DType::F32) * w.clone()).sum().backward();
                let grad = |t: &Tensor<4>| t.grad(&grads).expect("a gradient").cast(DType::F32);
                let db = bias
                    .grad(&grads)
                    .expect("the bias's gradient")
                    .cast(DType::F32);
                set_flash_variant(FlashVariant::Auto);
                [
                    out.cast(DType::F32).reshape([heads * seq * d_head]),
                    grad(&q).reshape([heads * seq * d_head]),
                    grad(&k).reshape([kv * seq * d_head]),
                    grad(&v).reshape([kv * seq * d_head]),
                    db.flatten::<1>(0, 1),
                ]
            };
            let ours = run(FlashVariant::TensorCores);
            let want = run(FlashVariant::Registers);
            // The slow twin (burn's own ops per tile of 16 rows, in f32 on the rounded inputs):
            // the referee where the two kernels disagree.
            let twin = {
                let f32_of = |t: &Tensor<4>| t.clone().cast(DType::F32).require_grad();
                let (q, k, v) = (f32_of(&q), f32_of(&k), f32_of(&v));
                let bias = bias.clone().cast(DType::F32).require_grad();
                let options =
                    if t5 {
                        AttendOptions::new()
                            .causal(true)
                            .window(burn_positional::Window::hf(100))
                            .bias(burn_positional::AttentionBias::ByDistance {
                                bias: bias.clone(),
                                reach: 128,
                            })
                    } else {
                        AttendOptions::new().causal(true).bias(
                            burn_positional::AttentionBias::Alibi(bias.clone().reshape([heads])),
                        )
                    };
                let out = burn_positional_kernels::reference_attention(
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    &options.tile_rows(16),
                );
                let grads = (out.clone() * w.clone()).sum().backward();
                let grad = |t: &Tensor<4>| t.grad(&grads).expect("a gradient");
                [
                    out.reshape([heads * seq * d_head]),
                    grad(&q).reshape([heads * seq * d_head]),
                    grad(&k).reshape([kv * seq * d_head]),
                    grad(&v).reshape([kv * seq * d_head]),
                    bias.grad(&grads)
                        .expect("the bias's gradient")
                        .flatten::<1>(0, 1),
                ]
            };
            for (name, ((a, b), t)) in ["output", "dq", "dk", "dv", "dbias"]
                .iter()
                .zip(ours.into_iter().zip(want).zip(twin))
            {
                let size = t.clone().abs().max().into_scalar::<f32>().max(1.0);
                let diff = (a.clone() - b.clone()).abs().max().into_scalar::<f32>() / size;
                let ours_twin = (a - t.clone()).abs().max().into_scalar::<f32>() / size;
                let registers_twin = (b - t).abs().max().into_scalar::<f32>() / size;
                let ok = diff <= tolerance && ours_twin <= tolerance;
                println!(
                    "{dtype:?} heads {heads}/{kv} d {d_head} {}: {name} differs by {diff:.2e} of its size \
                     (tensor cores - twin {ours_twin:.2e}, registers - twin {registers_twin:.2e}) {}",
                    if t5 { "t5, window" } else { "alibi" },
                    if ok { "ok" } else { "MISMATCH" }
                );
                if !ok {
                    failed.push(format!(
                        "{dtype:?} {heads}/{kv} d {d_head} {name}: {diff:.2e}"
                    ));
                }
            }
        }
    }
    if sweep {
        sweep_tensor_cores(&device, &mut failed);
    }
    assert!(failed.is_empty(), "tensor-core kernels differ: {failed:?}");
    println!("tensor-core check: ok");
}

/// The tensor-core kernels across the boundaries of their plans on this device
/// (`flash_boundaries`: the same lengths the kernels' `flash_sweep` tests take on lavapipe, here
/// with the device's own plans and `mma.sync`), f16 and bf16, head widths 32, 40, 64, 96 and 128,
/// 4 query heads over 2: one query row over every key count (forward), every row count over as
/// many keys (forward and gradients), and the two calls issue 61 found wrong; each against the
/// slow twin in f32 on the same rounded inputs.
fn sweep_tensor_cores(device: &Device, failed: &mut Vec<String>) {
    use burn_positional_kernels::{
        FlashVariant, flash_boundaries, reference_attention, set_flash_variant,
    };
    let started = Instant::now();
    let mut cases = 0;
    set_flash_variant(FlashVariant::TensorCores);
    for (dtype, tolerance) in [(DType::F16, 1e-2f32), (DType::BF16, 6e-2)] {
        if !device.supports_dtype(dtype) {
            continue;
        }
        for d in [32, 40, 64, 96, 128] {
            let b = flash_boundaries(device, FlashVariant::TensorCores, dtype, 4, 2, d, d);
            let mut one =
                |heads: (usize, usize),
                 rows: usize,
                 keys: usize,
                 grads: bool,
                 extra: &dyn Fn(AttendOptions) -> AttendOptions| {
                    let normal = |h: usize, n: usize| {
                        Tensor::<4>::random([1, h, n, d], Distribution::Normal(0.0, 1.0), device)
                            .cast(dtype)
                            .cast(DType::F32)
                    };
                    let (q, k, v) = (
                        normal(heads.0, rows),
                        normal(heads.1, keys),
                        normal(heads.1, keys),
                    );
                    let options = extra(AttendOptions::new().causal(true).offset(keys - rows));
                    let track = |t: &Tensor<4>| {
                        if grads {
                            t.clone().require_grad()
                        } else {
                            t.clone()
                        }
                    };
                    let (qf, kf, vf) = (track(&q), track(&k), track(&v));
                    let fast = attend(
                        qf.clone().cast(dtype),
                        kf.clone().cast(dtype),
                        vf.clone().cast(dtype),
                        &options,
                    )
                    .cast(DType::F32);
                    let (qs, ks, vs) = (track(&q), track(&k), track(&v));
                    let slow = reference_attention(
                        qs.clone(),
                        ks.clone(),
                        vs.clone(),
                        &options.clone().tile_rows(16),
                    );
                    let off = |a: Tensor<4>, b: Tensor<4>| {
                        let size = b.clone().abs().max().into_scalar::<f32>().max(1.0);
                        (a - b).abs().max().into_scalar::<f32>() / size
                    };
                    let mut worst = vec![("output", off(fast.clone(), slow.clone()))];
                    if grads {
                        let w = Tensor::<4>::random(
                            fast.dims(),
                            Distribution::Normal(0.0, 1.0),
                            device,
                        );
                        let gf = (fast * w.clone()).sum().backward();
                        let gs = (slow * w).sum().backward();
                        for (name, f, s) in [("dq", &qf, &qs), ("dk", &kf, &ks), ("dv", &vf, &vs)] {
                            worst.push((name, off(f.grad(&gf).unwrap(), s.grad(&gs).unwrap())));
                        }
                    }
                    for (name, diff) in worst {
                        if diff.is_nan() || diff > tolerance {
                            let line = format!(
                                "{dtype:?} d {d} heads {}/{} {rows} rows over {keys} keys: {name} differs by {diff:.2e}",
                                heads.0, heads.1
                            );
                            println!("sweep: {line} MISMATCH");
                            failed.push(line);
                        }
                    }
                };
            for &keys in &b.keys {
                one((4, 2), 1, keys, false, &|o| o);
                cases += 1;
            }
            for &rows in &b.queries {
                one((4, 2), rows, rows, true, &|o| o);
                cases += 1;
            }
            one((4, 2), *b.queries.last().unwrap(), 2049, true, &|o| o);
            cases += 1;
            if d == 40 {
                let packed = |o: AttendOptions| {
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
                        .window(burn_positional::Window::hf(256))
                };
                one((4, 1), 700, 700, true, &packed);
                cases += 1;
            }
            if d == 64 {
                let alibi = |o: AttendOptions| {
                    o.bias(burn_positional::AttentionBias::Alibi(
                        Tensor::<1>::from_floats([0.5, 0.25, 0.125, 0.0625], device),
                    ))
                };
                one((4, 2), 1024, 1024, true, &alibi);
                cases += 1;
            }
            println!(
                "sweep: {dtype:?} d {d}: keys {:?}, rows {:?}; {:.1} s so far",
                b.keys,
                b.queries,
                started.elapsed().as_secs_f32()
            );
        }
    }
    set_flash_variant(FlashVariant::Auto);
    println!(
        "sweep: {cases} cases in {:.1} s, {} mismatched",
        started.elapsed().as_secs_f32(),
        failed.len()
    );
}

pub fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `--adapter NAME`: open the device and print what it is (the GPU kit's first check).
    if let Some(at) = args.iter().position(|a| a == "--adapter") {
        let choice: DeviceChoice = args[at + 1]
            .parse()
            .unwrap_or_else(|e: String| panic!("{e}"));
        let opened = open(choice).unwrap_or_else(|reason| panic!("{reason}"));
        println!("{}\t{}", opened.description, opened.is_gpu);
        return;
    }
    if let Some(at) = args.iter().position(|a| a == "--check-tensor-cores") {
        check_tensor_cores(&args[at + 1], !args.iter().any(|a| a == "--no-sweep"));
        return;
    }
    if let Some(at) = args.iter().position(|a| a == "--case") {
        let [device, scheme, seq, backward] = [1, 2, 3, 4].map(|i| args[at + i].clone());
        case(
            &device,
            &scheme,
            seq.parse().unwrap(),
            backward == "backward",
        );
        return;
    }
    let env = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (max_seq, max_backward) = (env("MAX_SEQ", 16384), env("MAX_BACKWARD", 4096));
    let max_spelled = env("MAX_SPELLED", 8192);
    let devices = std::env::var("BENCH_DEVICES").unwrap_or_else(|_| "flex".into());
    let lengths: Vec<usize> = [1024, 2048, 4096, 8192, 16384]
        .into_iter()
        .filter(|&n| n <= max_seq)
        .collect();
    let me = std::env::current_exe().unwrap();
    // The name this program was called by, passed on to its children: the GPU kit's multi-call
    // binary (tools/gpu/kit) picks the program by it.
    let name = std::env::args().next().unwrap_or_default();
    let tables: Vec<(&str, &[&str])> = match std::env::var("TABLE").as_deref() {
        Ok("schemes") => vec![("schemes", &SCHEMES[..])],
        Ok("grouped") => vec![("grouped heads and windows", &GROUPED[..])],
        Ok("kernel") => vec![("the op alone", &KERNEL[..])],
        _ => vec![
            ("schemes", &SCHEMES[..]),
            ("grouped heads and windows", &GROUPED[..]),
        ],
    };
    for (table, schemes) in tables {
        for device in devices.split(',') {
            for backward in [false, true] {
                let what = if backward {
                    "forward + backward"
                } else {
                    "forward"
                };
                let on_cube = matches!(device, "wgpu" | "cuda");
                let memory = if on_cube {
                    "device memory reserved by cubecl's allocator"
                } else {
                    "peak resident memory growth"
                };
                println!("\n{table}: {device}, {what}: {memory}, MiB (time, ms)\n");
                println!("| seq | {} |", schemes.join(" | "));
                println!("|{}", " --- |".repeat(schemes.len() + 1));
                for &seq in &lengths {
                    let mut row = format!("| {seq} |");
                    for &scheme in schemes {
                        if backward && scheme.starts_with("cache, ") {
                            row.push_str(" - |");
                            continue;
                        }
                        let quadratic = matches!(scheme, "burn attention" | "none, spelled out");
                        let spelled_out = scheme == "none, spelled out";
                        if (backward && quadratic && seq > max_backward)
                            || (spelled_out && seq > max_spelled)
                        {
                            row.push_str(" not run |");
                            continue;
                        }
                        let out = Command::new(&me)
                            .arg0(&name)
                            .args(["--case", device, scheme, &seq.to_string()])
                            .arg(if backward { "backward" } else { "forward" })
                            .output()
                            .expect("run a case");
                        let text = String::from_utf8_lossy(&out.stdout);
                        let cell = match text.split_whitespace().collect::<Vec<_>>()[..] {
                            [mib, ms, device_mib] if out.status.success() => format!(
                                " {mib} ({ms:.0}) |",
                                // On wgpu, the device allocator's growth (lavapipe's resident
                                // memory also holds the shaders LLVM compiled for each shape).
                                mib = if on_cube { device_mib } else { mib },
                                ms = ms.parse::<f64>().unwrap_or(f64::NAN)
                            ),
                            _ => format!(
                                " failed: {} |",
                                // The panic's message: the line after "panicked at".
                                String::from_utf8_lossy(&out.stderr)
                                    .lines()
                                    .skip_while(|line| !line.contains("panicked at"))
                                    .nth(1)
                                    .unwrap_or("no panic message")
                                    .replace('|', "/")
                            ),
                        };
                        row.push_str(&cell);
                        eprintln!(
                            "{device} {what} {scheme} {seq}: {}",
                            cell.trim_end_matches('|').trim()
                        );
                    }
                    println!("{row}");
                }
            }
        }
    }
}
