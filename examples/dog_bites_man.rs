//! "dog bites man" and "man bites dog": the same three words in another order.
//!
//! 1. Self-attention without positions gives the two sentences the same output rows, permuted,
//!    and the same mean-pooled sentence vector.
//! 2. With positions (each scheme), the outputs differ.
//! 3. A tiny "who bites whom?" model, trained for seconds: at chance without positions, near
//!    100 % on held-out sentences with them.
//! 4. A PNG of the trained models' attention weights for both sentences.
//!
//! ```text
//! cargo run --release --example dog_bites_man [-- --device wgpu|flex] [--steps N] [--out DIR]
//! cargo run --release --features ndarray --example dog_bites_man -- --device ndarray
//! ```

use std::path::PathBuf;
use std::time::Instant;

use burn::prelude::*;
use burn_positional_examples::device::{DeviceChoice, open_or_cpu};
use burn_positional_examples::dog_bites_man::{self, Trained, TrainingOptions, compare, sentence};
use burn_positional_examples::schemes::Scheme;
use burn_positional_examples::who_bites_whom;
use burn_positional_plots::{Heatmap, draw_heatmaps};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Parser)]
#[command(about = "Why a transformer needs positions: dog bites man versus man bites dog")]
struct Args {
    /// Device: auto (wgpu on a GPU, else flex), wgpu, ndarray or flex; also read from
    /// BURN_DEVICE. Falls back to flex with a notice when wgpu has no adapter.
    #[arg(long, env = "BURN_DEVICE", default_value = "auto")]
    device: DeviceChoice,
    /// Training steps per scheme (full batch, Adam).
    #[arg(long, default_value_t = 150)]
    steps: usize,
    /// Folder for the picture.
    #[arg(long, default_value = "out")]
    out: PathBuf,
    /// Schemes to compare, by name (comma-separated): none, sinusoidal, learned,
    /// learned-from-sinusoidal, t5, rope, alibi. All of them by default.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,sinusoidal,learned,learned-from-sinusoidal,t5,rope,alibi"
    )]
    schemes: Vec<Scheme>,
    /// Seed for initialization and the train/held-out split.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

/// Parts 1 and 2: one randomly initialized attention block, each scheme.
fn compare_outputs(device: &Device, args: &Args) {
    println!("1-2. One self-attention block (random weights) on both sentences.");
    println!("     A = \"dog bites man\", B = \"man bites dog\"; largest absolute difference:\n");
    println!(
        "     {:<23} | {:>22} | {:>22}",
        "scheme", "B rows vs A rows swapped", "mean-pooled B vs A"
    );
    for &scheme in &args.schemes {
        let c = compare(scheme, args.seed, device);
        println!(
            "     {:<23} | {:>24.6} | {:>22.6}",
            scheme.to_string(),
            c.rows_swapped,
            c.pooled
        );
    }
    println!(
        "\n     Without positions the rows are the same, only permuted (difference 0 up to float\n     \
         rounding), so the pooled sentence vectors are identical: attention cannot tell who bites.\n"
    );
}

/// Seconds a scheme's training took: all of it, and its first step alone (read back), which on
/// a device that compiles its kernels (wgpu, CUDA) includes compiling every kernel the step
/// launches for the first time.
struct Timing {
    total: f64,
    first_step: f64,
}

