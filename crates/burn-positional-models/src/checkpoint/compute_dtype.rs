//! [`Checkpoint::compute_dtype`]: which float dtype a checkpoint computes in on a device, from
//! what was asked, the files' dtype, the device's arithmetic and, on the CPU, the memory the f32
//! copy needs.

use burn::tensor::{Device, FloatDType};

use super::{Checkpoint, ComputeDtype, dtype_name, header_tensors};
use crate::ModelError;

impl Checkpoint {
    /// How many float values the weights files hold (from the safetensors headers; no tensor
    /// data is read).
    ///
    /// # Errors
    ///
    /// As [`file_dtype`](Self::file_dtype).
    pub fn float_values(&self) -> Result<u64, ModelError> {
        let mut total = 0;
        for shard in &self.shards {
            for (dtype, values) in header_tensors(shard)? {
                if matches!(dtype.as_str(), "F32" | "F16" | "BF16" | "F64") {
                    total += values;
                }
            }
        }
        Ok(total)
    }

    /// The dtype the weights will be computed in on `device`: the one
    /// [`with_dtype`](Self::with_dtype) asked for; else, for bf16 and f16 files on a CPU backend
    /// (flex, ndarray), f32 where the f32 copy fits in the memory available (burn's half-precision
    /// products on the CPU convert both operands per product: a 100 M bf16 model decodes 1.3-3.1x
    /// faster in f32 on 2 cores, `docs/porting.md`),
    /// with a [`notice`](ComputeDtype::notice) saying so and what it costs; else the files'
    /// dtype where the device computes in it; else f32 with a notice.
    ///
    /// # Errors
    ///
    /// [`ModelError::Dtype`] if the dtype asked for is one `device` cannot compute in; as
    /// [`file_dtype`](Self::file_dtype).
    pub fn compute_dtype(&self, device: &Device) -> Result<ComputeDtype, ModelError> {
        self.compute_dtype_with_memory(device, available_memory)
    }

    /// [`compute_dtype`](Self::compute_dtype) with the memory available (in bytes, `None`
    /// where unknown) read by `available`: for tests, and for a caller that budgets memory
    /// itself.
    ///
    /// # Errors
    ///
    /// As [`compute_dtype`](Self::compute_dtype).
    pub fn compute_dtype_with_memory(
        &self,
        device: &Device,
        available: impl FnOnce() -> Option<u64>,
    ) -> Result<ComputeDtype, ModelError> {
        if let Some(dtype) = self.dtype {
            if !device.supports_dtype(dtype) {
                return Err(ModelError::Dtype {
                    dtype: dtype_name(dtype).into(),
                    device: format!("{device:?}"),
                    file: self.weights_path.display().to_string(),
                });
            }
            return Ok(ComputeDtype {
                dtype,
                notice: None,
            });
        }
        let file = self.file_dtype()?;
        if let Some(half @ (FloatDType::BF16 | FloatDType::F16)) = file
            && burn_positional::computes_on_host(device)
            && device.supports_dtype(half)
        {
            let values = self.float_values()?;
            let (ours, theirs) = (values * 4, values * 2);
            let name = dtype_name(half);
            let short = if half == FloatDType::BF16 {
                "bf16"
            } else {
                "f16"
            };
            let path = self.weights_path.display();
            match available() {
                Some(free) if ours > free => {
                    return Ok(ComputeDtype {
                        dtype: half,
                        notice: Some(format!(
                            "note: {path} holds {name} weights; computing in {name} on the CPU, \
                             slower than float32 there, because the float32 copy ({}) would not \
                             fit in the {} of memory available (choose with --dtype, or \
                             Checkpoint::with_dtype)",
                            bytes(ours),
                            bytes(free)
                        )),
                    });
                }
                _ => {
                    return Ok(ComputeDtype {
                        dtype: FloatDType::F32,
                        notice: Some(format!(
                            "note: {path} holds {name} weights; computing in float32 on the CPU, \
                             where burn's {name} matrix products are slower (each converts both \
                             operands to float32), at {} of weights instead of {} (keep {name} \
                             with --dtype {short}, or Checkpoint::with_dtype)",
                            bytes(ours),
                            bytes(theirs)
                        )),
                    });
                }
            }
        }
        Ok(match file {
            None | Some(FloatDType::F32 | FloatDType::Flex32) => ComputeDtype {
                dtype: FloatDType::F32,
                notice: None,
            },
            Some(dtype) if device.supports_dtype(dtype) => ComputeDtype {
                dtype,
                notice: None,
            },
            Some(dtype) => ComputeDtype {
                dtype: FloatDType::F32,
                notice: Some(format!(
                    "note: {} holds {} weights, which {device:?} cannot compute in; computing in \
                     float32 (choose with --dtype, or Checkpoint::with_dtype)",
                    self.weights_path.display(),
                    dtype_name(dtype)
                )),
            },
        })
    }
}

/// The memory the system has available for a new allocation, in bytes (`None` where the
/// platform does not say).
fn available_memory() -> Option<u64> {
    let mut system = sysinfo::System::new();
    system.refresh_memory();
    Some(system.available_memory()).filter(|&n| n > 0)
}

/// `n` bytes for a person: MiB below a GiB, GiB above, two decimals.
fn bytes(n: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    let n = n as f64;
    if n < 1024.0 * MIB {
        format!("{:.2} MiB", n / MIB)
    } else {
        format!("{:.2} GiB", n / (1024.0 * MIB))
    }
}
