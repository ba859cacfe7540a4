//! Training killed for real: a child process trains the copy-back tagger through `learner::fit`
//! and is killed with SIGKILL at random moments, again and again, each time restarted on the
//! same folder, until a run gets to the end. Every restart must either resume from a complete
//! checkpoint or refuse with a clear message (none may crash on a half-written file), and the
//! final parameters must equal an uninterrupted run's.
//!
//! To make kills land where a crash does harm, the children run with
//! `BURN_POSITIONAL_CHECKPOINT_DELAY_MS`, a fault-injection knob: the parts of each checkpoint
//! (model, optimizer, scheduler) are saved that far apart, and `run.json` pauses inside its
//! write. burn-train saves the three parts on threads of their own, in any order, so the
//! children take the six orders in turn (`BURN_POSITIONAL_CHECKPOINT_ORDER`). Each kill is
//! classified by what it left on disk (for a kill between parts: which parts of the newest
//! epoch were on disk), and the tally is printed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;
use burn_positional_studies::checkpoint::{PARTS, write_atomic};
use burn_positional_studies::learner::{Listener, Strategy, fit};
use burn_positional_studies::training::TrainingConfig;

const CHILD_DIR: &str = "BURN_POSITIONAL_CRASH_CHILD_DIR";
const DELAY: &str = "BURN_POSITIONAL_CHECKPOINT_DELAY_MS";
const ORDER: &str = "BURN_POSITIONAL_CHECKPOINT_ORDER";
/// Every order of the three parts.
const ORDERS: [&str; 6] = [
    "model,optim,scheduler",
    "model,scheduler,optim",
    "optim,model,scheduler",
    "optim,scheduler,model",
    "scheduler,model,optim",
    "scheduler,optim,model",
];
/// Kills to land in all, and at most this many in one run; bounded in time too, for CI.
const MIN_KILLS: usize = 30;
const MAX_KILLS_PER_RUN: usize = 40;
const BUDGET: Duration = Duration::from_secs(240);

#[path = "support/tiny.rs"]
mod tiny;

fn config() -> TrainingConfig {
    tiny::tiny_config().with_steps(48).with_valid_every(2)
}

struct Flatten(Vec<f32>);

impl ModuleVisitor for Flatten {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.extend(param.val().into_data().iter::<f32>());
    }
}

fn parameters(model: &impl Module) -> Vec<f32> {
    let mut flat = Flatten(Vec::new());
    model.visit(&mut flat);
    flat.0
}

/// The child's body: train in the folder the parent names, then write every parameter as
/// little-endian f32 to `final.bin`. Run only as a child (it is ignored otherwise).
#[test]
#[ignore = "the child process of kills_during_training_never_lose_the_run"]
fn crash_child() {
    let dir = std::env::var(CHILD_DIR).expect("run by the crash test, which names the folder");
    let dir = Path::new(&dir);
    let model = fit(
        &config(),
        &Device::flex(),
        Strategy::Single,
        dir,
        Listener::silent(),
    )
    .unwrap_or_else(|err| panic!("refused: {err}"));
    let bytes: Vec<u8> = parameters(&model)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    write_atomic(&dir.join("final.bin"), &bytes).unwrap();
}

