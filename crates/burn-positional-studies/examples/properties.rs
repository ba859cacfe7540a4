//! What each position scheme does, measured: seed 002's table of desirable properties, seed
//! 000's uniqueness question, seed 001's add versus concatenate, and pictures of all three.
//!
//! ```text
//! cargo run --release -p burn-positional-studies --example properties -- all            # everything below, into out/properties
//! cargo run --release -p burn-positional-studies --example properties -- report         # the properties table (Markdown + JSON)
//! cargo run --release -p burn-positional-studies --example properties -- collisions     # closest (token, position) pairs
//! cargo run --release -p burn-positional-studies --example properties -- add-vs-concat  # train both ways, loss and accuracy per step
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use burn::prelude::*;
use burn_positional::absolute::sinusoid_rows;
use burn_positional::{AbsolutePositionConfig, Combine};
use burn_positional_analysis as analysis;
use burn_positional_examples::device::{DeviceChoice, open, open_or_cpu};
use burn_positional_examples::encoder::EncoderConfig;
use burn_positional_examples::schemes::Scheme;
use burn_positional_studies::copy_back::CopyBackConfig;
use burn_positional_studies::learner::{self, Event, Listener, Strategy};
use burn_positional_studies::properties::pictures::{
    History, collision_row, draw_add_vs_concat, draw_collisions, draw_report_pictures,
};
use burn_positional_studies::properties::{
    self, PropertiesConfig, PropertyRow, SchemeProbe, number,
};
use burn_positional_studies::tagger::{TokenTagger, TokenTaggerConfig};
use burn_positional_studies::training::{TrainingConfig, TrainingError};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

#[derive(Parser)]
#[command(
    about = "Measure what each position scheme does; write tables (Markdown, JSON) and pictures"
)]
struct Args {
    /// Device: auto (wgpu on a GPU, else flex), wgpu, ndarray or flex; also read from
    /// BURN_DEVICE. Falls back to flex with a notice when wgpu has no adapter.
    #[arg(long, env = "BURN_DEVICE", default_value = "auto", global = true)]
    device: DeviceChoice,
    /// Folder for tables and pictures.
    #[arg(long, default_value = "out/properties", global = true)]
    out: PathBuf,
    /// Training steps for the trained rows of the report and for add-vs-concat (0 skips
    /// training in the report).
    #[arg(long, default_value_t = 600, global = true)]
    steps: usize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Clone, Copy, PartialEq)]
enum Command {
    /// Seed 002's properties for every scheme, fresh and trained.
    Report,
    /// Seed 000: the closest two (token, position) combinations, and its 2-D collision.
    Collisions,
    /// Seed 001: add versus concatenate at equal d_model, trained on the same task.
    AddVsConcat,
    /// All of the above.
    All,
}

