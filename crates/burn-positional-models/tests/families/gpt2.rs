//! GPT-2: learned absolute positions read at transformers' left-padding positions, GPT-2's
//! attention scale options, the config names transformers maps.

use burn::tensor::Device;
use burn_positional_models::gpt2::Gpt2Config;

use crate::decoders::{decoder_generates_as_transformers, decoder_logits_match};

/// Logits of the padded batch, a padded row against its prompt alone.
fn gpt2(device: &Device) {
    decoder_logits_match("gpt2", device);
}

on_every_device!(gpt2);

/// Greedy tokens and step logits against transformers, cached steps against one forward.
mod generation {
    fn gpt2(device: &burn::tensor::Device) {
        super::decoder_generates_as_transformers("gpt2", device);
    }

    on_every_inference_device!(gpt2);
}

/// `GPT2Config`'s `attribute_map` names win over GPT-2's own, as in transformers 5.24
/// (`GPT2Config.from_dict({"n_head": 4, "num_attention_heads": 8, ...}).n_head == 8`).
#[test]
fn gpt2_config_reads_transformers_names() {
    let c: Gpt2Config = serde_json::from_str(
        r#"{"n_embd": 32, "hidden_size": 48, "n_head": 4, "num_attention_heads": 8,
            "n_positions": 9, "max_position_embeddings": 7, "num_hidden_layers": 3}"#,
    )
    .unwrap();
    assert_eq!(
        (c.d_model(), c.n_heads(), c.max_len(), c.n_layers()),
        (48, 8, 7, 3)
    );
    let d: Gpt2Config = serde_json::from_str(r#"{"n_inner": null}"#).unwrap();
    assert_eq!(
        (
            d.vocab_size,
            d.d_model(),
            d.n_heads(),
            d.n_layers(),
            d.max_len(),
            d.n_inner
        ),
        (50257, 768, 12, 12, 1024, None)
    );
    assert_eq!(
        (d.activation_function.as_str(), d.layer_norm_epsilon),
        ("gelu_new", 1e-5)
    );
    assert!(d.tie_word_embeddings && d.scale_attn_weights && !d.scale_attn_by_inverse_layer_idx);
}

/// transformers' `GPT2Attention.scaling`: `head_dim^-0.5` with `scale_attn_weights`, divided
/// by `layer_idx + 1` with `scale_attn_by_inverse_layer_idx`, 1 with neither.
#[test]
fn gpt2_attention_scale_follows_the_flags() {
    let config = |json: &str| serde_json::from_str::<Gpt2Config>(json).unwrap();
    let c = config(r#"{"n_embd": 64, "n_head": 4}"#);
    assert_eq!((c.scale(0), c.scale(3)), (0.25, 0.25));
    let c = config(r#"{"n_embd": 64, "n_head": 4, "scale_attn_by_inverse_layer_idx": true}"#);
    assert_eq!((c.scale(0), c.scale(3)), (0.25, 0.0625));
    let c = config(
        r#"{"n_embd": 64, "n_head": 4, "scale_attn_weights": false,
                       "scale_attn_by_inverse_layer_idx": true}"#,
    );
    assert_eq!((c.scale(0), c.scale(1)), (1.0, 0.5));
}
