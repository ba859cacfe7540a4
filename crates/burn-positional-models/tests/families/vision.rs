//! ViT and DINOv2 (image classification) against transformers, on every device.
//!
//! The expected values were written by transformers 5.24.0 itself (torch 2.6.0 on the CPU,
//! float32, eager attention) with `tools/vision_fixtures.py` (part F), from the tiny random
//! checkpoints committed beside them in `tests/fixtures/{vit,dinov2}/`: for each image size the
//! `pixel_values_<H>x<W>` fed to `ViTForImageClassification(..., interpolate_pos_encoding=True)`
//! and `Dinov2ForImageClassification`, their `logits_<H>x<W>`, and the base model's
//! `last_hidden_state` as `hidden_<H>x<W>`. The sizes: 16 x 16 (the training resolution: the
//! position table as it is), 24 x 24 (the table resized to a 6 x 6 grid) and 16 x 28 (not
//! square: a 4 x 7 grid).

use burn::tensor::{Device, Tensor};
use burn_positional_models::{ModelError, dinov2, vit};

use crate::fixture::{Fixture, max_relative_error};

/// Relative tolerance against transformers (float32 on both sides).
const TOLERANCE: f64 = 1e-4;

/// The image sizes of the fixtures, `<H>x<W>`.
const SIZES: [&str; 3] = ["16x16", "24x24", "16x28"];

/// A loaded vision port: its logits and last hidden states of `pixel_values`.
type Run<'a> = &'a dyn Fn(Tensor<4>) -> (Tensor<2>, Tensor<3>);

/// Every size of fixture `name` through `run`: logits and hidden states within [`TOLERANCE`].
fn matches_transformers(fx: &Fixture, device: &Device, run: Run) {
    let source = fx.source();
    for size in SIZES {
        let pixels = fx.tensor::<4>(&format!("pixel_values_{size}"), device);
        let (logits, hidden) = run(pixels);
        let theirs: Tensor<2> = fx.tensor(&format!("logits_{size}"), device);
        let [batch, labels] = theirs.dims();
        let logits_err = max_relative_error(
            logits.unsqueeze_dim(1),
            theirs.unsqueeze_dim(1),
            &vec![vec![true]; batch],
        );
        let theirs: Tensor<3> = fx.tensor(&format!("hidden_{size}"), device);
        let [_, seq, _] = theirs.dims();
        assert_eq!(
            hidden.dims(),
            theirs.dims(),
            "{source} {size}: hidden shape"
        );
        let hidden_err = max_relative_error(hidden, theirs, &vec![vec![true; seq]; batch]);
        eprintln!(
            "{} {size} ({labels} labels, seq {seq}) on {device:?}: logits {logits_err:.2e}, \
             hidden {hidden_err:.2e}",
            fx.name
        );
        assert!(
            logits_err < TOLERANCE,
            "{source} {size}: logits differ by {logits_err:.2e} (relative)"
        );
        assert!(
            hidden_err < TOLERANCE,
            "{source} {size}: last hidden states differ by {hidden_err:.2e} (relative)"
        );
    }
}

fn vit(device: &Device) {
    let fx = Fixture::open("vit");
    let model =
        vit::load(&fx.checkpoint(), device).unwrap_or_else(|e| panic!("{}: {e}", fx.source()));
    matches_transformers(&fx, device, &|pixels: Tensor<4>| {
        (model.forward(pixels.clone()), model.hidden_states(pixels))
    });
}

fn dinov2(device: &Device) {
    let fx = Fixture::open("dinov2");
    let model =
        dinov2::load(&fx.checkpoint(), device).unwrap_or_else(|e| panic!("{}: {e}", fx.source()));
    matches_transformers(&fx, device, &|pixels: Tensor<4>| {
        (model.forward(pixels.clone()), model.hidden_states(pixels))
    });
}

/// Images the models cannot read are refused by their shape before anything runs, each a typed
/// error naming the value, the limit and the fix: another number of channels (transformers
/// raises "Expected 3 but got 1"), and an image smaller than one patch (transformers' convolution
/// fails deep inside PyTorch). Good images give `forward`'s logits.
fn bad_images_are_refused(device: &Device) {
    let fx = Fixture::open("vit");
    let vit = vit::load(&fx.checkpoint(), device).unwrap();
    let dinov2 = dinov2::load(&Fixture::open("dinov2").checkpoint(), device).unwrap();
    let try_both = |pixels: Tensor<4>| {
        let a = vit.try_forward(pixels.clone()).unwrap_err();
        let b = dinov2.try_forward(pixels).unwrap_err();
        assert_eq!(a.to_string(), b.to_string());
        assert!(matches!(a, ModelError::PixelValues { .. }), "{a}");
        a.to_string()
    };

    let gray = Tensor::<4>::zeros([2, 1, 16, 16], device);
    let message = try_both(gray);
    for says in [
        "pixel_values of shape [2, 1, 16, 16]",
        "1 channel, the model takes 3 (num_channels in config.json)",
        "Fix: give images of 3 channels",
    ] {
        assert!(message.contains(says), "{message}");
    }

    for (shape, pixels) in [([2, 3, 3, 16], "3 x 16"), ([1, 3, 16, 2], "16 x 2")] {
        let message = try_both(Tensor::<4>::zeros(shape, device));
        for says in [
            format!("pixel_values of shape {shape:?}"),
            format!("an image of {pixels} pixels is smaller than one patch of 4 x 4 pixels"),
            "Fix: resize images to at least 4 x 4 pixels (the model was trained at 16 x 16"
                .to_string(),
        ] {
            assert!(message.contains(&says), "{message}");
        }
    }

    // Exactly one patch is an image; and a good image gives the logits of `forward`.
    assert_eq!(
        vit.try_forward(Tensor::<4>::zeros([1, 3, 4, 7], device))
            .unwrap()
            .dims(),
        [1, 5]
    );
    let pixels = fx.tensor::<4>("pixel_values_16x28", device);
    let ok = vit.try_forward(pixels).unwrap();
    let theirs: Tensor<2> = fx.tensor("logits_16x28", device);
    let err = max_relative_error(
        ok.unsqueeze_dim(1),
        theirs.unsqueeze_dim(1),
        &[vec![true], vec![true]],
    );
    assert!(err < TOLERANCE, "{err:.2e}");
}