fn bar(len: usize, prefix: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64).with_style(
        ProgressStyle::with_template("{prefix:<32} [{bar:30}] {pos:>4}/{len} {elapsed:>4} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix.to_string());
    bar
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

fn write_json(path: &Path, value: &impl Serialize) {
    write(
        path,
        &serde_json::to_string_pretty(value).expect("serializable"),
    );
}

/// The copy-back training config of the training example, for `scheme` combined as `combine`.
fn training_config(scheme: Scheme, combine: Combine, steps: usize) -> TrainingConfig {
    let task = CopyBackConfig::new();
    let encoder = EncoderConfig::new(task.vocab_size, AbsolutePositionConfig::None)
        .with_position(scheme, task.seq)
        .with_combine(combine);
    TrainingConfig::new(TokenTaggerConfig::new(encoder), task).with_steps(steps)
}

/// Trains through burn-train (`learner::fit`, one device) from a fresh start in
/// `<out>/runs/<name>`, recording every step.
fn train(
    name: &str,
    config: &TrainingConfig,
    device: &Device,
    out: &Path,
) -> Result<(TokenTagger, History), TrainingError> {
    let progress = bar(config.steps, name);
    let start = Instant::now();
    let steps = Arc::new(Mutex::new(Vec::new()));
    let listener = {
        let (progress, steps) = (progress.clone(), steps.clone());
        Listener::Events(Box::new(move |event| {
            let mut steps = steps.lock().expect("not poisoned");
            match *event {
                Event::Step { step, train } => {
                    progress.set_position(step as u64);
                    steps.push((step, train, None));
                }
                Event::Validated { step, valid, .. } => {
                    progress.set_message(format!(
                        "valid loss {:.3} acc {:>5.1} %",
                        valid.loss,
                        100.0 * valid.accuracy
                    ));
                    if let Some(last) = steps.last_mut().filter(|(s, _, _)| *s == step) {
                        last.2 = Some(valid);
                    }
                }
            }
        }))
    };
    let dir = out
        .join("runs")
        .join(name.replace([' ', ',', '(', ')'], "_"));
    let _ = std::fs::remove_dir_all(&dir);
    let model = learner::fit(config, device, Strategy::Single, &dir, listener)?;
    progress.finish();
    let steps = std::mem::take(&mut *steps.lock().expect("not poisoned"));
    let history = History {
        name: name.to_string(),
        seconds: start.elapsed().as_secs_f64(),
        steps,
    };
    Ok((model, history))
}

// ---------------------------------------------------------------------------------------------
// report

#[derive(Serialize)]
struct Report<'a> {
    config: &'a PropertiesConfig,
    device: String,
    training_steps: usize,
    rows: Vec<PropertyRow>,
}

fn report(args: &Args, device: &Device, main_name: &str) -> Result<(), TrainingError> {
    let config = PropertiesConfig::new();
    let (n, reach) = (config.length, config.length * config.reach);
    println!(
        "\n== Seed 002's properties: d_model {}, {} heads, N = {n} positions, probed to {reach} ==",
        config.d_model, config.n_heads
    );
    let others: Vec<(String, Result<Device, String>)> = [
        DeviceChoice::Flex,
        DeviceChoice::Ndarray,
        DeviceChoice::Wgpu,
    ]
    .into_iter()
    .filter(|choice| choice.to_string() != main_name)
    .map(|choice| (choice.to_string(), open(choice).map(|opened| opened.device)))
    .collect();
    let mut probes: Vec<SchemeProbe> = Scheme::ALL
        .iter()
        .map(|&scheme| SchemeProbe::init(scheme, &config, device))
        .collect();
    if args.steps > 0 {
        println!(
            "training the schemes with parameters on copy-back ({} steps each) for the trained rows",
            args.steps
        );
        for scheme in [Scheme::Learned, Scheme::LearnedFromSinusoidal, Scheme::T5] {
            let label = format!("{scheme} (trained)");
            let (model, _) = train(
                &label,
                &training_config(scheme, Combine::Add, args.steps),
                device,
                &args.out,
            )?;
            probes.push(SchemeProbe::from_encoder(
                scheme,
                label,
                &model.encoder,
                &config,
            ));
        }
    }
    let progress = bar(probes.len(), "measuring");
    let mut rows = Vec::new();
    for probe in &probes {
        progress.set_message(probe.label.clone());
        rows.push(properties::measure(probe, &others).expect("every scheme has N positions"));
        progress.inc(1);
    }
    progress.finish();
    let mut text = format!(
        "Measured on {main_name} with `cargo run --release -p burn-positional-studies --example properties -- report`: d_model {}, {} heads, N = {n}, probed to {reach}, seed {}, trained rows after {} steps of copy-back.\n\n",
        config.d_model, config.n_heads, config.seed, args.steps
    );
    text.push_str(&properties::markdown(&rows, &config));
    text.push_str(&legend(&config));
    println!("\n{text}");
    std::fs::create_dir_all(&args.out).expect("output folder");
    write(&args.out.join("properties.md"), &text);
    write_json(
        &args.out.join("properties.json"),
        &Report {
            config: &config,
            device: main_name.to_string(),
            training_steps: args.steps,
            rows,
        },
    );
    draw_report_pictures(&probes, &config, &args.out);
    println!(
        "wrote {0}/properties.md, {0}/properties.json, {0}/encodings.png, {0}/similarity.png",
        args.out.display()
    );
    Ok(())
}

fn legend(config: &PropertiesConfig) -> String {
    let (n, reach, far) = (config.length, config.length * config.reach, config.far());
    format!(
        "
What each column measures (signatures: `PE(p)` is the position vector added to the embedding; `R(p)u` is RoPE's rotation of a fixed unit probe vector per head, heads side by side; `bias(r)` is the score bias at distance `r`, one value per head):

- **unique**: the smallest Euclidean distance between the signatures of two different positions in `0..{n}`, and which two. 0 means two positions look the same.
- **bounded**: the largest signature norm over `0..{n}`, then over `0..{reach}`. A growing number is a scheme that is not bounded.
- **deterministic**: the largest absolute difference between two fresh inits with the same seed on one device, then between this device and the others given the same parameters. 0 is bit-for-bit equality.
- **generalizable**: over `0..{reach}`, how many signatures are distinct, and the closest two past `{n}`; or the scheme's error where it has no vector past its table.
- **smooth**: the mean distance between neighbouring positions against the mean distance between positions at least {far} apart. Smooth schemes have the first well below the second.
- **relative (shift map)**: the least-squares residual `‖XW − Y‖/‖Y‖` of the best single linear map `W` taking `sig(p)` to `sig(p+1)` over `0..{n}`. 0 means a shift is one fixed linear map (for sinusoidal and RoPE, a rotation). n/a for score biases (their signatures are per distance already) and for none.
- **relative (score dependence)**: how much the scores between positions `p` and `q` in `0..{n}` vary along each diagonal `q − p = k`, relative to their overall spread. 0 means the scores depend on `q − p` alone. Absolute schemes score `PE(p)·PE(q)`; RoPE `R(p)u·R(q)w`; ALiBi and T5 their bias, averaged over heads.
"
    )
}

// ---------------------------------------------------------------------------------------------
// collisions

fn collisions(args: &Args, device: &Device, main_name: &str) {
    const VOCAB: usize = 256;
    let base = PropertiesConfig::new();
    let n = base.length;
    println!("\n== Seed 000: can a token at one position land on another token at another? ==");
    let mut text = String::new();
    // 1. The seed's construction.
    let tokens = vec![vec![0.5f32, 0.0], vec![1.0, 0.0]];
    let made_up = vec![vec![0.0f32, 1.0], vec![1.0, 0.0], vec![0.5, 0.0]];
    let seed = analysis::closest_combination(&tokens, &made_up);
    let sinusoid: Vec<Vec<f32>> = sinusoid_rows(0..3, 2, 10_000.0)
        .chunks(2)
        .map(<[f32]>::to_vec)
        .collect();
    let real = analysis::closest_combination(&tokens, &sinusoid);
    let gap = |t: usize, p: usize, u: usize, q: usize, pe: &[Vec<f32>]| -> f64 {
        (0..2)
            .map(|c| ((tokens[t][c] + pe[p][c]) as f64 - (tokens[u][c] + pe[q][c]) as f64).powi(2))
            .sum::<f64>()
            .sqrt()
    };
    let needed: Vec<f32> = (0..2)
        .map(|c| tokens[0][c] + sinusoid[1][c] - sinusoid[2][c])
        .collect();
    writeln!(
        text,
        "Measured with `cargo run --release -p burn-positional-studies --example properties -- collisions` on {main_name}.\n\n\
         ### The seed's constructed collision (d_model = 2)\n\n\
         Tokens A = [0.5, 0], B = [1, 0] with the seed's made-up position vectors PE(1) = [1, 0], PE(2) = [0.5, 0]: \
         the search finds (token {}, position {}) and (token {}, position {}) at distance {}: A + PE(1) = B + PE(2) = [1.5, 0].\n\n\
         With the paper's sinusoidal PE at d_model = 2 (PE(1) = [{:.4}, {:.4}], PE(2) = [{:.4}, {:.4}]) the same two tokens give \
         |A + PE(1) − (B + PE(2))| = {}, and the closest pair of all six combinations is {} apart. \
         For B + PE(2) to land on A + PE(1), B would have to be exactly A + PE(1) − PE(2) = [{:.4}, {:.4}]: \
         a collision needs the difference of two token vectors to equal the difference of two position vectors exactly, \
         one point in a continuous space.\n",
        seed.first.0, seed.first.1, seed.second.0, seed.second.1, number(seed.distance),
        sinusoid[1][0], sinusoid[1][1], sinusoid[2][0], sinusoid[2][1],
        number(gap(0, 1, 1, 2, &sinusoid)), number(real.distance), needed[0], needed[1],
    )
    .unwrap();
    // 2. Realistic sizes: every scheme at d_model 64, then a sweep of widths.
    let widths = [2usize, 4, 8, 16, 32, 64, 128];
    let schemes = [Scheme::Sinusoidal, Scheme::Learned, Scheme::None];
    let progress = bar(widths.len() * 2 + schemes.len(), "closest pairs");
    let mut rows = Vec::new();
    for scheme in schemes {
        progress.set_message(format!("{scheme} at d_model {}", base.d_model));
        rows.push(collision_row(scheme, VOCAB, &base, device));
        progress.inc(1);
    }
    let mut sweep = Vec::new();
    for d in widths {
        for scheme in [Scheme::Sinusoidal, Scheme::Learned] {
            progress.set_message(format!("{scheme} at d_model {d}"));
            let config = PropertiesConfig::new().with_d_model(d).with_n_heads(1);
            sweep.push(collision_row(scheme, VOCAB, &config, device));
            progress.inc(1);
        }
    }
    progress.finish();
    writeln!(
        text,
        "\n### Realistic sizes: {VOCAB} tokens × {n} positions, every pair searched\n\n\
         Token table: a fresh `EmbeddingWithPosition` (burn's N(0, 1) init, seed {}); positions 0..{n}. \
         \"closest\" is the closest two distinct (token, position) combinations; \"mean\" the mean distance over all pairs.\n\n\
         | scheme | d_model | closest pair | (token, position) | closest pair of different tokens | (token, position) | mean distance | different / mean | closest two tokens | closest two positions |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        base.seed
    )
    .unwrap();
    for row in rows.iter().chain(&sweep) {
        writeln!(
            text,
            "| {} | {} | {} | ({}, {}) and ({}, {}) | {} | ({}, {}) and ({}, {}) | {} | {} | {} | {} |",
            row.scheme,
            row.d_model,
            number(row.distance),
            row.first.0,
            row.first.1,
            row.second.0,
            row.second.1,
            number(row.different_tokens),
            row.different_first.0,
            row.different_first.1,
            row.different_second.0,
            row.different_second.1,
            number(row.mean_distance),
            number(row.different_tokens / row.mean_distance),
            number(row.closest_tokens),
            number(row.closest_positions),
        )
        .unwrap();
    }
    let at = |scheme: &str, d: usize| {
        sweep
            .iter()
            .find(|r| r.scheme == scheme && r.d_model == d)
            .expect("swept width")
    };
    let (two, wide) = (at("sinusoidal", 2), at("sinusoidal", base.d_model));
    let (none, learned) = (&rows[2], &rows[1]);
    writeln!(
        text,
        "\nWhat the numbers say:\n\n\
         - Without positions the same token at two positions is one vector (distance {}): an order-blind model cannot tell \
           the two apart at all. That, not a collision between different tokens, is the failure positions fix.\n\
         - In two dimensions, as in the seed, near-collisions do happen: with {} combinations packed into a plane, two \
           different tokens at different positions come within {} of each other (the mean distance is {}).\n\
         - At d_model = {}, the closest two different tokens at any positions are {} apart, {} times the mean distance. A collision needs a difference of two token vectors to equal a difference of two position \
           vectors exactly: probability zero for continuous vectors, and in many dimensions random vectors are all \
           roughly equally far apart, so nothing comes close.\n\
         - The closest pair overall is the same token at two positions: {} apart for sinusoidal positions (neighbouring \
           ones), {} for a fresh learned table, whose initial vectors are small (see the bounded \
           column of the properties table) until training spreads them.\n",
        number(none.distance),
        two.vocab * two.positions,
        number(two.different_tokens),
        number(two.mean_distance),
        wide.d_model,
        number(wide.different_tokens),
        number(wide.different_tokens / wide.mean_distance),
        number(wide.distance),
        number(learned.distance),
    )
    .unwrap();
    println!("{text}");
    std::fs::create_dir_all(&args.out).expect("output folder");
    write(&args.out.join("collisions.md"), &text);
    write_json(
        &args.out.join("collisions.json"),
        &serde_json::json!({ "d_model_64": rows, "sweep": sweep }),
    );
    draw_collisions(&tokens, &made_up, &sweep, device, &args.out);
    println!(
        "wrote {0}/collisions.md, {0}/collisions.json, {0}/collisions.png",
        args.out.display()
    );
}

// ---------------------------------------------------------------------------------------------
// add versus concatenate

fn add_vs_concat(args: &Args, device: &Device, main_name: &str) -> Result<(), TrainingError> {
    let d_model = EncoderConfig::new(1, AbsolutePositionConfig::None).d_model;
    let combines = [
        ("add", Combine::Add),
        (
            "concat 48+16",
            Combine::Concat {
                d_token: 48,
                d_position: 16,
            },
        ),
        (
            "concat 32+32",
            Combine::Concat {
                d_token: 32,
                d_position: 32,
            },
        ),
        (
            "concat 16+48",
            Combine::Concat {
                d_token: 16,
                d_position: 48,
            },
        ),
    ];
    println!(
        "\n== Seed 001: add or concatenate, at d_model {d_model}, on copy-back, {} steps each ==",
        args.steps
    );
    let mut histories = Vec::new();
    for scheme in [Scheme::Sinusoidal, Scheme::Learned] {
        for (name, combine) in &combines {
            let config = training_config(scheme, combine.clone(), args.steps);
            let (_, history) = train(&format!("{scheme}, {name}"), &config, device, &args.out)?;
            histories.push(history);
        }
    }
    let task = CopyBackConfig::new();
    let mut text = format!(
        "Measured on {main_name} with `cargo run --release -p burn-positional-studies --example properties -- add-vs-concat`: copy the token {} places back, \
         vocab {}, length {}, d_model {d_model} in every run (`concat a+b`: a token dims, b position dims), Adam at 3e-3, \
         batch 32, same seed. Each cell: validation loss / accuracy (256 held-out sequences).\n\n",
        task.k, task.vocab_size, task.seq
    );
    text.push_str("| step |");
    for h in &histories {
        write!(text, " {} |", h.name).unwrap();
    }
    text.push_str("\n| --- |");
    text.push_str(&" --- |".repeat(histories.len()));
    text.push('\n');
    let valid_steps: Vec<usize> = histories[0]
        .steps
        .iter()
        .filter(|(_, _, v)| v.is_some())
        .map(|(s, _, _)| *s)
        .collect();
    for step in &valid_steps {
        write!(text, "| {step} |").unwrap();
        for h in &histories {
            let valid = h.steps[step - 1].2.expect("validated at the same steps");
            write!(
                text,
                " {:.3} / {:.1} % |",
                valid.loss,
                100.0 * valid.accuracy
            )
            .unwrap();
        }
        text.push('\n');
    }
    text.push_str("| first step at ≥ 99 % |");
    for h in &histories {
        let first = h
            .steps
            .iter()
            .find(|(_, _, v)| v.is_some_and(|v| v.accuracy >= 0.99))
            .map_or("not reached".to_string(), |(s, _, _)| s.to_string());
        write!(text, " {first} |").unwrap();
    }
    text.push('\n');
    text.push_str("| seconds |");
    for h in &histories {
        write!(text, " {:.1} |", h.seconds).unwrap();
    }
    text.push('\n');
    text.push_str(
        "\nOne seed per configuration (the spread across seeds is not measured here), so read \
         differences of a few hundred steps as indications, not rankings.\n",
    );
    println!("\n{text}");
    std::fs::create_dir_all(&args.out).expect("output folder");
    write(&args.out.join("add_vs_concat.md"), &text);
    write_json(&args.out.join("add_vs_concat.json"), &histories);
    draw_add_vs_concat(&histories, &args.out);
    println!(
        "wrote {0}/add_vs_concat.md, {0}/add_vs_concat.json, {0}/add_vs_concat.png",
        args.out.display()
    );
    Ok(())
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
    let opened = open_or_cpu(args.device);
    let device = &opened.device;
    let main_name = opened
        .description
        .split([',', ' '])
        .next()
        .unwrap_or("device")
        .to_string();
    println!("device: {}", opened.description);
    let all = args.command == Command::All;
    if all || args.command == Command::Report {
        report(&args, device, &main_name)?;
    }
    if all || args.command == Command::Collisions {
        collisions(&args, device, &main_name);
    }
    if all || args.command == Command::AddVsConcat {
        add_vs_concat(&args, device, &main_name)?;
    }
    Ok(())
}
