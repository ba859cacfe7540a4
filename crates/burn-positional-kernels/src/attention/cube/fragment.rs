//! The register fragments of NVIDIA's `mma.sync.m16n8k16` (f16 or bf16 in, f32 accumulators):
//! which element of which tile each of a warp's 32 lanes holds (issue 72, the fragment layer's
//! first part). The FlashAttention-2 kernel keeps S, P and O in these registers; its index
//! logic is written against the functions here, which are cubecl's own layout polyfills
//! (`polyfills::mma::{row_index, col_index}`, what the CUDA lowering of `mma.sync` and
//! `position_of_nth` expand), so the layout the kernel assumes is the one the instruction reads.
//!
//! With `g = lane / 4` and `t = lane % 4` (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
//!
//! | operand | elements a lane | row of element `i` | column of element `i` |
//! | --- | --- | --- | --- |
//! | A (16 x 16) | 8 | `g + 8 ((i >> 1) & 1)` | `2t + (i & 1) + 8 ((i >> 2) & 1)` |
//! | B (16 x 8) | 4 | `2t + (i & 1) + 8 (i >> 1)` (k) | `g` (n) |
//! | C, D (16 x 8) | 4 | `g + 8 (i >> 1)` | `2t + (i & 1)` |
//!
//! FlashAttention-2's register trick follows from the table: the accumulators of S's n8-tiles
//! `2s` and `2s + 1` (keys `16s..16s + 16`), in that order, are element for element the A
//! operand of `P V` for those keys ([`p_operand_tile`]), so P never leaves registers.

// The forward kernel that reads these fragments is the next part of issue 72; until it lands
// only the tests use them.
#![cfg_attr(not(test), allow(dead_code))]

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

/// Lanes of a warp: the fragments are laid out over 32 lanes, real or emulated.
pub(crate) const WARP: usize = 32;
/// 16-bit elements per 32-bit register: the fragments' vectors are pairs.
pub(crate) const PAIR: usize = 2;
/// Elements of A (16 x 16) a lane holds.
pub(crate) const A_ELEMS: usize = 8;
/// Elements of B (16 x 8) a lane holds.
pub(crate) const B_ELEMS: usize = 4;
/// Elements of C or D (16 x 8) a lane holds.
pub(crate) const C_ELEMS: usize = 4;

/// Row of A's element `i` held by `lane`.
#[cube]
pub(crate) fn a_row(lane: u32, i: u32) -> u32 {
    polyfills::mma::row_index(lane, i, PAIR, MatrixIdent::A)
}

/// Column of A's element `i` held by `lane`.
#[cube]
pub(crate) fn a_col(lane: u32, i: u32) -> u32 {
    polyfills::mma::col_index(lane, i, PAIR, MatrixIdent::A)
}

/// Row (the `k` index) of B's element `i` held by `lane`.
#[cube]
pub(crate) fn b_row(lane: u32, i: u32) -> u32 {
    polyfills::mma::row_index(lane, i, PAIR, MatrixIdent::B)
}

/// Column (the `n` index) of B's element `i` held by `lane`.
#[cube]
pub(crate) fn b_col(lane: u32, i: u32) -> u32 {
    polyfills::mma::col_index(lane, i, PAIR, MatrixIdent::B)
}

/// Row of the accumulator's element `i` held by `lane`.
#[cube]
pub(crate) fn c_row(lane: u32, i: u32) -> u32 {
    polyfills::mma::row_index(lane, i, PAIR, MatrixIdent::Accumulator)
}

/// Column of the accumulator's element `i` held by `lane`.
#[cube]
pub(crate) fn c_col(lane: u32, i: u32) -> u32 {
    polyfills::mma::col_index(lane, i, PAIR, MatrixIdent::Accumulator)
}

/// Which of S's two n8-tiles (0: keys `16s..16s + 8`, 1: `16s + 8..16s + 16`) and which of its
/// accumulators give element `i` of P's A operand for key slice `s`: `(i / 4, i % 4)`.
pub(crate) const fn p_operand_tile(i: usize) -> (usize, usize) {
    (i / C_ELEMS, i % C_ELEMS)
}

