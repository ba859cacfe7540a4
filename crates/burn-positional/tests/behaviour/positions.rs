//! Offsets, explicit positions, concatenation and scaling: parity between ways of asking for
//! the same thing.

use burn::nn::Initializer;
use burn::prelude::*;
use burn::tensor::Tolerance;
use burn_positional::{
    AbsolutePositionConfig, Combine, EmbeddingWithPosition, EmbeddingWithPositionConfig,
    LearnedConfig, Positions, SinusoidalConfig,
};
use proptest::prelude::*;

fn ids(batch: usize, seq: usize, vocab: usize, device: &Device) -> Tensor<2, Int> {
    let values: Vec<i64> = (0..batch * seq)
        .map(|i| ((i * 7 + 3) % vocab) as i64)
        .collect();
    Tensor::from_data(TensorData::new(values, [batch, seq]), device)
}

fn schemes() -> Vec<AbsolutePositionConfig> {
    vec![
        SinusoidalConfig::new().into(),
        // A cache shorter than the sequence: the device table grows past it.
        SinusoidalConfig::new().with_cache_len(5).into(),
        LearnedConfig::new(32).into(),
    ]
}

fn assert_close(a: Tensor<3>, b: Tensor<3>) {
    a.into_data()
        .assert_approx_eq::<f32>(&b.into_data(), Tolerance::absolute(1e-6));
}

/// The forward at offset `k` equals rows `k..` of the whole forward (incremental decoding).
fn offset_equals_slice_of(
    embed: &EmbeddingWithPosition,
    batch: usize,
    seq: usize,
    k: usize,
    device: &Device,
) {
    let d_model = embed.d_model();
    let all = ids(batch, seq, embed.vocab_size(), device);
    let full = embed.forward(all.clone());
    let tail = embed.forward_at(all.slice([0..batch, k..seq]), Positions::Offset(k));
    assert_close(tail, full.slice([0..batch, k..seq, 0..d_model]));
}

pub fn offset_equals_slice(device: &Device) {
    for scheme in schemes() {
        let embed = EmbeddingWithPositionConfig::new(50, 16)
            .with_scheme(scheme)
            .init(device);
        for k in [0, 1, 5, 11] {
            offset_equals_slice_of(&embed, 2, 12, k, device);
        }
    }
}

pub fn explicit_default_positions_equal_implicit(device: &Device) {
    let (batch, seq) = (3, 9);
    for scheme in schemes() {
        let embed = EmbeddingWithPositionConfig::new(50, 16)
            .with_scheme(scheme)
            .init(device);
        let x = ids(batch, seq, 50, device);
        for offset in [0, 4] {
            let p = Tensor::<1, Int>::arange(offset as i64..(offset + seq) as i64, device)
                .unsqueeze::<2>()
                .expand([batch, seq]);
            // `try_forward` grows a short sinusoidal table to explicit positions past it. The
            // read-free `forward_at` cannot see them: it sees `cache_len` or `seq` rows, whatever
            // was grown before (see `bad_input`), and defers positions past those.
            let explicit = embed
                .try_forward_at(x.clone(), Positions::Explicit(p.clone()))
                .unwrap();
            let implicit = embed.forward_at(x.clone(), Positions::Offset(offset));
            assert_close(explicit, implicit.clone());
            let unread_rows = match &embed.position {
                burn_positional::AbsolutePosition::Sinusoidal(table) => {
                    table.cache().dims()[0].max(seq)
                }
                _ => usize::MAX,
            };
            let read_free = embed.forward_at(x.clone(), Positions::Explicit(p));
            if offset + seq <= unread_rows {
                assert_close(read_free, implicit);
                embed.check_inputs().unwrap();
            } else {
                assert!(read_free.is_nan().any().into_scalar::<bool>());
                assert!(embed.check_inputs().is_err());
            }
        }
    }
}

pub fn left_padding_with_explicit_positions(device: &Device) {
    // Row 1 is row 0 shifted right by two padding slots; with positions that start at its
    // first real token, its real tokens embed exactly as row 0's.
    for scheme in schemes() {
        let embed = EmbeddingWithPositionConfig::new(50, 16)
            .with_scheme(scheme)
            .with_padding_idx(Some(0))
            .init(device);
        let x = Tensor::<2, Int>::from_data([[7, 8, 9, 10], [0, 0, 7, 8]], device);
        let p = Tensor::<2, Int>::from_data([[0, 1, 2, 3], [0, 0, 0, 1]], device);
        let out = embed.forward_at(x, Positions::Explicit(p));
        let row0 = out.clone().slice([0..1, 0..2, 0..16]);
        let row1 = out.slice([1..2, 2..4, 0..16]);
        assert_close(row0, row1);
    }
}

pub fn concat_places_tokens_then_positions(device: &Device) {
    let (d_token, d_position) = (6, 4);
    let embed = EmbeddingWithPositionConfig::new(20, 10)
        .with_combine(Combine::Concat {
            d_token,
            d_position,
        })
        .init(device);
    let x = ids(2, 5, 20, device);
    let out = embed.forward(x.clone());
    assert_eq!(out.dims(), [2, 5, 10]);
    let tokens = burn::tensor::module::embedding(embed.tokens.val(), x);
    assert_close(out.clone().slice([0..2, 0..5, 0..d_token]), tokens);
    let table = embed
        .position
        .vectors(0..5)
        .unwrap()
        .unwrap()
        .unsqueeze::<3>()
        .expand([2, 5, d_position]);
    assert_close(out.slice([0..2, 0..5, d_token..10]), table);
}

pub fn scaling_multiplies_tokens_by_sqrt_d_model(device: &Device) {
    let d_model = 16;
    let config =
        EmbeddingWithPositionConfig::new(20, d_model).with_scheme(AbsolutePositionConfig::None);
    let plain = config.init(device);
    // The same token table, through a record.
    let scaled = config
        .clone()
        .with_scale_tokens(true)
        .init(device)
        .load_record(plain.clone().into_record());
    let x = ids(2, 5, 20, device);
    assert_close(scaled.forward(x.clone()), plain.forward(x).mul_scalar(4.0));
}

pub fn no_position_means_tokens_only(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(20, 8)
        .with_scheme(AbsolutePositionConfig::None)
        .with_token_initializer(Initializer::Normal {
            mean: 0.0,
            std: 1.0,
        })
        .init(device);
    let x = ids(1, 6, 20, device);
    let tokens = burn::tensor::module::embedding(embed.tokens.val(), x.clone());
    assert_close(embed.forward_at(x, Positions::Offset(1000)), tokens);
}

pub fn offsets_equal_slices_for_any_length(device: &Device) {
    // Property: for any sequence length and offset, offset forward equals the slice.
    let embed = EmbeddingWithPositionConfig::new(50, 8)
        .with_scheme(SinusoidalConfig::new().with_cache_len(16).into())
        .init(device);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(12));
    runner
        .run(&(1usize..40, 0usize..40), |(seq, k)| {
            let k = k % seq;
            offset_equals_slice_of(&embed, 1, seq, k, device);
            Ok(())
        })
        .unwrap();
}

on_every_device!(
    offset_equals_slice,
    explicit_default_positions_equal_implicit,
    left_padding_with_explicit_positions,
    concat_places_tokens_then_positions,
    scaling_multiplies_tokens_by_sqrt_d_model,
    no_position_means_tokens_only,
    offsets_equal_slices_for_any_length,
);
