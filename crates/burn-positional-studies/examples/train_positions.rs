//! Train learned position tables (BERT and GPT style) on a task made of position: copy the
//! token `k` places back. Saves the model (`.bpk`) and its config (JSON), reloads and
//! re-evaluates it, resumes from checkpoints, compares schemes and draws the learned table.
//!
//! ```text
//! cargo run --release -p burn-positional-studies --example train_positions -- train --scheme learned [--freeze-tokens]
//! cargo run --release -p burn-positional-studies --example train_positions -- eval --dir out/train_positions/learned
//! cargo run --release -p burn-positional-studies --example train_positions -- compare
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::prelude::*;
use burn::tensor::FloatDType;
use burn_positional::{AbsolutePosition, AbsolutePositionConfig, SinusoidalConfig};
use burn_positional_analysis::{cosine_matrix, neighbour_and_far_cosine};
use burn_positional_examples::device::{DeviceChoice, open_or_cpu};
use burn_positional_examples::encoder::EncoderConfig;
use burn_positional_examples::schemes::Scheme;
use burn_positional_plots::{Heatmap, draw_heatmaps};
use burn_positional_studies::copy_back::CopyBackConfig;
use burn_positional_studies::learner::{self, Listener, Strategy};
use burn_positional_studies::tagger::{TokenTagger, TokenTaggerConfig};
use burn_positional_studies::training::{self, Metrics, TrainingConfig, TrainingError, evaluate};
use clap::{Parser, Subcommand};
use std::io::IsTerminal;

#[derive(Parser)]
#[command(about = "Train learned positional tables on 'copy the token k places back'")]
struct Args {
    /// Device: auto (wgpu on a GPU, else flex), wgpu, ndarray or flex; also read from
    /// BURN_DEVICE. Falls back to flex with a notice when wgpu has no adapter.
    #[arg(long, env = "BURN_DEVICE", default_value = "auto", global = true)]
    device: DeviceChoice,
    /// Folder for models, checkpoints and pictures.
    #[arg(long, default_value = "out/train_positions", global = true)]
    out: PathBuf,
    /// Float dtype of every tensor the run creates (model, optimizer state, activations):
    /// f32, f16 or bf16. Set on the device before anything is built; a dtype the backend
    /// lacks is refused with the backend's reason.
    #[arg(long, default_value = "f32", global = true)]
    dtype: FloatDtype,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train one scheme; resumes from `<out>/<scheme>/checkpoint` when one is there.
    Train {
        /// none, sinusoidal, learned, learned-from-sinusoidal, t5, rope or alibi.
        #[arg(long, default_value = "learned")]
        scheme: Scheme,
        #[command(flatten)]
        options: TrainOptions,
    },
    /// Reload a trained model and evaluate it on the validation set.
    Eval {
        /// A folder written by `train` (holds model.bpk and config.json).
        #[arg(long)]
        dir: PathBuf,
    },
    /// Train every scheme on the same task and budget, print the table, draw the tables.
    Compare {
        #[command(flatten)]
        options: TrainOptions,
    },
}

#[derive(clap::Args, Clone)]
struct TrainOptions {
    /// Optimizer steps.
    #[arg(long, default_value_t = 600)]
    steps: usize,
    /// Keep the token table fixed: only positions and the rest of the model train.
    #[arg(long)]
    freeze_tokens: bool,
    /// Start fresh even if a checkpoint exists.
    #[arg(long)]
    fresh: bool,
    /// Workers: 1 trains on one device (burn-train's `SingleDevice`); more run burn-train's
    /// `MultiDevice` strategy with one worker thread per copy of the device, each on its own
    /// batch, the gradients summed on the first.
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// Distributed data parallel (burn-train's DDP, an NCCL all-reduce) on CUDA devices
    /// `0..devices` instead of worker threads: needs a build with `--features cuda` and
    /// `--device cuda`.
    #[arg(long)]
    ddp: bool,
}

