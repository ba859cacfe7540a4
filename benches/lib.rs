//! What the benches share: the devices they run on, and the timed loop that syncs them.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::Instant;

use burn::tensor::Device;
use burn_positional_examples::device::{DeviceChoice, open};
use criterion::Bencher;

/// The devices a bench runs on: the comma-separated names in `BENCH_DEVICES`, or `default`
/// (for example `"flex,wgpu"`), opened once per process (wgpu can be initialized only once)
/// and printed to stderr. A device that cannot be opened fails the bench loudly: a bench that
/// quietly drops a backend would report numbers for less than it claims.
///
/// # Panics
///
/// On an unknown name, or a device that cannot be opened.
pub fn bench_devices(default: &str) -> Vec<(DeviceChoice, Device)> {
    static DEVICES: OnceLock<Vec<(DeviceChoice, Device)>> = OnceLock::new();
    DEVICES
        .get_or_init(|| {
            let names = std::env::var("BENCH_DEVICES").unwrap_or_else(|_| default.into());
            names
                .split(',')
                .map(|name| {
                    let choice: DeviceChoice = name
                        .trim()
                        .parse()
                        .unwrap_or_else(|e: String| panic!("{e}"));
                    let opened = open(choice).unwrap_or_else(|reason| panic!("{reason}"));
                    eprintln!("bench device: {}", opened.description);
                    (choice, opened.device)
                })
                .collect()
        })
        .clone()
}

/// Calls of the timed routine per device sync in [`iter_synced`]: `BENCH_LAUNCHES_PER_SYNC`,
/// default 1 (a sync after every call).
///
/// With one sync per call, a GPU figure includes the host's round trip to the device on every
/// call: on the H200 the copy floor of `[32, 1024, 768]` took 185 µs that way where PyTorch,
/// timing 20 launches per sync with CUDA events, took 56 µs for the same bytes (docs/gpu.md). The
/// GPU kit sets 20, as its PyTorch twin does (`tools/gpu/torch_twin.py`). On flex and ndarray
/// the work is done before the call returns and the figure does not depend on it.
///
/// # Panics
///
/// If the variable is set and is not a positive integer.
pub fn launches_per_sync() -> usize {
    match std::env::var("BENCH_LAUNCHES_PER_SYNC") {
        Err(_) => 1,
        Ok(value) => value
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| {
                panic!(
                    "BENCH_LAUNCHES_PER_SYNC={value:?} is not a positive integer. Fix: set it to \
                     the number of calls timed between two device syncs (1, the default, syncs \
                     after every call)"
                )
            }),
    }
}

/// Times `routine` as criterion's `iter` does, with `device` synced inside the timed region
/// after every [`launches_per_sync`] calls and once at the end: each sample's time covers all
/// the device work its calls queued. Outputs are held until the sync that follows them, then
/// dropped (inside the timing, as `iter` drops them): burn's fusion does not write a fused
/// output that is dropped before its kernel runs, so a dropped output could go unmeasured.
///
/// # Panics
///
/// If the device fails to sync.
pub fn iter_synced<O>(b: &mut Bencher<'_>, device: &Device, mut routine: impl FnMut() -> O) {
    let every = launches_per_sync();
    b.iter_custom(|iters| {
        device.sync().expect("the device syncs");
        let mut held = Vec::with_capacity(every);
        let start = Instant::now();
        for _ in 0..iters {
            held.push(black_box(routine()));
            if held.len() == every {
                device.sync().expect("the device syncs");
                held.clear();
            }
        }
        device.sync().expect("the device syncs");
        drop(held);
        start.elapsed()
    });
}
