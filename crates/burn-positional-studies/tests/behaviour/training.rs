//! Training learned position tables: a short run on every autodiff device learns, trains the
//! position table while a frozen token table stays put, and reloads bit-exactly.

use burn::optim::{AdamConfig, GradientsParams};
use burn::prelude::*;
use burn_positional::{AbsolutePosition, LearnedConfig, LearnedInit, SinusoidalConfig};
use burn_positional_studies::learner::{self, Listener, Strategy};
use burn_positional_studies::tagger::TokenTagger;
use burn_positional_studies::training::{self, TrainingConfig};

#[path = "../support/tiny.rs"]
mod tiny;

fn tiny_config() -> TrainingConfig {
    tiny::tiny_config().with_valid_size(8)
}

fn table(model: &TokenTagger) -> TensorData {
    let AbsolutePosition::Learned(table) = &model.encoder.embed.position else {
        unreachable!()
    };
    table.table.val().into_data()
}

fn max_abs_diff(a: &TensorData, b: &TensorData) -> f32 {
    a.iter::<f32>()
        .zip(b.iter::<f32>())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// 40 Adam steps on one fixed batch, token table frozen: the loss falls at least 4-fold, the
/// learned table moves, the token table does not move at all.
pub fn short_run_learns_positions_with_frozen_tokens(device: &Device) {
    let config = tiny_config().with_freeze_tokens(true);
    let mut model = config.init_model(device);
    let tokens_before = model.encoder.embed.tokens.val().into_data();
    let table_before = table(&model);
    let batch = config.task.batch(8, 8, 7, device);
    let mut optim = AdamConfig::new().init();
    let mut losses = Vec::new();
    for _ in 0..40 {
        let (loss, _) = model
            .try_loss_and_accuracy(batch.ids.clone(), batch.answers.clone(), config.task.k)
            .unwrap();
        losses.push(loss.clone().into_scalar::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(config.learning_rate, model, grads);
    }
    let (first, last) = (losses[0], *losses.last().unwrap());
    assert!(last * 4.0 < first, "loss fell only from {first} to {last}");
    assert_eq!(
        model.encoder.embed.tokens.val().into_data(),
        tokens_before,
        "the frozen token table moved"
    );
    assert!(
        max_abs_diff(&table(&model), &table_before) > 1e-3,
        "the learned table did not train"
    );
}

/// `learner::fit` (burn-train) with checkpoints: a run stopped after its first epoch and
/// resumed ends where an uninterrupted one does; save and reload are bit-identical.
pub fn save_reload_and_resume(device: &Device) {
    let device = &device.clone().without_autodiff();
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_config().with_steps(4).with_valid_every(2);
    let quiet = || Listener::lines("resume test");
    let single = Strategy::Single;
    // One starting draw for both runs: the tests of this binary share flex's one random
    // generator, so two draws from one seed may differ here.
    let start = config.init_model(&device.clone().autodiff());
    let straight = learner::fit_from(
        &config,
        start.clone(),
        device,
        single,
        &dir.path().join("straight"),
        quiet(),
    )
    .unwrap();
    let resumed_dir = dir.path().join("resumed");
    learner::fit_from(
        &config.clone().with_steps(2),
        start.clone(),
        device,
        single,
        &resumed_dir,
        quiet(),
    )
    .unwrap();
    assert_eq!(learner::last_checkpoint(&resumed_dir), Some(1));
    // Resumed: the checkpoint replaces the starting model.
    let resumed = learner::fit_from(&config, start, device, single, &resumed_dir, quiet()).unwrap();
    assert_eq!(
        learner::last_checkpoint(&resumed_dir),
        Some(2),
        "resume ran epoch 2"
    );
    assert!(
        max_abs_diff(&table(&resumed), &table(&straight)) < 1e-5,
        "resumed run diverged"
    );

    training::save_model(&resumed, &config, dir.path()).unwrap();
    let (loaded_config, loaded) = training::load_model(dir.path(), device).unwrap();
    assert_eq!(loaded_config, config);
    assert_eq!(table(&loaded), table(&resumed));
    assert_eq!(
        loaded.encoder.embed.tokens.val().into_data(),
        resumed.encoder.embed.tokens.val().into_data()
    );
    let batch = config.valid_batch(8, device);
    assert_eq!(
        loaded.try_forward(batch.ids.clone()).unwrap().into_data(),
        resumed.try_forward(batch.ids).unwrap().into_data()
    );
}

/// A learned table can start as the sinusoidal one.
pub fn learned_table_starts_sinusoidal(device: &Device) {
    let learned = LearnedConfig::new(16)
        .with_init(LearnedInit::Sinusoidal { base: 10_000.0 })
        .init(8, device);
    let fixed = SinusoidalConfig::new().init(8, device);
    assert_eq!(
        learned.rows(0, 16).into_data(),
        fixed.rows(0, 16).into_data()
    );
}

on_every_autodiff_device!(
    short_run_learns_positions_with_frozen_tokens,
    save_reload_and_resume,
    learned_table_starts_sinusoidal
);
