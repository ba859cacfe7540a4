//! Threads and load: several threads share one `EmbeddingWithPosition` and one `SelfAttention`
//! and run thousands of forwards with good inputs and bad ones mixed (ids past the
//! vocabulary, negative ids, sequences past the learned table, empty batches). Every good call
//! must return exactly what a single-threaded run returns, every bad one its error, and
//! nothing may crash. A soak of the same shape checks that resident memory stays flat.
//!
//! On flex and on wgpu (lavapipe where there is no GPU; the wgpu test fails, never skips,
//! without an adapter). Bounded in calls, so CI stays within its time.

use std::sync::atomic::{AtomicUsize, Ordering};

use burn::prelude::*;
use burn_positional::{
    EmbeddingWithPosition, EmbeddingWithPositionConfig, LearnedConfig, PositionError,
    SelfAttention, SelfAttentionConfig,
};

const VOCAB: usize = 40;
const MAX_LEN: usize = 12;

/// The inputs every thread cycles through: `Ok` ones must give their reference output, `Err`
/// ones the named error.
#[derive(Clone, Copy, Debug)]
enum Input {
    Good(usize),
    IdPastVocabulary,
    NegativeId,
    PastTable,
    EmptyBatch,
}

const INPUTS: [Input; 7] = [
    Input::Good(0),
    Input::IdPastVocabulary,
    Input::Good(1),
    Input::NegativeId,
    Input::Good(2),
    Input::PastTable,
    Input::EmptyBatch,
];

fn ids(input: Input, device: &Device) -> Tensor<2, Int> {
    let data: (Vec<i64>, [usize; 2]) = match input {
        Input::Good(k) => (
            (0..2 * 10)
                .map(|i| ((i * 7 + k * 3) % VOCAB) as i64)
                .collect(),
            [2, 10],
        ),
        Input::IdPastVocabulary => (vec![1, 2, VOCAB as i64 + 5, 3], [1, 4]),
        Input::NegativeId => (vec![1, -1, 2], [1, 3]),
        Input::PastTable => (vec![1; MAX_LEN + 3], [1, MAX_LEN + 3]),
        Input::EmptyBatch => (Vec::new(), [0, 5]),
    };
    Tensor::from_data(TensorData::new(data.0, data.1), device)
}

fn models(device: &Device) -> (EmbeddingWithPosition, SelfAttention) {
    device.seed(5);
    let embed = EmbeddingWithPositionConfig::new(VOCAB, 16)
        .with_scheme(LearnedConfig::new(MAX_LEN).into())
        .init(device);
    let attention = SelfAttentionConfig::new(16, 2)
        .with_causal(true)
        .init(device);
    (embed, attention)
}

/// One call: the attention block's output for a good input, or the embedding's error.
fn call(
    embed: &EmbeddingWithPosition,
    attention: &SelfAttention,
    input: Input,
    device: &Device,
) -> Result<Vec<f32>, PositionError> {
    let x = embed.try_forward_at(ids(input, device), Default::default())?;
    if x.dims()[0] == 0 {
        return Ok(Vec::new());
    }
    Ok(attention.forward(x).into_data().iter::<f32>().collect())
}

fn check(input: Input, result: Result<Vec<f32>, PositionError>, reference: &[Vec<f32>]) {
    match (input, result) {
        (Input::Good(k), Ok(values)) => assert!(
            values == reference[k],
            "good input {k} gave other values under threads"
        ),
        (Input::EmptyBatch, Ok(values)) => assert!(values.is_empty()),
        (Input::IdPastVocabulary, Err(err)) => {
            assert!(err.to_string().contains("out of range"), "{err}")
        }
        (Input::NegativeId, Err(err)) => {
            assert!(err.to_string().contains("out of range"), "{err}")
        }
        (Input::PastTable, Err(err)) => {
            assert!(err.to_string().contains("past the learned"), "{err}")
        }
        (input, result) => panic!("{input:?} gave {:?}", result.map(|v| v.len())),
    }
}

/// Resident memory of this process, in KiB (`VmRSS` of `/proc/self/status`).
fn resident_kib() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .expect("Linux reports VmRSS")
}

fn stress(device: &Device, threads: usize, calls_per_thread: usize) {
    let (embed, attention) = models(device);
    let reference: Vec<Vec<f32>> = (0..3)
        .map(|k| call(&embed, &attention, Input::Good(k), device).unwrap())
        .collect();
    let calls = AtomicUsize::new(0);
    let errors = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (embed, attention, reference) = (&embed, &attention, &reference);
            let (calls, errors) = (&calls, &errors);
            scope.spawn(move || {
                for i in 0..calls_per_thread {
                    let input = INPUTS[(i + t) % INPUTS.len()];
                    let result = call(embed, attention, input, device);
                    if result.is_err() {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    check(input, result, reference);
                    calls.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let calls = calls.into_inner();
    assert_eq!(calls, threads * calls_per_thread);
    println!(
        "{device:?}: {calls} calls on {threads} threads, {} refused with their error, every \
         good one equal to the single-threaded run",
        errors.into_inner()
    );
}

/// Resident memory after rounds of calls on one thread: after the first two (allocator pools
/// and caches warm), later rounds must not grow it by more than a small bound.
fn soak(device: &Device, rounds: usize, calls_per_round: usize) {
    let (embed, attention) = models(device);
    let reference: Vec<Vec<f32>> = (0..3)
        .map(|k| call(&embed, &attention, Input::Good(k), device).unwrap())
        .collect();
    let mut resident = Vec::new();
    for _ in 0..rounds {
        for i in 0..calls_per_round {
            let input = INPUTS[i % INPUTS.len()];
            check(input, call(&embed, &attention, input, device), &reference);
        }
        resident.push(resident_kib());
    }
    // The first two rounds warm the allocator's pools and the shape caches.
    let growth = resident.last().unwrap().saturating_sub(resident[1]);
    let later_calls = (rounds - 2) * calls_per_round;
    println!(
        "{device:?}: resident memory after each round of {calls_per_round} calls (KiB): \
         {resident:?}; growth after the first two rounds: {growth} KiB over {later_calls} calls"
    );
    // A leak of even 100 bytes a call would show as 400 KiB here.
    assert!(
        growth * 1024 / later_calls < 100,
        "resident memory grew by {growth} KiB over {later_calls} calls: {resident:?}"
    );
}

fn wgpu() -> Device {
    devices::wgpu()
}

#[path = "behaviour/devices.rs"]
#[allow(dead_code)]
mod devices;

/// The tests of this file one at a time: the soak reads the whole process's memory, and
/// building models seeds the device's shared random generator.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn threads_share_one_model_on_flex() {
    let _serial = serial();
    stress(&Device::flex(), 4, 1000);
}

#[test]
fn threads_share_one_model_on_wgpu() {
    let _serial = serial();
    stress(&wgpu(), 4, 150);
}

#[test]
fn memory_stays_flat_under_load_on_flex() {
    let _serial = serial();
    soak(&Device::flex(), 6, 1000);
}
