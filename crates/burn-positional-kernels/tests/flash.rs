//! The attention kernel (one call per op, the bias and masks computed in its tiles) against its
//! slow twin, the tensor-op tiles of `reference_attention` (burn's own `attention` per tile,
//! burn's autodiff through it), on flex, ndarray and wgpu (lavapipe where there is no GPU;
//! never skipped), with and without autodiff: outputs and gradients for every option of the
//! entry point (bias none / ALiBi / by distance; causal; windows; key padding; segments;
//! sequential, offset, rolling and explicit positions, shared or per sequence; grouped heads;
//! scale; softcap), lengths 1, 7, 63, 65 and 1000, `seq_q != seq_k`, and fully masked rows
//! (zero, never NaN). On wgpu every case runs once per CubeCL kernel (register and
//! shared-memory), each forced in its own test.

use burn::tensor::{Bool, DType, Device, Distribution, Int, Tensor, TensorData, Tolerance};
use burn_positional_kernels::{
    AttendOptions, AttentionBias, FLASH_VARIANT_ENV, FlashVariant, Window,
    flash_attention_backward_calls, flash_attention_calls, flash_variant,
    flash_variant_backward_launches, flash_variant_launches, reference_attention,
    set_thread_flash_key_splits, set_thread_flash_variant, tiled_attention,
};

mod common;
use common::{devices, host_devices, twin_device, wgpu_devices};

/// The register-blocked kernels (issue 73).
#[path = "flash/blocked.rs"]
mod blocked;
/// The tensor-core kernels at lavapipe's subgroups of 8 and 4 units.
#[path = "flash/subgroups.rs"]
mod subgroups;

const BATCH: usize = 3;
const HEADS: usize = 4;
const D: usize = 8;

#[derive(Clone, Copy, Debug)]
enum Bias {
    None,
    Alibi,
    ByDistance,
}

#[derive(Clone, Copy, Debug)]
enum Pos {
    /// Positions from 0 for both.
    Whole,
    /// Queries from `seq_k - seq_q` over all `seq_k` keys (a decoding step, a chunk).
    Offset,
    /// Queries from 9, keys from 4 (a rolling cache).
    Rolling,
    /// Explicit positions per sequence, restarting at a document boundary.
    Packed,
    /// Explicit positions shared by the batch, `[1, seq]`.
    Shared,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    bias: Bias,
    causal: bool,
    window: Option<Window>,
    padded: bool,
    segments: bool,
    pos: Pos,
    kv_heads: usize,
    scale: Option<f64>,
    softcap: Option<f64>,
    seq_q: usize,
    seq_k: usize,
    /// Head widths of q and k, and of v.
    d_head: usize,
    d_v: usize,
}

/// Every option with every other, by a mixed-radix walk over the option values (each value
/// meets each value of every other option within a few cases), at lengths around the kernels'
/// blocks (64 keys, 64 stacked query rows), and a few at 1000.
fn cases() -> Vec<Case> {
    let biases = [Bias::None, Bias::Alibi, Bias::ByDistance];
    let windows = [
        None,
        Some(Window::hf(3)),
        Some(Window {
            before: 2,
            after: 5,
        }),
    ];
    let positions = [
        Pos::Whole,
        Pos::Offset,
        Pos::Rolling,
        Pos::Packed,
        Pos::Shared,
    ];
    let mut cases = Vec::new();
    for (n, seq) in [1, 7, 63, 65].into_iter().enumerate() {
        for i in 0..15 {
            let x = i + 7 * n;
            let pos = positions[x % 5];
            let (seq_q, seq_k) = match pos {
                Pos::Offset => (seq, seq + 5 + x % 3),
                Pos::Rolling => (seq, seq + 5),
                _ => (seq, seq),
            };
            cases.push(Case {
                bias: biases[x % 3],
                causal: x % 2 == 0,
                window: windows[(x / 2) % 3],
                padded: x % 4 < 2,
                segments: (x / 3) % 2 == 1,
                pos,
                kv_heads: [4, 2, 1][(x / 5) % 3],
                scale: (x % 7 == 3).then_some(0.7),
                softcap: (x % 5 == 1).then_some(3.0),
                seq_q,
                seq_k,
                d_head: D,
                d_v: D,
            });
        }
    }
    let long = |bias, causal, window, pos, kv_heads| Case {
        bias,
        causal,
        window,
        padded: true,
        segments: false,
        pos,
        kv_heads,
        scale: None,
        softcap: None,
        seq_q: 1000,
        seq_k: 1000,
        d_head: D,
        d_v: D,
    };
    if std::env::var_os("FLASH_SHORT_CASES").is_some() {
        // tools/mutants.py: the cases up to 65 tokens catch each mutation; quicker.
        return cases;
    }
    cases.push(long(Bias::Alibi, true, None, Pos::Whole, 2));
    cases.push(long(
        Bias::ByDistance,
        false,
        Some(Window::symmetric(100)),
        Pos::Whole,
        4,
    ));
    cases.push(long(Bias::None, true, None, Pos::Packed, 1));
    cases
}

