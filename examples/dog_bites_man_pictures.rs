//! "Dog bites man" for pictures: a picture and the same picture with its patches shuffled.
//!
//! 1. One attention block without positions gives the shuffled picture the picture's output
//!    rows, shuffled the same way, and the same mean-pooled vector; with each 2D scheme the
//!    outputs differ.
//! 2. A tiny vision transformer trained for seconds on "is red left of blue?": at chance
//!    without positions, near 100 % on held-out pictures with each 2D scheme (a learned patch
//!    grid, MAE's 2D sin-cos, axial 2D RoPE, Pixtral's 2D RoPE).
//! 3. A PNG of a held-out picture and its twin (red and blue swapped), each trained model's
//!    attention from the red patch and its verdict.
//!
//! ```text
//! cargo run --release --example dog_bites_man_pictures [-- --device wgpu|flex] [--steps N] [--out DIR]
//! cargo run --release --features ndarray --example dog_bites_man_pictures -- --device ndarray
//! ```

use std::path::PathBuf;
use std::time::Instant;

use burn::prelude::*;
use burn_positional_examples::device::{DeviceChoice, open_or_cpu};
use burn_positional_examples::pictures::{
    self, Trained, TrainingOptions, Verdict, compare, figure_pictures, verdicts,
};
use burn_positional_examples::red_left_of_blue::{self, ANSWERS, GRID, PATCH, Picture, SIZE};
use burn_positional_examples::schemes::GridScheme;
use burn_positional_plots::{Heatmap, Panel, Picture as PicturePanel, draw_panels};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Parser)]
#[command(
    about = "Why a vision transformer needs positions: red left of blue, or blue left of red"
)]
struct Args {
    /// Device: auto (wgpu on a GPU, else flex), wgpu, ndarray or flex; also read from
    /// BURN_DEVICE. Falls back to flex with a notice when wgpu has no adapter.
    #[arg(long, env = "BURN_DEVICE", default_value = "auto")]
    device: DeviceChoice,
    /// Training steps per scheme (full batch, Adam).
    #[arg(long, default_value_t = 300)]
    steps: usize,
    /// Folder for the picture.
    #[arg(long, default_value = "out")]
    out: PathBuf,
    /// Schemes to compare, by name (comma-separated): none, learned-2d, sincos-2d, rope-2d,
    /// rope-2d-pixtral. All of them by default.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,learned-2d,sincos-2d,rope-2d,rope-2d-pixtral"
    )]
    schemes: Vec<GridScheme>,
    /// Seed for initialization, the train/held-out split, the noise and the shuffle.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

/// Part 1: one randomly initialized block, each scheme.
fn compare_outputs(device: &Device, args: &Args) {
    let [a, _] = figure_pictures(args.seed);
    println!(
        "1.   One self-attention block (random weights) on a picture and on its patches shuffled."
    );
    println!(
        "     A = {SIZE} x {SIZE} pixels in {GRID} x {GRID} patches ({}, faint noise on every pixel),\n     \
         B = A's patches shuffled (each keeps the position of the cell it lands in);\n     \
         largest absolute difference:\n",
        a.describe()
    );
    println!(
        "     {:<16} | {:>25} | {:>18}",
        "scheme", "B rows vs A rows shuffled", "mean-pooled B vs A"
    );
    for &scheme in &args.schemes {
        let c = compare(scheme, args.seed, device);
        println!(
            "     {:<16} | {:>25.6} | {:>18.6}",
            scheme.to_string(),
            c.rows_shuffled,
            c.pooled
        );
    }
    println!(
        "\n     Without positions the rows are the same, only shuffled (difference 0 up to float\n     \
         rounding), so the pooled picture vectors are identical: attention sees a bag of patches.\n"
    );
}

/// Seconds a scheme's training took: all of it, and its first step alone (read back), which on
/// a device that compiles its kernels (wgpu, CUDA) includes compiling every kernel the step
/// launches for the first time.
struct Timing {
    total: f64,
    first_step: f64,
}

/// Part 2: train the ViT with one scheme, with a progress bar, and time it.
fn train(scheme: GridScheme, args: &Args, device: &Device) -> (Trained, Timing) {
    let options = TrainingOptions {
        steps: args.steps,
        seed: args.seed,
    };
    let progress = ProgressBar::new(args.steps as u64).with_style(
        ProgressStyle::with_template("     {prefix:<16} [{bar:30}] {pos:>4}/{len} {msg}")
            .unwrap()
            .progress_chars("=> "),
    );
    progress.set_prefix(scheme.to_string());
    let start = Instant::now();
    let mut first_step = None;
    let trained = pictures::train(scheme, &options, device, |step, loss, accuracy| {
        if step == 0 {
            // The loss read below waits for the step; the time to it is the step's.
            let _ = loss.clone().into_scalar::<f32>();
            first_step = Some(start.elapsed().as_secs_f64());
        }
        if step % 10 == 0 || step + 1 == args.steps {
            progress.set_message(format!(
                "loss {:.3}, train accuracy {:>5.1} %",
                loss.clone().into_scalar::<f32>(),
                100.0 * accuracy
            ));
        }
        progress.inc(1);
    });
    progress.finish();
    let total = start.elapsed().as_secs_f64();
    let first_step = first_step.unwrap_or(total);
    (trained, Timing { total, first_step })
}

