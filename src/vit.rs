//! A tiny vision transformer (Dosovitskiy et al. 2021, without a class token): pictures cut into
//! patches, a linear projection of each patch, [`SelfAttention`] blocks, a final norm, mean
//! pooling over the patches and a linear head.
//!
//! Every position goes through the layer: an absolute scheme's vectors for the grid
//! ([`AbsolutePosition::on_grid`]: a learned patch grid, MAE's 2D sin-cos) are added to the
//! patch vectors, and the blocks' rope (axial 2D RoPE) turns queries and keys at the grid's
//! positions ([`AttentionInput::rotary_at`]). Mean pooling forgets where patches are, so
//! everything the model knows about where comes from those schemes.

use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;

use crate::schemes::GridScheme;
use crate::{
    AbsolutePosition, AbsolutePositionConfig, AttentionInput, Grid, Positions, RopeConfig,
    SelfAttention, SelfAttentionConfig,
};

/// Configuration of [`Vit`].
#[derive(Config, Debug, PartialEq)]
pub struct VitConfig {
    /// The grid of patches the absolute scheme is built for, `[rows, columns]`: a learned
    /// table has one row per patch of it.
    pub grid: Vec<usize>,
    /// Pixels per side of a patch.
    #[config(default = 4)]
    pub patch: usize,
    /// Colour channels of the pictures.
    #[config(default = 3)]
    pub channels: usize,
    /// Width of the patch vectors and blocks.
    #[config(default = 32)]
    pub d_model: usize,
    /// Heads per block.
    #[config(default = 4)]
    pub n_heads: usize,
    /// Attention blocks.
    #[config(default = 1)]
    pub n_blocks: usize,
    /// Number of classes.
    #[config(default = 2)]
    pub n_classes: usize,
    /// Position vectors added to the patch vectors, read on the grid.
    #[config(default = "AbsolutePositionConfig::None")]
    pub position: AbsolutePositionConfig,
    /// Rotary positions in every block, turned at the grid's positions.
    #[config(default = "None")]
    pub rope: Option<RopeConfig>,
}

/// See the [module docs](self).
///
/// ```
/// use burn::prelude::*;
/// use burn_positional_examples::schemes::GridScheme;
/// use burn_positional_examples::vit::VitConfig;
///
/// let device = Device::flex();
/// let vit = VitConfig::new(vec![4, 4]).with_scheme(GridScheme::Rope).init(&device);
/// let pictures = Tensor::<4>::zeros([5, 3, 16, 16], &device); // [batch, channels, height, width]
/// assert_eq!(vit.logits(pictures.clone()).dims(), [5, 2]); // [batch, n_classes]
/// let (logits, weights) = vit.forward_weights(pictures);
/// assert_eq!(weights.dims(), [5, 4, 16, 16]); // [batch, n_heads, patches, patches]
/// ```
#[derive(Module, Debug)]
pub struct Vit {
    /// `patch * patch * channels -> d_model`: the linear patch projection.
    pub patch_projection: Linear,
    /// The absolute scheme (none, a learned patch grid, MAE's sin-cos).
    pub position: AbsolutePosition,
    /// The attention blocks.
    pub blocks: Vec<SelfAttention>,
    /// Final norm.
    pub norm: LayerNorm,
    /// `d_model -> n_classes`.
    pub head: Linear,
    /// Pixels per side of a patch.
    pub patch: usize,
}

impl VitConfig {
    /// This config with `scheme`'s parts for its grid. Set `grid`, `d_model` and `n_heads`
    /// first: the learned table's rows and RoPE's width depend on them.
    ///
    /// # Panics
    ///
    /// If `grid` is not a grid (see [`Grid::new`]).
    pub fn with_scheme(self, scheme: GridScheme) -> Self {
        let d_head = self.d_model / self.n_heads.max(1);
        let parts = scheme.parts(&Grid::new(&self.grid), d_head);
        Self {
            position: parts.embedding,
            rope: parts.rope,
            ..self
        }
    }

    /// Builds the model.
    ///
    /// # Panics
    ///
    /// As [`AbsolutePositionConfig::init`] and [`SelfAttentionConfig::init`].
    pub fn init(&self, device: &Device) -> Vit {
        let block =
            SelfAttentionConfig::new(self.d_model, self.n_heads).with_rope(self.rope.clone());
        let patch_dim = self.patch * self.patch * self.channels;
        burn_positional::training::materialize(Vit {
            patch_projection: LinearConfig::new(patch_dim, self.d_model).init(device),
            position: self.position.init(self.d_model, device),
            blocks: (0..self.n_blocks).map(|_| block.init(device)).collect(),
            norm: LayerNormConfig::new(self.d_model).init(device),
            head: LinearConfig::new(self.d_model, self.n_classes).init(device),
            patch: self.patch,
        })
    }
}

