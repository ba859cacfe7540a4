//! "Dog bites man" for pictures, end to end: what `cargo run --release --example
//! dog_bites_man_pictures` claims, checked on the library code the example prints
//! (`burn_positional_examples::pictures`), on flex, on wgpu (lavapipe where there is no GPU:
//! without an adapter these tests fail, they never skip) and on ndarray (with the `ndarray`
//! feature, which `cargo test` turns on through the crates that depend on this one; alone:
//! `cargo test -p burn-positional-examples --features ndarray --test dog_bites_man_pictures`).
//!
//! 1. One attention block without positions gives a picture with its patches shuffled the
//!    picture's output rows, shuffled the same way, and the same mean-pooled vector; every 2D
//!    scheme (learned, MAE's sin-cos, axial RoPE, Pixtral's RoPE) gives different pooled
//!    vectors.
//! 2. Trained without positions, the ViT is at chance by its argument, exactly: every picture
//!    of the task is the same bag of patches (one red, one blue, fourteen white), so the model
//!    gives every picture the same logits (to float rounding), and its accuracy is exactly
//!    50 % at every training step and on the held-out pictures (one answer on sets that are
//!    half each, or a tie, counted half). The argument holds after any number of steps, so the
//!    blind model trains [`BLIND_STEPS`] (every operation of training, each step checked). With
//!    axial 2D RoPE the training reaches 100 % held-out in [`STEPS`] steps.
//! 3. The same seed gives the same numbers twice, bit for bit, on each device (two short runs
//!    of every scheme).
//! 4. wgpu (and ndarray) give flex's verdicts.
//!
//! The example trains every scheme 300 steps, which the learned table needs (it starts as
//! ViT's, `N(0, 0.02)`, and leaves chance after about 200); those runs are the guide's
//! (`docs/dog-bites-man.md`, "Pictures"), not these tests'.

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use burn::prelude::*;
use burn_positional_examples::device::{DeviceChoice, open};
use burn_positional_examples::pictures::{
    Comparison, HOLDOUT_EVERY, TrainingOptions, compare, train,
};
use burn_positional_examples::red_left_of_blue;
use burn_positional_examples::schemes::GridScheme;

/// Training steps of the separation check. Measured with the release example on flex
/// (`--schemes rope-2d --steps N --seed S`): rope-2d at 100 % held-out with seeds 1, 2, 3, 7
/// and 42 at 100, 120 and 150 steps; at 80 steps seed 42 was at 95 % (100 % train) and seed 2
/// at 90.8 % train. 120 gives a margin of 20 steps over the last miss.
const STEPS: usize = 120;
/// Steps of the blind model's training: its claim (one set of logits for every picture, 50 %
/// at every step) follows from the architecture at any step count, and these steps run every
/// operation of training (issue 70: it had trained [`STEPS`] too, half of each device's run).
const BLIND_STEPS: usize = 3;
/// The schemes trained, and their steps: the blind one, and the 2D scheme that separates the
/// held-out pictures soonest and most steadily in those measurements.
const TRAINED: [(GridScheme, usize); 2] =
    [(GridScheme::None, BLIND_STEPS), (GridScheme::Rope, STEPS)];
/// Steps of the two short runs that must give the same numbers: every operation of training
/// (forward, backward, Adam) runs in each step.
const SAME_TWICE_STEPS: usize = 3;
/// The example's default seed.
const SEED: u64 = 42;

/// "Equal": the largest difference at most this fraction of the output's largest value (float
/// rounding: the same sums in another order).
const SAME: f32 = 1e-6;
/// "Different": the pooled vectors differ by at least 100 times that.
const DIFFERENT: f32 = 100.0 * SAME;
/// Logits of one bag of patches: equal up to this fraction of the largest logit (at least 1),
/// the rounding of a trained block and head summing the same rows in another order. Ten
/// times below the tie width (`pictures::TIE`).
const SAME_LOGITS: f32 = 1e-6;

/// One scheme's training, as numbers.
#[derive(Clone)]
struct Score {
    scheme: GridScheme,
    /// The accuracy on the training pictures at every step.
    step_accuracies: Vec<f32>,
    train_loss: f32,
    held_out_accuracy: f32,
    held_out_loss: f32,
    /// The trained model's logits `[n, 2]`, row-major, on every picture (train, then held out).
    logits: Vec<f32>,
}

impl std::fmt::Debug for Score {
    /// Without the logits (hundreds of numbers).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: train {:?} (loss {}), held-out {} (loss {})",
            self.scheme,
            self.step_accuracies.last(),
            self.train_loss,
            self.held_out_accuracy,
            self.held_out_loss
        )
    }
}

/// Everything the demo measures on one device.
#[derive(Debug, Clone)]
struct Run {
    comparisons: Vec<Comparison>,
    scores: Vec<Score>,
}