fn ints(rows: Vec<Vec<i64>>, device: &Device) -> Tensor<2, Int> {
    let shape = [rows.len(), rows[0].len()];
    Tensor::from_data(TensorData::new(rows.concat(), shape), device)
}

/// Explicit positions: sequence `b` restarts at `seq / (b + 2)` (packed documents).
fn packed(len: usize, batch: usize) -> Vec<Vec<i64>> {
    (0..batch)
        .map(|b| {
            let cut = len / (b + 2);
            (0..cut).chain(0..len - cut).map(|p| p as i64).collect()
        })
        .collect()
}

/// The case's options on `device`, the table by distance (`table`'s values, tracked on an
/// autodiff device) and ALiBi's slopes (tracked too). The same `table` gives the kernel's
/// device and the slow twin's the same options.
fn options(
    case: &Case,
    device: &Device,
    table: &TensorData,
) -> (AttendOptions, Option<Tensor<2>>, Tensor<1>) {
    let (seq_q, seq_k) = (case.seq_q, case.seq_k);
    let mut options = AttendOptions::new().causal(case.causal);
    match case.pos {
        Pos::Whole => {}
        Pos::Offset => options = options.offset(seq_k - seq_q),
        Pos::Rolling => options = options.sequential(9, 4),
        Pos::Packed => {
            options = options.positions(
                ints(packed(seq_q, BATCH), device),
                ints(packed(seq_k, BATCH), device),
            )
        }
        Pos::Shared => {
            let row = |len: usize| vec![(0..len as i64).map(|p| 2 * p + 1).collect::<Vec<_>>()];
            options = options.positions(ints(row(seq_q), device), ints(row(seq_k), device));
        }
    }
    if let Some(w) = case.window {
        options = options.window(w);
    }
    if case.padded {
        // Sequence 1 pads its first two keys; sequence 2 every key (its rows see nothing).
        let mut mask = vec![false; BATCH * seq_k];
        mask[seq_k..seq_k + 2.min(seq_k)].fill(true);
        mask[2 * seq_k..].fill(true);
        options = options.key_padding(Tensor::<2, Bool>::from_data(
            TensorData::new(mask, [BATCH, seq_k]),
            device,
        ));
    }
    if case.segments {
        let ids = |len: usize| {
            (0..BATCH)
                .map(|b| (0..len).map(|i| (i >= len / 2 + b) as i64).collect())
                .collect()
        };
        options = options.segments(ints(ids(seq_q), device), ints(ids(seq_k), device));
    }
    if let Some(scale) = case.scale {
        options = options.scale(scale);
    }
    if let Some(c) = case.softcap {
        options = options.softcap(c);
    }
    let frozen = FROZEN_BIAS.with(std::cell::Cell::get);
    let trained = |t: Tensor<1>| if frozen { t } else { t.require_grad_if(device) };
    let slopes = trained(Tensor::<1>::from_floats([0.5, 0.25, 0.125, 0.0625], device));
    let reach = 6;
    let table = Tensor::<2>::from_data(table.clone(), device);
    let (options, tracked) = match case.bias {
        Bias::None => (options, None),
        Bias::Alibi => (options.bias(AttentionBias::Alibi(slopes.clone())), None),
        Bias::ByDistance => {
            let table = if frozen {
                table
            } else {
                table.require_grad_if(device)
            };
            let bias = AttentionBias::ByDistance {
                bias: table.clone(),
                reach,
            };
            (options.bias(bias), (!frozen).then_some(table))
        }
    };
    (options, tracked, slopes)
}

