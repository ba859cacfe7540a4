//! Where a token sits on a grid: the patches of an image (rows, columns) or of a video (frames,
//! rows, columns), one axis for text.
//!
//! A [`Grid`] holds sizes only; its tokens are numbered row-major (the last axis fastest), as a
//! vision transformer flattens its patch grid (`flatten(2)` of a `[batch, d, rows, columns]`
//! convolution output), and token `i` sits at the coordinates [`Grid::coordinates`] gives.

/// Why a grid was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GridError {
    /// No axis, or more than three.
    #[error(
        "a grid has 1, 2 or 3 axes (frames, rows, columns), got {axes} ({sizes:?}); give one size \
         per axis"
    )]
    Axes {
        /// How many were given.
        axes: usize,
        /// The sizes given.
        sizes: Vec<i64>,
    },
    /// An axis of size zero or below.
    #[error(
        "grid axis {axis} has size {size} in {sizes:?}; every axis needs at least one patch (an \
         image smaller than one patch has none: resize it to at least the patch size)"
    )]
    Size {
        /// The axis.
        axis: usize,
        /// Its size.
        size: i64,
        /// The sizes given.
        sizes: Vec<i64>,
    },
    /// More tokens than the kernels' 32-bit position arithmetic numbers.
    #[error(
        "grid {sizes:?} holds {tokens} tokens, past {limit}, the most the kernels number; split \
         the input into smaller grids"
    )]
    TooLarge {
        /// The sizes given.
        sizes: Vec<i64>,
        /// Their product (saturated).
        tokens: u128,
        /// `i32::MAX`.
        limit: i64,
    },
}

/// The sizes of a grid of 1 to 3 axes, each at least 1, at most `i32::MAX` tokens in all.
///
/// ```
/// use burn_positional_kernels::Grid;
///
/// let grid = Grid::new([2, 3]); // 2 rows of 3 patches
/// assert_eq!(grid.len(), 6);
/// assert_eq!(grid.coordinates(), [0, 0, 0, 1, 0, 2, 1, 0, 1, 1, 1, 2]);
/// assert!(Grid::try_new([4, 0]).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Grid {
    sizes: Vec<usize>,
}

impl Grid {
    /// A grid of these sizes (frames, rows, columns; or rows, columns; or one axis).
    ///
    /// # Panics
    ///
    /// On the sizes [`try_new`](Self::try_new) refuses, with its message.
    pub fn new(sizes: impl AsRef<[usize]>) -> Self {
        Self::try_new(sizes).unwrap_or_else(|err| panic!("{err}"))
    }

    /// A grid of these sizes, or why not: no axis or more than three, an axis of size 0, more
    /// than `i32::MAX` tokens.
    pub fn try_new(sizes: impl AsRef<[usize]>) -> Result<Self, GridError> {
        let sizes = sizes.as_ref();
        let signed: Vec<i64> = sizes
            .iter()
            .map(|&s| i64::try_from(s).unwrap_or(i64::MAX))
            .collect();
        Self::from_signed(&signed)
    }

    /// A grid from signed sizes, as checkpoints and processors give them (`image_grid_thw` is an
    /// `int64` tensor): a negative size is refused by name, never wrapped.
    pub fn from_signed(sizes: &[i64]) -> Result<Self, GridError> {
        if sizes.is_empty() || sizes.len() > 3 {
            return Err(GridError::Axes {
                axes: sizes.len(),
                sizes: sizes.to_vec(),
            });
        }
        if let Some((axis, &size)) = sizes.iter().enumerate().find(|(_, s)| **s < 1) {
            return Err(GridError::Size {
                axis,
                size,
                sizes: sizes.to_vec(),
            });
        }
        let tokens = sizes
            .iter()
            .fold(1u128, |n, &s| n.saturating_mul(s as u128));
        let limit = i32::MAX as i64;
        if tokens > limit as u128 {
            return Err(GridError::TooLarge {
                sizes: sizes.to_vec(),
                tokens,
                limit,
            });
        }
        Ok(Self {
            sizes: sizes.iter().map(|&s| s as usize).collect(),
        })
    }

    /// The size of each axis.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// How many axes: 1, 2 or 3.
    pub fn axes(&self) -> usize {
        self.sizes.len()
    }

    /// How many tokens: the product of the sizes.
    pub fn len(&self) -> usize {
        self.sizes.iter().product()
    }

    /// Never: every axis holds at least one token.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The coordinates of every token, row-major `[len, axes]` (token `i`'s coordinate on the
    /// last axis is `i % sizes[last]`).
    pub fn coordinates(&self) -> Vec<i64> {
        let axes = self.axes();
        let mut out = Vec::with_capacity(self.len() * axes);
        for i in 0..self.len() {
            let mut rest = i;
            let start = out.len();
            out.resize(start + axes, 0);
            for a in (0..axes).rev() {
                out[start + a] = (rest % self.sizes[a]) as i64;
                rest /= self.sizes[a];
            }
        }
        out
    }
}

impl std::fmt::Display for Grid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sizes: Vec<String> = self.sizes.iter().map(usize::to_string).collect();
        write!(f, "{}", sizes.join("x"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinates_are_row_major() {
        let grid = Grid::new([2, 2, 3]);
        let c = grid.coordinates();
        assert_eq!(c.len(), 12 * 3);
        // Token 7 = frame 1, row 0, column 1.
        assert_eq!(&c[21..24], &[1, 0, 1]);
        assert_eq!(Grid::new([5]).coordinates(), [0, 1, 2, 3, 4]);
    }

    #[test]
    fn bad_grids_are_named() {
        let err = Grid::from_signed(&[2, -3]).unwrap_err();
        assert!(err.to_string().contains("axis 1 has size -3"), "{err}");
        assert!(matches!(
            Grid::try_new([]).unwrap_err(),
            GridError::Axes { axes: 0, .. }
        ));
        assert!(matches!(
            Grid::try_new([1, 2, 3, 4]).unwrap_err(),
            GridError::Axes { axes: 4, .. }
        ));
        assert!(matches!(
            Grid::try_new([1 << 16, 1 << 16]).unwrap_err(),
            GridError::TooLarge { .. }
        ));
        assert_eq!(Grid::new([3, 4]).to_string(), "3x4");
    }
}
