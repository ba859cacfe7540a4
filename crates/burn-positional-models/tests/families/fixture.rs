//! A fixture folder: the checkpoint, and what transformers computed from it.

use std::collections::HashMap;
use std::path::PathBuf;

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use burn_positional_models::{Batch, Checkpoint, Step};
use safetensors::{Dtype, SafeTensors};

/// `tests/fixtures/<name>/`: `config.json`, `model.safetensors`, and transformers' outputs in
/// `expected.safetensors` and `expected.json`.
pub struct Fixture {
    pub name: String,
    pub dir: PathBuf,
    pub json: serde_json::Value,
    tensors: HashMap<String, (Vec<usize>, Vec<f64>)>,
}

impl Fixture {
    pub fn open(name: &str) -> Self {
        let dir = crate::package_dir().join("tests/fixtures").join(name);
        let bytes = std::fs::read(dir.join("expected.safetensors"))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let file = SafeTensors::deserialize(&bytes).expect("expected.safetensors");
        let tensors = file
            .tensors()
            .into_iter()
            .map(|(key, view)| {
                let data = view.data();
                let values: Vec<f64> = match view.dtype() {
                    Dtype::F32 => data
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
                        .collect(),
                    // Logits stored in half precision to keep a folder small (gemma2_softcap).
                    Dtype::F16 => data
                        .chunks_exact(2)
                        .map(|b| {
                            burn::tensor::f16::from_bits(u16::from_le_bytes(b.try_into().unwrap()))
                                .to_f64()
                        })
                        .collect(),
                    Dtype::I64 => data
                        .chunks_exact(8)
                        .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as f64)
                        .collect(),
                    other => panic!("{key}: dtype {other:?} not expected"),
                };
                (key, (view.shape().to_vec(), values))
            })
            .collect();
        let json = serde_json::from_str(
            &std::fs::read_to_string(dir.join("expected.json")).expect("expected.json"),
        )
        .expect("expected.json is JSON");
        Self {
            name: name.to_string(),
            dir,
            json,
            tensors,
        }
    }

    /// The checkpoint folder.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint::open(&self.dir).expect("fixture checkpoint")
    }

    /// Which transformers wrote it, for messages.
    pub fn source(&self) -> String {
        format!(
            "{} fixture, transformers {} (torch {})",
            self.name, self.json["transformers"], self.json["torch"]
        )
    }

    /// A tensor's shape and values.
    pub fn get(&self, key: &str) -> &(Vec<usize>, Vec<f64>) {
        self.tensors
            .get(key)
            .unwrap_or_else(|| panic!("{}: no `{key}` in expected.safetensors", self.name))
    }

    /// A 2-d integer tensor as rows.
    pub fn rows(&self, key: &str) -> Vec<Vec<i64>> {
        let (shape, values) = self.get(key);
        values
            .chunks(shape[1])
            .map(|row| row.iter().map(|&v| v as i64).collect())
            .collect()
    }

    /// A float tensor on `device`.
    pub fn tensor<const D: usize>(&self, key: &str, device: &Device) -> Tensor<D> {
        let (shape, values) = self.get(key);
        let values: Vec<f32> = values.iter().map(|&v| v as f32).collect();
        Tensor::from_data(TensorData::new(values, shape.clone()), device)
    }

    /// The padded prompt batch: ids and attention mask.
    pub fn batch(&self) -> Batch {
        let mask = self
            .rows("attention_mask")
            .into_iter()
            .map(|row| row.into_iter().map(|m| m != 0).collect())
            .collect();
        Batch::new(self.rows("input_ids"), mask)
    }

    /// The prompts without their padding.
    pub fn prompts(&self) -> Vec<Vec<i64>> {
        let batch = self.batch();
        batch
            .ids
            .iter()
            .zip(&batch.mask)
            .map(|(ids, mask)| {
                ids.iter()
                    .zip(mask)
                    .filter(|(_, m)| **m)
                    .map(|(id, _)| *id)
                    .collect()
            })
            .collect()
    }

    /// The whole padded batch as one step, at the positions transformers used.
    pub fn prompt_step(&self, device: &Device) -> Step {
        let batch = self.batch();
        let positions = if self.tensors.contains_key("position_ids") {
            self.rows("position_ids")
        } else {
            batch.positions()
        };
        Step::new(&batch.ids, &positions, &batch.mask, 0, device)
    }
}

/// The largest `|ours - theirs|` over the rows where `keep[b][l]`, relative to the largest
/// `|theirs|` there. Shapes `[batch, seq, n]`.
pub fn max_relative_error(ours: Tensor<3>, theirs: Tensor<3>, keep: &[Vec<bool>]) -> f64 {
    assert_eq!(ours.dims(), theirs.dims(), "shapes");
    let [_, seq, n] = ours.dims();
    let ours: Vec<f32> = ours.into_data().iter::<f32>().collect();
    let theirs: Vec<f32> = theirs.into_data().iter::<f32>().collect();
    let (mut err, mut scale) = (0f64, 0f64);
    for (b, row) in keep.iter().enumerate() {
        for (l, &kept) in row.iter().enumerate() {
            if !kept {
                continue;
            }
            let at = (b * seq + l) * n;
            for i in at..at + n {
                err = err.max((ours[i] as f64 - theirs[i] as f64).abs());
                scale = scale.max((theirs[i] as f64).abs());
            }
        }
    }
    err / scale.max(f64::MIN_POSITIVE)
}

/// Rows of ids as a `[rows, len]` int tensor.
pub fn ints(rows: &[Vec<i64>], device: &Device) -> Tensor<2, Int> {
    let shape = [rows.len(), rows[0].len()];
    Tensor::from_data(TensorData::new(rows.concat(), shape), device)
}

/// The attention mask's rows as a `[rows, len]` padding mask, true at padding.
pub fn padding(mask: &[Vec<bool>], device: &Device) -> Tensor<2, Bool> {
    let flat: Vec<bool> = mask.iter().flatten().map(|&m| !m).collect();
    Tensor::from_data(TensorData::new(flat, [mask.len(), mask[0].len()]), device)
}