thread_local! {
    /// The bias tensors (ALiBi's slopes, the table) without gradients on this thread: the
    /// backward kernels' path for a bias that is applied but not trained.
    pub(crate) static FROZEN_BIAS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

trait RequireGradIf {
    fn require_grad_if(self, device: &Device) -> Self;
}

impl<const N: usize> RequireGradIf for Tensor<N> {
    fn require_grad_if(self, device: &Device) -> Self {
        if device.is_autodiff() {
            self.require_grad()
        } else {
            self
        }
    }
}

fn random(shape: [usize; 4], device: &Device) -> Tensor<4> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device).require_grad_if(device)
}

fn close<const N: usize>(got: Tensor<N>, want: Tensor<N>, tolerance: f32, what: &str) {
    let got = got.into_data();
    assert!(
        got.iter::<f32>().all(f32::is_finite),
        "{what}: NaN or infinity in the kernel's numbers"
    );
    let want = want.into_data();
    let worst = got
        .iter::<f32>()
        .zip(want.iter::<f32>())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst <= tolerance, "{what}: off by {worst}");
}

/// Each case on each device: the kernel's output and gradients against the slow twin's.
/// Returns how many kernel calls it made.
fn check_cases(devices: &[Device], cases: &[Case]) -> u64 {
    let mut calls = 0;
    for device in devices {
        twin_device(device.is_autodiff()).seed(3);
        for case in cases {
            check_case(device, case);
            calls += 1;
        }
    }
    calls
}

/// `t`'s values on `device`, tracked there where `device` has autodiff.
fn moved<const N: usize>(t: &Tensor<N>, device: &Device) -> Tensor<N> {
    Tensor::<N>::from_data(t.to_data(), device).require_grad_if(device)
}

