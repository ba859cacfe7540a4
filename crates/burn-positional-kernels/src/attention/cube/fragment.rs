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

/// Per warp, the shared `f32` values an emulated [`mma`] takes: A (16 x 16), then B (16 x 8).
pub(crate) const MMA_SCRATCH: usize = 16 * 16 + 16 * 8;

/// `c += a b` for one m16n8k16 tile on every warp of the cube: `a` is this lane's 8 elements of
/// A (4 pairs), `b` its 4 of B (2 pairs), `c` its 4 f32 accumulators (2 pairs), each in the
/// layout of the table above. Natively one `mma.sync.m16n8k16` (CUDA, sm_80 and up); with
/// `emulate`, the warp (units `32 w..32 w + 32` of the cube) writes its A and B into
/// `scratch[w * MMA_SCRATCH..]` at their own (row, column), `sync_cube`, and each lane sums its 4
/// entries in f32 (16 products each), `sync_cube`. Every unit of the cube must call it: the
/// emulation holds two cube barriers.
#[cube]
pub(crate) fn mma<F: Float>(
    a: &Array<Vector<F, Const<2>>>,
    b: &Array<Vector<F, Const<2>>>,
    c: &mut Array<Vector<f32, Const<2>>>,
    scratch: &mut [f32],
    #[comptime] emulate: bool,
) {
    if comptime!(emulate) {
        let lane = UNIT_POS % 32u32;
        let base = (UNIT_POS / 32u32) as usize * MMA_SCRATCH;
        #[unroll]
        for i in 0..A_ELEMS {
            let at = a_row(lane, i as u32) * 16u32 + a_col(lane, i as u32);
            let x: F = a[i / PAIR].extract(i % PAIR);
            scratch[base + at as usize] = f32::cast_from(x);
        }
        #[unroll]
        for i in 0..B_ELEMS {
            let at = 256u32 + b_row(lane, i as u32) * 8u32 + b_col(lane, i as u32);
            let x: F = b[i / PAIR].extract(i % PAIR);
            scratch[base + at as usize] = f32::cast_from(x);
        }
        sync_cube();
        #[unroll]
        for v in 0..C_ELEMS / PAIR {
            let mut pair: Vector<f32, Const<2>> = c[v];
            #[unroll]
            for e in 0..PAIR {
                let i = (v * PAIR + e) as u32;
                let row = c_row(lane, i) as usize;
                let col = c_col(lane, i) as usize;
                let mut sum: f32 = pair.extract(e);
                #[unroll]
                for k in 0..16usize {
                    sum += scratch[base + row * 16usize + k]
                        * scratch[base + 256usize + k * 8usize + col];
                }
                pair.insert(e, sum);
            }
            c[v] = pair;
        }
        sync_cube();
    } else {
        let def = cmma::MmaDefinition::<F, F, f32>::new(16usize, 8usize, 16usize);
        def.execute_inplace::<Const<2>, Const<2>, Const<2>>(a, b, c);
    }
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

/// Each warp `w` of the cube computes `out_w = c_w + a_w b_w` for its own tiles (`a` holds the
/// warps' 16 x 16 tiles row-major one after the other, `b` and `c` their 16 x 8 ones): each lane
/// loads its fragments through the layout functions, calls [`mma`] (emulated, or natively: the
/// CUDA compile check's probe of the native path), and stores its accumulators through them.
#[cfg(any(test, feature = "cuda-check"))]
#[cube(launch, create_dummy_kernel)]
fn mma_tiles<F: Float>(
    a: &Tensor<F>,
    b: &Tensor<F>,
    c: &Tensor<f32>,
    out: &mut Tensor<f32>,
    #[comptime] warps: usize,
    #[comptime] emulate: bool,
) {
    let lane = UNIT_POS % 32u32;
    let warp = (UNIT_POS / 32u32) as usize;
    let mut scratch = Shared::<[f32]>::new_slice(comptime!(warps * MMA_SCRATCH));
    let mut ra = Array::<Vector<F, Const<2>>>::new(comptime!(A_ELEMS / PAIR));
    let mut rb = Array::<Vector<F, Const<2>>>::new(comptime!(B_ELEMS / PAIR));
    let mut rc = Array::<Vector<f32, Const<2>>>::new(comptime!(C_ELEMS / PAIR));
    #[unroll]
    for v in 0..A_ELEMS / PAIR {
        let mut pair = Vector::empty();
        #[unroll]
        for e in 0..PAIR {
            let i = (v * PAIR + e) as u32;
            let at = (a_row(lane, i) * 16u32 + a_col(lane, i)) as usize;
            pair.insert(e, a[warp * 256usize + at]);
        }
        ra[v] = pair;
    }
    #[unroll]
    for v in 0..B_ELEMS / PAIR {
        let mut pair = Vector::empty();
        #[unroll]
        for e in 0..PAIR {
            let i = (v * PAIR + e) as u32;
            let at = (b_row(lane, i) * 8u32 + b_col(lane, i)) as usize;
            pair.insert(e, b[warp * 128usize + at]);
        }
        rb[v] = pair;
    }
    #[unroll]
    for v in 0..C_ELEMS / PAIR {
        let mut pair = Vector::empty();
        #[unroll]
        for e in 0..PAIR {
            let i = (v * PAIR + e) as u32;
            let at = (c_row(lane, i) * 8u32 + c_col(lane, i)) as usize;
            pair.insert(e, c[warp * 128usize + at]);
        }
        rc[v] = pair;
    }
    mma::<F>(&ra, &rb, &mut rc, &mut scratch, emulate);
    #[unroll]
    for v in 0..C_ELEMS / PAIR {
        #[unroll]
        for e in 0..PAIR {
            let i = (v * PAIR + e) as u32;
            let at = (c_row(lane, i) * 8u32 + c_col(lane, i)) as usize;
            out[warp * 128usize + at] = rc[v].extract(e);
        }
    }
}

/// The native path for the CUDA compile check: the probe kernel with one `mma.sync` a warp, four
/// warps, in f16 and bf16 (`.ci/checks` fails a tensor-core case whose SASS has no `HMMA`).
#[cfg(feature = "cuda-check")]
pub(crate) fn cuda_cases(target: &crate::cuda_check::Target) -> Vec<crate::cuda_check::Case> {
    use crate::cuda_check::{Case, tensor};
    let mut cases = Vec::new();
    macro_rules! probe {
        ($f:ty, $name:expr) => {
            cases.push(Case::new(
                "attention fragment: mma.sync probe",
                format!("{} m16n8k16, 4 warps", $name),
                true,
                mma_tiles::create_dummy_kernel::<$f>(
                    target.properties.clone(),
                    target.target.clone(),
                    CubeCount::Static(1, 1, 1),
                    CubeDim::new_1d((4 * WARP) as u32),
                    tensor(1),
                    tensor(1),
                    tensor(1),
                    tensor(1),
                    4,
                    false,
                ),
            ))
        };
    }
    probe!(burn::tensor::f16, "F16");
    probe!(burn::tensor::bf16, "BF16");
    cases
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use burn::tensor::{Device, DeviceKind, f16};
    use cubecl::zspace::{Shape, Strides};

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
                assert_eq!(
                    at(lane, i),
                    (row, col + 8 * tile),
                    "lane {lane}, A element {i}"
                );
            }
        }
        assert_eq!((a.len(), b.len(), c.len()), (16 * 16, 16 * 8, 16 * 8));
    }

    /// The emulated product on coordinate-coded tiles (small integers, exact in f16 and in f32
    /// sums): two warps in one cube, each its own tiles, against the product computed here. A
    /// misplaced element changes a sum by a distinct amount, so the failing entry names it.
    #[test]
    fn emulated_mma_is_the_tile_product() {
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner() else {
            panic!("the wgpu device is a cubecl device");
        };
        let client = cube.client();
        let warps = 2;
        let a: Vec<f32> = (0..warps * 256)
            .map(|x| ((x / 16) * 2 + x % 16) as f32 % 17.0 - 8.0)
            .collect();
        let b: Vec<f32> = (0..warps * 128)
            .map(|x| ((x / 8) * 3 + x % 8) as f32 % 13.0 - 6.0)
            .collect();
        let c: Vec<f32> = (0..warps * 128).map(|x| (x % 7) as f32 * 100.0).collect();
        let halves = |v: &[f32]| -> Vec<f16> { v.iter().map(|&x| f16::from_f32(x)).collect() };
        let (ha, hb) = (halves(&a), halves(&b));
        let a_h = client.create_from_slice(f16::as_bytes(&ha));
        let b_h = client.create_from_slice(f16::as_bytes(&hb));
        let c_h = client.create_from_slice(f32::as_bytes(&c));
        let out = client.create_from_slice(f32::as_bytes(&vec![f32::NAN; warps * 128]));
        let flat = |len: usize| -> (Strides, Shape) { ([1].into(), [len].into()) };
        let arg = |handle: cubecl::server::Handle, len: usize| {
            let (strides, shape) = flat(len);
            // SAFETY: a contiguous buffer of `len` values.
            unsafe { TensorArg::from_raw_parts(handle, strides, shape) }
        };
        // One cube of `warps` warps; warp `w` reads `a[256 w..][..256]`, `b` and `c` at
        // `[128 w..][..128]` and writes `out` there, every index from the layout functions,
        // whose values stay inside a tile (the test above).
        mma_tiles::launch::<f16>(
            &client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d((warps * WARP) as u32),
            arg(a_h, warps * 256),
            arg(b_h, warps * 128),
            arg(c_h, warps * 128),
            arg(out.clone(), warps * 128),
            warps,
            true,
        );
        let got = f32::from_bytes(&client.read_one_unchecked(out)).to_vec();
        for w in 0..warps {
            for r in 0..16 {
                for n in 0..8 {
                    let want = c[w * 128 + r * 8 + n]
                        + (0..16)
                            .map(|k| a[w * 256 + r * 16 + k] * b[w * 128 + k * 8 + n])
                            .sum::<f32>();
                    assert_eq!(
                        got[w * 128 + r * 8 + n],
                        want,
                        "warp {w}, row {r}, column {n}"
                    );
                }
            }
        }
    }
}
