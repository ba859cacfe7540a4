//! ViT (`model_type: "vit"`, `ViTForImageClassification`), as transformers 5.24's
//! `modeling_vit.py` ([Dosovitskiy et al. 2021](https://arxiv.org/abs/2010.11929)): the image cut
//! into patches by a convolution whose kernel and stride are `patch_size`, a class token before
//! them, a learned position table added, pre-norm encoder layers (`layernorm_before`,
//! bidirectional self-attention with `qkv_bias`, `layernorm_after`, an MLP with `hidden_act`), a
//! final LayerNorm, and the classifier on the class token's row.
//!
//! The layer does everything positional: the table is a [`LearnedPosition`] laid out as a patch
//! grid (the class token's row, then one row per patch of the `image_size / patch_size` grid),
//! and an image's rows are [`LearnedPosition::on_image`], which returns what transformers'
//! `interpolate_pos_encoding` returns; the attention is [`attend`]. The embedding and the
//! attention are shared with [`dinov2`](crate::dinov2), whose `modeling_dinov2.py` copies them.
//!
//! # Always `interpolate_pos_encoding=True`
//!
//! transformers' ViT takes a flag. Without it an image of another size than `image_size` is an
//! error; with it the patch rows of the table are resized (bicubic, `align_corners=False`, to
//! `(height // patch, width // patch)`) and the class row kept, except for an image with the
//! trained number of patches that is square in pixels, which gets the table as it is (its early
//! return). The port always takes the flag's path: at the trained size both paths give the same
//! rows, and elsewhere the port gives what `model(pixel_values, interpolate_pos_encoding=True)`
//! gives where the flag's absence gives an error. The resize is computed in f32 and rounded once
//! to the table's dtype (transformers' ViT resizes in the table's dtype; the two agree in f32).
//!
//! # What `config.json` may say
//!
//! - `patch_size`: one number, or `[p, p]`. transformers' ViT divides the image by
//!   `self.patch_size` (`height // self.patch_size`), which fails on a list outside the early
//!   return; the port reads `[p, p]` as `p` and refuses a patch that is not square
//!   ([`ModelError::UnportedSetting`]).
//! - `image_size`: one number or `[height, width]`, whose grid of patches must be square:
//!   `interpolate_pos_encoding` reshapes the table to `sqrt(N) x sqrt(N)`.
//! - `num_labels`: transformers' count, the length of `id2label`, else `num_labels`, else 2. With
//!   0 the classifier is `nn.Identity`: the logits are the class token's hidden state.
//! - `head_dim`: read where the file has one (`getattr(config, "head_dim", hidden // heads)`).

use std::collections::BTreeMap;

use burn::module::{Module, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Initializer, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use burn_positional::{AttendOptions, LearnedPosition, attend};
use serde::Deserialize;

use crate::ModelError;
use crate::checkpoint::{Checkpoint, Remap};
use crate::decoder::Activation;
use crate::vision::{PatchLayout, Sides, count_labels, expect_model_type, head_dim, load_position};

/// `ViTConfig`'s fields the port reads, with transformers 5.24's defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ViTConfig {
    /// `hidden_size`.
    pub hidden_size: usize,
    /// `num_hidden_layers`.
    pub num_hidden_layers: usize,
    /// `num_attention_heads`.
    pub num_attention_heads: usize,
    /// `head_dim`, where the file has one (else `hidden_size / num_attention_heads`).
    pub head_dim: Option<usize>,
    /// `intermediate_size`.
    pub intermediate_size: usize,
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
    /// `id2label`: its length is the number of labels.
    pub id2label: Option<BTreeMap<String, serde_json::Value>>,
    /// `num_labels`, read where there is no `id2label`.
    pub num_labels: Option<usize>,
}

impl Default for ViTConfig {
    fn default() -> Self {
        Self {
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            head_dim: None,
            intermediate_size: 3072,
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-12,
            image_size: Sides::One(224),
            patch_size: Sides::One(16),
            num_channels: 3,
            qkv_bias: true,
            id2label: None,
            num_labels: None,
        }
    }
}

/// Everything of transformers' `ViTEmbeddings` but the position table: the patch convolution and
/// the class token. DINOv2's `Dinov2Embeddings` is the same.
#[derive(Module, Debug)]
pub struct ViTEmbeddings {
    /// `patch_embeddings.projection`: `[hidden_size, num_channels, patch height, patch width]`,
    /// stride the patch, no padding.
    pub projection: Conv2d,
    /// `cls_token`: `[1, 1, hidden_size]`.
    pub cls_token: Param<Tensor<3>>,
}

