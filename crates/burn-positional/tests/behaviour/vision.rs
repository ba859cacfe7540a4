//! Positions on grids against transformers and PyTorch themselves, on every device.
//!
//! The expected values in `tests/fixtures/vision/` were written by `tools/vision_fixtures.py`
//! (transformers 5.24.0, torch 2.6.0 on the CPU; each JSON names its versions and quotes the
//! source lines it follows):
//!
//! - `interpolate.*`: `torch.nn.functional.interpolate` itself, bicubic and bilinear, sizes and
//!   scale factors, every `align_corners` and `antialias`;
//! - `pos_interpolation.*`: each family's own `interpolate_pos_encoding` (ViT, DeiT, DINOv2,
//!   CLIP's and SigLIP's vision towers) on a random table, at eight image sizes;
//! - `sincos_2d.*`: ViT-MAE's 2D sin-cos table, as its checkpoint holds it and as
//!   `build_2d_sinusoidal_position_embedding` returns it;
//! - `mrope.*`: Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's `get_rope_index` on a mixed text, image
//!   and video batch (one row left-padded), and their rotary modules' rotated q and k;
//! - `vision_rope.*`: the 2D rotary of Qwen2-VL's vision encoder and of Pixtral.

use std::collections::HashMap;

use burn::prelude::*;
use burn::tensor::TensorData;
use burn_positional::absolute::{GridResize, PatchGridConfig, ResizeMode, resize_weights};
use burn_positional::rotary::{Modality, MropeIndexConfig, mrope_positions};
use burn_positional::{
    Grid, LearnedConfig, PositionError, Positions, RopeArithmetic, RopeAxes, RopeConfig,
    RopeLayout, SinusoidalConfig,
};
use serde_json::Value;

/// Float32 on both sides; every path is a handful of products and sums.
const TOLERANCE: f32 = 1e-5;

/// A fixture file pair: its JSON and its tensors (f32 or i64, host side).
struct Fixture {
    json: Value,
    floats: HashMap<String, (Vec<usize>, Vec<f32>)>,
    ints: HashMap<String, (Vec<usize>, Vec<i64>)>,
}

impl Fixture {
    fn open(name: &str) -> Self {
        let dir = crate::package_dir().join("tests/fixtures/vision");
        let read = |file: String| {
            std::fs::read(dir.join(&file))
                .unwrap_or_else(|e| panic!("{file}: {e} (written by tools/vision_fixtures.py)"))
        };
        let json: Value = serde_json::from_slice(&read(format!("{name}.json"))).unwrap();
        let bytes = read(format!("{name}.safetensors"));
        let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let (mut floats, mut ints) = (HashMap::new(), HashMap::new());
        for (key, view) in tensors.tensors() {
            let shape = view.shape().to_vec();
            let data = view.data();
            match view.dtype() {
                safetensors::Dtype::F32 => {
                    let values = data
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                        .collect();
                    floats.insert(key, (shape, values));
                }
                safetensors::Dtype::I64 => {
                    let values = data
                        .chunks_exact(8)
                        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
                        .collect();
                    ints.insert(key, (shape, values));
                }
                other => panic!("{key}: unexpected dtype {other:?}"),
            }
        }
        Self { json, floats, ints }
    }

    fn floats(&self, key: &str) -> &(Vec<usize>, Vec<f32>) {
        self.floats
            .get(key)
            .unwrap_or_else(|| panic!("no float tensor {key}"))
    }

    fn ints(&self, key: &str) -> &(Vec<usize>, Vec<i64>) {
        self.ints
            .get(key)
            .unwrap_or_else(|| panic!("no int tensor {key}"))
    }

    fn tensor<const D: usize>(&self, key: &str, device: &Device) -> Tensor<D> {
        let (shape, values) = self.floats(key);
        Tensor::from_data(TensorData::new(values.clone(), shape.clone()), device)
    }
}