/// A verdict in words: `red left 0.98, right`, or `tie 0.50` (no answer).
fn says(v: &Verdict) -> String {
    match v.predicted {
        None => format!("tie {:.2}", v.red_left),
        Some(answer) => {
            let (name, p) = match answer {
                1 => ("red left", v.red_left),
                _ => ("blue left", 1.0 - v.red_left),
            };
            let mark = if v.correct() { "right" } else { "wrong" };
            format!("{name} {p:.2}, {mark}")
        }
    }
}

/// Part 3: each picture, then each trained model's attention from its red patch (a grid of
/// cells) and its verdict; one row per picture.
fn panels(pictures: &[Picture], trained: &[(Trained, Vec<Verdict>)]) -> Vec<Panel> {
    let mut panels = Vec::new();
    for (i, (picture, name)) in pictures.iter().zip(["A", "B"]).enumerate() {
        panels.push(Panel::Picture(PicturePanel::from_channels(
            format!("{name}: {}", ANSWERS[picture.answer()]),
            &picture.pixels(),
            [SIZE, SIZE],
            PATCH,
        )));
        for (t, verdicts) in trained {
            let v = &verdicts[i];
            let labels: Vec<String> = (0..GRID).map(|k| k.to_string()).collect();
            panels.push(Panel::Heatmap(Heatmap {
                title: format!("{}: {}", t.scheme, says(v)),
                row_labels: labels.clone(),
                col_labels: labels,
                values: v.from_red.chunks(GRID).map(<[f32]>::to_vec).collect(),
                range: None,
                annotate: true,
            }));
        }
    }
    panels
}

pub fn main() {
    // SAFETY: first thing in `main`, before any thread starts.
    unsafe { burn_positional_examples::device::quiet_headless_vulkan() };
    let args = Args::parse();
    let opened = open_or_cpu(args.device);
    let device = &opened.device;
    println!("device: {}\n", opened.description);

    compare_outputs(device, &args);

    let (train_set, held_out) = red_left_of_blue::split(args.seed, pictures::HOLDOUT_EVERY);
    println!(
        "2.   Training \"is red left of blue?\": {} pictures like A (one red and one blue patch, in\n     \
         different columns, anywhere on the grid), {} more held out. A tiny ViT (linear patch\n     \
         projection, one attention block, mean pooling, a linear head); {} steps of Adam per\n     \
         scheme, so where the patches are can only come from positions.\n",
        train_set.len(),
        held_out.len(),
        args.steps
    );
    let trained: Vec<(Trained, Timing)> = args
        .schemes
        .iter()
        .map(|&scheme| train(scheme, &args, device))
        .collect();
    // On a device that compiles kernels at run time, the first step's seconds (compiling
    // included) apart: the column is left out on the CPU backends, which compile nothing.
    let backend = opened.description.to_lowercase();
    let compiles = ["wgpu", "cuda"]
        .iter()
        .any(|name| backend.starts_with(name));
    println!(
        "\n     {:<16} | {:>9} | {:>9} | {:>7}{}",
        "scheme",
        "train",
        "held-out",
        "seconds",
        if compiles { " | first step" } else { "" }
    );
    for (t, timing) in &trained {
        println!(
            "     {:<16} | {:>7.1} % | {:>7.1} % | {:>7.1}{}",
            t.scheme.to_string(),
            100.0 * t.train_accuracy,
            100.0 * t.held_out_accuracy,
            timing.total,
            if compiles {
                format!(" | {:>10.1}", timing.first_step)
            } else {
                String::new()
            }
        );
    }
    println!(
        "\n     Chance is 50 %: every picture is the same bag of patches (one red, one blue, {} white),\n     \
         and half of each set is red left of blue (each picture's twin, red and blue swapped, is in\n     \
         the same set). A model blind to where patches are gives every picture one answer, right\n     \
         on half of them; trained, it settles on 50/50 for all: a tie (its logits within {:.0e}),\n     \
         counted half right.\n",
        GRID * GRID - 2,
        pictures::TIE
    );

    let figure = figure_pictures(args.seed);
    let judged: Vec<(Trained, Vec<Verdict>)> = trained
        .into_iter()
        .map(|(t, _)| {
            let v = verdicts(&t.model, &figure, device);
            (t, v)
        })
        .collect();
    std::fs::create_dir_all(&args.out).expect("create the output folder");
    let path = args.out.join("dog_bites_man_pictures.png");
    draw_panels(
        &path,
        "Held-out A and its twin B; each trained model's attention from the red patch (mean over heads) and its verdict",
        &panels(&figure, &judged),
        1 + judged.len(),
        300,
    )
    .unwrap_or_else(|err| panic!("{err}"));
    println!(
        "3.   A held-out picture and its twin, the trained models' verdicts: {}",
        path.display()
    );
    println!(
        "     A = {} ({}), B = {} ({}).\n",
        figure[0].describe(),
        ANSWERS[figure[0].answer()],
        figure[1].describe(),
        ANSWERS[figure[1].answer()]
    );
    println!("     {:<16} | {:<22} | on B", "scheme", "on A");
    for (t, v) in &judged {
        println!(
            "     {:<16} | {:<22} | {}",
            t.scheme.to_string(),
            says(&v[0]),
            says(&v[1])
        );
    }
    println!(
        "\n     Without positions B gets A's answer and A's attention, moved with the patches; with\n     \
         positions the red patch looks at the blue one differently when it sits on the other side."
    );
}
