//! Kernels that run the fragment layer's operations one at a time: on lavapipe for the tests
//! (emulated), and through the CUDA compile check as probes of the native paths (`cuda_cases`:
//! `.ci/checks` compiles them with NVRTC).

use cubecl::prelude::*;

use super::*;

/// Slots a lane writes in [`layout_table`]: A's, B's, then the accumulator's elements.
#[cfg(test)]
pub(super) const SLOTS: usize = A_ELEMS + B_ELEMS + C_ELEMS;

/// Each lane of one warp writes the (row, column) of every element it holds, A then B then C:
/// `out[(lane * SLOTS + slot) * 2 + {0, 1}]`.
#[cfg(test)]
#[cube(launch)]
pub(super) fn layout_table(out: &mut Tensor<u32>) {
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

/// Each warp `w` of the cube computes `out_w = c_w + a_w b_w` for its own tiles (`a`, `b` and
/// `c` hold the warps' 16 x 16 tiles row-major one after the other): each lane loads its
/// fragments through the layout functions (B and C as two n8-tiles, columns `0..8` and
/// `8..16`), calls [`mma_pair`] twice (emulated, or natively: the CUDA compile check's probe of
/// the native path), the second time with zero B, so both slots of the emulation are used, and
/// stores its accumulators through them.
#[cube(launch, create_dummy_kernel)]
pub(super) fn mma_tiles<F: Float>(
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
    let mut rb = Array::<Vector<F, Const<2>>>::new(comptime!(2 * B_ELEMS / PAIR));
    let mut zero = Array::<Vector<F, Const<2>>>::new(comptime!(2 * B_ELEMS / PAIR));
    let mut rc = Array::<Vector<f32, Const<2>>>::new(comptime!(2 * C_ELEMS / PAIR));
    let tile = warp * 256usize;
    #[unroll]
    for v in 0..A_ELEMS / PAIR {
        let mut pair = Vector::empty();
        #[unroll]
        for e in 0..PAIR {
            let i = (v * PAIR + e) as u32;
            let at = (a_row(lane, i) * 16u32 + a_col(lane, i)) as usize;
            pair.insert(e, a[tile + at]);
        }
        ra[v] = pair;
    }
    #[unroll]
    for half in 0..2usize {
        #[unroll]
        for v in 0..B_ELEMS / PAIR {
            let mut pair = Vector::empty();
            #[unroll]
            for e in 0..PAIR {
                let i = (v * PAIR + e) as u32;
                let at = (b_row(lane, i) * 16u32 + b_col(lane, i)) as usize + half * 8usize;
                pair.insert(e, b[tile + at]);
            }
            rb[half * 2usize + v] = pair;
            zero[half * 2usize + v] = Vector::new(F::new(0.0));
        }
    }
    #[unroll]
    for v in 0..C_ELEMS / PAIR {
        let mut p0 = Vector::empty();
        let mut p1 = Vector::empty();
        #[unroll]
        for e in 0..PAIR {
            let i = (v * PAIR + e) as u32;
            let at = (c_row(lane, i) * 16u32 + c_col(lane, i)) as usize;
            p0.insert(e, c[tile + at]);
            p1.insert(e, c[tile + at + 8usize]);
        }
        rc[v] = p0;
        rc[2usize + v] = p1;
    }
    mma_pair::<F>(&ra, &rb, &mut rc, &mut scratch, 0usize, emulate);
    mma_pair::<F>(&ra, &zero, &mut rc, &mut scratch, 1usize, emulate);
    #[unroll]
    for v in 0..C_ELEMS / PAIR {
        #[unroll]
        for e in 0..PAIR {
            let i = (v * PAIR + e) as u32;
            let at = (c_row(lane, i) * 16u32 + c_col(lane, i)) as usize;
            out[tile + at] = rc[v].extract(e);
            out[tile + at + 8usize] = rc[2usize + v].extract(e);
        }
    }
}

/// Each warp stages the 16 x 16 tile `tile` (row-major) in shared memory, swizzled as the
/// kernels stage keys ([`chunk_at`], 16 values a row), and loads it with [`ldmatrix_x4`]: plain
/// in the A order, transposed in the A order, and plain in the columns-first order; lane `l`
/// writes its 8 values of each at `out[(w * 32 + l) * 24..]`. Then the quad's largest and its
/// sum of `x = lane` by [`quad_max`] and [`quad_sum`], at `quad[w * 64 + l]` and `+ 32`.
#[cube(launch, create_dummy_kernel)]
pub(super) fn ldmatrix_tiles<F: Float>(
    tile: &Tensor<F>,
    out: &mut Tensor<F>,
    quad: &mut Tensor<f32>,
    #[comptime] warps: usize,
    #[comptime] emulate: bool,
) {
    let lane = (UNIT_POS % 32u32) as usize;
    let warp = (UNIT_POS / 32u32) as usize;
    let mut stage = Shared::<[F]>::new_aligned_slice(comptime!(warps * 256), 16usize);
    let mut lanes = Shared::<[u32]>::new_slice(comptime!(warps * LANE_SCRATCH));
    // Lane `l` stages row `l / 2`, chunk `l % 2`.
    let (row, chunk) = (lane / 2usize, lane % 2usize);
    let to = warp * 256usize + chunk_at(row, chunk, 16usize);
    #[unroll]
    for j in 0..8usize {
        stage[to + j] = tile[row * 16usize + chunk * 8usize + j];
    }
    sync_cube();
    let base = warp * 256usize;
    let plain = ldmatrix_x4::<F>(&stage, base, 0usize, 0usize, 16usize, false, false, emulate);
    let trans = ldmatrix_x4::<F>(&stage, base, 0usize, 0usize, 16usize, false, true, emulate);
    let across = ldmatrix_x4::<F>(&stage, base, 0usize, 0usize, 16usize, true, false, emulate);
    let at = (warp * 32usize + lane) * 24usize;
    #[unroll]
    for v in 0..4usize {
        #[unroll]
        for e in 0..2usize {
            out[at + v * 2usize + e] = plain[v].extract(e);
            out[at + 8usize + v * 2usize + e] = trans[v].extract(e);
            out[at + 16usize + v * 2usize + e] = across[v].extract(e);
        }
    }
    let x = lane as f32;
    quad[warp * 64usize + lane] = quad_max(x, &mut lanes, 0usize, emulate);
    quad[warp * 64usize + 32usize + lane] = quad_sum(x, &mut lanes, 1usize, emulate);
}

/// Two stages of a double-buffered copy, as the forward will run them: each of the cube's units
/// copies 16 bytes of `src`'s first half into stage 0 and commits, then of its second half into
/// stage 1 and commits; waits for the first group (one left in flight) and writes stage 0 out
/// reversed, waits for the second and writes stage 1 out reversed (`out[i]` holds
/// `src[half - 1 - i]` of its half: every unit reads what others copied).
#[cube(launch, create_dummy_kernel)]
pub(super) fn staged_copy<F: Float>(
    src: &Tensor<F>,
    out: &mut Tensor<F>,
    #[comptime] emulate: bool,
) {
    let size = F::size();
    let chunk = comptime!(16 / size);
    let half = chunk * CUBE_DIM as usize;
    let mut stage = Shared::<[F]>::new_aligned_slice(comptime!(2 * 64 * chunk), 16usize);
    let at = UNIT_POS as usize * chunk;
    copy_16_bytes::<F>(src, at, &mut stage, at, emulate);
    commit_group(emulate);
    copy_16_bytes::<F>(src, half + at, &mut stage, half + at, emulate);
    commit_group(emulate);
    wait_group(1u32, emulate);
    #[unroll]
    for i in 0..chunk {
        out[at + i] = stage[half - 1 - (at + i)];
    }
    wait_group(0u32, emulate);
    #[unroll]
    for i in 0..chunk {
        out[half + at + i] = stage[half + half - 1 - (at + i)];
    }
}

/// One warp: each lane loads its accumulators of the two n8-tiles of the 16 x 16 `s` (columns
/// 0..8 and 8..16) through the accumulator layout, turns them into P's A operand
/// ([`p_operand`]) and stores that through the A layout into `out`: `out` is `s` again.
#[cfg(test)]
#[cube(launch)]
pub(super) fn s_to_p<F: Float>(s: &Tensor<f32>, out: &mut Tensor<F>) {
    let lane = UNIT_POS % 32u32;
    let mut tiles = Array::<Vector<f32, Const<2>>>::new(4usize);
    #[unroll]
    for v in 0..2usize {
        let mut l = Vector::empty();
        let mut h = Vector::empty();
        #[unroll]
        for e in 0..2usize {
            let i = (v * 2usize + e) as u32;
            let at = (c_row(lane, i) * 16u32 + c_col(lane, i)) as usize;
            l.insert(e, s[at]);
            h.insert(e, s[at + 8usize]);
        }
        tiles[v] = l;
        tiles[2usize + v] = h;
    }
    let a = p_operand::<F>(&tiles);
    #[unroll]
    for v in 0..4usize {
        #[unroll]
        for e in 0..2usize {
            let i = (v * 2usize + e) as u32;
            out[(a_row(lane, i) * 16u32 + a_col(lane, i)) as usize] = a[v].extract(e);
        }
    }
}

/// `out[i] = 2^x[i]` by [`exp2`], a unit per value (`n` of them).
#[cube(launch, create_dummy_kernel)]
pub(super) fn exp2_values(
    x: &Tensor<f32>,
    out: &mut Tensor<f32>,
    n: u32,
    #[comptime] emulate: bool,
) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        out[i] = exp2(x[i], emulate);
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
    cases.push(Case::new(
        "attention fragment: ldmatrix and shuffle probe",
        "F16 x4 and x4.trans, quad max, 2 warps".into(),
        false,
        ldmatrix_tiles::create_dummy_kernel::<burn::tensor::f16>(
            target.properties.clone(),
            target.target.clone(),
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d((2 * WARP) as u32),
            tensor(1),
            tensor(1),
            tensor(1),
            2,
            false,
        ),
    ));
    cases.push(Case::new(
        "attention fragment: async copy probe",
        "F16 two stages, 64 units".into(),
        false,
        staged_copy::create_dummy_kernel::<burn::tensor::f16>(
            target.properties.clone(),
            target.target.clone(),
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(64),
            tensor(1),
            tensor(1),
            false,
        ),
    ));
    cases.push(Case::new(
        "attention fragment: exp2 probe",
        "F32 ex2.approx".into(),
        false,
        exp2_values::create_dummy_kernel(
            target.properties.clone(),
            target.target.clone(),
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(128),
            tensor(1),
            tensor(1),
            1,
            false,
        ),
    ));
    cases
}