fn check_case(device: &Device, case: &Case) {
    let what = format!("{device:?} {case:?}");
    // The twin on flex (`common::twin_device`); the inputs drawn there and copied to the
    // kernel's device, so both see the same numbers.
    let twin = twin_device(device.is_autodiff());
    let qs = random([BATCH, HEADS, case.seq_q, case.d_head], &twin);
    let ks = random([BATCH, case.kv_heads, case.seq_k, case.d_head], &twin);
    let vs = random([BATCH, case.kv_heads, case.seq_k, case.d_v], &twin);
    let [q, k, v] = [&qs, &ks, &vs].map(|t| moved(t, device));
    // The table by distance: a row of 13 (reach 6) per head.
    let table_values =
        Tensor::<2>::random([HEADS, 13], Distribution::Normal(0.0, 1.0), &twin).into_data();
    let (twin_options, twin_table, twin_slopes) = options(case, &twin, &table_values);
    let (options, table, slopes) = options(case, device, &table_values);
    let before = flash_attention_calls();
    let fast = tiled_attention(q.clone(), k.clone(), v.clone(), &options);
    assert_eq!(
        flash_attention_calls(),
        before + 1,
        "{what}: one kernel call per op"
    );
    // A table's gradient in the slow twin goes through burn's `select_assign`, which on wgpu
    // (burn 0.22.1) adds at most 65535 index entries per call and drops the rest (measured:
    // 10^6 ones into one entry give 65535). A tile's index holds batch x rows x keys entries:
    // where they could pass 65535, the slow twin takes tiles of 16 query rows (3 x 16 x 1000).
    // The twin runs on flex now, where that limit does not apply; the tiles stay, so the twin
    // is the same wherever it is moved. The kernels do not tile by rows.
    let slow_options = match case.bias {
        Bias::ByDistance if BATCH * case.seq_q * case.seq_k > 65535 => {
            twin_options.clone().tile_rows(16)
        }
        _ => twin_options.clone(),
    };
    let slow = reference_attention(qs.clone(), ks.clone(), vs.clone(), &slow_options);
    assert_eq!(fast.dims(), [BATCH, HEADS, case.seq_q, case.d_v], "{what}");
    if case.padded {
        // Sequence 2 sees no key: zeros.
        let empty = fast
            .clone()
            .narrow(0, 2, 1)
            .abs()
            .max()
            .into_scalar::<f32>();
        assert_eq!(empty, 0.0, "{what}: a row that sees nothing is not zero");
    }
    close(fast.clone(), slow.clone(), 1e-4, &what);
    if !device.is_autodiff() {
        return;
    }
    // Gradients of <out, w> for a random w: every input, through both paths.
    let w_twin = Tensor::<4>::random(fast.dims(), Distribution::Normal(0.0, 1.0), &twin);
    let w = Tensor::<4>::from_data(w_twin.to_data(), device);
    let before = flash_attention_backward_calls();
    let g_fast = (fast * w).sum().backward();
    assert_eq!(
        flash_attention_backward_calls(),
        before + 1,
        "{what}: one backward kernel call per op"
    );
    let g_slow = (slow * w_twin).sum().backward();
    assert_eq!(
        flash_attention_backward_calls(),
        before + 1,
        "{what}: the slow twin calls no kernel"
    );
    for (name, t, s) in [("q", &q, &qs), ("k", &k, &ks), ("v", &v, &vs)] {
        close(
            t.grad(&g_fast).unwrap(),
            s.grad(&g_slow).unwrap(),
            2e-4,
            &format!("{what}: d{name}"),
        );
    }
    if let (Some(table), Some(twin_table)) = (table, twin_table) {
        close(
            table.grad(&g_fast).unwrap(),
            twin_table.grad(&g_slow).unwrap(),
            5e-4,
            &format!("{what}: dbias"),
        );
    }
    if matches!(case.bias, Bias::Alibi) && !FROZEN_BIAS.with(std::cell::Cell::get) {
        // Slopes' gradients sum |rel|-weighted score gradients over every score: up to
        // thousands of terms of size ~|rel| at 1000 tokens; relative to their size.
        let (got, want) = (
            slopes.grad(&g_fast).unwrap(),
            twin_slopes.grad(&g_slow).unwrap(),
        );
        let size = want.clone().abs().max().into_scalar::<f32>().max(1.0);
        close(got, want, 2e-4 * size, &format!("{what}: dslopes"));
    }
}

/// The host kernels (flex, ndarray; plain and autodiff). The wgpu devices run the same cases
/// once per CubeCL kernel, forced, below.
#[test]
fn kernel_equals_the_slow_twin_outputs_and_gradients() {
    check_cases(&host_devices(), &cases());
}

