//! `padding_idx` as PyTorch's `nn.Embedding(padding_idx=..)`: the padding row starts at zero,
//! the forward returns the stored row (a converted checkpoint may hold a non-zero one), and the
//! row gets no gradient. Checked against PyTorch's own outputs and gradients
//! (`tools/torch_padding_fixture.py`), on the fused path and on the reference twin.

use burn::module::Param;
use burn::prelude::*;
use burn_positional::testing::fused_calls;
use burn_positional::{
    AbsolutePosition, AbsolutePositionConfig, EmbeddingWithPosition, EmbeddingWithPositionConfig,
    LearnedConfig, Positions,
};
use serde_json::Value;

fn fixture() -> Value {
    let path = crate::package_dir().join("tests/fixtures/torch/padding_idx.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
    serde_json::from_str(&text).unwrap()
}

fn floats(value: &Value, out: &mut Vec<f32>, shape: &mut Vec<usize>, depth: usize) {
    match value {
        Value::Array(items) => {
            if shape.len() == depth {
                shape.push(items.len());
            }
            for item in items {
                floats(item, out, shape, depth + 1);
            }
        }
        other => out.push(other.as_f64().expect("a number") as f32),
    }
}

fn tensor<const D: usize>(value: &Value, device: &Device) -> Tensor<D> {
    let (mut values, mut shape) = (Vec::new(), Vec::new());
    floats(value, &mut values, &mut shape, 0);
    Tensor::from_data(TensorData::new(values, shape), device)
}

fn close<const D: usize>(got: Tensor<D>, want: Tensor<D>, what: &str) {
    let diff = (got - want).abs().max().into_scalar::<f32>();
    assert!(diff <= 1e-5, "{what}: differs from PyTorch by {diff}");
}

pub fn padding_idx_follows_pytorch(device: &Device) {
    let f = fixture();
    let n = |key: &str| f[key].as_u64().unwrap() as usize;
    let (vocab, d, pad, max_len) = (
        n("vocab_size"),
        n("d_model"),
        n("padding_idx"),
        n("max_len"),
    );
    let ids_values: Vec<i64> = f["ids"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()))
        .collect();
    let [batch, seq] = [
        f["ids"].as_array().unwrap().len(),
        f["ids"][0].as_array().unwrap().len(),
    ];
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids_values, [batch, seq]), device);
    let weights = tensor::<3>(&f["loss_weights"], device);
    let cases: [(AbsolutePositionConfig, &str); 2] = [
        (AbsolutePositionConfig::None, "tokens_only"),
        (LearnedConfig::new(max_len).into(), "with_positions"),
    ];
    for (scheme, case) in cases {
        let learned = scheme != AbsolutePositionConfig::None;
        let mut embed = EmbeddingWithPositionConfig::new(vocab, d)
            .with_scheme(scheme)
            .with_padding_idx(Some(pad))
            .init(device);
        // At init the padding row is zero, as PyTorch's.
        close(
            embed.tokens.val().slice([pad..pad + 1, 0..d]),
            tensor::<2>(&Value::Array(vec![f["init_padding_row"].clone()]), device),
            &format!("{case}: initial padding row"),
        );
        // A checkpoint whose padding row is not zero.
        embed.tokens = Param::from_tensor(tensor::<2>(&f["tokens"], device));
        if let AbsolutePosition::Learned(table) = &mut embed.position {
            table.table = Param::from_tensor(tensor::<2>(&f["positions"], device));
        }
        let want = &f[case];
        type Path = fn(&EmbeddingWithPosition, Tensor<2, Int>) -> Tensor<3>;
        let paths: [(&str, Path); 3] = [
            ("forward", |e, ids| e.forward(ids)),
            ("try_forward", |e, ids| e.try_forward(ids).unwrap()),
            ("reference", |e, ids| {
                e.try_forward_reference(ids, Positions::default()).unwrap()
            }),
        ];
        for (path, run) in paths {
            let what = format!("{case}, {path}");
            let before = fused_calls();
            let out = run(&embed, ids.clone());
            if learned && path != "reference" {
                assert_eq!(fused_calls(), before + 1, "{what}: the fused kernel ran");
            }
            embed.check_inputs().unwrap();
            close(
                out.clone(),
                tensor::<3>(&want["output"], device),
                &format!("{what}: output"),
            );
            if !device.is_autodiff() {
                continue;
            }
            let grads = (out * weights.clone()).sum().backward();
            let tokens = embed.tokens.grad(&grads).expect("token gradient");
            close(
                tokens,
                tensor::<2>(&want["tokens_grad"], device),
                &format!("{what}: token gradient"),
            );
            if let AbsolutePosition::Learned(table) = &embed.position {
                let positions = table.table.grad(&grads).expect("position gradient");
                close(
                    positions,
                    tensor::<2>(&want["positions_grad"], device),
                    &format!("{what}: position gradient"),
                );
            }
        }
    }
}

on_every_device!(padding_idx_follows_pytorch);
