//! The distance table's gradient in the tensor-core dQ kernel (`mma_backward.rs`), per warp
//! and without atomics: [`table_block`] folds one block's `dS` into the warp's table in shared
//! memory (a lane per diagonal, with sequential positions one distance each) or into the sums of
//! its two ends, and [`table_out`] reduces the ends over the warp in lane order and writes the
//! warp's table, which the host sums with the other warps' and cubes'.

use cubecl::prelude::*;

use super::Scalars;
use super::fragment::WARP;

/// One block's part of the distance table's gradient in warp `w` (see the module): `edge`, this
/// lane's `dS` of a block whose distances all clamp to one end (`low`: the first entry), goes to
/// that end's sum (`ends`); a block with distances `inside` the table has the warp's `dS` tile
/// in `ds_s` (`[rows, block]`, row `r` key `c` at distance `shift + c - r` from the keys' and
/// queries' offsets), whose diagonals lane `lane` sums in turn (diagonals `lane`, `lane + 32`,
/// ...), each into the table entry of its distance or an end's sum where it clamps. No two
/// lanes touch one entry: a diagonal is one distance. Every unit of the cube calls it.
#[cube]
pub(super) fn table_block(
    ds_s: &[f32],
    table_s: &mut [f32],
    ends: &mut Array<f32>,
    edge: f32,
    inside: bool,
    low: bool,
    p: &Scalars,
    shift: i32,
    w: usize,
    lane: usize,
    #[comptime] rows: usize,
    #[comptime] block: usize,
    #[comptime] table_slots: usize,
    #[comptime] emulate: bool,
) {
    let diagonals = comptime!(rows + block - 1);
    if inside {
        // The warp's tile written before any lane reads it (emulated: the virtual warp's units
        // are the cube's).
        if comptime!(emulate) {
            sync_cube();
        } else {
            sync_plane();
        }
        let base = w * rows * block;
        let first = p.key_offset - p.query_offset + shift - (rows - 1) as i32;
        #[unroll]
        for round in 0..comptime!(diagonals.div_ceil(WARP)) {
            let diagonal = round * WARP + lane;
            if diagonal < diagonals {
                let mut sum = 0.0f32;
                #[unroll]
                for r in 0..rows {
                    // Row r's key on this diagonal: c - r = diagonal - (rows - 1).
                    let c = diagonal as i32 + r as i32 - (rows - 1) as i32;
                    if c >= 0 && c < block as i32 {
                        sum += ds_s[base + r * block + c as usize];
                    }
                }
                let rel = first + diagonal as i32;
                if rel <= -p.reach {
                    ends[0] += sum;
                } else if rel >= p.reach {
                    ends[1] += sum;
                } else {
                    let at = w * table_slots + (rel + p.reach) as usize;
                    table_s[at] += sum;
                }
            }
        }
    } else if low {
        ends[0] += edge;
    } else {
        ends[1] += edge;
    }
}

/// Warp `w`'s distance table out to `row` of `dbias` (`[.., 2 reach + 1]`): the ends' sums of
/// its 32 lanes reduced in lane order (through `scratch`, a warp's `tile` words) and added to
/// the first and last entries, then every entry written. Every unit of the cube calls it, after
/// the block loop.
#[cube]
pub(super) fn table_out<C: Float>(
    dbias: &mut Tensor<C>,
    scratch: &mut [f32],
    table_s: &mut [f32],
    ends: &Array<f32>,
    p: &Scalars,
    row: usize,
    w: usize,
    lane: usize,
    #[comptime] tile: usize,
    #[comptime] table_slots: usize,
) {
    let width = 2 * p.reach as usize + 1;
    scratch[w * tile + lane] = ends[0];
    scratch[w * tile + WARP + lane] = ends[1];
    sync_cube();
    if lane == 0 {
        let mut first = 0.0f32;
        let mut last = 0.0f32;
        #[unroll]
        for l in 0..WARP {
            first += scratch[w * tile + l];
            last += scratch[w * tile + WARP + l];
        }
        table_s[w * table_slots] += first;
        table_s[w * table_slots + width - 1] += last;
    }
    sync_cube();
    #[unroll]
    for t in 0..comptime!(table_slots.div_ceil(WARP)) {
        let slot = t * WARP + lane;
        if slot < width {
            dbias[row * width + slot] = C::cast_from(table_s[w * table_slots + slot]);
        }
    }
}