impl Run {
    /// Every number, as bits: what "the same output" means.
    fn bits(&self) -> Vec<(String, u32)> {
        let mut bits = Vec::new();
        for c in &self.comparisons {
            for (what, value) in [
                ("rows_shuffled", c.rows_shuffled),
                ("pooled", c.pooled),
                ("rows_in_place", c.rows_in_place),
                ("scale", c.scale),
            ] {
                bits.push((format!("{} {what}", c.scheme), value.to_bits()));
            }
        }
        for s in &self.scores {
            let scalars = [
                ("train_loss", s.train_loss),
                ("held_out_accuracy", s.held_out_accuracy),
                ("held_out_loss", s.held_out_loss),
            ];
            let steps = s.step_accuracies.iter().enumerate();
            let logits = s.logits.iter().enumerate();
            bits.extend(scalars.map(|(what, v)| (format!("{} {what}", s.scheme), v.to_bits())));
            bits.extend(
                steps.map(|(i, v)| (format!("{} step {i} accuracy", s.scheme), v.to_bits())),
            );
            bits.extend(logits.map(|(i, v)| (format!("{} logit {i}", s.scheme), v.to_bits())));
        }
        bits
    }
}

/// What the example concludes, per scheme: whether the block only permutes the rows, and (for
/// the trained schemes) the held-out accuracy to 0.1 %, as the example prints it.
#[derive(Debug, PartialEq, Eq)]
struct Verdict {
    scheme: GridScheme,
    only_permutes: bool,
    held_out_per_mille: Option<u32>,
}

/// The example's run on `device`: every scheme compared, then each of `schemes` trained its
/// number of steps.
fn run(name: &str, device: &Device, schemes: &[(GridScheme, usize)]) -> Run {
    // burn's seed is one generator per backend: runs on the same backend must not interleave.
    let _guard = backend_lock(name);
    let start = Instant::now();
    let comparisons: Vec<Comparison> = GridScheme::ALL
        .iter()
        .map(|&scheme| compare(scheme, SEED, device))
        .collect();
    let (train_set, held_out) = red_left_of_blue::split(SEED, HOLDOUT_EVERY);
    let every: Vec<_> = train_set.iter().chain(&held_out).copied().collect();
    let scores = schemes
        .iter()
        .map(|&(scheme, steps)| {
            let options = TrainingOptions { steps, seed: SEED };
            let mut step_accuracies = Vec::new();
            let t = train(scheme, &options, device, |_, _, accuracy| {
                step_accuracies.push(accuracy)
            });
            assert_eq!(t.held_out_pictures, 40, "the example's split");
            let (pictures, _) = red_left_of_blue::batch(&every, device);
            Score {
                scheme,
                step_accuracies,
                train_loss: t.train_loss,
                held_out_accuracy: t.held_out_accuracy,
                held_out_loss: t.held_out_loss,
                logits: t.model.logits(pictures).into_data().iter::<f32>().collect(),
            }
        })
        .collect();
    let run = Run {
        comparisons,
        scores,
    };
    eprintln!(
        "{name}: {:.1} s, steps {schemes:?}\n{run:#?}",
        start.elapsed().as_secs_f64()
    );
    run
}

