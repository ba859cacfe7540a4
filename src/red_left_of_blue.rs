//! "Is red left of blue?": the picture version of "who bites whom?", a task only positions can
//! solve.
//!
//! A picture is [`SIZE`] x [`SIZE`] pixels on white, cut into patches [`PATCH`] pixels wide: a
//! [`GRID`] x [`GRID`] grid. One patch is red, another blue, anywhere on the grid but in
//! different columns; the answer is whether red is left of blue. A picture and its twin, red and
//! blue trading places, hold the same patches (one red, one blue, the rest white) and have
//! opposite answers: a model that sees the patches but not where they are gives both the same
//! answer, so it is right for exactly one of them. The split keeps twins together, so on either
//! set such a model scores exactly 50 %.

use burn::prelude::*;

use crate::rng::SplitMix64;

/// Pixels per side of a picture.
pub const SIZE: usize = 16;
/// Pixels per side of a patch.
pub const PATCH: usize = 4;
/// Patches per side of the grid.
pub const GRID: usize = SIZE / PATCH;
/// Colour channels (red, green, blue).
pub const CHANNELS: usize = 3;
/// The answers, by class index: 0 = blue is left of red, 1 = red is left of blue.
pub const ANSWERS: [&str; 2] = ["blue left of red", "red left of blue"];

/// A patch of the grid: row and column, from the top left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cell {
    /// From the top, `0..GRID`.
    pub row: usize,
    /// From the left, `0..GRID`.
    pub col: usize,
}

impl Cell {
    /// The cell of patch `index` in row-major order (the order of the patch tokens).
    pub fn of_patch(index: usize) -> Self {
        Self {
            row: index / GRID,
            col: index % GRID,
        }
    }

    /// This cell's patch index in row-major order.
    pub fn patch(self) -> usize {
        self.row * GRID + self.col
    }
}

/// A picture: a red patch and a blue patch, in different columns, on white.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Picture {
    /// Where the red patch is.
    pub red: Cell,
    /// Where the blue patch is.
    pub blue: Cell,
}

impl Picture {
    /// The answer: 1 when red is left of blue, else 0 (an index in [`ANSWERS`]).
    pub fn answer(&self) -> usize {
        usize::from(self.red.col < self.blue.col)
    }

    /// The twin: red and blue trade places. The same patches, the opposite answer.
    pub fn swapped(&self) -> Self {
        Self {
            red: self.blue,
            blue: self.red,
        }
    }

    /// The pixels, channels first: `[CHANNELS, SIZE, SIZE]` row-major, in `0..=1`.
    pub fn pixels(&self) -> Vec<f32> {
        let mut pixels = vec![1.0; CHANNELS * SIZE * SIZE];
        for (cell, colour) in [(self.red, [1.0, 0.0, 0.0]), (self.blue, [0.0, 0.0, 1.0])] {
            for (channel, value) in colour.into_iter().enumerate() {
                for y in cell.row * PATCH..(cell.row + 1) * PATCH {
                    for x in cell.col * PATCH..(cell.col + 1) * PATCH {
                        pixels[(channel * SIZE + y) * SIZE + x] = value;
                    }
                }
            }
        }
        pixels
    }

    /// A short description: `red (1, 0), blue (2, 3)` (row, column).
    pub fn describe(&self) -> String {
        format!(
            "red ({}, {}), blue ({}, {})",
            self.red.row, self.red.col, self.blue.row, self.blue.col
        )
    }
}

/// Every picture, split into train and held-out sets: the twins (a picture and
/// [`Picture::swapped`]) in a seeded shuffle, every `holdout_every`-th pair held out, twins side
/// by side (`[a, a.swapped(), b, b.swapped(), ...]`). A model blind to where patches are gives
/// twins the same answer, so on either set it is right for exactly half of the pictures.
///
/// # Panics
///
/// If `holdout_every` is 0.
pub fn split(seed: u64, holdout_every: usize) -> (Vec<Picture>, Vec<Picture>) {
    assert!(holdout_every > 0, "holdout_every must be at least 1");
    let cells = GRID * GRID;
    let mut pairs = Vec::new();
    for a in 0..cells {
        for b in a + 1..cells {
            let (red, blue) = (Cell::of_patch(a), Cell::of_patch(b));
            if red.col != blue.col {
                let picture = Picture { red, blue };
                pairs.push([picture, picture.swapped()]);
            }
        }
    }
    // Fisher-Yates: the same split on every machine.
    let mut rng = SplitMix64::new(seed);
    for i in (1..pairs.len()).rev() {
        pairs.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let (mut train, mut held_out) = (Vec::new(), Vec::new());
    for (i, pair) in pairs.into_iter().enumerate() {
        if i % holdout_every == 0 {
            held_out.extend(pair);
        } else {
            train.extend(pair);
        }
    }
    (train, held_out)
}

/// Pictures `[n, CHANNELS, SIZE, SIZE]` and answers `[n]` of a set of pictures.
pub fn batch(pictures: &[Picture], device: &Device) -> (Tensor<4>, Tensor<1, Int>) {
    let n = pictures.len();
    let pixels: Vec<f32> = pictures.iter().flat_map(Picture::pixels).collect();
    let answers: Vec<i64> = pictures.iter().map(|p| p.answer() as i64).collect();
    (
        Tensor::from_data(TensorData::new(pixels, [n, CHANNELS, SIZE, SIZE]), device),
        Tensor::from_data(TensorData::new(answers, [n]), device),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_picture_once_twins_together() {
        let (train, held_out) = split(42, 5);
        // 16 cells, ordered pairs in different columns: 16 x 12.
        assert_eq!(train.len() + held_out.len(), 16 * 12);
        for set in [&train, &held_out] {
            for twins in set.chunks(2) {
                assert_eq!(twins[1], twins[0].swapped());
                assert_ne!(twins[0].answer(), twins[1].answer());
            }
        }
        let mut all: Vec<_> = train
            .iter()
            .chain(&held_out)
            .map(Picture::describe)
            .collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 16 * 12);
    }

    #[test]
    fn pixels_put_each_colour_on_its_patch() {
        let picture = Picture {
            red: Cell { row: 1, col: 0 },
            blue: Cell { row: 2, col: 3 },
        };
        assert_eq!(picture.answer(), 1);
        let pixels = picture.pixels();
        let at = |c: usize, y: usize, x: usize| pixels[(c * SIZE + y) * SIZE + x];
        // Red's patch: rows 4..8, columns 0..4.
        assert_eq!([at(0, 5, 2), at(1, 5, 2), at(2, 5, 2)], [1.0, 0.0, 0.0]);
        // Blue's patch: rows 8..12, columns 12..16.
        assert_eq!(
            [at(0, 11, 15), at(1, 11, 15), at(2, 11, 15)],
            [0.0, 0.0, 1.0]
        );
        // White elsewhere.
        assert_eq!([at(0, 0, 0), at(1, 0, 0), at(2, 0, 0)], [1.0, 1.0, 1.0]);
    }
}
