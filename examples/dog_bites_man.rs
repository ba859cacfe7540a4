//! "dog bites man" and "man bites dog": the same three words, in another order.
//!
//! Without positions, the two sentences embed to the same set of vectors, permuted, and any
//! order-blind summary of them (such as the mean) is identical. With positions, they differ.
//!
//! ```text
//! cargo run --release --example dog_bites_man [-- --device wgpu|ndarray|flex]
//! ```

use burn::prelude::*;
use burn_positional::device::{DeviceChoice, open_or_cpu};
use burn_positional::{
    EmbeddingWithPositionConfig, LearnedConfig, PositionSchemeConfig, SinusoidalConfig,
};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Why a transformer needs positions: dog bites man versus man bites dog")]
struct Args {
    /// Device to run on (also read from BURN_DEVICE). wgpu falls back to the CPU with a notice
    /// when no adapter exists.
    #[arg(long, env = "BURN_DEVICE", default_value = "wgpu")]
    device: DeviceChoice,
    /// Width of the vectors.
    #[arg(long, default_value_t = 8)]
    d_model: usize,
}

const VOCAB: [&str; 3] = ["dog", "bites", "man"];

fn ids(sentence: &str, device: &Device) -> Tensor<2, Int> {
    let ids: Vec<i64> = sentence
        .split(' ')
        .map(|word| VOCAB.iter().position(|w| *w == word).expect("known word") as i64)
        .collect();
    let len = ids.len();
    Tensor::from_data(TensorData::new(ids, [1, len]), device)
}

fn rows(t: Tensor<3>) -> Vec<Vec<f32>> {
    let [_, seq, d] = t.dims();
    let values: Vec<f32> = t.into_data().iter::<f32>().collect();
    (0..seq)
        .map(|s| values[s * d..(s + 1) * d].to_vec())
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn mean(rows: &[Vec<f32>]) -> Vec<f32> {
    let n = rows.len() as f32;
    (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c]).sum::<f32>() / n)
        .collect()
}

fn show(name: &str, scheme: PositionSchemeConfig, args: &Args, device: &Device) {
    // The same seed gives the same token table for every scheme.
    device.seed(42);
    let embed = EmbeddingWithPositionConfig::new(VOCAB.len(), args.d_model)
        .with_scheme(scheme)
        .init(device);
    let a = rows(embed.forward(ids("dog bites man", device)));
    let b = rows(embed.forward(ids("man bites dog", device)));
    // "man bites dog" is "dog bites man" with words 0 and 2 swapped.
    let permuted: Vec<Vec<f32>> = vec![a[2].clone(), a[1].clone(), a[0].clone()];
    let row_diff = (0..3)
        .map(|i| max_abs_diff(&b[i], &permuted[i]))
        .fold(0.0, f32::max);
    let pooled_diff = max_abs_diff(&mean(&a), &mean(&b));
    println!(
        "{name:<12} | rows of B vs rows of A swapped: {row_diff:>9.6} | mean-pooled A vs B: {pooled_diff:>9.6}"
    );
}

fn main() {
    let args = Args::parse();
    let opened = open_or_cpu(args.device);
    let device = &opened.device;
    println!("device: {}", opened.description);
    println!(
        "A = \"dog bites man\", B = \"man bites dog\", d_model = {}\n",
        args.d_model
    );
    println!("largest absolute difference (0 means identical):");
    show("none", PositionSchemeConfig::None, &args, device);
    show("sinusoidal", SinusoidalConfig::new().into(), &args, device);
    show("learned", LearnedConfig::new(16).into(), &args, device);
    println!(
        "\nWithout positions, B's vectors are A's vectors in another order, so anything that \
         ignores order (a mean, or self-attention) cannot tell the sentences apart. With \
         positions, the word vectors carry where they stand, and the sentences differ."
    );
}