impl ViTEmbeddings {
    /// The embedding of `num_channels`-channel images cut into `layout`'s patches, weights zero
    /// until loaded.
    pub fn new(layout: &PatchLayout, num_channels: usize, d_model: usize, device: &Device) -> Self {
        Self {
            projection: Conv2dConfig::new([num_channels, d_model], layout.patch)
                .with_stride(layout.patch)
                .with_initializer(Initializer::Zeros)
                .init(device),
            cls_token: Param::from_tensor(Tensor::zeros([1, 1, d_model], device)),
        }
    }

    /// Refuses images this embedding cannot read, from their shape alone (nothing runs): another
    /// number of channels than the convolution's, or a side smaller than one patch.
    ///
    /// # Errors
    ///
    /// [`ModelError::PixelValues`] naming the value, the limit and the fix.
    pub fn check(&self, shape: [usize; 4], position: &LearnedPosition) -> Result<(), ModelError> {
        let [_, channels, height, width] = shape;
        let [_, expected, ph, pw] = self.projection.weight.shape().dims();
        if channels != expected {
            return Err(ModelError::PixelValues {
                shape,
                problem: format!(
                    "{channels} channel{}, the model takes {expected} (num_channels in \
                     config.json)",
                    if channels == 1 { "" } else { "s" }
                ),
                fix: format!(
                    "give images of {expected} channels laid out [batch, channels, height, width], \
                     channels first as transformers' image processors write them (a grayscale \
                     image repeated on {expected} channels, an RGBA image without its alpha)"
                ),
            });
        }
        if height < ph || width < pw {
            let trained = position
                .patch_grid()
                .map(|g| format!("{} x {}", g.trained[0] * ph, g.trained[1] * pw))
                .unwrap_or_else(|| "its image_size".into());
            return Err(ModelError::PixelValues {
                shape,
                problem: format!(
                    "an image of {height} x {width} pixels is smaller than one patch of {ph} x \
                     {pw} pixels (patch_size in config.json): it has no patch to embed"
                ),
                fix: format!(
                    "resize images to at least {ph} x {pw} pixels (the model was trained at \
                     {trained}, image_size in config.json, where its image processor resizes them)"
                ),
            });
        }
        Ok(())
    }

    /// `cat(cls_token, patches) + positions`, the positions those [`LearnedPosition::on_image`]
    /// gives for the image's size (transformers' `interpolate_pos_encoding`). Every check runs
    /// before anything is launched.
    ///
    /// # Shapes
    ///
    /// - `pixel_values`: `[batch, num_channels, height, width]`
    /// - output: `[batch, 1 + (height / patch) * (width / patch), hidden_size]`
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check), and [`ModelError::Position`] for a grid the layer refuses
    /// (one too large to resize the table to).
    pub fn forward(
        &self,
        pixel_values: Tensor<4>,
        position: &LearnedPosition,
    ) -> Result<Tensor<3>, ModelError> {
        let shape = pixel_values.dims();
        self.check(shape, position)?;
        let [batch, _, height, width] = shape;
        // [1 + rows * cols, hidden]: the class row, then the grid's rows, row-major.
        let positions = position.on_image([height, width], self.projection.kernel_size)?;
        // transformers casts the pixels to the projection's dtype.
        let weight = self.projection.weight.val();
        let pixel_values = if pixel_values.dtype() == weight.dtype() {
            pixel_values
        } else {
            pixel_values.cast(weight.dtype())
        };
        let patches = self.projection.forward(pixel_values);
        let [_, d_model, rows, cols] = patches.dims();
        // [batch, hidden, rows, cols] -> [batch, rows * cols, hidden], row-major over the grid
        // (transformers' `flatten(2).transpose(1, 2)`).
        let patches = patches
            .reshape([batch, d_model, rows * cols])
            .swap_dims(1, 2);
        let cls = self.cls_token.val().expand([batch, 1, d_model]);
        Ok(Tensor::cat(vec![cls, patches], 1) + positions.unsqueeze::<3>())
    }
}

/// Bidirectional multi-head self-attention with an output projection (`ViTAttention`,
/// `Dinov2Attention`), through the layer's [`attend`] scaled by `head_dim^-0.5`.
#[derive(Module, Debug)]
pub struct ViTAttention {
    /// `attention.attention.query`.
    pub query: Linear,
    /// `attention.attention.key`.
    pub key: Linear,
    /// `attention.attention.value`.
    pub value: Linear,
    /// `attention.output.dense`.
    pub output: Linear,
    /// Heads.
    pub n_heads: usize,
}

