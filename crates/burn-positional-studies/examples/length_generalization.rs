//! Train short, test long: which position scheme lets a decoder-only model answer sequences
//! longer than it was trained on? Trains small causal models with teacher forcing on copy,
//! reverse, sort and addition at lengths up to `L`, then scores greedy decoding (exact match)
//! at `L`, `1.5L`, `2L` and `3L`, for none (NoPE), sinusoidal, learned, T5, RoPE (also with
//! position interpolation and NTK-aware scaling at test time) and causal ALiBi, over several
//! seeds. Writes `results.md`, `results.json` and `length_generalization.png` into `--out`.
//!
//! ```text
//! cargo run --release -p burn-positional-studies --example length_generalization                 # the reduced grid (CPU)
//! cargo run --release -p burn-positional-studies --example length_generalization -- --full       # the full grid (GPU)
//! ```
//!
//! A run stopped anywhere resumes where it stopped: done cells are read from disk, the cell
//! in progress resumes from its last checkpoint.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use burn_positional_examples::device::{DeviceChoice, open_or_cpu};
use burn_positional_plots::{Chart, Series, draw_charts};
use burn_positional_studies::length_generalization::{
    Progress, StudyConfig, StudyResults, run_study,
};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Parser)]
#[command(about = "Train short, test long: length generalization of every position scheme")]
struct Args {
    /// Device: auto (wgpu on a GPU, else flex), wgpu, ndarray or flex; also read from
    /// BURN_DEVICE.
    #[arg(long, env = "BURN_DEVICE", default_value = "auto")]
    device: DeviceChoice,
    /// Folder for checkpoints, results and the figure.
    #[arg(long, default_value = "out/length_generalization")]
    out: PathBuf,
    /// Forget what `--out` holds and start over.
    #[arg(long)]
    fresh: bool,
    /// Cells trained at once (threads).
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// The full grid for a GPU: L = 16, 4 blocks of width 128, 10 000 steps, 5 seeds, 500
    /// test examples per length. The flags below override it.
    #[arg(long)]
    full: bool,
    /// Training length L (digits per number, trained on 1..=L).
    #[arg(long)]
    train_len: Option<usize>,
    /// Optimizer steps per model.
    #[arg(long)]
    steps: Option<usize>,
    /// Seeds per cell.
    #[arg(long)]
    seeds: Option<u64>,
    /// Test examples per length.
    #[arg(long)]
    test_examples: Option<usize>,
    /// Adam's learning rate.
    #[arg(long)]
    learning_rate: Option<f64>,
    /// Width of the models.
    #[arg(long)]
    d_model: Option<usize>,
    /// Causal blocks per model.
    #[arg(long)]
    blocks: Option<usize>,
    /// Tasks (comma-separated): copy, reverse, sort, addition.
    #[arg(long, value_delimiter = ',')]
    tasks: Option<Vec<String>>,
    /// Schemes (comma-separated): none, sinusoidal, learned, t5, rope, alibi.
    #[arg(long, value_delimiter = ',')]
    schemes: Option<Vec<String>>,
}

impl Args {
    fn config(&self) -> StudyConfig {
        let mut config = StudyConfig::new();
        if self.full {
            config = config
                .with_train_len(16)
                .with_d_model(128)
                .with_n_blocks(4)
                .with_steps(10_000)
                .with_steps_per_epoch(1000)
                .with_seeds(5)
                .with_test_examples(500);
        }
        if let Some(n) = self.train_len {
            config.train_len = n;
        }
        if let Some(steps) = self.steps {
            config.steps = steps;
            config.steps_per_epoch = config.steps_per_epoch.min(steps);
        }
        if let Some(seeds) = self.seeds {
            config.seeds = seeds;
        }
        if let Some(n) = self.test_examples {
            config.test_examples = n;
        }
        if let Some(lr) = self.learning_rate {
            config.learning_rate = lr;
        }
        if let Some(d) = self.d_model {
            config.d_model = d;
        }
        if let Some(n) = self.blocks {
            config.n_blocks = n;
        }
        if let Some(tasks) = &self.tasks {
            config.tasks = tasks.clone();
        }
        if let Some(schemes) = &self.schemes {
            config.schemes = schemes.clone();
        }
        config
    }
}

