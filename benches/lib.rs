//! What the benches share: the devices they run on.

use std::sync::OnceLock;

use burn::tensor::Device;
use burn_positional_examples::device::{DeviceChoice, open};

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