fn config_for(scheme: Scheme, options: &TrainOptions) -> TrainingConfig {
    let task = CopyBackConfig::new();
    let encoder = EncoderConfig::new(task.vocab_size, AbsolutePositionConfig::None)
        .with_position(scheme, task.seq);
    let model = TokenTaggerConfig::new(encoder);
    TrainingConfig::new(model, task)
        .with_steps(options.steps)
        .with_freeze_tokens(options.freeze_tokens)
}

struct Outcome {
    model: TokenTagger,
    valid: Metrics,
    /// Wall time of the training (burn-train's launch to its end).
    seconds: f64,
    /// Steps this invocation ran (fewer than the budget after a resume).
    steps_run: usize,
}

fn train_one(
    scheme: Scheme,
    options: &TrainOptions,
    out: &Path,
    device: &Device,
) -> Result<Outcome, TrainingError> {
    let config = config_for(scheme, options);
    let dir = out.join(scheme.to_string());
    if options.fresh {
        // Held while deleting: a run that owns the folder is refused, naming its pid, before
        // its checkpoints are touched.
        let _lock = burn_positional_studies::checkpoint::RunLock::acquire(&dir)?;
        let _ = std::fs::remove_dir_all(dir.join("checkpoint"));
    }
    let steps_done = learner::last_checkpoint(&dir).map_or(0, |epoch| epoch * config.valid_every);
    let start = Instant::now();
    // burn-train's dashboard on a terminal; one line per validation otherwise (logs, CI).
    let listener = if std::io::stdout().is_terminal() {
        Listener::Dashboard
    } else {
        Listener::lines(format!("{scheme:<24}"))
    };
    let strategy = Strategy::new(options.devices, options.ddp);
    let model = learner::fit(&config, device, strategy, &dir, listener)?;
    let seconds = start.elapsed().as_secs_f64();
    training::save_model(&model, &config, &dir)?;
    model.encoder.embed.check_inputs()?;
    let valid = evaluate(
        &model,
        &config.valid_batch(config.task.seq, device),
        config.task.k,
    )?;
    Ok(Outcome {
        model,
        valid,
        seconds,
        steps_run: config.steps.saturating_sub(steps_done),
    })
}

/// Accuracy at twice the trained length, or the embedding's error.
fn longer(model: &TokenTagger, config: &TrainingConfig, device: &Device) -> String {
    let seq = 2 * config.task.seq;
    match evaluate(model, &config.valid_batch(seq, device), config.task.k) {
        Ok(m) => format!("{:.1} %", 100.0 * m.accuracy),
        Err(err) => format!("error: {err}"),
    }
}

fn learned_table(model: &TokenTagger) -> Option<Tensor<2>> {
    match &model.encoder.embed.position {
        AbsolutePosition::Learned(table) => Some(table.table.val()),
        _ => None,
    }
}

fn draw_tables(learned: &[(String, Tensor<2>)], out: &Path, device: &Device) {
    let n = learned[0].1.dims()[0];
    let d = learned[0].1.dims()[1];
    let sinusoidal = SinusoidalConfig::new().init(d, device).rows(0, n);
    let mut panels = Vec::new();
    let mut all: Vec<(String, Tensor<2>)> = learned.to_vec();
    all.push(("sinusoidal (fixed)".into(), sinusoidal));
    println!(
        "\nsmoothness: mean cosine similarity of neighbouring positions vs positions >= 8 apart"
    );
    for (name, table) in &all {
        let [_, d] = table.dims();
        let values: Vec<f32> = table.clone().into_data().iter::<f32>().collect();
        let rows: Vec<Vec<f32>> = values.chunks(d).map(<[f32]>::to_vec).collect();
        let (near, far) = neighbour_and_far_cosine(&rows, 8);
        let cosine = cosine_matrix(&rows);
        println!("  {name:<28} neighbours {near:>6.3}   far {far:>6.3}");
        panels.push(Heatmap::new(format!("{name}: table [position, dim]"), rows));
        panels.push(
            Heatmap::new(format!("{name}: cosine similarity"), cosine)
                .with_range(Some((-1.0, 1.0))),
        );
    }
    let path = out.join("position_tables.png");
    draw_heatmaps(
        &path,
        "Position tables after training (rows: positions)",
        &panels,
        2,
        420,
    )
    .unwrap_or_else(|err| panic!("{err}"));
    println!("pictures: {}", path.display());
}

