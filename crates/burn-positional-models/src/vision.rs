//! What the vision ports ([`vit`](crate::vit), [`dinov2`](crate::dinov2)) share besides their
//! modules: `image_size` and `patch_size` as `config.json` writes them, the patch grid they
//! describe (checked against what transformers' `interpolate_pos_encoding` can read) and its
//! position table built through the layer, the position table loaded from the checkpoint's
//! `[1, 1 + patches, hidden_size]` tensor, and transformers' count of labels.

use std::collections::BTreeMap;
use std::fmt;

use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::tensor::{Device, Tensor};
use burn_positional::absolute::PatchGridConfig;
use burn_positional::{LearnedConfig, LearnedInit, LearnedPosition};
use serde::Deserialize;

use crate::ModelError;
use crate::checkpoint::Checkpoint;

/// `image_size` or `patch_size` as transformers takes them: one number for both sides, or
/// `[height, width]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Sides {
    /// The same on both sides.
    One(usize),
    /// `[height, width]`.
    Two([usize; 2]),
}

impl Sides {
    /// `[height, width]`.
    pub fn sides(self) -> [usize; 2] {
        match self {
            Self::One(s) => [s, s],
            Self::Two(sides) => sides,
        }
    }
}

impl fmt::Display for Sides {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::One(s) => write!(f, "{s}"),
            Self::Two([h, w]) => write!(f, "[{h}, {w}]"),
        }
    }
}

/// The patch grid a vision config describes, checked: what the patch convolution and the
/// position table are built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchLayout {
    /// Pixels per patch, `[height, width]`.
    pub patch: [usize; 2],
    /// Patches per side of the trained grid (`image_size / patch_size`; the grid is square).
    pub side: usize,
}

impl PatchLayout {
    /// The layout of `image_size` and `patch_size` (`square_patch`: the family divides both
    /// sides of an image by one patch size, as ViT does).
    ///
    /// # Errors
    ///
    /// [`ModelError::Config`] for a patch side of 0 or an image smaller than one patch;
    /// [`ModelError::UnportedSetting`] for a patch that is not square where `square_patch`, or a
    /// trained grid that is not square.
    pub fn of(
        image_size: Sides,
        patch_size: Sides,
        square_patch: bool,
        path: &str,
    ) -> Result<Self, ModelError> {
        let [ph, pw] = patch_size.sides();
        let [ih, iw] = image_size.sides();
        if ph == 0 || pw == 0 {
            return Err(ModelError::Config {
                path: path.into(),
                detail: format!("patch_size {patch_size} has a side of 0 pixels"),
            });
        }
        if square_patch && ph != pw {
            return Err(ModelError::UnportedSetting {
                path: path.into(),
                field: "patch_size",
                value: patch_size.to_string(),
                reason: "ViT's interpolate_pos_encoding divides both sides of an image by one \
                         patch size (`height // self.patch_size`), so transformers itself runs a \
                         patch that is not square only at the trained size"
                    .into(),
                fix: "use a checkpoint with a square patch (one number)".into(),
            });
        }
        let (rows, cols) = (ih / ph, iw / pw);
        if rows == 0 || cols == 0 {
            return Err(ModelError::Config {
                path: path.into(),
                detail: format!(
                    "image_size {image_size} is smaller than patch_size {patch_size}: the \
                     trained grid has no patch"
                ),
            });
        }
        if rows != cols {
            return Err(ModelError::UnportedSetting {
                path: path.into(),
                field: "image_size",
                value: image_size.to_string(),
                reason: format!(
                    "with patch_size {patch_size} the trained grid is {rows} x {cols} patches; \
                     interpolate_pos_encoding reads the position table as a square grid (the \
                     square root of its patch count per side), so only a square grid has a port"
                ),
                fix: "use a checkpoint whose image_size / patch_size is the same on both sides"
                    .into(),
            });
        }
        Ok(Self {
            patch: [ph, pw],
            side: rows,
        })
    }

    /// The position table of this grid, `1 + side^2` rows of `d_model`, zeros until loaded: a
    /// [`LearnedPosition`] laid out as a patch grid with one prefix row (the class token's).
    ///
    /// # Errors
    ///
    /// [`ModelError::Position`] for a table the layer refuses (too large for the device).
    pub fn position_table(
        &self,
        d_model: usize,
        device: &Device,
    ) -> Result<LearnedPosition, ModelError> {
        Ok(LearnedConfig::new(1 + self.side * self.side)
            // Zeros, not a random draw the load replaces (the layer draws its table eagerly).
            .with_init(LearnedInit::Random(Initializer::Zeros))
            .with_grid(Some(PatchGridConfig::new(vec![self.side, self.side])))
            .try_init(d_model, device)?)
    }
}

/// `num_labels` as transformers counts it: the length of `id2label` where the file has one, else
/// `num_labels`, else 2.
pub fn count_labels(
    id2label: Option<&BTreeMap<String, serde_json::Value>>,
    num_labels: Option<usize>,
) -> usize {
    id2label.map_or(num_labels.unwrap_or(2), BTreeMap::len)
}

