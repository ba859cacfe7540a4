//! [`Rope::apply_positions`]: rotation at any [`Positions`], grids included (image patches,
//! video frames, M-RoPE's mixed prompts), through the same fused kernel as the one-axis path.

use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_positional_kernels::Grid;

use super::Rope;
use super::axes::grid_angle_rows;
use crate::cache::{DeviceKey, count_host_table};
use crate::{PositionError, Positions};

impl Rope {
    /// Rotates queries or keys at `positions`, whatever their kind:
    ///
    /// - `Offset(k)`: [`apply`](Self::apply) at offset `k`;
    /// - `Explicit(p)`: [`apply_at`](Self::apply_at);
    /// - `Grid(grid)`: the tokens of a grid in row-major order, each pair turned by the token's
    ///   coordinate on the pair's axis ([`RopeAxes`](super::RopeAxes)). The angles depend on the
    ///   grid's sizes only: computed on the host once per grid (as the one-axis tables, in this
    ///   rope's arithmetic) and kept on the device, reused by every call with that grid;
    /// - `Axes(p)`: explicit positions on several axes (Qwen2-VL's M-RoPE ids), the angles
    ///   computed on the device in f32 as transformers computes them
    ///   (`position_ids.float() * inv_freq`, then cos and sin). A negative position turns
    ///   backwards, as in transformers.
    ///
    /// A one-axis position sits at that position on every axis (M-RoPE's text tokens). No read
    /// from the device; every check is on shapes.
    ///
    /// # Shapes
    ///
    /// - x: `[batch, n_heads, seq, d_head]`
    /// - `Positions::Explicit`: `[batch or 1, seq]`
    /// - `Positions::Grid`: `grid.len() == seq`
    /// - `Positions::Axes`: `[batch or 1, seq, axes]`
    /// - output: `[batch, n_heads, seq, d_head]`
    ///
    /// # Errors
    ///
    /// A grid that does not hold `seq` tokens, positions with another number of axes than this
    /// rope's [`RopeAxes`](super::RopeAxes), positions of another shape, heads of another width.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{Grid, Positions, RopeAxes, RopeConfig, RopeLayout};
    ///
    /// let device = Device::flex();
    /// // Qwen2-VL's vision encoder: rows on the first half of the pairs, columns on the second.
    /// let rope = RopeConfig::new(16)
    ///     .with_layout(RopeLayout::HalfSplit)
    ///     .with_axes(RopeAxes::Axial(2))
    ///     .init(&device);
    /// let q = Tensor::<4>::ones([1, 2, 12, 16], &device); // a 3 x 4 grid of patches
    /// let rotated = rope.try_apply_positions(q.clone(), Positions::Grid(Grid::new([3, 4]))).unwrap();
    /// assert_eq!(rotated.dims(), [1, 2, 12, 16]);
    /// // 12 tokens are not a 3 x 5 grid: a clear error.
    /// let err = rope.try_apply_positions(q, Positions::Grid(Grid::new([3, 5]))).unwrap_err();
    /// assert!(err.to_string().contains("holds 15 tokens but 12 were given"));
    /// ```
    pub fn try_apply_positions(
        &self,
        x: Tensor<4>,
        positions: Positions,
    ) -> Result<Tensor<4>, PositionError> {
        let [batch, _, seq, d_head] = x.dims();
        if d_head != self.d_head {
            return Err(PositionError::ShapeMismatch {
                what: "rope: the width of the heads",
                expected: vec![self.d_head],
                got: vec![d_head],
                fix: "build the rope with RopeConfig::new(d_head) for these heads",
            });
        }
        let axes = self.axes.axes();
        let wrong_axes = |got: usize| PositionError::GridAxes {
            scheme: format!("a rope with axes {}", self.axes.name()),
            expected: axes,
            got,
            fix: "give positions with one coordinate per axis of the rope's RopeAxes (or one \
                  position per token, which sits on every axis), or build the rope with the \
                  RopeAxes of these positions",
        };
        match positions {
            Positions::Offset(offset) => Ok(self.apply(x, offset)),
            Positions::Explicit(p) => {
                check_rows(&p.dims(), batch, seq)?;
                Ok(self.apply_at(x, p))
            }
            Positions::Grid(grid) => {
                if grid.len() != seq {
                    return Err(PositionError::GridLength {
                        grid: grid.to_string(),
                        tokens: grid.len(),
                        seq,
                    });
                }
                if grid.axes() == 1 {
                    return Ok(self.apply(x, 0));
                }
                if grid.axes() != axes {
                    return Err(wrong_axes(grid.axes()));
                }
                let (cos, sin) = self.grid_angles(&grid);
                let pairs = cos.dims()[1];
                let shape = [1, 1, seq, pairs];
                Ok(self.rotate(x, cos.reshape(shape), sin.reshape(shape)))
            }
            Positions::Axes(p) => {
                let [n, len, got] = p.dims();
                check_rows(&[n, len], batch, seq)?;
                if got == 1 {
                    return Ok(self.apply_at(x, p.reshape([n, len])));
                }
                if got != axes {
                    return Err(wrong_axes(got));
                }
                let (cos, sin) = self.axes_angles(p);
                let pairs = cos.dims()[2];
                let shape = [n, 1, seq, pairs];
                Ok(self.rotate(x, cos.reshape(shape), sin.reshape(shape)))
            }
        }
    }