fn backend_lock(name: &str) -> MutexGuard<'static, ()> {
    static FLEX: Mutex<()> = Mutex::new(());
    static WGPU: Mutex<()> = Mutex::new(());
    static NDARRAY: Mutex<()> = Mutex::new(());
    let lock = match name {
        "flex" => &FLEX,
        "wgpu" => &WGPU,
        "ndarray" => &NDARRAY,
        other => panic!("no lock for {other}"),
    };
    // A failed test poisons it; the next run is still valid.
    lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The chance-level argument, checked: every picture gets the same logits (one bag of
/// patches), and every accuracy is exactly 50 %.
fn check_blind(name: &str, s: &Score) {
    let scale = s.logits.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    let (first, rest) = s.logits.split_at(2);
    for (i, logits) in rest.chunks(2).enumerate() {
        let gap = (logits[0] - first[0])
            .abs()
            .max((logits[1] - first[1]).abs());
        assert!(
            gap <= SAME_LOGITS * scale,
            "{name}, none: picture {} gets other logits than picture 0: {logits:?} against \
             {first:?} (tolerance {SAME_LOGITS} of {scale})",
            i + 1
        );
    }
    // One answer for every picture, or a tie: 50 %, exactly, on sets that are half each.
    for (step, &accuracy) in s.step_accuracies.iter().enumerate() {
        assert_eq!(accuracy, 0.5, "{name}, none: train accuracy at step {step}");
    }
    assert_eq!(s.held_out_accuracy, 0.5, "{name}, none: held-out accuracy");
}

/// Checks the example's claims on one run; returns its verdicts.
fn check_claims(name: &str, run: &Run) -> Vec<Verdict> {
    assert_eq!(run.comparisons.len(), GridScheme::ALL.len());
    let mut verdicts = Vec::new();
    for c in &run.comparisons {
        let scheme = c.scheme;
        // The outputs are not zero, and the patches did move.
        assert!(c.scale > 0.1, "{name}, {scheme}: output too small: {c:?}");
        assert!(
            c.rows_in_place > DIFFERENT * c.scale,
            "{name}, {scheme}: the rows in place should differ: {c:?}"
        );
        let only_permutes = c.rows_shuffled <= SAME * c.scale && c.pooled <= SAME * c.scale;
        if scheme == GridScheme::None {
            assert!(
                only_permutes,
                "{name}, {scheme}: the block should only permute the rows (differences at most \
                 {SAME} of the largest output): {c:?}"
            );
        } else {
            assert!(
                c.pooled >= DIFFERENT * c.scale,
                "{name}, {scheme}: the pooled vectors should differ by at least {DIFFERENT} of \
                 the largest output: {c:?}"
            );
        }
        let score = run.scores.iter().find(|s| s.scheme == scheme);
        if let Some(s) = score {
            if scheme == GridScheme::None {
                check_blind(name, s);
            } else {
                assert_eq!(
                    s.held_out_accuracy, 1.0,
                    "{name}, {scheme}: held-out accuracy should be 100 % after {STEPS} steps: \
                     {s:?}"
                );
            }
        }
        verdicts.push(Verdict {
            scheme,
            only_permutes,
            held_out_per_mille: score.map(|s| (1000.0 * s.held_out_accuracy).round() as u32),
        });
    }
    verdicts
}

/// The same seed, the same numbers: a second run against the first, bit for bit.
fn check_same_twice(name: &str, first: &Run, second: &Run) {
    let (first, second) = (first.bits(), second.bits());
    assert_eq!(first.len(), second.len());
    let differing: Vec<_> = first
        .iter()
        .zip(&second)
        .filter(|(a, b)| a != b)
        .map(|(a, b)| {
            format!(
                "{}: {} then {}",
                a.0,
                f32::from_bits(a.1),
                f32::from_bits(b.1)
            )
        })
        .collect();
    assert!(
        differing.is_empty(),
        "{name}: the same seed gave other numbers:\n{}",
        differing.join("\n")
    );
}

/// Every scheme, trained `steps` steps.
fn every_scheme(steps: usize) -> Vec<(GridScheme, usize)> {
    GridScheme::ALL
        .iter()
        .map(|&scheme| (scheme, steps))
        .collect()
}

fn flex() -> Device {
    Device::flex()
}

/// The wgpu device, opened as the example opens it. Panics, never skips, when wgpu has no
/// adapter.
fn wgpu() -> Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            let opened = open(DeviceChoice::Wgpu).unwrap_or_else(|reason| {
                panic!(
                    "{reason}. These tests never skip a backend. Install a Vulkan driver \
                     (Debian: apt-get install mesa-vulkan-drivers libvulkan1, which gives the \
                     lavapipe CPU adapter) or run on a machine with a GPU."
                )
            });
            eprintln!("wgpu: {}", opened.description);
            opened.device
        })
        .clone()
}

/// The first run on each device, shared by the tests that read it.
fn first_run(name: &'static str) -> &'static Run {
    static FLEX: OnceLock<Run> = OnceLock::new();
    static WGPU: OnceLock<Run> = OnceLock::new();
    #[cfg(feature = "ndarray")]
    static NDARRAY: OnceLock<Run> = OnceLock::new();
    match name {
        "flex" => FLEX.get_or_init(|| run(name, &flex(), &TRAINED)),
        "wgpu" => WGPU.get_or_init(|| run(name, &wgpu(), &TRAINED)),
        #[cfg(feature = "ndarray")]
        "ndarray" => NDARRAY.get_or_init(|| run(name, &ndarray(), &TRAINED)),
        other => panic!("no device {other}"),
    }
}

#[test]
fn claims_hold_on_flex() {
    check_claims("flex", first_run("flex"));
}

#[test]
fn claims_hold_on_wgpu() {
    check_claims("wgpu", first_run("wgpu"));
}

#[test]
fn same_seed_same_numbers_on_flex() {
    let device = flex();
    let twice = || run("flex", &device, &every_scheme(SAME_TWICE_STEPS));
    check_same_twice("flex", &twice(), &twice());
}

#[test]
fn same_seed_same_numbers_on_wgpu() {
    let device = wgpu();
    let twice = || run("wgpu", &device, &every_scheme(SAME_TWICE_STEPS));
    check_same_twice("wgpu", &twice(), &twice());
}

#[test]
fn wgpu_gives_flex_verdicts() {
    assert_eq!(
        check_claims("wgpu", first_run("wgpu")),
        check_claims("flex", first_run("flex"))
    );
}

/// ndarray is deprecated in burn 0.22 in favour of flex; our users asked for both.
#[cfg(feature = "ndarray")]
#[allow(deprecated)]
fn ndarray() -> Device {
    Device::ndarray()
}

#[cfg(feature = "ndarray")]
#[test]
fn claims_hold_on_ndarray() {
    check_claims("ndarray", first_run("ndarray"));
}

#[cfg(feature = "ndarray")]
#[test]
fn same_seed_same_numbers_on_ndarray() {
    let device = ndarray();
    let twice = || run("ndarray", &device, &every_scheme(SAME_TWICE_STEPS));
    check_same_twice("ndarray", &twice(), &twice());
}

#[cfg(feature = "ndarray")]
#[test]
fn ndarray_gives_flex_verdicts() {
    assert_eq!(
        check_claims("ndarray", first_run("ndarray")),
        check_claims("flex", first_run("flex"))
    );
}
