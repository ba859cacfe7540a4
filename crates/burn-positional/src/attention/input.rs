//! What a block takes and gives: [`AttentionInput`], [`AttentionOutput`] and [`padding_mask`].

use burn::tensor::{Bool, Int, Tensor};

use crate::Positions;

/// The block's output and the attention weights that produced it.
#[derive(Debug, Clone)]
pub struct AttentionOutput {
    /// `[batch, seq, d_model]`.
    pub output: Tensor<3>,
    /// `[batch, n_heads, seq, seq_k]`: row `i` is how token `i` spreads its attention
    /// (`seq_k = seq` without a cache).
    pub weights: Tensor<4>,
}

/// What a block attends over: the tokens, and optionally a key padding mask and a score bias
/// computed outside (one T5 table shared by every block), as burn's `MhaInput` carries `mask_pad`.
///
/// ```
/// use burn::prelude::*;
/// use burn_positional::{AttentionInput, SelfAttentionConfig, padding_mask};
///
/// let device = Device::flex();
/// let block = SelfAttentionConfig::new(32, 4).init(&device);
/// let ids = Tensor::<2, Int>::from_data([[0, 0, 7, 8], [5, 6, 7, 8]], &device); // 0 pads
/// let x = Tensor::<3>::ones([2, 4, 32], &device);
/// let input = AttentionInput::new(x).key_padding(padding_mask(ids, 0));
/// assert_eq!(block.forward_input(input).dims(), [2, 4, 32]);
/// ```
#[derive(Debug, Clone)]
pub struct AttentionInput {
    /// `[batch, seq, d_model]`.
    pub x: Tensor<3>,
    /// `[batch, seq_k]`, true where the key is padding (`seq_k` counts cached keys too).
    pub key_padding: Option<Tensor<2, Bool>>,
    /// `[batch or 1, n_heads or 1, seq, seq_k]`, added to the scores beside the block's own.
    pub score_bias: Option<Tensor<4>>,
    /// `[batch or 1, seq]`: one position per token (packed documents restarting at 0, left
    /// padding), for RoPE and for the bias and window of the block; sequential from 0 when
    /// `None`.
    pub positions: Option<Tensor<2, Int>>,
    /// `[batch, seq]`: a document id per token; a token attends only within its document.
    pub segments: Option<Tensor<2, Int>>,
    /// Where the block's rope places the tokens when they sit on a grid (image patches, a
    /// video's frames, M-RoPE's mixed prompts); see [`rotary_at`](Self::rotary_at).
    pub rotary: Option<Positions>,
}

impl AttentionInput {
    /// Tokens alone.
    pub fn new(x: Tensor<3>) -> Self {
        Self {
            x,
            key_padding: None,
            score_bias: None,
            positions: None,
            segments: None,
            rotary: None,
        }
    }

    /// Keeps padded keys out of attention: `mask` is `[batch, seq_k]`, true at padding (see
    /// [`padding_mask`]). A query whose keys are all padding gets zero attention.
    pub fn key_padding(mut self, mask: Tensor<2, Bool>) -> Self {
        self.key_padding = Some(mask);
        self
    }

    /// Packed rows: several documents in one row, `segments` (`[batch, seq]`) their ids and
    /// `positions` (`[batch or 1, seq]`) each token's position in its document. Each token
    /// attends only within its document, and RoPE, ALiBi, T5 and the window measure with the
    /// positions, so a packed row gives what each document gives alone. Runs on the tiled path
    /// ([`SelfAttention`](crate::SelfAttention)'s docs): not with an outside score bias,
    /// `forward_weights`, a [`KvCache`](crate::KvCache) or dropout in training.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{AttentionInput, SelfAttentionConfig};
    ///
    /// let device = Device::flex();
    /// let block = SelfAttentionConfig::new(32, 4).with_causal(true).with_rotary().init(&device);
    /// let x = Tensor::<3>::ones([1, 5, 32], &device);
    /// let segments = Tensor::<2, Int>::from_data([[0, 0, 0, 1, 1]], &device);
    /// let positions = Tensor::<2, Int>::from_data([[0, 1, 2, 0, 1]], &device);
    /// let input = AttentionInput::new(x).packed(segments, positions);
    /// assert_eq!(block.forward_input(input).dims(), [1, 5, 32]);
    /// ```
    pub fn packed(mut self, segments: Tensor<2, Int>, positions: Tensor<2, Int>) -> Self {
        self.segments = Some(segments);
        self.positions = Some(positions);
        self
    }

    /// One position per token (`[batch or 1, seq]`), without segments: left padding, or
    /// positions that do not start at 0.
    pub fn positions(mut self, positions: Tensor<2, Int>) -> Self {
        self.positions = Some(positions);
        self
    }

    /// Rotary positions on a grid: the block's rope turns queries and keys at `positions`
    /// ([`Rope::apply_positions`](crate::Rope::apply_positions): `Positions::Grid` for the
    /// patches of an image in row-major order, `Positions::Axes` for M-RoPE's ids). Only the
    /// rotation reads them: the causal mask, the window, ALiBi and T5's buckets keep measuring
    /// along the sequence, where a distance has one axis (a 2D distance has no meaning for
    /// them). Not with a [`KvCache`](crate::KvCache). A block without a rope has nothing to turn
    /// and ignores them (a model can pass its grid to every block, whatever its scheme).
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{AttentionInput, Grid, Positions, RopeAxes, RopeConfig, SelfAttentionConfig};
    ///
    /// let device = Device::flex();
    /// // A vision block: axial 2D RoPE (rows on half the pairs, columns on the other half).
    /// let rope = RopeConfig::new(8).with_axes(RopeAxes::Axial(2));
    /// let block = SelfAttentionConfig::new(32, 4).with_rope(Some(rope)).init(&device);
    /// let patches = Tensor::<3>::ones([2, 12, 32], &device); // a 3 x 4 grid of patches
    /// let input = AttentionInput::new(patches).rotary_at(Positions::Grid(Grid::new([3, 4])));
    /// assert_eq!(block.forward_input(input).dims(), [2, 12, 32]);
    /// ```
    pub fn rotary_at(mut self, positions: Positions) -> Self {
        self.rotary = Some(positions);
        self
    }

    /// Adds `bias` (`[batch or 1, n_heads or 1, seq, seq_k]`) to the scores.
    pub fn score_bias(mut self, bias: Tensor<4>) -> Self {
        self.score_bias = Some(bias);
        self
    }
}

/// The key padding mask of token ids: true where the id is `padding_idx`. No read.
///
/// # Shapes
///
/// - ids: `[batch, seq]`; output: `[batch, seq]`
pub fn padding_mask(ids: Tensor<2, Int>, padding_idx: usize) -> Tensor<2, Bool> {
    ids.equal_elem(padding_idx as i64)
}
