//! Where gradients go: the token table and a learned table, never a sinusoidal one, never the
//! padding row.

use burn::prelude::*;
use burn_positional::{AbsolutePosition, EmbeddingWithPositionConfig, LearnedConfig};

/// A loss that weights every output element differently (shared by the gradient tests).
pub fn loss_of(out: Tensor<3>) -> Tensor<1> {
    // A loss that weights every output element differently, so no gradient cancels.
    let [batch, seq, d] = out.dims();
    let weights = Tensor::<1, Int>::arange(0..(batch * seq * d) as i64, &out.device())
        .float()
        .reshape([batch, seq, d])
        .sin();
    (out * weights).sum()
}

fn abs_sum(t: Tensor<2>) -> f32 {
    t.abs().sum().into_scalar::<f32>()
}

pub fn gradients_reach_token_and_learned_tables(device: &Device) {
    let embed = EmbeddingWithPositionConfig::new(10, 8)
        .with_scheme(LearnedConfig::new(16).into())
        .init(device);
    let x = Tensor::<2, Int>::from_data([[1, 2, 3], [3, 2, 1]], device);
    let grads = loss_of(embed.forward(x)).backward();
    let tokens = embed
        .tokens
        .grad(&grads)
        .expect("the token table gets a gradient");
    assert!(abs_sum(tokens.clone().slice([1..4, 0..8])) > 0.0);
    assert_eq!(
        abs_sum(tokens.slice([4..10, 0..8])),
        0.0,
        "unused ids get no gradient"
    );
    let AbsolutePosition::Learned(table) = &embed.position else {
        unreachable!()
    };
    let positions = table
        .table
        .grad(&grads)
        .expect("the learned table gets a gradient");
    assert!(abs_sum(positions.clone().slice([0..3, 0..8])) > 0.0);
    assert_eq!(
        abs_sum(positions.slice([3..16, 0..8])),
        0.0,
        "positions past seq get none"
    );
}

pub fn sinusoidal_table_is_never_trained(device: &Device) {
    let (vocab, d) = (10, 8);
    let embed = EmbeddingWithPositionConfig::new(vocab, d).init(device);
    // The only parameter is the token table: the sinusoids are a constant, not a Param.
    assert_eq!(embed.num_params(), vocab * d);
    let AbsolutePosition::Sinusoidal(table) = &embed.position else {
        unreachable!()
    };
    assert!(!table.cache().is_require_grad());
    let grads = loss_of(embed.forward(Tensor::<2, Int>::from_data([[1, 2]], device))).backward();
    assert!(table.cache().grad(&grads).is_none());
    assert!(embed.tokens.grad(&grads).is_some());
}

pub fn padding_row_is_zero_and_gets_no_gradient(device: &Device) {
    let pad = 0;
    let embed = EmbeddingWithPositionConfig::new(10, 8)
        .with_padding_idx(Some(pad))
        .with_scale_tokens(true)
        .init(device);
    assert_eq!(abs_sum(embed.tokens.val().slice([pad..pad + 1, 0..8])), 0.0);
    let x = Tensor::<2, Int>::from_data([[0, 0, 4, 5], [6, 0, 0, 0]], device);
    let out = embed.forward(x.clone());
    // At padding slots the output is the position vector alone.
    let positions = embed.position.vectors(0..4).unwrap().unwrap();
    let slot = out.clone().slice([0..1, 1..2, 0..8]).reshape([1, 8]);
    slot.into_data().assert_approx_eq::<f32>(
        &positions.slice([1..2, 0..8]).into_data(),
        burn::tensor::Tolerance::absolute(1e-6),
    );
    let grads = loss_of(out).backward();
    let tokens = embed.tokens.grad(&grads).unwrap();
    assert_eq!(
        abs_sum(tokens.clone().slice([pad..pad + 1, 0..8])),
        0.0,
        "padding row got a gradient"
    );
    assert!(abs_sum(tokens.slice([4..7, 0..8])) > 0.0);
}

/// T5's bucket table is trained: gradients reach it through the score bias.
pub fn t5_gradients_reach_the_table(device: &Device) {
    let t5 = burn_positional::T5BiasConfig::new(4).init(device);
    let grads = t5.bias(0, 6, 6, false).mul_scalar(1.5).sum().backward();
    let grad = t5.table.grad(&grads).expect("the T5 table gets a gradient");
    let used: f32 = grad.abs().sum().into_scalar::<f32>();
    assert!(used > 0.0);
}

on_every_autodiff_device!(
    t5_gradients_reach_the_table,
    gradients_reach_token_and_learned_tables,
    sinusoidal_table_is_never_trained,
    padding_row_is_zero_and_gets_no_gradient,
);
