//! The fragment layer on lavapipe, emulated: each operation against what PTX and the host say.

use std::collections::BTreeSet;

use burn::tensor::{Device, DeviceKind, f16};
use cubecl::zspace::{Shape, Strides};

use super::probes::*;
use super::*;

/// The wgpu device's cubecl client (lavapipe in CI).
fn client() -> cubecl::client::Client {
    let device = Device::wgpu(DeviceKind::DefaultDevice);
    let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch().clone().inner() else {
        panic!("the wgpu device is a cubecl device");
    };
    cube.client()
}

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
    let client = client();
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

/// The emulated `ldmatrix` x4 (plain, transposed, and plain in the columns-first order) on a
/// coordinate-coded tile staged swizzled, two warps a cube: each lane's pairs are the tile's A
/// fragment, transposed the B fragments of its two 16 x 8 halves, and in the columns-first
/// order the B fragments of the two n8-tiles of the tile's transpose (keys as rows: `Q Kᵀ`),
/// as the layout functions place them; the emulated quad max is each quad's last lane, its sum
/// the four lanes'.
#[test]
fn emulated_ldmatrix_gives_the_fragments_and_shuffle_the_quad() {
    let client = client();
    let warps = 2;
    // tile[r][c] = 16 r + c: every value names its cell (exact in f16).
    let tile: Vec<f16> = (0..256).map(|x| f16::from_f32(x as f32)).collect();
    let tile_h = client.create_from_slice(f16::as_bytes(&tile));
    let out = client.create_from_slice(f16::as_bytes(&vec![f16::NAN; warps * 32 * 24]));
    let quad = client.create_from_slice(f32::as_bytes(&vec![f32::NAN; warps * 64]));
    // SAFETY: contiguous buffers of the lengths given.
    let arg = |handle: cubecl::server::Handle, len: usize| unsafe {
        TensorArg::from_raw_parts(handle, [1].into(), [len].into())
    };
    ldmatrix_tiles::launch::<f16>(
        &client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d((warps * WARP) as u32),
        arg(tile_h, 256),
        arg(out.clone(), warps * 32 * 24),
        arg(quad.clone(), warps * 64),
        warps,
        true,
    );
    let got: Vec<usize> = f16::from_bytes(&client.read_one_unchecked(out))
        .iter()
        .map(|v| v.to_f32() as usize)
        .collect();
    let quads = f32::from_bytes(&client.read_one_unchecked(quad)).to_vec();
    for w in 0..warps {
        for lane in 0..WARP {
            let at = (w * 32 + lane) * 24;
            for i in 0..A_ELEMS {
                let (row, col) = ptx(lane, i);
                assert_eq!(got[at + i], 16 * row + col, "warp {w}, lane {lane}, A {i}");
                // Transposed: pair v of half v / 2 holds B's elements 2 (v % 2), + 1.
                let (half, b) = (i / 4, i % 4);
                let (k, n) = ptx(lane, A_ELEMS + b);
                assert_eq!(
                    got[at + 8 + i],
                    16 * k + 8 * half + n,
                    "warp {w}, lane {lane}, transposed {i}"
                );
                // Columns first: pair v of n8-tile v / 2 holds B's (k, n) at the tile's
                // (row 8 (v / 2) + n, column k): B = tileᵀ.
                assert_eq!(
                    got[at + 16 + i],
                    16 * (8 * half + n) + k,
                    "warp {w}, lane {lane}, columns first {i}"
                );
            }
            assert_eq!(
                quads[w * 64 + lane],
                (lane | 3) as f32,
                "warp {w}, lane {lane}: max"
            );
            let first = lane & !3;
            assert_eq!(
                quads[w * 64 + 32 + lane],
                (4 * first + 6) as f32,
                "warp {w}, lane {lane}: sum"
            );
        }
    }
}

/// The emulated `exp2` on the softmax's range (shifted scores, `x <= 0`, and a little above)
/// against 2^x in f64: within 4 ulp of f32.
#[test]
fn emulated_exp2_is_two_to_the_x() {
    let client = client();
    let xs: Vec<f32> = (0..256).map(|i| -60.0 + i as f32 * 0.25 + 0.013).collect();
    let n = xs.len();
    let x_h = client.create_from_slice(f32::as_bytes(&xs));
    let out = client.create_from_slice(f32::as_bytes(&vec![f32::NAN; n]));
    // SAFETY: contiguous buffers of `n` values.
    let arg = |handle: cubecl::server::Handle| unsafe {
        TensorArg::from_raw_parts(handle, [1].into(), [n].into())
    };
    exp2_values::launch(
        &client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(n as u32),
        arg(x_h),
        arg(out.clone()),
        n as u32,
        true,
    );
    let got = f32::from_bytes(&client.read_one_unchecked(out)).to_vec();
    for (x, y) in xs.iter().zip(got) {
        let want = 2f64.powf(*x as f64);
        let ulp = (want as f32).abs() * f32::EPSILON;
        assert!(
            ((y as f64) - want).abs() <= 4.0 * ulp as f64,
            "2^{x}: {y}, want {want}"
        );
    }
}