/// f16 and bf16 inputs: the kernel computes in f32 and rounds once; the slow twin rounds at
/// every op. Both within the dtype's precision of the f32 result. Returns how many kernel
/// calls it made.
fn check_half(devices: &[Device]) -> u64 {
    let mut calls = 0;
    for device in devices {
        device.seed(5);
        let case = Case {
            bias: Bias::Alibi,
            causal: true,
            window: None,
            padded: true,
            segments: false,
            pos: Pos::Whole,
            kv_heads: 2,
            scale: None,
            softcap: None,
            seq_q: 65,
            seq_k: 65,
            d_head: D,
            d_v: D,
        };
        let q = random([BATCH, HEADS, 65, D], device);
        let k = random([BATCH, 2, 65, D], device);
        let v = random([BATCH, 2, 65, D], device);
        let table = Tensor::<2>::zeros([HEADS, 13], device).into_data();
        let (options, _, _) = options(&case, device, &table);
        let exact = tiled_attention(q.clone(), k.clone(), v.clone(), &options);
        calls += 1;
        let w = Tensor::<4>::random(exact.dims(), Distribution::Normal(0.0, 1.0), device);
        let exact_grads = device.is_autodiff().then(|| {
            let g = (exact.clone() * w.clone()).sum().backward();
            [&q, &k, &v].map(|t| t.grad(&g).unwrap())
        });
        for (dtype, tolerance) in [(DType::F16, 1e-2), (DType::BF16, 6e-2)] {
            if !device.supports_dtype(dtype) {
                continue;
            }
            let half = tiled_attention(
                q.clone().cast(dtype),
                k.clone().cast(dtype),
                v.clone().cast(dtype),
                &options,
            );
            calls += 1;
            assert_eq!(half.dtype(), dtype, "{device:?}");
            let half = half.cast(DType::F32);
            close(
                half.clone(),
                exact.clone(),
                tolerance,
                &format!("{device:?} {dtype:?}"),
            );
            // Gradients through the half-precision op (the backward kernel in that dtype),
            // within the dtype's precision of the f32 ones, relative to their size.
            if let Some(exact_grads) = &exact_grads {
                let g = (half * w.clone()).sum().backward();
                for (name, t, want) in [
                    ("q", &q, &exact_grads[0]),
                    ("k", &k, &exact_grads[1]),
                    ("v", &v, &exact_grads[2]),
                ] {
                    let size = want.clone().abs().max().into_scalar::<f32>().max(1.0);
                    close(
                        t.grad(&g).unwrap(),
                        want.clone(),
                        tolerance * size,
                        &format!("{device:?} {dtype:?} d{name}"),
                    );
                }
            }
        }
    }
    calls
}

#[test]
fn half_precision_follows_f32() {
    check_half(&host_devices());
}

/// The wgpu devices (plain and autodiff) with `variant` (and `splits`, the shared forward's key
/// splits, where given) forced on this thread: the cases of [`cases`] (and, with `wide`, of
/// [`wide_cases`]) that `keep` keeps, and the half-precision check, and proof that the forced
/// kernels are what ran: the forward's launch count grew by at least one per call, the backward's by at least one per backward call (the
/// backward follows the variant its forward was called with). Returns the forward launches
/// beyond the calls.
fn check_variant(
    variant: FlashVariant,
    splits: Option<usize>,
    keep: impl Fn(&Case) -> bool,
    wide: bool,
) -> u64 {
    let _forcing = crate::forcing(variant);
    // The tensor-core backward leaves a distance table's own gradient at explicit positions
    // (packed or shared ones) to the shared one: its launches are counted too, under the
    // shared variant's lock. The register-blocked backward leaves a bias's own gradient to the
    // shared one too.
    let fallback = FlashVariant::Shared;
    let falls_back = matches!(variant, FlashVariant::TensorCores | FlashVariant::Blocked);
    let _fallback = falls_back.then(|| crate::forcing(fallback));
    let fallback_before = flash_variant_backward_launches(fallback);
    let backward_variant = variant;
    set_thread_flash_variant(Some(variant));
    set_thread_flash_key_splits(splits);
    let devices = wgpu_devices();
    for device in &devices {
        assert_eq!(flash_variant(device), variant, "{device:?}");
    }
    let cases: Vec<Case> = cases().into_iter().filter(|case| keep(case)).collect();
    let before = flash_variant_launches(variant);
    let before_backward = flash_variant_backward_launches(backward_variant);
    let backward_calls_before = flash_attention_backward_calls();
    // The wide heads on the autodiff device alone: it checks the outputs too.
    let autodiff: Vec<Device> = devices
        .iter()
        .filter(|d| d.is_autodiff())
        .cloned()
        .collect();
    let wide = if wide { wide_cases(&keep) } else { Vec::new() };
    let calls =
        check_cases(&devices, &cases) + check_cases(&autodiff, &wide) + check_half(&devices);
    let launched = flash_variant_launches(variant) - before;
    let backward_calls = flash_attention_backward_calls() - backward_calls_before;
    let backward_launched = flash_variant_backward_launches(backward_variant) - before_backward;
    let fell_back = if falls_back {
        flash_variant_backward_launches(fallback) - fallback_before
    } else {
        0
    };
    set_thread_flash_variant(None);
    set_thread_flash_key_splits(None);
    assert!(
        launched >= calls,
        "{variant:?}: {launched} launches for {calls} calls"
    );
    assert!(
        backward_calls > 0
            && (backward_launched > fell_back
                || (variant == FlashVariant::Blocked && backward_launched > 0))
            && backward_launched + fell_back >= backward_calls,
        "{variant:?}: {backward_launched} backward launches ({fell_back} more of the shared \
         backward) for {backward_calls} backward calls"
    );
    launched - calls
}

