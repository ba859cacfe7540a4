//! Saving and loading: records bit-exact, configs as JSON, and clear errors for records that
//! do not fit.

use burn::config::Config;
use burn::prelude::*;
use burn_positional::{
    AbsolutePosition, EmbeddingWithPositionConfig, LearnedConfig, PositionError, Positions,
};

fn learned(max_len: usize) -> EmbeddingWithPositionConfig {
    EmbeddingWithPositionConfig::new(30, 8)
        .with_scheme(LearnedConfig::new(max_len).into())
        .with_padding_idx(Some(0))
}

fn table(embed: &burn_positional::EmbeddingWithPosition) -> TensorData {
    let AbsolutePosition::Learned(t) = &embed.position else {
        unreachable!()
    };
    t.table.val().into_data()
}

pub fn record_round_trip_is_bit_exact(device: &Device) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("embedding.bpk");
    device.seed(1);
    let saved = learned(16).init(device);
    saved.clone().save_file(&path).unwrap();
    device.seed(2);
    let loaded = learned(16).init(device).try_load_file(&path).unwrap();
    assert_eq!(
        saved.tokens.val().into_data(),
        loaded.tokens.val().into_data()
    );
    assert_eq!(table(&saved), table(&loaded));
    let x = Tensor::<2, Int>::from_data([[1, 2, 3]], device);
    assert_eq!(
        saved
            .forward_at(x.clone(), Positions::Offset(2))
            .into_data(),
        loaded.forward_at(x, Positions::Offset(2)).into_data()
    );
}

pub fn config_round_trips_as_json(device: &Device) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("embedding.json");
    let config = learned(64).with_scale_tokens(true).with_dropout(0.1);
    config.save(&path).unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    assert!(json.contains("\"max_len\": 64"), "{json}");
    let loaded = EmbeddingWithPositionConfig::load(&path).unwrap();
    assert_eq!(loaded, config);
    assert_eq!(loaded.init(device).d_model(), 8);
}

pub fn record_from_another_config_is_refused(device: &Device) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short.bpk");
    learned(16).init(device).save_file(&path).unwrap();
    let err = learned(64).init(device).try_load_file(&path).unwrap_err();
    assert!(
        matches!(err, PositionError::RecordMismatch { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("short.bpk") && msg.contains("64") && msg.contains("16"),
        "{msg}"
    );
    assert!(
        msg.contains("config that was saved with the record"),
        "{msg}"
    );
}

pub fn corrupt_record_is_refused(device: &Device) {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.bpk");
    learned(16).init(device).save_file(&good).unwrap();
    let bytes = std::fs::read(&good).unwrap();

    let truncated = dir.path().join("truncated.bpk");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let garbage = dir.path().join("garbage.bpk");
    std::fs::write(&garbage, b"not a burnpack file at all").unwrap();
    let missing = dir.path().join("missing.bpk");

    for path in [truncated, garbage, missing] {
        let err = learned(16).init(device).try_load_file(&path).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, PositionError::RecordUnreadable { .. }),
            "{msg}"
        );
        assert!(
            msg.contains(&*path.file_name().unwrap().to_string_lossy()) && msg.contains("Fix"),
            "{msg}"
        );
    }
}

on_every_device!(
    record_round_trip_is_bit_exact,
    config_round_trips_as_json,
    record_from_another_config_is_refused,
    corrupt_record_is_refused,
);
