//! BERT (`BertForMaskedLM`) against transformers: the masked-LM logits of a right-padded batch
//! with two token-type segments per row, and each padded row against its tokens alone.

use burn::tensor::Device;

use crate::fixture::{Fixture, ints, max_relative_error, padding};

/// Relative tolerance against transformers (float32 on both sides).
const TOLERANCE: f64 = 1e-4;

/// Every check of a BERT fixture.
pub fn bert_matches_transformers(name: &str, device: &Device) {
    let fx = Fixture::open(name);
    let source = fx.source();
    let model = burn_positional_models::bert::load(&fx.checkpoint(), device)
        .unwrap_or_else(|e| panic!("{source}: {e}"));
    let batch = fx.batch();
    let types = fx.rows("token_type_ids");

    // The right-padded batch, compared at its real tokens.
    let logits = model.forward(
        ints(&batch.ids, device),
        ints(&types, device),
        padding(&batch.mask, device),
    );
    let err = max_relative_error(logits.clone(), fx.tensor("logits", device), &batch.mask);
    assert!(
        err < TOLERANCE,
        "{source}: logits differ by {err:.2e} (relative)"
    );

    // Each row's real tokens alone give its padded row's logits: padding never leaks.
    let [_, _, vocab] = logits.dims();
    for (row, mask) in batch.mask.iter().enumerate() {
        let n = mask.iter().filter(|&&m| m).count();
        let alone = model.forward(
            ints(&[batch.ids[row][..n].to_vec()], device),
            ints(&[types[row][..n].to_vec()], device),
            padding(&[vec![true; n]], device),
        );
        let padded = logits.clone().slice([row..row + 1, 0..n, 0..vocab]);
        let err = max_relative_error(alone, padded, &[vec![true; n]]);
        assert!(
            err < TOLERANCE,
            "{source}: row {row} padded differs from alone by {err:.2e}"
        );
    }
}

fn bert(device: &Device) {
    bert_matches_transformers("bert", device);
}

/// Input from outside, checked before anything runs: an id past the vocabulary or negative,
/// a token type past the table, each a typed error naming the value, its place and the limit
/// (before, `forward` gave NaN rows for the ids and on wgpu stray rows for the types).
fn bad_input_is_refused(device: &Device) {
    let fx = Fixture::open("bert");
    let model = burn_positional_models::bert::load(&fx.checkpoint(), device).unwrap();
    let batch = fx.batch();
    let types = fx.rows("token_type_ids");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fx.dir.join("config.json")).unwrap())
            .unwrap();
    let vocab = config["vocab_size"].as_i64().expect("vocab_size");
    for (bad, says) in [
        (vocab, format!("token id {vocab} at [batch 1, index 3]")),
        (-1, "token id -1 at [batch 1, index 3]".to_string()),
    ] {
        let mut ids = batch.ids.clone();
        ids[1][3] = bad;
        let err = model
            .try_forward(
                ints(&ids, device),
                ints(&types, device),
                padding(&batch.mask, device),
            )
            .unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&says), "{message}");
        assert!(message.contains(&vocab.to_string()), "{message}");
    }
    let mut bad_types = types.clone();
    bad_types[0][5] = 2;
    let err = model
        .try_forward(
            ints(&batch.ids, device),
            ints(&bad_types, device),
            padding(&batch.mask, device),
        )
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("token type id 2 at [batch 0, index 5] is outside 0..2"),
        "{message}"
    );
    // Good input: the same logits as forward.
    let ok = model
        .try_forward(
            ints(&batch.ids, device),
            ints(&types, device),
            padding(&batch.mask, device),
        )
        .unwrap();
    let err = max_relative_error(ok, fx.tensor("logits", device), &batch.mask);
    assert!(err < TOLERANCE, "{err:.2e}");
}

on_every_device!(bert, bad_input_is_refused);

/// `from_pretrained`'s tying: the MLM decoder's own weight and bias where the file holds them,
/// the word table and `cls.predictions.bias` where it does not; without tying, its own.
#[test]
fn head_follows_tying() {
    use burn_positional_models::bert::{HeadSource, remaps};
    let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect();
    let source = |k: &[&str], tie| {
        let head = HeadSource::of(&keys(k), tie);
        (head.own_weight, head.own_bias)
    };
    assert_eq!(source(&["cls.predictions.bias"], true), (false, false));
    let all = [
        "cls.predictions.bias",
        "cls.predictions.decoder.weight",
        "cls.predictions.decoder.bias",
    ];
    assert_eq!(source(&all, true), (true, true));
    assert_eq!(source(&["cls.predictions.bias"], false), (true, true));
    // The tied bias is read from `cls.predictions.bias` only when the decoder has none.
    let tied = HeadSource::of(&keys(&["cls.predictions.bias"]), true);
    assert!(remaps(tied).contains(&("cls.predictions", "head")));
    assert!(!remaps(HeadSource::of(&keys(&all), true)).contains(&("cls.predictions", "head")));
}