/// The largest difference between `got` and `expected`, relative to 1 or the value.
fn assert_close<const D: usize>(got: Tensor<D>, expected: Tensor<D>, what: &str) {
    assert_eq!(got.dims(), expected.dims(), "{what}: shapes");
    let got: Vec<f32> = got
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .unwrap();
    let expected: Vec<f32> = expected.into_data().try_to_vec::<f32>().unwrap();
    let worst = got
        .iter()
        .zip(&expected)
        .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
        .fold(0f32, f32::max);
    assert!(
        worst <= TOLERANCE,
        "{what}: differs from the reference by {worst:.2e}"
    );
}

/// `F.interpolate` on `[1, channels, h0, w0]` as two weight matrices on the device:
/// `out[c] = W_h x[c] W_w^T`.
fn interpolate_equals_pytorch(device: &Device) {
    let fx = Fixture::open("interpolate");
    let cases = fx.json["cases"].as_array().unwrap();
    assert!(cases.len() >= 50, "{} cases", cases.len());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let (h0, w0) = (
            case["h0"].as_u64().unwrap() as usize,
            case["w0"].as_u64().unwrap() as usize,
        );
        let (size, scale) = match case.get("size") {
            Some(size) => (size, None),
            None => (&case["output_size"], Some(&case["scale_factor"])),
        };
        let (h, w) = (
            size[0].as_u64().unwrap() as usize,
            size[1].as_u64().unwrap() as usize,
        );
        let resize = GridResize::new()
            .with_mode(match case["mode"].as_str().unwrap() {
                "bicubic" => ResizeMode::Bicubic,
                _ => ResizeMode::Bilinear,
            })
            .with_align_corners(case["align_corners"].as_bool().unwrap())
            .with_antialias(case["antialias"].as_bool().unwrap());
        let scale_of = |axis: usize| scale.map(|s| s[axis].as_f64().unwrap());
        let matrix = |input, output, axis| {
            let weights = resize_weights(input, output, scale_of(axis), &resize);
            Tensor::<2>::from_data(TensorData::new(weights, [output, input]), device)
        };
        let (wh, ww) = (matrix(h0, h, 0), matrix(w0, w, 1));
        let x: Tensor<4> = fx.tensor(&format!("{name}_input"), device);
        let channels = x.dims()[1];
        let x = x.reshape([channels, h0, w0]);
        let out = wh
            .unsqueeze::<3>()
            .expand([channels, h, h0])
            .matmul(x)
            .matmul(ww.transpose().unsqueeze::<3>().expand([channels, w0, w]));
        let expected: Tensor<4> = fx.tensor(&format!("{name}_output"), device);
        assert_close(out.unsqueeze(), expected, &format!("{name} {case}"));
    }
}