/// Cuts pictures into patches, row-major (the last axis fastest, as a ViT flattens its patch
/// grid), each patch's pixels as `[patch row, patch column, channel]`; and the grid they sit
/// on.
///
/// # Shapes
///
/// - pictures: `[batch, channels, height, width]`
/// - output: `[batch, rows * columns, patch * patch * channels]`, with `rows = height / patch`,
///   `columns = width / patch`
///
/// # Panics
///
/// If `patch` does not divide the height and the width.
pub fn patchify(pictures: Tensor<4>, patch: usize) -> (Tensor<3>, Grid) {
    let [batch, channels, height, width] = pictures.dims();
    assert!(
        patch > 0 && height % patch == 0 && width % patch == 0,
        "pictures of {height} x {width} pixels do not cut into patches of {patch}: crop or pad \
         them to a multiple of the patch size"
    );
    let (rows, cols) = (height / patch, width / patch);
    let patches = pictures
        .reshape([batch, channels, rows, patch, cols, patch])
        .permute([0, 2, 4, 3, 5, 1]) // [batch, rows, cols, patch y, patch x, channels]
        .reshape([batch, rows * cols, patch * patch * channels]);
    (patches, Grid::new([rows, cols]))
}

impl Vit {
    /// Class logits through the blocks' fused attention (the training path): no weights, no
    /// device-to-host read.
    ///
    /// # Shapes
    ///
    /// - pictures: `[batch, channels, height, width]`; logits: `[batch, n_classes]`
    ///
    /// # Panics
    ///
    /// As [`hidden`](Self::hidden).
    pub fn logits(&self, pictures: Tensor<4>) -> Tensor<2> {
        let (patches, grid) = patchify(pictures, self.patch);
        self.pool_and_head(self.hidden(patches, &grid, false).0)
    }

    /// Class logits, and the last block's attention weights.
    ///
    /// # Shapes
    ///
    /// - pictures: `[batch, channels, height, width]`
    /// - logits: `[batch, n_classes]`; weights: `[batch, n_heads, patches, patches]`
    ///
    /// # Panics
    ///
    /// As [`hidden`](Self::hidden).
    pub fn forward_weights(&self, pictures: Tensor<4>) -> (Tensor<2>, Tensor<4>) {
        let (patches, grid) = patchify(pictures, self.patch);
        let (hidden, weights) = self.hidden(patches, &grid, true);
        (
            self.pool_and_head(hidden),
            weights.expect("a ViT has at least one block"),
        )
    }

    /// Normalized hidden states of patches on `grid`: the projected patches plus the
    /// absolute scheme's vectors for the grid, then the blocks (rope turned at the grid's
    /// positions) and the norm; the last block's weights when `weights` is set.
    ///
    /// # Shapes
    ///
    /// - patches: `[batch, grid.len(), patch * patch * channels]`
    /// - hidden: `[batch, grid.len(), d_model]`; weights: `[batch, n_heads, grid.len(), grid.len()]`
    ///
    /// # Panics
    ///
    /// With the layer's message when the absolute scheme refuses the grid (a learned table
    /// resized to a grid with another number of axes), or the rope the grid's length.
    pub fn hidden(
        &self,
        patches: Tensor<3>,
        grid: &Grid,
        weights: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let mut x = self.patch_projection.forward(patches); // [batch, seq, d_model]
        let positions = self
            .position
            .on_grid(grid)
            .unwrap_or_else(|err| panic!("{err}"));
        if let Some(positions) = positions {
            x = x + positions.unsqueeze::<3>(); // [1, seq, d_model], one row per patch
        }
        let mut last = None;
        for (i, block) in self.blocks.iter().enumerate() {
            // The tokens sit on the grid: a block's rope turns them there (one without ignores it).
            let input = AttentionInput::new(x).rotary_at(Positions::Grid(grid.clone()));
            if weights && i + 1 == self.blocks.len() {
                let out = block.forward_weights(input);
                (x, last) = (out.output, Some(out.weights));
            } else {
                x = block.forward_input(input);
            }
        }
        (self.norm.forward(x), last)
    }

    /// Mean pooling over the patches, then the head.
    fn pool_and_head(&self, hidden: Tensor<3>) -> Tensor<2> {
        self.head.forward(hidden.mean_dim(1).squeeze_dim::<2>(1)) // pooled: [batch, d_model]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_are_row_major_with_their_own_pixels() {
        let device = Device::flex();
        // 1 picture, 2 channels, 4 x 6 pixels, pixel value = channel * 100 + y * 10 + x.
        let values: Vec<f32> = (0..2)
            .flat_map(|c| {
                (0..4).flat_map(move |y| (0..6).map(move |x| (c * 100 + y * 10 + x) as f32))
            })
            .collect();
        let pictures = Tensor::<4>::from_data(TensorData::new(values, [1, 2, 4, 6]), &device);
        let (patches, grid) = patchify(pictures, 2);
        assert_eq!(grid, Grid::new([2, 3]));
        assert_eq!(patches.dims(), [1, 6, 8]);
        let patches: Vec<f32> = patches.into_data().iter::<f32>().collect();
        // Patch 4 = row 1, column 1: pixels y 2..4, x 2..4; [y, x, channel].
        assert_eq!(
            &patches[4 * 8..5 * 8],
            &[22.0, 122.0, 23.0, 123.0, 32.0, 132.0, 33.0, 133.0]
        );
    }
}