/// A float dtype by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum FloatDtype {
    F32,
    F16,
    Bf16,
}

impl From<FloatDtype> for FloatDType {
    fn from(dtype: FloatDtype) -> Self {
        match dtype {
            FloatDtype::F32 => FloatDType::F32,
            FloatDtype::F16 => FloatDType::F16,
            FloatDtype::Bf16 => FloatDType::BF16,
        }
    }
}

fn main() {
    // SAFETY: first thing in `main`, before any thread starts.
    unsafe { burn_positional_examples::device::quiet_headless_vulkan() };
    if let Err(err) = run() {
        eprintln!("error: {err}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), TrainingError> {
    let args = Args::parse();
    let mut opened = open_or_cpu(args.device);
    if args.dtype != FloatDtype::F32 {
        let dtype = FloatDType::from(args.dtype);
        if let Err(err) = opened.device.configure(dtype) {
            eprintln!(
                "error: {} cannot train in {dtype:?}: {err}. Fix: choose another --dtype or \
                 --device",
                opened.description
            );
            std::process::exit(2);
        }
    }
    let device = &opened.device;
    println!("device: {} ({:?})", opened.description, args.dtype);
    match args.command {
        Command::Train { scheme, options } => {
            let outcome = train_one(scheme, &options, &args.out, device)?;
            let config = config_for(scheme, &options);
            let workers = Strategy::new(options.devices, options.ddp).workers();
            let rate = outcome.steps_run as f64 / outcome.seconds;
            println!(
                "{}: valid accuracy {:.1} % (loss {:.3}) after {} steps; {} steps in {:.1} s here \
                 ({rate:.1} steps/s, {:.0} sequences/s on {workers} worker(s)); saved to {}",
                scheme,
                100.0 * outcome.valid.accuracy,
                outcome.valid.loss,
                config.steps,
                outcome.steps_run,
                outcome.seconds,
                rate * (config.batch_size * workers) as f64,
                args.out.join(scheme.to_string()).display()
            );
            println!(
                "at twice the trained length ({}): {}",
                2 * config.task.seq,
                longer(&outcome.model, &config, device)
            );
        }
        Command::Eval { dir } => {
            let (config, model) = training::load_model(&dir, device)?;
            let m = evaluate(
                &model,
                &config.valid_batch(config.task.seq, device),
                config.task.k,
            )?;
            println!(
                "{}: valid accuracy {:.1} % (loss {:.3})",
                dir.display(),
                100.0 * m.accuracy,
                m.loss
            );
        }
        Command::Compare { options } => {
            let task = CopyBackConfig::new();
            println!(
                "task: copy the token {} places back; vocab {}, trained at length {}, {} steps each, same seed\n",
                task.k, task.vocab_size, task.seq, options.steps
            );
            let schemes = Scheme::ALL;
            let mut rows = Vec::new();
            let mut tables = Vec::new();
            for scheme in schemes {
                let outcome = train_one(scheme, &options, &args.out, device)?;
                let config = config_for(scheme, &options);
                if let Some(table) = learned_table(&outcome.model) {
                    tables.push((scheme.to_string(), table));
                }
                rows.push((
                    scheme.to_string(),
                    outcome.valid,
                    outcome.seconds,
                    longer(&outcome.model, &config, device),
                ));
            }
            println!(
                "\n| scheme | valid accuracy | valid loss | seconds | accuracy at length {} |",
                2 * task.seq
            );
            println!("|---|---|---|---|---|");
            for (name, valid, seconds, longer) in rows {
                let longer = longer.split(". Fix").next().unwrap_or_default().to_string();
                println!(
                    "| {name} | {:.1} % | {:.3} | {seconds:.1} | {longer} |",
                    100.0 * valid.accuracy,
                    valid.loss
                );
            }
            println!("(chance is about {:.1} %)", 100.0 / task.vocab_size as f32);
            draw_tables(&tables, &args.out, device);
        }
    }
    Ok(())
}
