//! Choosing a device by name, for examples and tools: `auto`, `wgpu`, `ndarray` or `flex`.

use std::fmt;
use std::str::FromStr;

use burn::tensor::{Device, DeviceKind};

/// A backend chosen by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    /// wgpu when it reaches a GPU; otherwise flex, with a notice saying why. (A machine
    /// without a GPU may still have a wgpu adapter: Mesa's lavapipe, which runs shaders on the
    /// CPU far slower than flex runs the same work.)
    Auto,
    /// The GPU through wgpu (or Mesa's lavapipe on a machine without one).
    Wgpu,
    /// The ndarray CPU backend.
    Ndarray,
    /// The flex CPU backend.
    Flex,
    /// CUDA device 0 (built with the `cuda` feature).
    #[cfg(feature = "cuda")]
    Cuda,
}

impl FromStr for DeviceChoice {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "wgpu" => Ok(Self::Wgpu),
            "ndarray" => Ok(Self::Ndarray),
            "flex" => Ok(Self::Flex),
            #[cfg(feature = "cuda")]
            "cuda" => Ok(Self::Cuda),
            #[cfg(not(feature = "cuda"))]
            "cuda" => Err("this build has no CUDA backend: build with --features cuda".into()),
            other => Err(format!(
                "unknown device {other:?}: choose wgpu, ndarray or flex (or cuda, in a build with \
                 the cuda feature)"
            )),
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Wgpu => "wgpu",
            Self::Ndarray => "ndarray",
            Self::Flex => "flex",
            #[cfg(feature = "cuda")]
            Self::Cuda => "cuda",
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
    /// Whether the device is a GPU (false for the CPU backends and for a software adapter).
    pub is_gpu: bool,
}

/// Opens the chosen device. For wgpu, fails with the reason when no adapter exists. `Auto`
/// opens wgpu when it reaches a GPU, and fails with the reason otherwise.
pub fn open(choice: DeviceChoice) -> Result<OpenedDevice, String> {
    let opened = match choice {
        DeviceChoice::Wgpu | DeviceChoice::Auto => {
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
            let is_gpu = identity.as_ref().is_some_and(|id| id.physical.is_some());
            let adapter = identity
                .map(|id| id.name)
                .unwrap_or_else(|| "unnamed adapter".into());
            if choice == DeviceChoice::Auto && !is_gpu {
                return Err(format!(
                    "wgpu's adapter is {adapter}, which runs on the CPU (no GPU found); flex runs the \
                     same work much faster there (pass --device wgpu to use the adapter anyway)"
                ));
            }
            OpenedDevice {
                device: Device::wgpu(DeviceKind::DefaultDevice),
                description: format!("wgpu, adapter: {adapter}"),
                is_gpu,
            }
        }
        // burn 0.22 deprecates ndarray in favour of flex; our users asked for both.
        #[cfg(feature = "ndarray")]
        #[allow(deprecated)]
        DeviceChoice::Ndarray => OpenedDevice {
            device: Device::ndarray(),
            description: "ndarray (CPU)".into(),
            is_gpu: false,
        },
        // The demo's first build leaves ndarray out (it is the slowest backend to compile).
        #[cfg(not(feature = "ndarray"))]
        DeviceChoice::Ndarray => {
            return Err(
                "this build has no ndarray backend: add `--features ndarray` to the \
                        cargo command (for example `cargo run --release --features ndarray \
                        --example dog_bites_man -- --device ndarray`)"
                    .into(),
            );
        }
        DeviceChoice::Flex => OpenedDevice {
            device: Device::flex(),
            description: "flex (CPU)".into(),
            is_gpu: false,
        },
        #[cfg(feature = "cuda")]
        DeviceChoice::Cuda => {
            cuda_driver()?;
            OpenedDevice {
                device: Device::cuda(0),
                description: "CUDA device 0".into(),
                is_gpu: true,
            }
        }
    };
    Ok(opened)
}

/// Whether NVIDIA's driver library loads here: cubecl's CUDA runtime loads it on the device's
/// own thread at first use, and without it panics there, leaving the caller a closed channel.
#[cfg(feature = "cuda")]
fn cuda_driver() -> Result<(), String> {
    let names: &[&str] = if cfg!(windows) {
        &["nvcuda.dll"]
    } else {
        &["libcuda.so.1", "libcuda.so"]
    };
    // SAFETY: loading NVIDIA's driver library runs its initializers, as cudarc's own load does;
    // the handle is dropped at once.
    if names
        .iter()
        .any(|&name| unsafe { libloading::Library::new(name) }.is_ok())
    {
        return Ok(());
    }
    Err(format!(
        "CUDA: the dynamic loader finds no NVIDIA driver here (tried {}). Fix: run on a machine \
         with an NVIDIA GPU and its driver (the driver provides libcuda; no CUDA toolkit is \
         needed), or choose --device wgpu or flex",
        names.join(", ")
    ))
}

/// Opens the chosen device; if that fails (wgpu without an adapter, or `Auto` without a GPU),
/// says why on stderr and opens flex instead.
pub fn open_or_cpu(choice: DeviceChoice) -> OpenedDevice {
    open(choice).unwrap_or_else(|reason| {
        eprintln!("notice: {reason}; running on the CPU (flex)");
        open(DeviceChoice::Flex).expect("flex needs no adapter")
    })
}

/// Keeps Mesa's Vulkan device-selection layer quiet on a machine without a desktop session.
///
/// That layer (`VK_LAYER_MESA_device_select`, loaded by the Vulkan loader into every Vulkan
/// program, wgpu's included) asks a Wayland compositor for the desktop's default GPU; with no
/// `XDG_RUNTIME_DIR` it prints `error: XDG_RUNTIME_DIR is invalid or not set in the
/// environment.` once per Vulkan instance, which reads like a failure of ours. The layer only
/// reorders the GPUs of multi-GPU desktops (wgpu picks its adapter itself), so when there is no
/// desktop session (neither `XDG_RUNTIME_DIR` nor `WAYLAND_DISPLAY`) this sets
/// `NODEVICE_SELECT=1`, the layer's documented off switch. A value already set wins.
/// (`cargo run` and `cargo test` in this repository set it through `.cargo/config.toml`; this
/// covers the example binaries run directly.)
///
/// # Safety
///
/// Sets an environment variable: call it first thing in `main`, before any other thread
/// exists (see [`std::env::set_var`]).
pub unsafe fn quiet_headless_vulkan() {
    let headless = std::env::var_os("XDG_RUNTIME_DIR").is_none()
        && std::env::var_os("WAYLAND_DISPLAY").is_none();
    if headless && std::env::var_os("NODEVICE_SELECT").is_none() {
        // SAFETY: the caller guarantees no other thread exists yet.
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
}