impl ViTAttention {
    /// `n_heads` heads of `d_head` over `d_model`, with query, key and value biases where
    /// `qkv_bias`.
    pub fn new(
        d_model: usize,
        n_heads: usize,
        d_head: usize,
        qkv_bias: bool,
        device: &Device,
    ) -> Self {
        let inner = n_heads * d_head;
        let projection = || {
            LinearConfig::new(d_model, inner)
                .with_bias(qkv_bias)
                .init(device)
        };
        Self {
            query: projection(),
            key: projection(),
            value: projection(),
            output: LinearConfig::new(inner, d_model).init(device),
            n_heads,
        }
    }

    /// `dense(softmax(q k^T / sqrt(d_head)) v)` over every token, no mask.
    ///
    /// # Shapes
    ///
    /// - `x`: `[batch, seq, hidden_size]`, and the output
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [batch, seq, _] = x.dims();
        let h = self.n_heads;
        let split = |t: Tensor<3>| {
            let inner = t.dims()[2];
            t.reshape([batch, seq, h, inner / h]).swap_dims(1, 2)
        };
        let q = split(self.query.forward(x.clone()));
        let k = split(self.key.forward(x.clone()));
        let v = split(self.value.forward(x));
        let attended = attend(q, k, v, &AttendOptions::new()).swap_dims(1, 2);
        let [_, _, _, d_head] = attended.dims();
        self.output
            .forward(attended.reshape([batch, seq, h * d_head]))
    }
}

/// One pre-norm encoder layer (`ViTLayer`).
#[derive(Module, Debug)]
pub struct ViTLayer {
    /// `layernorm_before`.
    pub layernorm_before: LayerNorm,
    /// `attention`.
    pub attention: ViTAttention,
    /// `layernorm_after`.
    pub layernorm_after: LayerNorm,
    /// `intermediate.dense` (the MLP's `fc1`).
    pub intermediate: Linear,
    /// `output.dense` (the MLP's `fc2`).
    pub output: Linear,
    /// `hidden_act`.
    #[module(skip)]
    pub activation: Activation,
}

impl ViTLayer {
    /// `h = x + attention(LN(x))`, then `h + fc2(act(fc1(LN(h))))`.
    ///
    /// # Shapes
    ///
    /// - `x`: `[batch, seq, hidden_size]`, and the output
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let x = x.clone() + self.attention.forward(self.layernorm_before.forward(x));
        let hidden = self
            .intermediate
            .forward(self.layernorm_after.forward(x.clone()));
        x + self.output.forward(self.activation.apply(hidden))
    }
}

/// Everything of ViT but the position table: what [`Checkpoint::load`] reads.
#[derive(Module, Debug)]
pub struct ViTWeights {
    /// `vit.embeddings` (the patch convolution and the class token).
    pub embeddings: ViTEmbeddings,
    /// `vit.encoder.layer`.
    pub layers: Vec<ViTLayer>,
    /// `vit.layernorm`, after the last layer.
    pub layernorm: LayerNorm,
    /// `classifier`, none where `num_labels` is 0 (transformers' `nn.Identity`).
    pub classifier: Option<Linear>,
}

/// `ViTForImageClassification`. Built by [`load`].
#[derive(Module, Debug)]
pub struct ViT {
    /// `vit.embeddings.position_embeddings`: the class row, then the trained grid's rows.
    pub position: LearnedPosition,
    /// The rest.
    pub weights: ViTWeights,
}

impl ViTConfig {
    /// Builds the model, weights zero until loaded.
    ///
    /// # Errors
    ///
    /// [`ModelError::Config`] for an activation without a port, no attention head, or a patch
    /// grid that does not fit (see [`PatchLayout::of`]), [`ModelError::UnportedSetting`] for a
    /// patch or a grid that is not square, [`ModelError::Position`] for a table the layer
    /// refuses.
    pub fn init(&self, path: &str, device: &Device) -> Result<ViT, ModelError> {
        let activation = Activation::from_hf(&self.hidden_act, path)?;
        let layout = PatchLayout::of(self.image_size, self.patch_size, true, path)?;
        let d = self.hidden_size;
        let d_head = head_dim(d, self.num_attention_heads, self.head_dim, path)?;
        let norm = || {
            LayerNormConfig::new(d)
                .with_epsilon(self.layer_norm_eps)
                .init(device)
        };
        let layers = (0..self.num_hidden_layers)
            .map(|_| ViTLayer {
                layernorm_before: norm(),
                attention: ViTAttention::new(
                    d,
                    self.num_attention_heads,
                    d_head,
                    self.qkv_bias,
                    device,
                ),
                layernorm_after: norm(),
                intermediate: LinearConfig::new(d, self.intermediate_size).init(device),
                output: LinearConfig::new(self.intermediate_size, d).init(device),
                activation,
            })
            .collect();
        let labels = count_labels(self.id2label.as_ref(), self.num_labels);
        Ok(ViT {
            position: layout.position_table(d, device)?,
            weights: ViTWeights {
                embeddings: ViTEmbeddings::new(&layout, self.num_channels, d, device),
                layers,
                layernorm: norm(),
                classifier: (labels > 0).then(|| LinearConfig::new(d, labels).init(device)),
            },
        })
    }
}

