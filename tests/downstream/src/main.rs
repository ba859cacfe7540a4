//! What a user's crate sees with `burn-positional = { default-features = false, features =
//! ["flex"] }`: the README's model builds and runs, and a backend the features leave out (here
//! burn's `Autodiff<Flex>`: burn has autodiff, our `autodiff` feature is off, so our extension
//! has no implementation for it) takes the reference path with the same values and the same
//! errors, never a panic.

use burn::prelude::*;
use burn_positional::kernels::fused_covers;
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

    // The same errors, by the same words.
    let bad = Tensor::<2, Int>::from_data([[1, 50, 3]], &flex);
    let want = embed.try_forward(bad.clone(), Positions::Offset(0)).unwrap_err().to_string();
    let got = on_uncovered
        .try_forward(bad.to_device(&uncovered), Positions::Offset(0))
        .unwrap_err()
        .to_string();
    assert_eq!(got, want);
    let past = Tensor::<2, Int>::from_data([[1, 2, 3]], &flex);
    let want = embed.try_forward(past.clone(), Positions::Offset(6)).unwrap_err().to_string();
    let got = on_uncovered
        .try_forward(past.to_device(&uncovered), Positions::Offset(6))
        .unwrap_err()
        .to_string();
    assert_eq!(got, want);
    println!("uncovered backend: same errors ({want})");
}
