//! DINOv2 (`model_type: "dinov2"`, `Dinov2ForImageClassification`), as transformers 5.24's
//! `modeling_dinov2.py` ([Oquab et al. 2023](https://arxiv.org/abs/2304.07193)): ViT's patch
//! embedding, class token and learned position table ([`ViTEmbeddings`]), pre-norm layers whose
//! two residual branches are each scaled per channel by a learned layer scale
//! (`layer_scale1.lambda1`, `layer_scale2.lambda1`), an MLP of `hidden_size * mlp_ratio`, a final
//! LayerNorm, and a classifier on the class token's row concatenated with the mean of the patch
//! rows (`Linear(2 * hidden_size, num_labels)`).
//!
//! The layer does everything positional, as in [`vit`](crate::vit): the table is a
//! [`LearnedPosition`] laid out as a patch grid and an image's rows are its `on_image`, which is
//! DINOv2's `interpolate_pos_encoding`. DINOv2 has no flag: it always calls it (the early return keeps the table at the trained number of patches of a
//! square image), and it resizes in f32, casting back to the table's dtype, as the layer does.
//!
//! # What the port leaves out
//!
//! - `use_swiglu_ffn: true` (the giant checkpoints' SwiGLU feed-forward) is refused by name
//!   ([`ModelError::UnportedSetting`]): no fixture checks it here.
//! - `dinov2.embeddings.mask_token` (`[1, hidden_size]`, present where `use_mask_token`) replaces
//!   masked patches only when transformers is given `bool_masked_pos`, which this port does not
//!   take: the key is left in the file, on purpose ([`IGNORED_KEYS`]).
//! - `layerscale_value` only initializes the layer scales; the port reads them from the file.
//!   `drop_path_rate` and the dropouts act in training only.
//!
//! Unlike ViT, DINOv2 divides each side of the image by its own patch side
//! (`patch_height, patch_width = self.patch_embeddings.patch_size`), so a patch that is not square
//! is taken, as long as the trained grid is square.

use std::collections::BTreeMap;

use burn::module::{Module, Param};
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use burn_positional::LearnedPosition;
use serde::Deserialize;

use crate::ModelError;
use crate::checkpoint::{Checkpoint, Remap};
use crate::decoder::Activation;
use crate::vision::{PatchLayout, Sides, count_labels, expect_model_type, head_dim, load_position};
use crate::vit::{ViTAttention, ViTEmbeddings};

/// `Dinov2Config`'s fields the port reads, with transformers 5.24's defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct Dinov2Config {
    /// `hidden_size`.
    pub hidden_size: usize,
    /// `num_hidden_layers`.
    pub num_hidden_layers: usize,
    /// `num_attention_heads`.
    pub num_attention_heads: usize,
    /// `head_dim`, where the file has one (else `hidden_size / num_attention_heads`).
    pub head_dim: Option<usize>,
    /// `mlp_ratio`: the MLP is `int(hidden_size * mlp_ratio)` wide.
    pub mlp_ratio: f64,
    /// `hidden_act`.
    pub hidden_act: String,
    /// `layer_norm_eps`.
    pub layer_norm_eps: f64,
    /// `image_size`: the trained resolution.
    pub image_size: Sides,
    /// `patch_size`.
    pub patch_size: Sides,
    /// `num_channels`.
    pub num_channels: usize,
    /// `qkv_bias`.
    pub qkv_bias: bool,
    /// `use_swiglu_ffn`: refused where true (see the module docs).
    pub use_swiglu_ffn: bool,
    /// `id2label`: its length is the number of labels.
    pub id2label: Option<BTreeMap<String, serde_json::Value>>,
    /// `num_labels`, read where there is no `id2label`.
    pub num_labels: Option<usize>,
}

impl Default for Dinov2Config {
    fn default() -> Self {
        Self {
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            head_dim: None,
            mlp_ratio: 4.0,
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-6,
            image_size: Sides::One(224),
            patch_size: Sides::One(14),
            num_channels: 3,
            qkv_bias: true,
            use_swiglu_ffn: false,
            id2label: None,
            num_labels: None,
        }
    }
}