/// A child training in `dir`, saving the parts of each checkpoint `delay_ms` apart in `order`.
fn child(dir: &Path, delay_ms: u64, order: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--ignored", "--test-threads=1"])
        .env(CHILD_DIR, dir)
        .env(DELAY, delay_ms.to_string())
        .env(ORDER, order)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What a kill left on disk; for a kill between the parts of a checkpoint, which parts of the
/// newest epoch were on disk.
fn classify(dir: &Path) -> String {
    let list = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    if list(dir).iter().any(|n| n.ends_with(".tmp")) {
        return "inside the write of run.json (its scratch file left behind)".into();
    }
    let names = list(&dir.join("checkpoint"));
    if names.iter().any(|n| n.ends_with(".tmp")) {
        return "inside the write of a part (a scratch file left behind)".into();
    }
    let epochs: Vec<usize> = names
        .iter()
        .filter_map(|n| n.split_once('-')?.1.strip_suffix(".bpk")?.parse().ok())
        .collect();
    let Some(&last) = epochs.iter().max() else {
        return "before the first checkpoint".into();
    };
    let saved: Vec<&str> = PARTS
        .iter()
        .copied()
        .filter(|part| names.contains(&format!("{part}-{last}.bpk")))
        .collect();
    if saved.len() == PARTS.len() {
        "between checkpoints".into()
    } else {
        format!("{BETWEEN_PARTS} ({} on disk)", saved.join(" and "))
    }
}

const BETWEEN_PARTS: &str = "between the parts of one checkpoint";

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn kills_during_training_never_lose_the_run() {
    let root = tempfile::tempdir().unwrap();
    let delay_ms = 50;

    // The uninterrupted run, in a child too (same code path), timed to spread the kills.
    let straight = root.path().join("straight");
    let start = Instant::now();
    let output = child(&straight, delay_ms, ORDERS[0])
        .wait_with_output()
        .unwrap();
    let duration = start.elapsed();
    assert!(
        output.status.success(),
        "the uninterrupted run failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected = std::fs::read(straight.join("final.bin")).unwrap();

    let floats = |bytes: &[u8]| -> Vec<f32> {
        bytes
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let expected = floats(&expected);

    // Campaigns: a fresh folder, killed until a restart gets to the end, then compared with
    // the uninterrupted run; until enough kills have landed (or the time budget is spent).
    let mut rng = 0x5EED_C0DE_u64;
    let mut hits: BTreeMap<String, usize> = BTreeMap::new();
    let mut orders: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut kills, mut campaigns, mut launches) = (0, 0, 0);
    let began = Instant::now();
    let half = (duration.as_millis() / 2).max(1) as u64;
    while kills < MIN_KILLS && began.elapsed() < BUDGET {
        campaigns += 1;
        let dir = root.path().join(format!("killed-{campaigns}"));
        let mut kills_here = 0;
        loop {
            let order = ORDERS[launches % ORDERS.len()];
            launches += 1;
            let mut process = child(&dir, delay_ms, order);
            // Anywhere in the first half of a whole run's time: each restart resumes further
            // on, so the kills walk through the run's epochs until a restart gets to the end.
            std::thread::sleep(Duration::from_millis(splitmix(&mut rng) % half));
            if kills_here >= MAX_KILLS_PER_RUN || process.try_wait().unwrap().is_some() {
                let output = process.wait_with_output().unwrap();
                assert!(
                    output.status.success(),
                    "a restart after {kills_here} kills did not resume: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
                break;
            }
            process.kill().unwrap(); // SIGKILL
            process.wait().unwrap();
            kills_here += 1;
            *hits.entry(classify(&dir)).or_default() += 1;
            *orders.entry(order).or_default() += 1;
        }
        kills += kills_here;
        let resumed = floats(&std::fs::read(dir.join("final.bin")).unwrap());
        assert_eq!(resumed.len(), expected.len());
        let difference = resumed
            .iter()
            .zip(&expected)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(
            difference < 1e-5,
            "after {kills_here} kills the parameters differ from an uninterrupted run's by \
             {difference}"
        );
    }
    println!(
        "{kills} kills in {campaigns} runs, {:.0} s, every run ended equal to the uninterrupted \
         one. Kills by save order: {orders:?}. What they hit:",
        began.elapsed().as_secs_f64()
    );
    for (hit, count) in &hits {
        println!("  {count:>3}  {hit}");
    }
    assert!(
        kills >= MIN_KILLS,
        "only {kills} kills in the time budget: {hits:?}"
    );
    assert_eq!(
        orders.len(),
        ORDERS.len(),
        "some save order was never killed: {orders:?}"
    );
    // burn-train's own order is any order: a kill must have found the model part missing with
    // another part saved, which the model-first order never leaves.
    assert!(
        hits.keys()
            .any(|hit| hit.starts_with(BETWEEN_PARTS) && !hit.contains("model")),
        "no kill landed between the parts of a checkpoint saved before its model: {hits:?}"
    );
}