/// S's accumulators of two n8-tiles, converted in registers, are P's A operand for the 16
/// keys: the tile comes back cell for cell (small integers, exact in f16).
#[test]
fn s_accumulators_convert_to_ps_a_operand() {
    let client = client();
    let s: Vec<f32> = (0..256).map(|x| x as f32 - 100.0).collect();
    let s_h = client.create_from_slice(f32::as_bytes(&s));
    let out = client.create_from_slice(f16::as_bytes(&vec![f16::NAN; 256]));
    // SAFETY: contiguous buffers of 256 values.
    let (s_arg, out_arg) = unsafe {
        (
            TensorArg::from_raw_parts(s_h, [1].into(), [256].into()),
            TensorArg::from_raw_parts(out.clone(), [1].into(), [256].into()),
        )
    };
    s_to_p::launch::<f16>(
        &client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(WARP as u32),
        s_arg,
        out_arg,
    );
    let got: Vec<f32> = f16::from_bytes(&client.read_one_unchecked(out))
        .iter()
        .map(|v| v.to_f32())
        .collect();
    assert_eq!(got, s);
}

/// The emulated double-buffered copy: both stages land, and each unit reads what the others
/// copied.
#[test]
fn emulated_async_copy_stages_both_halves() {
    let client = client();
    let (units, chunk) = (64, 8);
    let half = units * chunk;
    let src: Vec<f16> = (0..2 * half).map(|x| f16::from_f32(x as f32)).collect();
    let src_h = client.create_from_slice(f16::as_bytes(&src));
    let out = client.create_from_slice(f16::as_bytes(&vec![f16::NAN; 2 * half]));
    // SAFETY: contiguous buffers of `2 half` values.
    let arg = |handle: cubecl::server::Handle| unsafe {
        TensorArg::from_raw_parts(handle, [1].into(), [2 * half].into())
    };
    staged_copy::launch::<f16>(
        &client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(units as u32),
        arg(src_h),
        arg(out.clone()),
        true,
    );
    let got: Vec<f32> = f16::from_bytes(&client.read_one_unchecked(out))
        .iter()
        .map(|v| v.to_f32())
        .collect();
    for i in 0..half {
        assert_eq!(got[i], (half - 1 - i) as f32, "stage 0, value {i}");
        assert_eq!(
            got[half + i],
            (2 * half - 1 - i) as f32,
            "stage 1, value {i}"
        );
    }
}

/// The emulated products on coordinate-coded tiles (small integers, exact in f16 and in f32
/// sums): two warps in one cube, each its own tiles, both n8-tiles of a 16 x 16 B, and a
/// second call (all-zero B) through the other slot, against the product computed here. A
/// misplaced element changes a sum by a distinct amount, so the failing entry names it.
#[test]
fn emulated_mma_is_the_tile_product() {
    let client = client();
    let warps = 2;
    let a: Vec<f32> = (0..warps * 256)
        .map(|x| ((x / 16) * 2 + x % 16) as f32 % 17.0 - 8.0)
        .collect();
    let b: Vec<f32> = (0..warps * 256)
        .map(|x| ((x / 16) * 3 + x % 16) as f32 % 13.0 - 6.0)
        .collect();
    let c: Vec<f32> = (0..warps * 256).map(|x| (x % 7) as f32 * 100.0).collect();
    let halves = |v: &[f32]| -> Vec<f16> { v.iter().map(|&x| f16::from_f32(x)).collect() };
    let (ha, hb) = (halves(&a), halves(&b));
    let a_h = client.create_from_slice(f16::as_bytes(&ha));
    let b_h = client.create_from_slice(f16::as_bytes(&hb));
    let c_h = client.create_from_slice(f32::as_bytes(&c));
    let out = client.create_from_slice(f32::as_bytes(&vec![f32::NAN; warps * 256]));
    let flat = |len: usize| -> (Strides, Shape) { ([1].into(), [len].into()) };
    let arg = |handle: cubecl::server::Handle, len: usize| {
        let (strides, shape) = flat(len);
        // SAFETY: a contiguous buffer of `len` values.
        unsafe { TensorArg::from_raw_parts(handle, strides, shape) }
    };
    // One cube of `warps` warps; warp `w` reads `a`, `b` and `c` at `[256 w..][..256]` and
    // writes `out` there, every index from the layout functions, whose values stay inside a
    // tile (the test above).
    mma_tiles::launch::<f16>(
        &client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d((warps * WARP) as u32),
        arg(a_h, warps * 256),
        arg(b_h, warps * 256),
        arg(c_h, warps * 256),
        arg(out.clone(), warps * 256),
        warps,
        true,
    );
    let got = f32::from_bytes(&client.read_one_unchecked(out)).to_vec();
    for w in 0..warps {
        for r in 0..16 {
            for n in 0..16 {
                let want = c[w * 256 + r * 16 + n]
                    + (0..16)
                        .map(|k| a[w * 256 + r * 16 + k] * b[w * 256 + k * 16 + n])
                        .sum::<f32>();
                assert_eq!(
                    got[w * 256 + r * 16 + n],
                    want,
                    "warp {w}, row {r}, column {n}"
                );
            }
        }
    }
}