/// Part 3: train the classifier with one scheme, with a progress bar, and time it.
fn train(scheme: Scheme, args: &Args, device: &Device) -> (Trained, Timing) {
    let options = TrainingOptions {
        steps: args.steps,
        seed: args.seed,
    };
    let progress = ProgressBar::new(args.steps as u64).with_style(
        ProgressStyle::with_template("     {prefix:<23} [{bar:30}] {pos:>4}/{len} {msg}")
            .unwrap()
            .progress_chars("=> "),
    );
    progress.set_prefix(scheme.to_string());
    let start = Instant::now();
    let mut first_step = None;
    let trained = dog_bites_man::train(scheme, &options, device, |step, loss, accuracy| {
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

/// Part 4: the last block's attention, averaged over heads, as a 3x3 grid per sentence.
fn attention_panels(trained: &Trained, device: &Device) -> Vec<Heatmap> {
    ["dog bites man", "man bites dog"]
        .into_iter()
        .map(|text| {
            let ids = sentence(text, device);
            let (_, weights) = trained.model.forward(ids);
            let weights = weights.expect("one block").mean_dim(1); // [1, 1, seq, seq]
            let values: Vec<f32> = weights.into_data().iter::<f32>().collect();
            let words: Vec<String> = text.split(' ').map(String::from).collect();
            Heatmap {
                title: format!("{}: \"{text}\"", trained.scheme),
                row_labels: words.clone(),
                col_labels: words,
                values: values.chunks(3).map(<[f32]>::to_vec).collect(),
                range: Some((0.0, 1.0)),
                annotate: true,
            }
        })
        .collect()
}

pub fn main() {
    // SAFETY: first thing in `main`, before any thread starts.
    unsafe { burn_positional_examples::device::quiet_headless_vulkan() };
    let args = Args::parse();
    let opened = open_or_cpu(args.device);
    let device = &opened.device;
    println!("device: {}\n", opened.description);

    compare_outputs(device, &args);

    let (train_set, held_out) = who_bites_whom::split(args.seed, dog_bites_man::HOLDOUT_EVERY);
    println!(
        "3.   Training \"who bites whom?\": {} sentences like \"dog bites man\" (answer: dog), {} more held out.\n     \
         {} steps of Adam per scheme; mean-pooled attention, so order can only come from positions.\n",
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
        "\n     {:<23} | {:>9} | {:>9} | {:>7}{}",
        "scheme",
        "train",
        "held-out",
        "seconds",
        if compiles { " | first step" } else { "" }
    );
    for (t, timing) in &trained {
        println!(
            "     {:<23} | {:>7.1} % | {:>7.1} % | {:>7.1}{}",
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
    if compiles {
        let first: f64 = trained.iter().map(|(_, t)| t.first_step).sum();
        let total: f64 = trained.iter().map(|(_, t)| t.total).sum();
        println!(
            "\n     First steps: {first:.1} s of the {total:.1} s of training: each includes compiling the\n     \
             kernels that step launches for the first time (the first scheme's compiles the most)."
        );
    }
    println!(
        "\n     Chance is 50 %: each held-out sentence's reverse is held out too, and a model blind to\n     \
         order must give both the same answer, so it is right for at most one of them.\n"
    );
    if args.schemes.contains(&Scheme::Alibi) {
        println!(
            "     alibi here is the symmetric (bidirectional) variant: its bias -m|i - j| is unchanged when a\n     \
             sentence is reversed, and \"man bites dog\" is \"dog bites man\" reversed, so it stays blind\n     \
             to who bites. The paper's causal variant also masks later tokens, which breaks the symmetry.\n"
        );
    }

    std::fs::create_dir_all(&args.out).expect("create the output folder");
    let path = args.out.join("dog_bites_man_attention.png");
    let panels: Vec<Heatmap> = trained
        .iter()
        .filter(|(t, _)| matches!(t.scheme, Scheme::None | Scheme::Sinusoidal))
        .flat_map(|(t, _)| attention_panels(t, device))
        .collect();
    draw_heatmaps(
        &path,
        "Attention after training (row: query, column: key; mean over heads)",
        &panels,
        2,
        420,
    )
    .unwrap_or_else(|err| panic!("{err}"));
    println!(
        "4.   Attention weights of the trained models: {}",
        path.display()
    );
    println!(
        "     Without positions, \"man bites dog\" has exactly the weights of \"dog bites man\" with rows and\n     \
         columns swapped; with positions the patterns differ."
    );
}