/// Slots a lane writes in [`layout_table`]: A's, B's, then the accumulator's elements.
#[cfg(test)]
const SLOTS: usize = A_ELEMS + B_ELEMS + C_ELEMS;

/// Each lane of one warp writes the (row, column) of every element it holds, A then B then C:
/// `out[(lane * SLOTS + slot) * 2 + {0, 1}]`.
#[cfg(test)]
#[cube(launch)]
fn layout_table(out: &mut Tensor<u32>) {
    let lane = UNIT_POS;
    let base = (lane as usize) * SLOTS * 2;
    #[unroll]
    for i in 0..A_ELEMS {
        out[base + i * 2] = a_row(lane, i as u32);
        out[base + i * 2 + 1] = a_col(lane, i as u32);
    }
    #[unroll]
    for i in 0..B_ELEMS {
        let at = base + (A_ELEMS + i) * 2;
        out[at] = b_row(lane, i as u32);
        out[at + 1] = b_col(lane, i as u32);
    }
    #[unroll]
    for i in 0..C_ELEMS {
        let at = base + (A_ELEMS + B_ELEMS + i) * 2;
        out[at] = c_row(lane, i as u32);
        out[at + 1] = c_col(lane, i as u32);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use burn::tensor::{Device, DeviceKind};

    use super::*;

    /// PTX ISA's table for m16n8k16 with 16-bit inputs, written out independently of cubecl.
    fn ptx(lane: usize, slot: usize) -> (usize, usize) {
        let (g, t) = (lane / 4, lane % 4);
        if slot < A_ELEMS {
            let i = slot;
            (g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * ((i >> 2) & 1))
        } else if slot < A_ELEMS + B_ELEMS {
            let i = slot - A_ELEMS;
            (2 * t + (i & 1) + 8 * (i >> 1), g)
        } else {
            let i = slot - A_ELEMS - B_ELEMS;
            (g + 8 * (i >> 1), 2 * t + (i & 1))
        }
    }

    /// The layouts as a wgpu kernel computes them (lavapipe in CI): PTX's table, each tile
    /// covered once by the warp, and the accumulators of two n8-tiles equal to the A operand.
    #[test]
    fn fragment_layouts_are_ptxs_and_s_is_ps_a_operand() {
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner() else {
            panic!("the wgpu device is a cubecl device");
        };
        let client = cube.client();
        let len = WARP * SLOTS * 2;
        let out = client.create_from_slice(u32::as_bytes(&vec![u32::MAX; len]));
        // SAFETY: one cube of 32 units; unit `lane` writes `out[lane * SLOTS * 2..][..SLOTS * 2]`,
        // inside the `WARP * SLOTS * 2` values.
        unsafe {
            layout_table::launch(
                &client,
                CubeCount::Static(1, 1, 1),
                CubeDim::new_1d(WARP as u32),
                TensorArg::from_raw_parts(out.clone(), [1].into(), [len].into()),
            );
        }
        let bytes = client.read_one_unchecked(out);
        let table = u32::from_bytes(&bytes);
        let at = |lane: usize, slot: usize| {
            let k = (lane * SLOTS + slot) * 2;
            (table[k] as usize, table[k + 1] as usize)
        };
        let (mut a, mut b, mut c) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for lane in 0..WARP {
            for slot in 0..SLOTS {
                assert_eq!(at(lane, slot), ptx(lane, slot), "lane {lane}, slot {slot}");
                let cell = at(lane, slot);
                let fresh = match slot {
                    s if s < A_ELEMS => a.insert(cell),
                    s if s < A_ELEMS + B_ELEMS => b.insert(cell),
                    _ => c.insert(cell),
                };
                assert!(fresh, "lane {lane}, slot {slot}: {cell:?} held twice");
            }
            // P's A operand for keys 16s..16s + 16 from S's tiles 2s and 2s + 1: same row, the
            // second tile's columns 8 further.
            for i in 0..A_ELEMS {
                let (tile, acc) = p_operand_tile(i);
                let (row, col) = at(lane, A_ELEMS + B_ELEMS + acc);
                assert_eq!(at(lane, i), (row, col + 8 * tile), "lane {lane}, A element {i}");
            }
        }
        assert_eq!((a.len(), b.len(), c.len()), (16 * 16, 16 * 8, 16 * 8));
    }
}
