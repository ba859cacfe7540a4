//! Written by `python3 tools/hf_rope_fixtures.py --defaults` (transformers 5.24.0); do not edit.

/// `(model_type, a part of the head may rotate)`: the model types whose modeling code rotates
/// adjacent pairs `(x[2i], x[2i + 1])` in place (Cohere's `rotate_half` takes `x[..., ::2]` and
/// `x[..., 1::2]` and repeats cos and sin pair by pair), not Llama's halves. With `true` its
/// `apply_rotary_pos_emb` rotates the first `rotary_dim` dimensions and passes the rest (GLM);
/// with `false` it multiplies the whole head by cos and sin, so a partial rotation fails there.
pub(super) const INTERLEAVED_ROTATION: &[(&str, bool)] = &[
    ("blt", false),
    ("blt_global_transformer", false),
    ("blt_local_decoder", false),
    ("blt_local_encoder", false),
    ("blt_patcher", false),
    ("cohere", false),
    ("cohere2", false),
    ("cohere2_moe", false),
    ("deepseek_v4", false),
    ("efficientloftr", false),
    ("ernie4_5", false),
    ("ernie4_5_moe", false),
    ("glm", true),
    ("glm4", true),
    ("helium", false),
    ("hy_v4_vl_text", false),
    ("llama4_text", false),
    ("moonshine", true),
    ("moonshine_streaming", true),
    ("musicflamingo", false),
    ("openai_privacy_filter", false),
];

/// `(model_type, why)`: the model types whose rotation no [`RopeLayout`](crate::RopeLayout) gives.
pub(super) const OTHER_ROTATION: &[(&str, &str)] = &[(
    "nanochat",
    "its rotate_half is cat((x2, -x1)): it turns each pair the other way (by minus the angle)",
)];