impl ViT {
    /// The logits of a batch of images: the classifier on the class token's row of
    /// [`hidden_states`](Self::hidden_states).
    ///
    /// # Shapes
    ///
    /// - `pixel_values`: `[batch, num_channels, height, width]`, any size of at least one patch
    /// - output: `[batch, num_labels]` (`[batch, hidden_size]` where `num_labels` is 0)
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
    /// final LayerNorm, the positions resized to the image's grid (see the module docs).
    ///
    /// # Shapes
    ///
    /// - `pixel_values`: `[batch, num_channels, height, width]`
    /// - output: `[batch, 1 + (height / patch) * (width / patch), hidden_size]`
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

    /// The classifier on the class token's row.
    ///
    /// # Shapes
    ///
    /// - `hidden`: `[batch, seq, hidden_size]`
    /// - output: `[batch, num_labels]` (`[batch, hidden_size]` without a classifier)
    pub fn head(&self, hidden: Tensor<3>) -> Tensor<2> {
        let [batch, _, d_model] = hidden.dims();
        let cls = hidden
            .slice([0..batch, 0..1, 0..d_model])
            .reshape([batch, d_model]);
        match &self.weights.classifier {
            Some(classifier) => classifier.forward(cls),
            None => cls,
        }
    }
}

/// The remaps of a `ViTForImageClassification` checkpoint (the keys `save_pretrained` writes)
/// into [`ViTWeights`]; the position table is loaded apart (see [`load`]).
pub fn remaps() -> Vec<Remap> {
    vec![
        (
            "vit.embeddings.patch_embeddings.projection",
            "embeddings.projection",
        ),
        ("vit.embeddings.cls_token", "embeddings.cls_token"),
        (
            "vit.encoder.layer.{}.layernorm_before",
            "layers.{}.layernorm_before",
        ),
        (
            "vit.encoder.layer.{}.attention.attention.query",
            "layers.{}.attention.query",
        ),
        (
            "vit.encoder.layer.{}.attention.attention.key",
            "layers.{}.attention.key",
        ),
        (
            "vit.encoder.layer.{}.attention.attention.value",
            "layers.{}.attention.value",
        ),
        (
            "vit.encoder.layer.{}.attention.output.dense",
            "layers.{}.attention.output",
        ),
        (
            "vit.encoder.layer.{}.layernorm_after",
            "layers.{}.layernorm_after",
        ),
        (
            "vit.encoder.layer.{}.intermediate.dense",
            "layers.{}.intermediate",
        ),
        ("vit.encoder.layer.{}.output.dense", "layers.{}.output"),
        ("vit.layernorm", "layernorm"),
        ("classifier", "classifier"),
    ]
}

/// The checkpoint key of ViT's position table.
pub const POSITION_KEY: &str = "vit.embeddings.position_embeddings";

/// Builds the `ViTForImageClassification` `checkpoint` describes and loads its weights:
/// [`ViTWeights`] with [`Checkpoint::load`], the position table ([`POSITION_KEY`],
/// `[1, 1 + patches, hidden_size]` in the file) into the layer's [`LearnedPosition`].
///
/// # Errors
///
/// [`ModelError::Unsupported`] for another `model_type`, what [`ViTConfig::init`] refuses, and
/// what [`Checkpoint::load`] gives ([`ModelError::MissingTensor`] naming the transformers key,
/// [`ModelError::ShapeMismatch`]).
pub fn load(checkpoint: &Checkpoint, device: &Device) -> Result<ViT, ModelError> {
    expect_model_type(checkpoint, "vit", "vit::load")?;
    let config: ViTConfig = checkpoint.config()?;
    let path = checkpoint.config_path.display().to_string();
    let mut model = config.init(&path, device)?;
    checkpoint.load(&mut model.weights, &remaps(), device)?;
    load_position(checkpoint, POSITION_KEY, &mut model.position, device)?;
    Ok(model)
}
