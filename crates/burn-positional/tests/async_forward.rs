//! `forward` never reads from the device: proven on wgpu by what a read would do there, which
//! is to wait for every operation queued before it.
//!
//! The test queues a few seconds of GPU work (lavapipe in CI), calls the entry point, then
//! syncs. An entry point that reads back has to wait for that work inside the call, so the
//! final sync finds nothing left; one that does not returns at once and the sync does the
//! waiting. The test compares the two waits of the same run, so it depends on no machine's
//! speed, and it runs the control too: `try_forward`, which does read, must show the
//! opposite. If someone adds a read-back to `forward` (or to the training step's embedding),
//! this fails.
//!
//! The CPU backends have no queue: their ops run when called, so there is nothing to stall.
//!
//! A test binary of its own: other tests sharing the device would add their own waits (their
//! reads, their syncs) to these timings.

use std::time::{Duration, Instant};

use burn::prelude::*;
use burn::tensor::Distribution;
use burn_positional::{EmbeddingWithPositionConfig, LearnedConfig};

/// Queues `n` dependent 512 x 512 matrix products (and keeps the result alive).
fn queue_work(device: &Device, n: usize) -> Tensor<2> {
    let w = Tensor::<2>::random([512, 512], Distribution::Uniform(-0.05, 0.05), device);
    let mut x = Tensor::<2>::random([512, 512], Distribution::Uniform(-1.0, 1.0), device);
    for _ in 0..n {
        x = x.matmul(w.clone()).tanh();
    }
    x
}

/// (time inside `call`, time of the sync after it), with `n` products queued before the call.
fn waits(device: &Device, n: usize, call: &dyn Fn()) -> (Duration, Duration) {
    device.sync().unwrap();
    let work = queue_work(device, n);
    let start = Instant::now();
    call();
    let in_call = start.elapsed();
    let start = Instant::now();
    device.sync().unwrap();
    let in_sync = start.elapsed();
    drop(work);
    (in_call, in_sync)
}

#[test]
fn forward_does_not_wait_for_the_queue_on_wgpu() {
    // Never skipped: without an adapter this fails and says what to install.
    let device = devices::wgpu();
    let ids = Tensor::<2, Int>::from_data(
        [[1, 2, 3, 4, 5, 6, 7, 8], [9, 8, 7, 6, 5, 4, 3, 2]],
        &device,
    );
    for config in [
        EmbeddingWithPositionConfig::new(100, 64),
        EmbeddingWithPositionConfig::new(100, 64).with_scheme(LearnedConfig::new(16).into()),
    ] {
        for device in [device.clone(), device.clone().autodiff()] {
            let embed = config.init(&device);
            let ids = ids.clone().to_device(&device);
            // Warm up: compile every kernel involved, so no compile time lands in a call.
            embed.forward(ids.clone());
            embed.try_forward(ids.clone()).unwrap();
            embed.check_inputs().unwrap();
            queue_work(&device, 2);
            device.sync().unwrap();

            // Enough work that the queue takes far longer than an unblocked call: doubled
            // until the control (a call that reads) spends most of its time waiting.
            let mut n = 8;
            let (read_call, read_sync) = loop {
                let (call, sync) = waits(&device, n, &|| {
                    drop(embed.try_forward(ids.clone()).unwrap());
                });
                if call > Duration::from_millis(200) || n >= 512 {
                    break (call, sync);
                }
                n *= 2;
            };
            assert!(
                read_call > read_sync,
                "control: try_forward reads, so it should wait for the queue inside the call \
                 ({read_call:?} in the call, {read_sync:?} in the sync after it, {n} products)"
            );
            let (call, sync) = waits(&device, n, &|| {
                drop(embed.forward(ids.clone()));
            });
            assert!(
                call < sync,
                "forward waited for the queue: {call:?} in the call, {sync:?} in the sync after \
                 it ({n} products queued); a device-to-host read is on the default path"
            );
            eprintln!(
                "{n} products queued; try_forward: {read_call:?} in the call, {read_sync:?} in \
                 the sync; forward: {call:?} in the call, {sync:?} in the sync"
            );
            embed.check_inputs().unwrap();
        }
    }
}

#[path = "behaviour/devices.rs"]
#[allow(dead_code)]
mod devices;
