//! The tiny copy-back run the training tests share: vocabulary 8, sequences of 8, copy 2 back,
//! one block of width 16 with a learned table, batches of 8, Adam at 1e-2.

use burn_positional::LearnedConfig;
use burn_positional_examples::encoder::EncoderConfig;
use burn_positional_studies::copy_back::CopyBackConfig;
use burn_positional_studies::tagger::TokenTaggerConfig;
use burn_positional_studies::training::TrainingConfig;

pub fn tiny_config() -> TrainingConfig {
    let task = CopyBackConfig::new()
        .with_vocab_size(8)
        .with_seq(8)
        .with_k(2);
    let encoder = EncoderConfig::new(8, LearnedConfig::new(8).into())
        .with_d_model(16)
        .with_n_heads(2)
        .with_n_blocks(1);
    TrainingConfig::new(TokenTaggerConfig::new(encoder), task)
        .with_batch_size(8)
        .with_valid_size(16)
        .with_learning_rate(1e-2)
}