    /// [`try_apply_positions`](Self::try_apply_positions), panicking with its message.
    ///
    /// # Shapes
    ///
    /// As [`try_apply_positions`](Self::try_apply_positions).
    ///
    /// # Panics
    ///
    /// On what [`try_apply_positions`](Self::try_apply_positions) refuses.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use burn_positional::{Grid, Positions, RopeAxes, RopeConfig};
    ///
    /// let device = Device::flex();
    /// let rope = RopeConfig::new(8).with_axes(RopeAxes::Axial(2)).init(&device);
    /// let k = Tensor::<4>::ones([2, 1, 6, 8], &device);
    /// assert_eq!(rope.apply_positions(k, Positions::Grid(Grid::new([2, 3]))).dims(), [2, 1, 6, 8]);
    /// ```
    pub fn apply_positions(&self, x: Tensor<4>, positions: Positions) -> Tensor<4> {
        self.try_apply_positions(x, positions)
            .unwrap_or_else(|err| panic!("{err}"))
    }

    /// `cos` and `sin` of a grid's tokens, `[grid.len(), pairs]`: built on the host once per
    /// grid (and device), kept for the next call with that grid.
    fn grid_angles(&self, grid: &Grid) -> (Tensor<2>, Tensor<2>) {
        let device = self.cos.device();
        let key = (DeviceKey::new(&device, DType::F32), grid.clone());
        self.grid_angles.with(&key, |slot| {
            slot.get_or_insert_with(|| {
                let (inv_freq, _) = self.frequencies(0);
                let pairs = inv_freq.len();
                let pair_axes = self.axes.pair_axes(pairs);
                let (cos, sin) = grid_angle_rows(
                    &grid.coordinates(),
                    grid.axes(),
                    &pair_axes,
                    &inv_freq,
                    self.arithmetic,
                );
                count_host_table();
                let shape = [grid.len(), pairs];
                (
                    Tensor::from_data(TensorData::new(cos, shape), &device),
                    Tensor::from_data(TensorData::new(sin, shape), &device),
                )
            })
            .clone()
        })
    }

    /// `cos` and `sin` of explicit positions on several axes, `[n, seq, pairs]`, on the device:
    /// each pair takes its axis's coordinate (a gather of `pairs` columns), times its inverse
    /// frequency, in f32.
    fn axes_angles(&self, positions: Tensor<3, Int>) -> (Tensor<3>, Tensor<3>) {
        let device = self.cos.device();
        let (inv_freq, _) = self.device_frequencies(super::scaling::Regime::Trained);
        let pairs = inv_freq.dims()[1];
        let key = DeviceKey::new(&device, DType::I64);
        let pair_axes = self.pair_axes.with(&key, |slot| {
            slot.get_or_insert_with(|| {
                let axes: Vec<i64> = self
                    .axes
                    .pair_axes(pairs)
                    .into_iter()
                    .map(|a| a as i64)
                    .collect();
                Tensor::from_data(TensorData::new(axes, [pairs]), &device)
            })
            .clone()
        });
        // [n, seq, axes] -> [n, seq, pairs]: pair j reads its axis's coordinate.
        let per_pair = positions.float().select(2, pair_axes);
        let angles = per_pair * inv_freq.reshape([1, 1, pairs]);
        (angles.clone().cos(), angles.sin())
    }
}

/// Refuses positions that are not `[batch or 1, seq]` (their first two dimensions).
fn check_rows(dims: &[usize], batch: usize, seq: usize) -> Result<(), PositionError> {
    if dims[1] == seq && (dims[0] == 1 || dims[0] == batch) {
        return Ok(());
    }
    Err(PositionError::ShapeMismatch {
        what: "rope: the positions' [batch or 1, seq]",
        expected: vec![batch, seq],
        got: dims.to_vec(),
        fix: "give one position per token, or one row shared by the batch",
    })
}
