//! What a user's crate sees with `burn-positional = { default-features = false, features =
//! ["flex"] }`: the README's model builds and runs, and a backend the features leave out (here
//! burn's `Autodiff<Flex>`: burn has autodiff, our `autodiff` feature is off, so our extension
//! has no implementation for it) takes the reference path with the same values and the same
//! errors, never a panic.

use burn::prelude::*;
use burn_positional::fused_covers;
use burn_positional::{AbsolutePosition, EmbeddingWithPositionConfig, LearnedConfig, Positions};

include!(concat!(env!("OUT_DIR"), "/readme_model.rs"));

fn main() {
    readme_model();
    println!("README \"In a burn model\": ran");

    let flex = Device::flex();
    let uncovered = Device::flex().autodiff();
    assert!(fused_covers(&flex), "flex is this crate's one backend feature");
    assert!(
        !fused_covers(&uncovered),
        "without our `autodiff` feature an autodiff device must take the reference path"
    );

    // One module on the uncovered device, and its tables on plain flex (covered).
    let on_uncovered = EmbeddingWithPositionConfig::new(50, 16)
        .with_scheme(LearnedConfig::new(8).into())
        .with_scale_tokens(true)
        .init(&uncovered);
    let embed = on_uncovered.valid();
    let ids = Tensor::<2, Int>::from_data([[1, 2, 3, 4], [5, 6, 7, 0]], &flex);
    let fused = embed.forward(ids.clone());
    let reference = on_uncovered.forward(ids.clone().to_device(&uncovered));
    reference
        .clone()
        .into_data()
        .assert_approx_eq::<f32>(&fused.into_data(), Default::default());
    println!("uncovered backend (Autodiff<Flex>): same values as the fused path");

    // Gradients flow on the reference path.
    let grads = reference.sum().backward();
    let AbsolutePosition::Learned(learned) = &on_uncovered.position else {
        unreachable!("built with LearnedConfig")
    };
    let grad = learned
        .table
        .grad(&grads)
        .expect("the learned table gets a gradient");
    assert_eq!(grad.dims(), [8, 16]);
    println!("uncovered backend: gradients reach the learned table");

    // The same errors, by the same words: a bad id, and a position past the table.
    let same_error = |ids: [[i64; 3]; 1], offset: usize| {
        let ids = Tensor::<2, Int>::from_data(ids, &flex);
        let want = embed.try_forward_at(ids.clone(), Positions::Offset(offset)).unwrap_err();
        let got = on_uncovered
            .try_forward_at(ids.to_device(&uncovered), Positions::Offset(offset))
            .unwrap_err();
        assert_eq!(got.to_string(), want.to_string());
        want.to_string()
    };
    same_error([[1, 50, 3]], 0);
    let want = same_error([[1, 2, 3]], 6);
    println!("uncovered backend: same errors ({want})");
}