/// A learned per-channel scale of a residual branch (`Dinov2LayerScale`).
#[derive(Module, Debug)]
pub struct LayerScale {
    /// `lambda1`: `[hidden_size]`.
    pub lambda1: Param<Tensor<1>>,
}

impl LayerScale {
    /// `x * lambda1`.
    ///
    /// # Shapes
    ///
    /// - `x`: `[batch, seq, hidden_size]`, and the output
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        x * self.lambda1.val().unsqueeze::<3>()
    }
}

/// One pre-norm layer with layer scale (`Dinov2Layer`).
#[derive(Module, Debug)]
pub struct Dinov2Layer {
    /// `norm1`.
    pub norm1: LayerNorm,
    /// `attention`.
    pub attention: ViTAttention,
    /// `layer_scale1`.
    pub layer_scale1: LayerScale,
    /// `norm2`.
    pub norm2: LayerNorm,
    /// `mlp.fc1`.
    pub fc1: Linear,
    /// `mlp.fc2`.
    pub fc2: Linear,
    /// `layer_scale2`.
    pub layer_scale2: LayerScale,
    /// `hidden_act`.
    #[module(skip)]
    pub activation: Activation,
}

impl Dinov2Layer {
    /// `h = x + lambda1 * attention(LN(x))`, then `h + lambda2 * fc2(act(fc1(LN(h))))`.
    ///
    /// # Shapes
    ///
    /// - `x`: `[batch, seq, hidden_size]`, and the output
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let attended = self.attention.forward(self.norm1.forward(x.clone()));
        let x = x + self.layer_scale1.forward(attended);
        let hidden = self
            .activation
            .apply(self.fc1.forward(self.norm2.forward(x.clone())));
        x + self.layer_scale2.forward(self.fc2.forward(hidden))
    }
}

/// Everything of DINOv2 but the position table: what [`Checkpoint::load`] reads.
#[derive(Module, Debug)]
pub struct Dinov2Weights {
    /// `dinov2.embeddings` (the patch convolution and the class token).
    pub embeddings: ViTEmbeddings,
    /// `dinov2.encoder.layer`.
    pub layers: Vec<Dinov2Layer>,
    /// `dinov2.layernorm`, after the last layer.
    pub layernorm: LayerNorm,
    /// `classifier` on `2 * hidden_size` inputs, none where `num_labels` is 0
    /// (transformers' `nn.Identity`).
    pub classifier: Option<Linear>,
}

/// `Dinov2ForImageClassification`. Built by [`load`].
#[derive(Module, Debug)]
pub struct Dinov2 {
    /// `dinov2.embeddings.position_embeddings`: the class row, then the trained grid's rows.
    pub position: LearnedPosition,
    /// The rest.
    pub weights: Dinov2Weights,
}