on_every_device!(vit, dinov2, bad_images_are_refused);

/// A copy of fixture `name` with `config.json` edited by `config` and the tensors `drop` left
/// out of `model.safetensors`.
fn altered(
    name: &str,
    config: impl Fn(&mut serde_json::Value),
    drop: &[&str],
) -> tempfile::TempDir {
    let src = Fixture::open(name).dir;
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(src.join("config.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    config(&mut json);
    std::fs::write(dir.path().join("config.json"), json.to_string()).unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<_> = file
        .tensors()
        .into_iter()
        .filter(|(key, _)| !drop.contains(&key.as_str()))
        .collect();
    let out = safetensors::serialize(kept, None).unwrap();
    std::fs::write(dir.path().join("model.safetensors"), out).unwrap();
    dir
}

/// Checkpoints the ports cannot build are refused at load, naming the key or the setting.
#[test]
fn bad_checkpoints_are_refused_naming_the_key() {
    let device = crate::devices::flex();
    let open =
        |dir: &tempfile::TempDir| burn_positional_models::Checkpoint::open(dir.path()).unwrap();

    // No position table: burn-store's report, in transformers' key.
    let dir = altered("vit", |_| {}, &[vit::POSITION_KEY]);
    let err = vit::load(&open(&dir), &device).unwrap_err();
    assert!(matches!(err, ModelError::MissingTensor { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("no tensor `vit.embeddings.position_embeddings`"),
        "{err}"
    );
    let dir = altered(
        "dinov2",
        |_| {},
        &["dinov2.encoder.layer.1.layer_scale2.lambda1"],
    );
    let err = dinov2::load(&open(&dir), &device).unwrap_err();
    assert!(
        err.to_string()
            .contains("no tensor `dinov2.encoder.layer.1.layer_scale2.lambda1`"),
        "{err}"
    );
    // The mask token is left in the file on purpose: a checkpoint without it loads.
    let dir = altered("dinov2", |_| {}, &dinov2::IGNORED_KEYS);
    dinov2::load(&open(&dir), &device).unwrap();

    // A config whose grid does not match the file's table.
    let dir = altered("vit", |c| c["image_size"] = 24.into(), &[]);
    let err = vit::load(&open(&dir), &device).unwrap_err();
    assert!(matches!(err, ModelError::ShapeMismatch { .. }), "{err}");
    assert!(err.to_string().contains("[1, 37, 32]"), "{err}");

    // Settings without a port.
    let dir = altered("dinov2", |c| c["use_swiglu_ffn"] = true.into(), &[]);
    let err = dinov2::load(&open(&dir), &device).unwrap_err();
    assert!(err.to_string().contains("`use_swiglu_ffn` = true"), "{err}");
    let dir = altered("vit", |c| c["patch_size"] = serde_json::json!([4, 2]), &[]);
    let err = vit::load(&open(&dir), &device).unwrap_err();
    assert!(err.to_string().contains("`patch_size` = [4, 2]"), "{err}");
    let dir = altered(
        "vit",
        |c| c["image_size"] = serde_json::json!([16, 28]),
        &[],
    );
    let err = vit::load(&open(&dir), &device).unwrap_err();
    assert!(
        err.to_string()
            .contains("the trained grid is 4 x 7 patches"),
        "{err}"
    );

    // A folder of the other family.
    let err = vit::load(&Fixture::open("dinov2").checkpoint(), &device).unwrap_err();
    assert!(matches!(err, ModelError::Unsupported { .. }), "{err}");
}

/// The loaded position table is a parameter to fine-tune: on an autodiff device the logits of a
/// resized grid (24 x 24) give every row of the table a gradient, through the layer's resize.
#[test]
fn the_loaded_table_trains_through_the_resize() {
    let device = crate::devices::flex().autodiff();
    for name in ["vit", "dinov2"] {
        let fx = Fixture::open(name);
        let pixels = fx.tensor::<4>("pixel_values_24x24", &device);
        let (logits, table) = if name == "vit" {
            let model = vit::load(&fx.checkpoint(), &device).unwrap();
            (model.forward(pixels), model.position.table)
        } else {
            let model = dinov2::load(&fx.checkpoint(), &device).unwrap();
            (model.forward(pixels), model.position.table)
        };
        let grads = logits.sum().backward();
        let grad = table
            .grad(&grads)
            .expect("a gradient for the position table");
        let rows: Vec<f32> = grad.abs().sum_dim(1).into_data().iter::<f32>().collect();
        assert_eq!(rows.len(), 17, "{name}");
        assert!(rows.iter().all(|&r| r > 0.0), "{name}: {rows:?}");
    }
}