/// `head_dim` as transformers' attention takes it: the config's, else `hidden / heads`.
pub(crate) fn head_dim(
    d_model: usize,
    n_heads: usize,
    head_dim: Option<usize>,
    path: &str,
) -> Result<usize, ModelError> {
    if n_heads == 0 {
        return Err(ModelError::Config {
            path: path.into(),
            detail: "num_attention_heads is 0: attention needs at least one head".into(),
        });
    }
    let d_head = head_dim.unwrap_or(d_model / n_heads);
    if d_head == 0 {
        return Err(ModelError::Config {
            path: path.into(),
            detail: format!(
                "heads of 0 values: hidden_size {d_model} over num_attention_heads {n_heads} \
                 (or head_dim 0)"
            ),
        });
    }
    Ok(d_head)
}

/// The position table as a file holds it: `[1, 1 + patches, hidden_size]` at `position.table`,
/// the path of the model's own table.
#[derive(Module, Debug)]
struct FileTable {
    table: Param<Tensor<3>>,
}

#[derive(Module, Debug)]
struct FilePosition {
    position: FileTable,
}

/// Loads `key` (`[1, 1 + patches, hidden_size]`) into `position`'s table (`[1 + patches,
/// hidden_size]`) with [`Checkpoint::load`], in the compute dtype. burn's store checks shapes
/// as they are and does not squeeze, so the file's tensor is read as it is and its leading 1
/// dropped here.
///
/// # Errors
///
/// As [`Checkpoint::load`]: a missing tensor, another shape than the config implies.
pub(crate) fn load_position(
    checkpoint: &Checkpoint,
    key: &'static str,
    position: &mut LearnedPosition,
    device: &Device,
) -> Result<(), ModelError> {
    let [rows, d_model] = position.table.shape().dims();
    let mut file = FilePosition {
        position: FileTable {
            table: Param::from_tensor(Tensor::zeros([1, rows, d_model], device)),
        },
    };
    checkpoint.load(&mut file, &[(key, "position.table")], device)?;
    // The layer takes the squeezed table out of any autodiff graph (a squeezed parameter is no
    // leaf): it trains as the model's own.
    let table = file.position.table.val().squeeze_dim::<2>(0);
    *position = position.clone().with_table(table)?;
    Ok(())
}

/// Refuses a checkpoint of another family than the loader's.
pub(crate) fn expect_model_type(
    checkpoint: &Checkpoint,
    expected: &str,
    loader: &str,
) -> Result<(), ModelError> {
    let model_type = checkpoint.model_type()?;
    if model_type == expected {
        return Ok(());
    }
    Err(ModelError::Unsupported {
        model_type: model_type.into(),
        path: checkpoint.config_path.display().to_string(),
        supported: format!(
            "{expected} ({loader}; load a checkpoint through its family's loader: vit::load, \
             dinov2::load, bert::load, t5::load, or load_causal_lm for decoder-only families)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_transformers_writes_them() {
        let one: Sides = serde_json::from_str("16").unwrap();
        let two: Sides = serde_json::from_str("[16, 28]").unwrap();
        assert_eq!(one.sides(), [16, 16]);
        assert_eq!(two.sides(), [16, 28]);
        assert_eq!(two.to_string(), "[16, 28]");
    }

    #[test]
    fn layouts_that_have_no_port_are_refused_by_name() {
        let layout = PatchLayout::of(Sides::One(224), Sides::Two([16, 16]), true, "c").unwrap();
        assert_eq!(
            layout,
            PatchLayout {
                patch: [16, 16],
                side: 14
            }
        );
        let err = PatchLayout::of(Sides::One(16), Sides::Two([4, 8]), true, "c").unwrap_err();
        assert!(err.to_string().contains("`patch_size` = [4, 8]"), "{err}");
        // DINOv2 divides each side by its own patch side: a square grid of oblong patches.
        let layout = PatchLayout::of(Sides::Two([16, 32]), Sides::Two([4, 8]), false, "c");
        assert_eq!(layout.unwrap().side, 4);
        let err = PatchLayout::of(Sides::Two([16, 28]), Sides::One(4), true, "c").unwrap_err();
        let message = err.to_string();
        assert!(message.contains("`image_size` = [16, 28]"), "{message}");
        assert!(message.contains("4 x 7 patches"), "{message}");
        let err = PatchLayout::of(Sides::One(2), Sides::One(4), true, "c").unwrap_err();
        assert!(
            err.to_string().contains("smaller than patch_size 4"),
            "{err}"
        );
        let err = PatchLayout::of(Sides::One(16), Sides::One(0), true, "c").unwrap_err();
        assert!(err.to_string().contains("a side of 0 pixels"), "{err}");
    }

    #[test]
    fn labels_are_counted_as_transformers_counts_them() {
        let map: BTreeMap<String, serde_json::Value> =
            (0..5).map(|i| (i.to_string(), "x".into())).collect();
        assert_eq!(count_labels(Some(&map), Some(3)), 5);
        assert_eq!(count_labels(None, Some(3)), 3);
        assert_eq!(count_labels(None, None), 2);
    }
}
