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

use burn::optim::{AdamConfig, GradientsParams};
use burn::prelude::*;
use burn_positional::{AbsolutePositionConfig, EmbeddingWithPositionConfig, SelfAttentionConfig};
use burn_positional_examples::classifier::{SequenceClassifier, SequenceClassifierConfig};
use burn_positional_examples::device::{DeviceChoice, open_or_cpu};
use burn_positional_examples::encoder::EncoderConfig;
use burn_positional_examples::schemes::{Scheme, SchemeParts};
use burn_positional_examples::who_bites_whom::{self, NOUNS, token_id, vocabulary};
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

const D_MODEL: usize = 32;
const N_HEADS: usize = 4;

/// Each scheme's parts for this example's blocks (learned tables of 8 rows).
fn parts(scheme: Scheme) -> SchemeParts {
    scheme.parts(8, N_HEADS, D_MODEL / N_HEADS)
}

fn sentence(text: &str, device: &Device) -> Tensor<2, Int> {
    let ids: Vec<i64> = text.split(' ').map(|w| token_id(w) as i64).collect();
    Tensor::from_data(TensorData::new(ids, [1, 3]), device)
}

/// "man bites dog" is "dog bites man" with words 0 and 2 swapped.
fn swap_first_and_last(x: Tensor<3>) -> Tensor<3> {
    let device = x.device();
    x.select(1, Tensor::<1, Int>::from_data([2, 1, 0], &device))
}

fn max_abs(t: Tensor<3>) -> f32 {
    t.abs().max().into_scalar::<f32>()
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
        let (name, parts) = (scheme.to_string(), parts(scheme));
        device.seed(args.seed);
        let embed = EmbeddingWithPositionConfig::new(vocabulary().len(), D_MODEL)
            .with_scheme(parts.embedding)
            .init(device);
        let block = SelfAttentionConfig::new(D_MODEL, N_HEADS)
            .with_rope(parts.rope)
            .with_score_bias(parts.score_bias)
            .init(device);
        let a = block.forward(embed.forward(sentence("dog bites man", device)));
        let b = block.forward(embed.forward(sentence("man bites dog", device)));
        let rows = max_abs(b.clone() - swap_first_and_last(a.clone()));
        let pooled = max_abs(b.mean_dim(1) - a.mean_dim(1));
        println!("     {name:<23} | {rows:>24.6} | {pooled:>22.6}");
    }
    println!(
        "\n     Without positions the rows are the same, only permuted (difference 0 up to float\n     \
         rounding), so the pooled sentence vectors are identical: attention cannot tell who bites.\n"
    );
}

struct Trained {
    name: String,
    model: SequenceClassifier,
    train_accuracy: f32,
    held_out_accuracy: f32,
    seconds: f64,
}

/// Part 3: train the classifier with one scheme.
fn train(scheme: Scheme, args: &Args, device: &Device) -> Trained {
    let (train_set, held_out) = who_bites_whom::split(args.seed, 5);
    let training = device.clone().autodiff();
    training.seed(args.seed);
    let name = scheme.to_string();
    let encoder = EncoderConfig::new(vocabulary().len(), AbsolutePositionConfig::None)
        .with_d_model(D_MODEL)
        .with_n_heads(N_HEADS)
        .with_n_blocks(1)
        .with_position(scheme, 8);
    let mut model = SequenceClassifierConfig::new(encoder, NOUNS.len()).init(&training);
    let (ids, answers) = who_bites_whom::batch(&train_set, &training);
    let mut optim = AdamConfig::new().init();
    let progress = ProgressBar::new(args.steps as u64).with_style(
        ProgressStyle::with_template("     {prefix:<23} [{bar:30}] {pos:>4}/{len} {msg}")
            .unwrap()
            .progress_chars("=> "),
    );
    progress.set_prefix(name.clone());
    let start = Instant::now();
    let mut train_accuracy = 0.0;
    for step in 0..args.steps {
        let (loss, accuracy) = model.loss_and_accuracy(ids.clone(), answers.clone());
        train_accuracy = accuracy;
        if step % 10 == 0 || step + 1 == args.steps {
            progress.set_message(format!(
                "loss {:.3}, train accuracy {:>5.1} %",
                loss.clone().into_scalar::<f32>(),
                100.0 * accuracy
            ));
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
        progress.inc(1);
    }
    progress.finish();
    let model = model.valid();
    let (held_ids, held_answers) = who_bites_whom::batch(&held_out, device);
    let (_, held_out_accuracy) = model.loss_and_accuracy(held_ids, held_answers);
    Trained {
        name,
        model,
        train_accuracy,
        held_out_accuracy,
        seconds: start.elapsed().as_secs_f64(),
    }
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
                title: format!("{}: \"{text}\"", trained.name),
                row_labels: words.clone(),
                col_labels: words,
                values: values.chunks(3).map(<[f32]>::to_vec).collect(),
                range: Some((0.0, 1.0)),
                annotate: true,
            }
        })
        .collect()
}

fn main() {
    // SAFETY: first thing in `main`, before any thread starts.
    unsafe { burn_positional_examples::device::quiet_headless_vulkan() };
    let args = Args::parse();
    let opened = open_or_cpu(args.device);
    let device = &opened.device;
    println!("device: {}\n", opened.description);

    compare_outputs(device, &args);

    let (train_set, held_out) = who_bites_whom::split(args.seed, 5);
    println!(
        "3.   Training \"who bites whom?\": {} sentences like \"dog bites man\" (answer: dog), {} more held out.\n     \
         {} steps of Adam per scheme; mean-pooled attention, so order can only come from positions.\n",
        train_set.len(),
        held_out.len(),
        args.steps
    );
    let trained: Vec<Trained> = args
        .schemes
        .iter()
        .map(|&scheme| train(scheme, &args, device))
        .collect();
    println!(
        "\n     {:<23} | {:>9} | {:>9} | {:>7}",
        "scheme", "train", "held-out", "seconds"
    );
    for t in &trained {
        println!(
            "     {:<23} | {:>7.1} % | {:>7.1} % | {:>7.1}",
            t.name,
            100.0 * t.train_accuracy,
            100.0 * t.held_out_accuracy,
            t.seconds
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
        .filter(|t| t.name == "none" || t.name == "sinusoidal")
        .flat_map(|t| attention_panels(t, device))
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