fn main() {
    // SAFETY: first thing in `main`, before any thread starts.
    unsafe { burn_positional_examples::device::quiet_headless_vulkan() };
    if let Err(err) = run(Args::parse()) {
        eprintln!("error: {err}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let opened = open_or_cpu(args.device);
    let device = &opened.device;
    let config = args.config();
    config.validate()?;
    if args.fresh && args.out.exists() {
        std::fs::remove_dir_all(&args.out)?;
    }
    let cells = config.tasks.len() * config.schemes.len() * config.seeds as usize;
    let steps = config.trained_steps();
    println!("device: {}", opened.description);
    println!(
        "{cells} models ({} tasks x {} schemes x {} seeds), {steps} steps of {} examples each, \
         L = {}, tests at n = {:?}, {} jobs",
        config.tasks.len(),
        config.schemes.len(),
        config.seeds,
        config.batch_size,
        config.train_len,
        config.test_lengths(),
        args.jobs
    );
    let bar = ProgressBar::new((cells * steps) as u64).with_style(
        ProgressStyle::with_template(
            "[{elapsed_precise}] [{bar:30}] {percent:>3}% steps, eta {eta} | {msg}",
        )?
        .progress_chars("=> "),
    );
    let start = Instant::now();
    let shown = bar.clone();
    // A line per cell: above the bar on a terminal, plain lines in a log (where indicatif
    // draws nothing).
    let say = move |line: String| {
        if shown.is_hidden() {
            println!("{line}");
        } else {
            shown.println(line);
        }
    };
    let shown = bar.clone();
    let progress: Arc<dyn Fn(&Progress) + Send + Sync> = Arc::new(move |event| match event {
        Progress::Started { cell, resumed_at } => {
            if let Some(step) = resumed_at {
                say(format!("{cell}: resuming at step {step}"));
                shown.inc(*step as u64);
            }
        }
        Progress::Step { cell, step, loss } => {
            shown.inc(1);
            shown.set_message(format!("{cell} step {step}, loss {loss:.3}"));
        }
        Progress::Done {
            cell,
            steps,
            from_disk,
            valid_accuracy,
        } => {
            let accuracy = 100.0 * valid_accuracy;
            if *from_disk {
                shown.inc(*steps as u64);
                say(format!(
                    "{cell}: done before (valid {accuracy:.1} %), read from disk"
                ));
            } else {
                say(format!(
                    "{cell}: trained and scored (valid {accuracy:.1} % of answer tokens), {:.0} s \
                     into the run",
                    start.elapsed().as_secs_f64()
                ));
            }
        }
    });
    let results = run_study(&config, device, args.jobs, &args.out, progress)?;
    bar.finish_and_clear();
    let seconds = start.elapsed().as_secs_f64();
    let mut written = results.save(&args.out)?;
    let figure = args.out.join("length_generalization.png");
    draw(&results, &figure)?;
    written.push(figure);
    println!("\n{}", results.markdown());
    let trained: f64 = results.cells.iter().map(|c| c.seconds).sum();
    println!(
        "{} models in {seconds:.0} s of wall time ({trained:.0} s of cell time, cells read back from disk included); wrote {}",
        results.cells.len(),
        written
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// One panel per task: mean exact match against test length, a line per scheme (and RoPE
/// variant); a refused length has no point.
fn draw(results: &StudyResults, path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let l = results.config.train_len;
    // One legend (the colours are the same in every panel), in the panel with the least to
    // hide: the lowest best accuracy past L (the last such panel on a tie).
    let best_past_l = |task: &String| {
        results
            .summary
            .iter()
            .filter(|s| &s.task == task && s.n > l)
            .filter_map(|s| s.mean)
            .fold(0.0f64, f64::max)
    };
    let legend_task = results
        .config
        .tasks
        .iter()
        .rev()
        .min_by(|a, b| best_past_l(a).total_cmp(&best_past_l(b)));
    let mut panels = Vec::new();
    for task in &results.config.tasks {
        let mut rows: Vec<&str> = Vec::new();
        for s in results.summary.iter().filter(|s| &s.task == task) {
            if !rows.contains(&s.row.as_str()) {
                rows.push(&s.row);
            }
        }
        let mut chart = Chart::new(
            format!("{task} (trained on n <= {l})"),
            "digits per number (n)",
            "exact match (%)",
        )
        .with_y_range(-2.0, 102.0);
        for (colour, row) in rows.iter().enumerate() {
            let points: Vec<(f64, f64)> = results
                .summary
                .iter()
                .filter(|s| &s.task == task && s.row == *row)
                .filter_map(|s| s.mean.map(|m| (s.n as f64, 100.0 * m)))
                .collect();
            let refused = results
                .summary
                .iter()
                .any(|s| &s.task == task && s.row == *row && s.refused.is_some());
            let name = if Some(task) != legend_task {
                String::new()
            } else if refused {
                format!("{row} (refuses n > {l})")
            } else {
                row.to_string()
            };
            if !points.is_empty() {
                chart = chart.with_series(Series::line(name, points, colour));
            }
        }
        panels.push(chart);
    }
    let title = format!(
        "Train short, test long: exact match of greedy decoding, mean of {} seeds",
        results.config.seeds
    );
    draw_charts(path, &title, &panels, 2, (560, 400))?;
    Ok(())
}