/// Each family's `interpolate_pos_encoding`, early return included, through
/// `LearnedPosition::on_image`.
fn family_tables_equal_transformers(device: &Device) {
    let fx = Fixture::open("pos_interpolation");
    for family in fx.json["families"].as_array().unwrap() {
        let name = family["family"].as_str().unwrap();
        let prefix = family["prefix_rows"].as_u64().unwrap() as usize;
        let grid: Vec<usize> = family["trained_grid"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let patch = family["config"]["patch_size"].as_u64().unwrap() as usize;
        let (shape, values) = fx.floats(family["table_tensor"].as_str().unwrap());
        let d = *shape.last().unwrap();
        let rows = values.len() / d;
        let mut table = LearnedConfig::new(rows)
            .with_grid(Some(PatchGridConfig::new(grid).with_prefix(prefix)))
            .init(d, device);
        table.table = burn::module::Param::from_tensor(Tensor::from_data(
            TensorData::new(values.clone(), [rows, d]),
            device,
        ));
        for case in family["cases"].as_array().unwrap() {
            let key = case["tensor"].as_str().unwrap();
            let pixels = [
                case["height"].as_u64().unwrap() as usize,
                case["width"].as_u64().unwrap() as usize,
            ];
            let got = table.on_image(pixels, [patch, patch]).unwrap();
            let expected: Tensor<3> = fx.tensor(key, device);
            let [_, n, _] = expected.dims();
            assert_close(
                got,
                expected.reshape([n, d]),
                &format!("{name} at {pixels:?}"),
            );
        }
    }
}

/// ViT-MAE's table as its checkpoint holds it (column half first), and the raw layout of
/// `build_2d_sinusoidal_position_embedding` (row half first) on a grid that is not square.
fn sincos_grid_equals_mae(device: &Device) {
    let fx = Fixture::open("sincos_2d");
    let check = |key: &str, d: usize, grid: Grid, cls: bool, row_first: bool| {
        let table = SinusoidalConfig::new().init(d, device);
        let mut got = table.on_grid(&grid).unwrap();
        if row_first {
            let n = grid.len();
            got = Tensor::cat(
                vec![
                    got.clone().slice([0..n, d / 2..d]),
                    got.slice([0..n, 0..d / 2]),
                ],
                1,
            );
        }
        if cls {
            got = Tensor::cat(vec![Tensor::zeros([1, d], device), got], 0);
        }
        assert_close(got, fx.tensor(key, device), key);
    };
    check("checkpoint_d16_g4_cls", 16, Grid::new([4, 4]), true, false);
    check("checkpoint_d8_g3", 8, Grid::new([3, 3]), false, false);
    check("raw_d16_g4_cls", 16, Grid::new([4, 4]), true, true);
    check("raw_d16_h3_w5_cls", 16, Grid::new([3, 5]), true, true);
}

/// `get_rope_index` and the rotated q, k of Qwen2-VL, Qwen2.5-VL (frames spaced by
/// `tokens_per_second`) and Qwen3-VL (interleaved sections, videos cut into frames), the rope
/// read from each text config as `config.json` gives it.
fn mrope_equals_qwen_vl(device: &Device) {
    let fx = Fixture::open("mrope");
    for case in fx.json["cases"].as_array().unwrap() {
        let prefix = case["prefix"].as_str().unwrap();
        let model_type = match prefix {
            "" => "qwen2_vl_text",
            "qwen2_5_" => "qwen2_5_vl_text",
            _ => "qwen3_vl_text",
        };
        let key = |k: &str| format!("{prefix}{k}");
        let (shape, types) = fx.ints(&key("mm_token_type_ids"));
        let (batch, seq) = (shape[0], shape[1]);
        let modalities: Vec<Vec<Modality>> = types
            .chunks(seq)
            .map(|row| {
                row.iter()
                    .map(|t| match t {
                        0 => Modality::Text,
                        1 => Modality::Image,
                        _ => Modality::Video,
                    })
                    .collect()
            })
            .collect();
        let mask: Vec<Vec<bool>> = fx
            .ints(&key("attention_mask"))
            .1
            .chunks(seq)
            .map(|row| row.iter().map(|&m| m == 1).collect())
            .collect();
        let grids = |k: &str| -> Vec<[i64; 3]> {
            fx.ints(&key(k))
                .1
                .chunks(3)
                .map(|g| [g[0], g[1], g[2]])
                .collect()
        };
        let seconds: Vec<f64> = fx
            .floats
            .get(&key("second_per_grid_ts"))
            .map(|(_, v)| v.iter().map(|&s| s as f64).collect())
            .unwrap_or_default();
        let vision = &case["vision_config"];
        let config = MropeIndexConfig::new()
            .with_spatial_merge_size(vision["spatial_merge_size"].as_u64().unwrap() as usize)
            .with_tokens_per_second(vision["tokens_per_second"].as_f64())
            .with_split_video_frames(prefix == "qwen3_");
        let ids = mrope_positions(
            &modalities,
            Some(&mask),
            &grids("image_grid_thw"),
            &grids("video_grid_thw"),
            &seconds,
            &config,
        )
        .unwrap();
        // transformers' [3, batch, seq], plane by plane.
        let expected = &fx.ints(&key("position_ids")).1;
        for axis in 0..3 {
            assert_eq!(
                ids.axis(axis),
                expected[axis * batch * seq..(axis + 1) * batch * seq],
                "{model_type}: position ids, axis {axis}"
            );
        }
        assert_eq!(
            ids.deltas,
            fx.ints(&key("rope_deltas")).1,
            "{model_type}: deltas"
        );

        let mut text = case["text_config"].clone();
        text["model_type"] = Value::from(model_type);
        let rope = RopeConfig::from_hf_config(&text.to_string())
            .unwrap()
            .init(device);
        for (x, rotated) in [("q", "q_rot"), ("k", "k_rot")] {
            let got = rope.apply_positions(fx.tensor(&key(x), device), ids.to_positions(device));
            assert_close(
                got,
                fx.tensor(&key(rotated), device),
                &format!("{model_type} {x}"),
            );
        }
    }
}

/// The 2D rotary of Qwen2-VL's vision encoder (its patches in merge-block order: explicit
/// positions on two axes) and of Pixtral (row-major patches: a grid, and the same as explicit).
fn vision_rope_equals_transformers(device: &Device) {
    let fx = Fixture::open("vision_rope");
    // Each encoder's rope read from its config as transformers writes it (`rope_type: "axial"`),
    // and the same built by hand.
    let rope = |family: &str, model_type: &str, axes: RopeAxes| {
        let mut config = fx.json[family]["config"].clone();
        config["model_type"] = Value::from(model_type);
        let read = RopeConfig::from_hf_config(&config.to_string()).unwrap();
        let theta = config["rope_parameters"]["rope_theta"].as_f64().unwrap();
        let head_dim = config["head_dim"].as_u64().unwrap() as usize;
        let by_hand = RopeConfig::new(head_dim)
            .with_base(theta)
            .with_layout(RopeLayout::HalfSplit)
            .with_arithmetic(RopeArithmetic::Transformers)
            .with_axes(axes);
        assert_eq!(read.axes, by_hand.axes, "{model_type}");
        assert_eq!(
            (read.d_head, read.base, read.layout),
            (by_hand.d_head, by_hand.base, by_hand.layout),
            "{model_type}"
        );
        read.init(device)
    };
    let axes_of = |key: &str| {
        let (shape, ids) = fx.ints(key);
        Positions::Axes(Tensor::<3, Int>::from_data(
            TensorData::new(ids.clone(), [1, shape[0], 2]),
            device,
        ))
    };

    // Qwen2-VL: q, k are [seq, heads, head_dim].
    let qwen = rope("qwen2_vl", "qwen2_vl_vision", RopeAxes::Axial(2));
    for (x, rotated) in [
        ("qwen2_vl_q", "qwen2_vl_q_rot"),
        ("qwen2_vl_k", "qwen2_vl_k_rot"),
    ] {
        let heads = |t: Tensor<3>| t.swap_dims(0, 1).unsqueeze::<4>();
        let got = qwen.apply_positions(
            heads(fx.tensor(x, device)),
            axes_of("qwen2_vl_position_ids"),
        );
        assert_close(got, heads(fx.tensor(rotated, device)), x);
    }

    // Pixtral: q, k are [1, heads, seq, head_dim] on a 3 x 5 grid.
    let pixtral = rope("pixtral", "pixtral", RopeAxes::AxialAlternate(2));
    for (x, rotated) in [
        ("pixtral_q", "pixtral_q_rot"),
        ("pixtral_k", "pixtral_k_rot"),
    ] {
        let expected: Tensor<4> = fx.tensor(rotated, device);
        let on_grid =
            pixtral.apply_positions(fx.tensor(x, device), Positions::Grid(Grid::new([3, 5])));
        assert_close(on_grid, expected.clone(), &format!("{x} on a grid"));
        let explicit =
            pixtral.apply_positions(fx.tensor(x, device), axes_of("pixtral_position_ids"));
        assert_close(explicit, expected, &format!("{x} at explicit positions"));
    }

    // Pixtral with a head of 18: 9 pairs, rows taking 5 frequencies and columns 4, as
    // transformers' slices `inv[0::2]`, `inv[1::2]` deal them (issue 71: refused before).
    let odd = rope("pixtral_odd", "pixtral", RopeAxes::AxialAlternate(2));
    for (x, rotated) in [
        ("pixtral_odd_q", "pixtral_odd_q_rot"),
        ("pixtral_odd_k", "pixtral_odd_k_rot"),
    ] {
        let expected: Tensor<4> = fx.tensor(rotated, device);
        let on_grid = odd.apply_positions(fx.tensor(x, device), Positions::Grid(Grid::new([3, 5])));
        assert_close(on_grid, expected.clone(), &format!("{x} on a grid"));
        let explicit =
            odd.apply_positions(fx.tensor(x, device), axes_of("pixtral_odd_position_ids"));
        assert_close(explicit, expected, &format!("{x} at explicit positions"));
    }
}

/// Gradients, on the autodiff devices only.
mod training {
    use super::*;

    /// The resized table trains: its gradient is the resize's transpose applied to the output's
    /// (the table reaches the loss through two matrix products only).
    fn resized_table_trains(device: &Device) {
        let trained = [3, 3];
        let d = 2;
        let table = LearnedConfig::new(1 + 9)
            .with_grid(Some(PatchGridConfig::new(trained.to_vec())))
            .init(d, device);
        let target = Grid::new([4, 5]);
        let out = table.on_grid(&target).unwrap();
        // loss = sum(out * c) with c[i] = i: d loss / d table = W_h^T C W_w per column.
        let n = target.len() * d;
        let c: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let weights = Tensor::<2>::from_data(TensorData::new(c.clone(), [target.len(), d]), device);
        let loss = (out * weights).sum();
        let grads = loss.backward();
        let grad = table
            .table
            .val()
            .grad(&grads)
            .expect("the table receives a gradient");
        let resize = GridResize::new();
        let (wh, ww) = (
            resize_weights(3, 4, None, &resize),
            resize_weights(3, 5, None, &resize),
        );
        let mut expected = vec![0f32; 10 * d];
        for i in 0..3 {
            for j in 0..3 {
                for k in 0..d {
                    let mut sum = 0f64;
                    for a in 0..4 {
                        for b in 0..5 {
                            sum += wh[a * 3 + i] as f64
                                * ww[b * 3 + j] as f64
                                * c[(a * 5 + b) * d + k] as f64;
                        }
                    }
                    expected[(1 + i * 3 + j) * d + k] = sum as f32;
                }
            }
        }
        let expected = Tensor::<2>::from_data(TensorData::new(expected, [10, d]), device);
        assert_close(
            grad.cast(burn::tensor::DType::F32),
            expected,
            "gradient of the resized table",
        );
    }

    on_every_autodiff_device!(resized_table_trains);
}

/// Bad grids, named before anything runs: a grid that does not hold the tokens, positions on
/// another number of axes, an empty or negative axis, M-RoPE sections that do not sum to the
/// pairs, a grid too large for a resized table, a learned table without a grid layout.
fn bad_grids_are_named(device: &Device) {
    let rope = RopeConfig::new(8)
        .with_axes(RopeAxes::Axial(2))
        .init(device);
    let q = Tensor::<4>::ones([1, 1, 6, 8], device);
    let message = |err: PositionError| err.to_string();

    let err = message(
        rope.try_apply_positions(q.clone(), Positions::Grid(Grid::new([2, 4])))
            .unwrap_err(),
    );
    assert!(
        err.contains("grid 2x4 holds 8 tokens but 6 were given"),
        "{err}"
    );
    let err = message(
        rope.try_apply_positions(q.clone(), Positions::Grid(Grid::new([1, 2, 3])))
            .unwrap_err(),
    );
    assert!(err.contains("on 2 axes, but the positions have 3"), "{err}");
    let three = Tensor::<3, Int>::zeros([1, 6, 3], device);
    let err = message(
        rope.try_apply_positions(q, Positions::Axes(three))
            .unwrap_err(),
    );
    assert!(err.contains("positions have 3"), "{err}");

    let err = Grid::try_new([4, 0]).unwrap_err().to_string();
    assert!(err.contains("axis 1 has size 0"), "{err}");
    let err = RopeConfig::new(16)
        .with_axes(RopeAxes::MRope(vec![2, 3, 2]))
        .try_init(device)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("[2, 3, 2] (sum 7)") && err.contains("sum to 8"),
        "{err}"
    );
    // Two sections that do sum to the pairs: the interleaved layout needs three (issue 71).
    let err = RopeConfig::new(24)
        .with_axes(RopeAxes::MRopeInterleaved(vec![6, 6]))
        .try_init(device)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("[6, 6] (2 sections)") && err.contains("give three sections"),
        "{err}"
    );

    let table = LearnedConfig::new(1 + 4)
        .with_grid(Some(PatchGridConfig::new(vec![2, 2])))
        .init(8, device);
    let err = message(table.on_grid(&Grid::new([1 << 15, 1 << 15])).unwrap_err());
    assert!(err.contains("grid axis 0 has 32768 patches"), "{err}");
    let err = message(table.on_grid(&Grid::new([2, 2, 2])).unwrap_err());
    assert!(err.contains("on 2 axes, but the positions have 3"), "{err}");
    let err = message(table.on_image([3, 8], [4, 4]).unwrap_err());
    assert!(
        err.contains("`image height` = 3 pixels (patches of 4 x 4)"),
        "{err}"
    );
    assert!(err.contains("at least 4 x 4 pixels"), "{err}");
    // A patch of no pixels blames the patch, not the image (issue 71).
    let err = message(table.on_image([16, 16], [0, 6]).unwrap_err());
    assert!(
        err.contains("`patch` = 0 x 6 pixels")
            && err.contains("patch_size")
            && !err.contains("resize"),
        "{err}"
    );
    let plain = LearnedConfig::new(8).init(8, device);
    let err = message(plain.on_grid(&Grid::new([2, 2])).unwrap_err());
    assert!(err.contains("LearnedConfig::grid"), "{err}");
    let err = LearnedConfig::new(8)
        .with_grid(Some(PatchGridConfig::new(vec![2, 2])))
        .try_init(8, device)
        .unwrap_err()
        .to_string();
    assert!(err.contains("set max_len to 5"), "{err}");

    // The embedding's one-axis table refuses grid positions by name.
    let embed = burn_positional::EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(LearnedConfig::new(16).into())
        .init(device);
    let ids = Tensor::<2, Int>::ones([1, 6], device);
    let err = message(
        embed
            .try_forward_at(ids.clone(), Positions::Grid(Grid::new([2, 3])))
            .unwrap_err(),
    );
    assert!(err.contains("on_grid"), "{err}");
    let err = message(
        embed
            .try_forward_at(ids, Positions::Grid(Grid::new([7])))
            .unwrap_err(),
    );
    assert!(err.contains("holds 7 tokens but 6 were given"), "{err}");
}

/// Shape-only work is built once: the angles of a grid, MAE's table of a grid, the resize
/// matrices of a target grid.
fn grid_tables_are_built_once(device: &Device) {
    let rope = RopeConfig::new(8)
        .with_axes(RopeAxes::Axial(2))
        .init(device);
    let sincos = SinusoidalConfig::new().init(8, device);
    let q = Tensor::<4>::ones([1, 1, 6, 8], device);
    let grid = Grid::new([2, 3]);
    let first = rope.apply_positions(q.clone(), Positions::Grid(grid.clone()));
    sincos.on_grid(&grid).unwrap();
    let built = burn_positional::testing::host_table_builds();
    for _ in 0..3 {
        let again = rope.apply_positions(q.clone(), Positions::Grid(grid.clone()));
        assert_close(again, first.clone(), "the same grid twice");
        sincos.on_grid(&grid).unwrap();
    }
    assert_eq!(burn_positional::testing::host_table_builds(), built);
}

on_every_device!(
    interpolate_equals_pytorch,
    family_tables_equal_transformers,
    sincos_grid_equals_mae,
    mrope_equals_qwen_vl,
    vision_rope_equals_transformers,
    bad_grids_are_named,
    grid_tables_are_built_once,
);