/// The cases at 65 tokens (each value of each option, across a stage of keys) with wide heads
/// of unequal widths (`d_head` 64, `d_v` 40), as a GPU model has them: one row per unit and
/// another stage length in the shared kernel, two rows per unit in the register kernel. Not the
/// table by distance: its gradient's registers are a compiled class of their own (one slot or
/// a table's), whose code does not depend on the head's width, and the narrow cases take it on
/// every kernel; at width 64 each class is one more backward kernel of each variant for
/// lavapipe's LLVM to compile (issue 70).
fn wide_cases(keep: impl Fn(&Case) -> bool) -> Vec<Case> {
    cases()
        .into_iter()
        .filter(|case| case.seq_q == 65 && !matches!(case.bias, Bias::ByDistance) && keep(case))
        .map(|case| Case {
            d_head: 64,
            d_v: 40,
            ..case
        })
        .collect()
}

/// The register kernel (lavapipe's `Auto`), forced: every case, the three 1000-token ones too.
#[test]
fn register_kernel_equals_the_slow_twin() {
    check_variant(FlashVariant::Registers, None, |_| true, true);
}

/// The shared-memory kernels, forced (on lavapipe too, where `Auto` would not pick them), the
/// forward and the backward: every case; of the 1000-token ones only the window, whose tiles start their keys past 0 and walk
/// many stages (the 63- and 65-token cases already cross a stage of 64 keys). The sweeps force
/// it too (`flash_sweep.rs`); holding the variant's lock (`crate::forcing`), its launches are
/// exactly this test's calls.
#[test]
fn shared_kernel_equals_the_slow_twin() {
    let extra = check_variant(
        FlashVariant::Shared,
        None,
        |case| case.seq_q < 1000 || case.window.is_some(),
        true,
    );
    assert_eq!(extra, 0, "shared launches from elsewhere");
    // Each tile's keys split into 3 runs across cubes and combined (flash-decoding: `Auto`
    // splits where the grid is small next to the device, as in a decoding step), on the cases
    // of 63 and 65 tokens (each value of every option, a stage of keys crossed) and the
    // half-precision check: outputs, and gradients through the combined log-sum-exp. Not the
    // wide heads: the split and its combine do not depend on the head's width, the wide heads'
    // kernels are the ones above (the split count is a run-time value), and the sweep
    // (`flash_sweep.rs`, `split_keys_across_their_boundaries`) splits widths 32 to 128 across
    // every boundary; on lavapipe each wide case costs seconds of barriers (issue 70).
    let extra = check_variant(
        FlashVariant::Shared,
        Some(3),
        |case| (63..1000).contains(&case.seq_q),
        false,
    );
    assert_eq!(extra, 0, "shared launches from elsewhere");
}

