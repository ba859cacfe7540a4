//! Training throughput of a GPT-2-small-shaped model (the port's `Gpt2Config` defaults: vocab
//! 50257, 1024 learned positions, width 768, 12 layers of 12 heads, tied head), the side
//! `tools/train_speed.py` measures in PyTorch eager (transformers' `GPT2LMHeadModel`, the same
//! shapes):
//!
//! ```text
//! cargo run --release -p burn-positional-models --example train_speed -- --steps 3
//! python3 tools/train_speed.py --steps 3
//! ```
//!
//! A step is the forward of a batch of `--batch` random sequences of `--seq` token ids (seed 1),
//! the next-token cross-entropy, the backward and one AdamW update (lr 1e-4, weight decay
//! 0.01), synced: what a training loop does per batch. The attention is the layer's
//! (`SelfAttention`'s `attend`: the flash kernel and its backward kernel); positions are the
//! layer's learned table, trained. The first `--warmup` steps are not timed. Prints one JSON
//! line: the median step's seconds (and its forward with the loss, backward and update),
//! steps and tokens per second, and the loss of each step.

use std::time::Instant;

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamWConfig, GradientsParams};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn_positional::{EmbeddingWithPositionConfig, LearnedConfig};
use burn_positional_examples::device::{DeviceChoice, open};
use burn_positional_models::gpt2::Gpt2Config;
use burn_positional_models::{CausalLm, Step};
use clap::Parser;

/// Training steps per second of a GPT-2-small-shaped model.
#[derive(Parser, Debug)]
struct Args {
    /// Sequences per batch.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 512)]
    seq: usize,
    /// Blocks (12 is GPT-2 small).
    #[arg(long, default_value_t = 12)]
    layers: usize,
    /// Timed steps.
    #[arg(long, default_value_t = 3)]
    steps: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// flex, ndarray, wgpu.
    #[arg(long, default_value = "flex")]
    device: DeviceChoice,
}

pub fn main() -> Result<(), String> {
    let args = Args::parse();
    let opened = open(args.device)?;
    let device = opened.device.autodiff();
    device.seed(1);
    let config = Gpt2Config {
        n_layer: args.layers,
        ..Gpt2Config::default()
    };
    let mut model = config
        .init("train_speed", &device)
        .map_err(|e| e.to_string())?;
    // The port starts its token table at zeros (a checkpoint fills it); training draws it, as
    // transformers does: N(0, 0.02) (the learned positions' default too).
    model.embedding = EmbeddingWithPositionConfig::new(config.vocab_size, config.d_model())
        .with_token_initializer(burn::nn::Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        })
        .with_scheme(LearnedConfig::new(config.max_len()).into())
        .try_init(&device)
        .map_err(|e| e.to_string())?;
    let params = model.num_params();
    let mut optim = AdamWConfig::new().with_weight_decay(0.01).init();
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    let (batch, seq) = (args.batch, args.seq);
    let positions = Tensor::<1, Int>::arange(0..seq as i64, &device)
        .reshape([1, seq])
        .expand([batch, seq]);
    let key_padding = Tensor::<2, Bool>::from_data(
        burn::tensor::TensorData::new(vec![false; batch * seq], [batch, seq]),
        &device,
    );
    let mut times = Vec::new();
    let mut phases: Vec<[f64; 3]> = Vec::new();
    let mut losses = Vec::new();
    for step in 0..args.warmup + args.steps {
        let ids = Tensor::<2, Int>::random(
            [batch, seq],
            Distribution::Uniform(0.0, config.vocab_size as f64),
            &device,
        );
        device.sync().map_err(|e| format!("sync: {e:?}"))?;
        let start = Instant::now();
        let step_input = Step {
            ids: ids.clone(),
            positions: positions.clone(),
            key_positions: positions.clone(),
            key_padding: key_padding.clone(),
            past: 0,
            len: seq,
            sequential: true,
        };
        let logits = model.head(model.hidden(&step_input, None));
        let vocab = config.vocab_size;
        let predicted = logits
            .narrow(1, 0, seq - 1)
            .reshape([batch * (seq - 1), vocab]);
        let targets = ids.narrow(1, 1, seq - 1).reshape([batch * (seq - 1)]);
        let loss = loss_fn.forward(predicted, targets);
        device.sync().map_err(|e| format!("sync: {e:?}"))?;
        let forward = start.elapsed().as_secs_f64();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        device.sync().map_err(|e| format!("sync: {e:?}"))?;
        let backward = start.elapsed().as_secs_f64() - forward;
        model = optim.step(1e-4, model, grads);
        device.sync().map_err(|e| format!("sync: {e:?}"))?;
        let elapsed = start.elapsed().as_secs_f64();
        let update = elapsed - forward - backward;
        let loss = loss.into_scalar::<f32>();
        eprintln!(
            "step {step}: {elapsed:.2} s (forward {forward:.2}, backward {backward:.2}, AdamW \
             {update:.2}), loss {loss:.4}"
        );
        if step >= args.warmup {
            times.push(elapsed);
            phases.push([forward, backward, update]);
        }
        losses.push(loss);
    }
    let mut order: Vec<usize> = (0..times.len()).collect();
    order.sort_by(|&a, &b| times[a].total_cmp(&times[b]));
    let median = times[order[order.len() / 2]];
    let [forward, backward, update] = phases[order[order.len() / 2]];
    println!(
        "{{\"side\": \"burn\", \"device\": \"{}\", \"params\": {params}, \"batch\": {batch}, \
         \"seq\": {seq}, \"layers\": {}, \"step_s\": {median:.3}, \"forward_s\": {forward:.3}, \
         \"backward_s\": {backward:.3}, \"update_s\": {update:.3}, \"steps_per_s\": {:.4}, \
         \"tokens_per_s\": {:.1}, \"losses\": {losses:?}}}",
        opened.description,
        args.layers,
        1.0 / median,
        (batch * seq) as f64 / median
    );
    Ok(())
}
