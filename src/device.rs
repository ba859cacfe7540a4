//! Choosing a device by name, for examples and tools: `wgpu`, `ndarray` or `flex`.

use std::fmt;
use std::str::FromStr;

use burn::tensor::{Device, DeviceKind};

/// A backend chosen by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    /// The GPU through wgpu (or Mesa's lavapipe on a machine without one).
    Wgpu,
    /// The ndarray CPU backend.
    Ndarray,
    /// The flex CPU backend.
    Flex,
}

impl FromStr for DeviceChoice {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name.to_ascii_lowercase().as_str() {
            "wgpu" => Ok(Self::Wgpu),
            "ndarray" => Ok(Self::Ndarray),
            "flex" => Ok(Self::Flex),
            other => Err(format!(
                "unknown device {other:?}: choose wgpu, ndarray or flex"
            )),
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Wgpu => "wgpu",
            Self::Ndarray => "ndarray",
            Self::Flex => "flex",
        })
    }
}

/// An opened device and a line saying what it is.
#[derive(Debug, Clone)]
pub struct OpenedDevice {
    /// The device.
    pub device: Device,
    /// Which backend and, for wgpu, which adapter.
    pub description: String,
}

/// Opens the chosen device. For wgpu, fails with the reason when no adapter exists.
pub fn open(choice: DeviceChoice) -> Result<OpenedDevice, String> {
    let (device, description) = match choice {
        DeviceChoice::Wgpu => {
            // The runtime starts on first use, whoever uses it first (burn itself reaches for
            // `Device::default()` in places, for example when loading an optimizer record),
            // so open the default wgpu device rather than `wgpu_options().init()`, which
            // refuses a runtime that is already running. Asking for its identity opens the
            // adapter; without one, that panics, and the panic becomes our error.
            let identity =
                std::panic::catch_unwind(|| Device::wgpu(DeviceKind::DefaultDevice).identity())
                    .map_err(|panic| {
                        let reason = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_else(|| "no reason given".into());
                        format!("wgpu found no adapter ({reason})")
                    })?;
            let adapter = identity
                .map(|id| id.name)
                .unwrap_or_else(|| "unnamed adapter".into());
            (
                Device::wgpu(DeviceKind::DefaultDevice),
                format!("wgpu, adapter: {adapter}"),
            )
        }
        // burn 0.22 deprecates ndarray in favour of flex; our users asked for both.
        #[allow(deprecated)]
        DeviceChoice::Ndarray => (Device::ndarray(), "ndarray (CPU)".to_string()),
        DeviceChoice::Flex => (Device::flex(), "flex (CPU)".to_string()),
    };
    Ok(OpenedDevice {
        device,
        description,
    })
}

/// Opens the chosen device; if wgpu has no adapter, says so on stderr and opens flex instead.
pub fn open_or_cpu(choice: DeviceChoice) -> OpenedDevice {
    open(choice).unwrap_or_else(|reason| {
        eprintln!("notice: {reason}; falling back to the CPU (flex)");
        open(DeviceChoice::Flex).expect("flex needs no adapter")
    })
}