/// The tensor-core kernels, forced, forward and backward. Lavapipe has no `mma.sync`, so here
/// each warp is emulated by 32 units exchanging through shared memory (the fragment layer's
/// emulation): what this checks is the kernels' index logic around the products (the
/// fragments' rows and columns, staging, padding of heads and sequences to 16, the warps' rows
/// and heads, the per-score formula on the accumulators, the online softmax, the backward's
/// four products' operands, ALiBi's slope gradient per row). A covering subset, as each
/// compiled kernel costs seconds of LLVM on lavapipe: the 65-token cases take every value of
/// every option and each comptime branch (one, two and four heads of a group; blocks crossed;
/// tiles whose window starts their keys past 0; rows and keys past the sequence; the distance
/// table's gradient, summed by diagonals at sequential positions and offsets, by the shared
/// backward at explicit ones), the 1-token ones a decoding step; the 1000-token table with a
/// window (its gradient's blocks whose distances all clamp to the first entry or all to the
/// last, which 65 tokens in one tile of rows never have); the
/// wide heads (64 and 40: padded to 64 and 48) and the half-precision check.
#[test]
fn tensor_core_kernel_equals_the_slow_twin() {
    let extra = check_variant(
        FlashVariant::TensorCores,
        None,
        |case| {
            case.seq_q == 65
                || case.seq_q == 1
                || (case.seq_q == 1000 && matches!(case.bias, Bias::ByDistance))
        },
        true,
    );
    assert_eq!(extra, 0, "tensor-core launches from elsewhere");
}

/// `Auto` on a CPU-type adapter (lavapipe, llvmpipe: CI's wgpu) is the register kernel, on
/// anything else the shared-memory one; skipped while `BURN_POSITIONAL_FLASH` forces one.
#[test]
fn auto_follows_the_adapter() {
    if std::env::var_os(FLASH_VARIANT_ENV).is_some() {
        return;
    }
    for device in wgpu_devices() {
        let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner() else {
            panic!("{device:?} is not a CubeCL device");
        };
        let name = cube.client().properties().identity.name.to_lowercase();
        let want = if name.contains("llvmpipe") || name.contains("lavapipe") {
            FlashVariant::Registers
        } else {
            FlashVariant::Shared
        };
        assert_eq!(flash_variant(&device), want, "{name}");
    }
}

/// ALiBi's weights from the paper's formula, by hand in f64: with every score zero, query `i`
/// weighs key `j <= i` by `exp(-m (i - j)) / sum_j' exp(-m (i - j'))`.
#[test]
fn alibi_weights_follow_the_formula() {
    for device in devices() {
        // One head, scores all zero (q = 0): weights are softmax(-m |rel|), by hand in f64.
        let (seq, m) = (5, 0.5f64);
        let q = Tensor::<4>::zeros([1, 1, seq, 2], &device);
        let k = Tensor::<4>::zeros([1, 1, seq, 2], &device);
        // v = one-hot of the key index: the output row is the weight row.
        let v = Tensor::<2>::eye(seq, &device).reshape([1, 1, seq, seq]);
        let options =
            AttendOptions::new()
                .causal(true)
                .bias(AttentionBias::Alibi(Tensor::from_floats(
                    [m as f32],
                    &device,
                )));
        let out = tiled_attention(q, k, v, &options);
        let mut want = Vec::new();
        for i in 0..seq {
            let z: f64 = (0..=i).map(|j| (-m * (i - j) as f64).exp()).sum();
            for j in 0..seq {
                want.push(if j <= i {
                    ((-m * (i - j) as f64).exp() / z) as f32
                } else {
                    0.0
                });
            }
        }
        out.into_data().assert_approx_eq::<f32>(
            &TensorData::new(want, [1, 1, seq, seq]),
            Tolerance::absolute(1e-6),
        );
    }
}