impl Dinov2Config {
    /// Builds the model, weights zero until loaded.
    ///
    /// # Errors
    ///
    /// [`ModelError::UnportedSetting`] for `use_swiglu_ffn` or a trained grid that is not
    /// square, [`ModelError::Config`] for an activation without a port, no attention head, an
    /// MLP of no width or a patch grid that does not fit, [`ModelError::Position`] for a table
    /// the layer refuses.
    pub fn init(&self, path: &str, device: &Device) -> Result<Dinov2, ModelError> {
        if self.use_swiglu_ffn {
            return Err(ModelError::UnportedSetting {
                path: path.into(),
                field: "use_swiglu_ffn",
                value: "true".into(),
                reason: "DINOv2's SwiGLU feed-forward (Dinov2SwiGLUFFN, the giant checkpoints') \
                         has no port here"
                    .into(),
                fix: "use a checkpoint with use_swiglu_ffn false (dinov2-small, -base, -large), \
                      or port Dinov2SwiGLUFFN in dinov2.rs"
                    .into(),
            });
        }
        let activation = Activation::from_hf(&self.hidden_act, path)?;
        let layout = PatchLayout::of(self.image_size, self.patch_size, false, path)?;
        let d = self.hidden_size;
        let d_head = head_dim(d, self.num_attention_heads, self.head_dim, path)?;
        // Python's `int(config.hidden_size * config.mlp_ratio)`: the product in f64, truncated.
        let mlp = (d as f64 * self.mlp_ratio) as usize;
        if mlp == 0 {
            return Err(ModelError::Config {
                path: path.into(),
                detail: format!(
                    "mlp_ratio {} gives an MLP of int({d} * {}) = 0 units",
                    self.mlp_ratio, self.mlp_ratio
                ),
            });
        }
        let norm = || {
            LayerNormConfig::new(d)
                .with_epsilon(self.layer_norm_eps)
                .init(device)
        };
        let scale = || LayerScale {
            lambda1: Param::from_tensor(Tensor::ones([d], device)),
        };
        let layers = (0..self.num_hidden_layers)
            .map(|_| Dinov2Layer {
                norm1: norm(),
                attention: ViTAttention::new(
                    d,
                    self.num_attention_heads,
                    d_head,
                    self.qkv_bias,
                    device,
                ),
                layer_scale1: scale(),
                norm2: norm(),
                fc1: LinearConfig::new(d, mlp).init(device),
                fc2: LinearConfig::new(mlp, d).init(device),
                layer_scale2: scale(),
                activation,
            })
            .collect();
        let labels = count_labels(self.id2label.as_ref(), self.num_labels);
        Ok(Dinov2 {
            position: layout.position_table(d, device)?,
            weights: Dinov2Weights {
                embeddings: ViTEmbeddings::new(&layout, self.num_channels, d, device),
                layers,
                layernorm: norm(),
                classifier: (labels > 0).then(|| LinearConfig::new(2 * d, labels).init(device)),
            },
        })
    }
}

impl Dinov2 {
    /// The logits of a batch of images: the classifier on `cat(cls, mean(patches))` of
    /// [`hidden_states`](Self::hidden_states).
    ///
    /// # Shapes
    ///
    /// - `pixel_values`: `[batch, num_channels, height, width]`, any size of at least one patch
    /// - output: `[batch, num_labels]` (`[batch, 2 * hidden_size]` where `num_labels` is 0)
    ///
    /// # Panics
    ///
    /// With [`try_forward`](Self::try_forward)'s message on the images it refuses.
    pub fn forward(&self, pixel_values: Tensor<4>) -> Tensor<2> {
        self.try_forward(pixel_values)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`forward`](Self::forward), or why the images do not fit. Checks shapes only: nothing is
    /// read from the device, and nothing runs before the checks.
    ///
    /// # Shapes
    ///
    /// As [`forward`](Self::forward).
    ///
    /// # Errors
    ///
    /// As [`try_hidden_states`](Self::try_hidden_states).
    pub fn try_forward(&self, pixel_values: Tensor<4>) -> Result<Tensor<2>, ModelError> {
        Ok(self.head(self.try_hidden_states(pixel_values)?))
    }

    /// The base model's `last_hidden_state`: the class token's row and one per patch, after the
    /// final LayerNorm, the positions resized to the image's grid.
    ///
    /// # Shapes
    ///
    /// - `pixel_values`: `[batch, num_channels, height, width]`
    /// - output: `[batch, 1 + (height / patch height) * (width / patch width), hidden_size]`
    ///
    /// # Panics
    ///
    /// With [`try_hidden_states`](Self::try_hidden_states)'s message on the images it refuses.
    pub fn hidden_states(&self, pixel_values: Tensor<4>) -> Tensor<3> {
        self.try_hidden_states(pixel_values)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`hidden_states`](Self::hidden_states), or why the images do not fit (shapes only).
    ///
    /// # Shapes
    ///
    /// As [`hidden_states`](Self::hidden_states).
    ///
    /// # Errors
    ///
    /// [`ModelError::PixelValues`] for another number of channels than `num_channels` or an
    /// image smaller than one patch, [`ModelError::Position`] for a grid too large to resize the
    /// table to.
    pub fn try_hidden_states(&self, pixel_values: Tensor<4>) -> Result<Tensor<3>, ModelError> {
        let w = &self.weights;
        let mut x = w.embeddings.forward(pixel_values, &self.position)?;
        for layer in &w.layers {
            x = layer.forward(x);
        }
        Ok(w.layernorm.forward(x))
    }

    /// The classifier on `cat([cls, patches.mean(dim=1)], dim=1)`.
    ///
    /// # Shapes
    ///
    /// - `hidden`: `[batch, seq, hidden_size]`
    /// - output: `[batch, num_labels]` (`[batch, 2 * hidden_size]` without a classifier)
    pub fn head(&self, hidden: Tensor<3>) -> Tensor<2> {
        let [batch, seq, d_model] = hidden.dims();
        let cls = hidden
            .clone()
            .slice([0..batch, 0..1, 0..d_model])
            .reshape([batch, d_model]);
        let patches = hidden
            .slice([0..batch, 1..seq, 0..d_model])
            .mean_dim(1)
            .reshape([batch, d_model]);
        let input = Tensor::cat(vec![cls, patches], 1);
        match &self.weights.classifier {
            Some(classifier) => classifier.forward(input),
            None => input,
        }
    }
}

/// The remaps of a `Dinov2ForImageClassification` checkpoint (the keys `save_pretrained`
/// writes) into [`Dinov2Weights`]; the position table is loaded apart (see [`load`]).
pub fn remaps() -> Vec<Remap> {
    vec![
        (
            "dinov2.embeddings.patch_embeddings.projection",
            "embeddings.projection",
        ),
        ("dinov2.embeddings.cls_token", "embeddings.cls_token"),
        ("dinov2.encoder.layer.{}.norm1", "layers.{}.norm1"),
        (
            "dinov2.encoder.layer.{}.attention.attention.query",
            "layers.{}.attention.query",
        ),
        (
            "dinov2.encoder.layer.{}.attention.attention.key",
            "layers.{}.attention.key",
        ),
        (
            "dinov2.encoder.layer.{}.attention.attention.value",
            "layers.{}.attention.value",
        ),
        (
            "dinov2.encoder.layer.{}.attention.output.dense",
            "layers.{}.attention.output",
        ),
        (
            "dinov2.encoder.layer.{}.layer_scale1",
            "layers.{}.layer_scale1",
        ),
        ("dinov2.encoder.layer.{}.norm2", "layers.{}.norm2"),
        ("dinov2.encoder.layer.{}.mlp.fc1", "layers.{}.fc1"),
        ("dinov2.encoder.layer.{}.mlp.fc2", "layers.{}.fc2"),
        (
            "dinov2.encoder.layer.{}.layer_scale2",
            "layers.{}.layer_scale2",
        ),
        ("dinov2.layernorm", "layernorm"),
        ("classifier", "classifier"),
    ]
}

/// The checkpoint key of DINOv2's position table.
pub const POSITION_KEY: &str = "dinov2.embeddings.position_embeddings";

/// Keys of a DINOv2 checkpoint the port leaves in the file on purpose: the mask token, used
/// only with `bool_masked_pos` (masked-image pretraining), which the port does not take.
pub const IGNORED_KEYS: [&str; 1] = ["dinov2.embeddings.mask_token"];

/// Builds the `Dinov2ForImageClassification` `checkpoint` describes and loads its weights:
/// [`Dinov2Weights`] with [`Checkpoint::load`], the position table ([`POSITION_KEY`],
/// `[1, 1 + patches, hidden_size]` in the file) into the layer's `LearnedPosition`. The keys of
/// [`IGNORED_KEYS`] are not read.
///
/// # Errors
///
/// [`ModelError::Unsupported`] for another `model_type`, what [`Dinov2Config::init`] refuses,
/// and what [`Checkpoint::load`] gives ([`ModelError::MissingTensor`] naming the transformers
/// key, [`ModelError::ShapeMismatch`]).
pub fn load(checkpoint: &Checkpoint, device: &Device) -> Result<Dinov2, ModelError> {
    expect_model_type(checkpoint, "dinov2", "dinov2::load")?;
    let config: Dinov2Config = checkpoint.config()?;
    let path = checkpoint.config_path.display().to_string();
    let mut model = config.init(&path, device)?;
    checkpoint.load(&mut model.weights, &remaps(), device)?;
    load_position(checkpoint, POSITION_KEY, &mut model.position, device)?;
    Ok(model)
}
