#!/usr/bin/env python3
"""RoPE fixtures from Hugging Face transformers, for `crates/burn-positional/tests/behaviour/hf_rope.rs`.

Run by hand, never by CI (CI runs only the Rust side against the committed JSON):

    pip install torch transformers safetensors
    python3 tools/hf_rope_fixtures.py

For every case below it builds the model's own config class from a `config.json` dict
(`AutoConfig.for_model`), then the model's own rotary module (`LlamaRotaryEmbedding`,
`GPTNeoXRotaryEmbedding`, `Qwen2RotaryEmbedding`, `Phi3RotaryEmbedding`), and writes what
transformers computes: the module's `inv_freq` and `attention_scaling` after `__init__`, and for
each window of positions a random `q` `[1, n_heads, seq, head_dim]` rotated by the model's
`apply_rotary_pos_emb` with the cos and sin the module returns for those positions. Each window
uses a fresh rotary module, so the length-dependent types (`dynamic`, `longrope`) see only that
call's positions (`seq_len = max(position_ids) + 1`), as on a first call.

The cases are small (head_dim 8 to 24, short original contexts) so that every branch of every
formula in `modeling_rope_utils.py` is hit: all three llama3 bands, the yarn ramp's interior and
edges with and without `truncate`, `mscale`/`mscale_all_dim`, an explicit `attention_factor`,
longrope on both sides of `original_max_position_embeddings`, dynamic below, at and past
`max_position_embeddings`, partial rotation (even and odd widths), proportional, and the older
`rope_scaling` / `type` spelling.
"""

import importlib
import json
import math
import pathlib

import torch
import transformers

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/burn-positional/tests/fixtures/hf/rope"

ROTARY = {
    "llama": ("llama", "LlamaRotaryEmbedding"),
    "gpt_neox": ("gpt_neox", "GPTNeoXRotaryEmbedding"),
    "qwen2": ("qwen2", "Qwen2RotaryEmbedding"),
    "phi3": ("phi3", "Phi3RotaryEmbedding"),
    "phi": ("phi", "PhiRotaryEmbedding"),
    "gemma3_text": ("gemma3", "Gemma3RotaryEmbedding"),
    "gemma4_text": ("gemma4", "Gemma4TextRotaryEmbedding"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3RotaryEmbedding"),
}

LONG_FACTOR = [1.0, 1.25, 1.5, 2.0, 3.0, 5.5, 8.0, 12.0]
SHORT_FACTOR = [1.0, 1.0, 1.02, 1.05, 1.1, 1.2, 1.3, 1.5]

# (name, config.json, windows as (offset, seq), what it checks)
CASES = [
    ("default_llama", {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 2,
                       "max_position_embeddings": 64, "rope_theta": 10000.0},
     [(0, 4), (97, 4)], "default inv_freq, head_dim from hidden_size / num_attention_heads"),
    ("default_llama3_8b_theta", {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                 "head_dim": 16, "max_position_embeddings": 8192,
                                 "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}},
     [(0, 4), (61, 3)], "rope_parameters spelling, explicit head_dim, theta 500000"),
    ("default_partial_phi", {"model_type": "phi", "hidden_size": 40, "num_attention_heads": 2,
                             "max_position_embeddings": 64, "rope_theta": 10000.0,
                             "partial_rotary_factor": 0.4},
     [(0, 3), (70, 3)], "partial rotation (phi-2's 0.4): 8 of 20 dimensions"),
    ("default_partial_phi_class_default", {"model_type": "phi", "hidden_size": 32, "num_attention_heads": 2,
                                           "max_position_embeddings": 64},
     [(9, 2)], "phi without partial_rotary_factor: transformers' PhiConfig default 0.5"),
    ("default_partial_odd", {"model_type": "phi", "hidden_size": 40, "num_attention_heads": 2,
                             "max_position_embeddings": 64, "partial_rotary_factor": 0.25},
     [(5, 3)], "odd partial width int(20 * 0.25) = 5: three pairs, exponents over 5"),
    ("default_gpt_neox", {"model_type": "gpt_neox", "hidden_size": 48, "num_attention_heads": 2,
                          "max_position_embeddings": 64, "rotary_emb_base": 5000, "rotary_pct": 0.5,
                          "rope_theta": 123.0, "partial_rotary_factor": 1.0},
     [(3, 3)], "GPT-NeoX's own keys rotary_emb_base and rotary_pct win over rope_theta / partial_rotary_factor"),
    ("linear_old_spelling", {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 2,
                             "max_position_embeddings": 256, "rope_theta": 10000.0,
                             "rope_scaling": {"type": "linear", "factor": 4.0}},
     [(0, 3), (130, 3)], "rope_scaling with `type`: inv_freq / factor"),
    ("dynamic", {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 2,
                 "max_position_embeddings": 32, "rope_theta": 10000.0,
                 "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}},
     [(0, 4), (28, 4), (29, 4), (60, 4), (150, 2)],
     "below, at (seq_len 32) and past max_position_embeddings: NTK base from the current length"),
    ("dynamic_partial", {"model_type": "phi", "hidden_size": 48, "num_attention_heads": 2,
                         "max_position_embeddings": 16, "partial_rotary_factor": 0.5,
                         "rope_scaling": {"type": "dynamic", "factor": 3.0}},
     [(2, 3), (40, 3)], "dynamic on a partial rotation"),
    ("yarn_qwen", {"model_type": "qwen2", "hidden_size": 32, "num_attention_heads": 2,
                   "max_position_embeddings": 128, "rope_theta": 10000.0,
                   "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}},
     [(0, 3), (90, 3)], "yarn defaults: beta 32/1, truncate, attention 0.1 ln(factor) + 1"),
    ("yarn_ramp_no_truncate", {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 2,
                               "max_position_embeddings": 512, "rope_theta": 100.0,
                               "rope_parameters": {"rope_type": "yarn", "rope_theta": 100.0, "factor": 8.0,
                                                   "original_max_position_embeddings": 64,
                                                   "beta_fast": 4.0, "beta_slow": 0.5,
                                                   "truncate": False}},
     [(0, 3), (300, 3)], "the ramp's interior, untruncated bounds"),
    ("yarn_deepseek_mscale", {"model_type": "llama", "hidden_size": 48, "num_attention_heads": 2,
                              "max_position_embeddings": 2560, "rope_theta": 100.0,
                              "rope_scaling": {"type": "yarn", "factor": 40.0, "beta_fast": 32, "beta_slow": 1,
                                               "mscale": 1.0, "mscale_all_dim": 0.5,
                                               "original_max_position_embeddings": 64}},
     [(0, 2), (100, 2)], "mscale / mscale_all_dim attention factor, ramp clamped at both ends"),
    ("yarn_attention_factor", {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 2,
                               "max_position_embeddings": 256, "rope_theta": 1000.0,
                               "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000.0, "factor": 4.0,
                                                   "attention_factor": 0.8, "beta_fast": 8, "beta_slow": 2,
                                                   "original_max_position_embeddings": 64}},
     [(70, 3)], "an explicit attention_factor wins"),
    ("longrope_phi3", {"model_type": "phi3", "hidden_size": 32, "num_attention_heads": 2,
                       "max_position_embeddings": 128, "original_max_position_embeddings": 32,
                       "rope_theta": 10000.0,
                       "rope_scaling": {"type": "longrope", "short_factor": SHORT_FACTOR,
                                        "long_factor": LONG_FACTOR}},
     [(0, 4), (28, 4), (29, 4), (100, 3)],
     "short factors up to seq_len 32, long past it; attention from max/original"),
    ("longrope_factor", {"model_type": "phi3", "hidden_size": 32, "num_attention_heads": 2,
                         "max_position_embeddings": 128, "rope_theta": 10000.0,
                         "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0,
                                             "short_factor": SHORT_FACTOR, "long_factor": LONG_FACTOR,
                                             "factor": 8.0, "original_max_position_embeddings": 16}},
     [(10, 3), (20, 3)], "explicit factor for the attention factor"),
    ("llama3", {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 2,
                "max_position_embeddings": 256, "rope_theta": 10000.0,
                "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 32}},
     [(0, 3), (200, 3)], "all three wavelength bands: kept, divided by factor, blended"),
    ("llama3_wide_head", {"model_type": "llama", "hidden_size": 96, "num_attention_heads": 4,
                          "max_position_embeddings": 1024, "rope_theta": 500000.0,
                          "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 64}},
     [(100, 2)], "Llama 3.2's factor 32 on a 24-wide head"),
    ("proportional", {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 2,
                      "max_position_embeddings": 64,
                      "rope_parameters": {"rope_type": "proportional", "rope_theta": 10000.0,
                                          "partial_rotary_factor": 0.25, "factor": 2.0}},
     [(0, 3), (80, 3)], "rotated pairs keep the full head's spacing; the rest have frequency 0"),
    ("gemma3_full_attention", {"model_type": "gemma3_text", "hidden_size": 32, "num_attention_heads": 2,
                               "head_dim": 16, "max_position_embeddings": 256, "num_hidden_layers": 6,
                               "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                               "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
     [(0, 3), (200, 3)], "Gemma 3's config.json: rope_scaling and rope_theta belong to the global layers",
     "full_attention"),
    ("gemma3_sliding_attention", {"model_type": "gemma3_text", "hidden_size": 32, "num_attention_heads": 2,
                                  "head_dim": 16, "max_position_embeddings": 256, "num_hidden_layers": 6,
                                  "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                                  "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
     [(0, 3), (200, 3)], "Gemma 3's local layers: rope_local_base_freq, no scaling", "sliding_attention"),
    ("gemma4_full_attention", {"model_type": "gemma4_text", "hidden_size": 32, "num_attention_heads": 2,
                               "head_dim": 8, "global_head_dim": 16, "max_position_embeddings": 256,
                               "num_hidden_layers": 6},
     [(0, 3), (150, 3)], "Gemma 4's defaults: proportional 0.25 of the global_head_dim, theta 1e6",
     "full_attention"),
    ("deepseek_v3_yarn_interleaved", {"model_type": "deepseek_v3", "hidden_size": 64, "num_attention_heads": 2,
                                      "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 16,
                                      "max_position_embeddings": 2560, "rope_theta": 10000,
                                      "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40,
                                                       "mscale": 1.0, "mscale_all_dim": 1.0,
                                                       "original_max_position_embeddings": 64, "type": "yarn"}},
     [(0, 3), (1000, 3)], "DeepSeek V3: the rope part qk_rope_head_dim, interleaved weights (rope_interleave)"),
]


def rotary(config):
    """The model's own rotary module, and GPT-NeoX's `apply_rotary_pos_emb`, which rotates the first
    `cos.shape[-1]` dimensions and passes the rest (the same as Llama's when all are rotated)."""
    module_name, class_name = ROTARY[config.model_type]
    module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb

    if getattr(config, "rope_interleave", False):
        # DeepSeek: q and k come in interleaved pairs; this turns them half-split, then rotates.
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import apply_rotary_pos_emb_interleave

        return getattr(module, class_name)(config), apply_rotary_pos_emb_interleave
    return getattr(module, class_name)(config), apply_rotary_pos_emb


def model_is_gemma4(config):
    return config.model_type.startswith("gemma4")


def flat(t):
    return [float(f"{v:.9g}") for v in t.detach().double().flatten().tolist()]


def model_defaults():
    """The rotary defaults of every config class whose defaults differ from the generic ones
    (theta 10 000, full rotation, no top-level original context), as a Rust table for
    `crates/burn-positional/src/rotary/hf_config/defaults.rs`: what transformers uses when a
    config.json leaves the key out."""
    from transformers import CONFIG_MAPPING

    rows = []
    interleaved = []
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            config = CONFIG_MAPPING[model_type]()
        except Exception:
            continue
        if getattr(config, "rope_interleave", None) is True:
            interleaved.append(f'    "{model_type}",')
        rope = getattr(config, "rope_parameters", None)
        if not isinstance(rope, dict) or "rope_theta" not in rope or rope.get("rope_type") == "axial":
            continue
        theta = float(rope["rope_theta"])
        partial = rope.get("partial_rotary_factor")
        original = getattr(config, "original_max_position_embeddings", None)
        if theta != 10000.0 or partial not in (None, 1.0) or original is not None:
            partial = "None" if partial in (None, 1.0) else f"Some({float(partial)!r})"
            original = "None" if original is None else f"Some({original})"
            rows.append(f'    ("{model_type}", {theta!r}, {partial}, {original}),')
    # Whose own `compute_default_rope_parameters` reads partial_rotary_factor (GPT-NeoX, Phi,
    # GLM, ...): the others (Llama, Qwen 2, Mistral, ...) rotate the whole head for "default".
    import inspect
    import re

    from transformers.models.auto.configuration_auto import model_type_to_module_name

    ignores = []
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            folder = model_type_to_module_name(model_type)
            module = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
        except Exception:
            continue
        defaults = [
            inspect.getsource(cls.compute_default_rope_parameters)
            for name, cls in vars(module).items()
            if name.endswith("RotaryEmbedding") and hasattr(cls, "compute_default_rope_parameters")
        ]
        if defaults and not any(re.search("partial_rotary_factor", src) for src in defaults):
            ignores.append(f'    "{model_type}",')
    path = OUT.parent.parent.parent.parent / "src/rotary/hf_config/defaults.rs"
    path.write_text(
        "//! Written by `python3 tools/hf_rope_fixtures.py` (transformers "
        f"{transformers.__version__}); do not edit.\n\n"
        "/// `(model_type, default rope_theta, default partial_rotary_factor, default top-level\n"
        "/// original_max_position_embeddings)` of every transformers config class whose defaults\n"
        "/// differ from theta 10 000, full rotation and none.\n"
        "pub(super) const MODEL_DEFAULTS: &[(&str, f64, Option<f64>, Option<usize>)] = &[\n"
        + "\n".join(rows)
        + "\n];\n\n"
        "/// Model types whose rotary module's `compute_default_rope_parameters` rotates the whole\n"
        "/// head whatever `partial_rotary_factor` says (for `rope_type: \"default\"` only).\n"
        "pub(super) const DEFAULT_IGNORES_PARTIAL: &[&str] = &[\n"
        + "\n".join(ignores)
        + "\n];\n\n"
        "/// Model types whose config class sets `rope_interleave` to true by default: their\n"
        "/// checkpoints store q and k in interleaved pairs (DeepSeek V3 and its kin).\n"
        "pub(super) const INTERLEAVED_BY_DEFAULT: &[&str] = &[\n"
        + "\n".join(interleaved)
        + "\n];\n"
    )
    print(f"{path}: {len(rows)} model types")
    model_sizes()
    model_rotations()


def model_sizes():
    """The head width and context defaults of every transformers config class with a rope, as
    `crates/burn-positional/src/rotary/hf_config/sizes.rs`: what a config.json that leaves out
    `head_dim` or `max_position_embeddings` gets (Gemma's head_dim 256, Qwen 3's 128, DeepSeek's
    `qk_rope_head_dim`, ...), found by building each class with and without the keys."""
    import warnings

    from transformers import CONFIG_MAPPING

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()

    def head(model_type, **kwargs):
        try:
            return getattr(CONFIG_MAPPING[model_type](**kwargs), "head_dim", None)
        except Exception:
            return "error"

    # The keys the reader reads whose spelling a config class may change (`attribute_map`).
    read_keys = ("hidden_size", "num_attention_heads", "head_dim", "max_position_embeddings",
                 "layer_types")
    aliases = set()
    for model_type in sorted(CONFIG_MAPPING.keys()):
        for key, alias in (getattr(CONFIG_MAPPING[model_type], "attribute_map", None) or {}).items():
            if key in read_keys and key != alias:
                aliases.add((alias, key))
    consts, from_qk, max_positions, maps, sizes, ignored = [], [], [], [], [], []
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            config = CONFIG_MAPPING[model_type]()
        except Exception:
            continue
        if not isinstance(getattr(config, "rope_parameters", None), dict):
            continue
        mapped = [(key, alias) for key, alias in (type(config).attribute_map or {}).items()
                  if key in read_keys and key != alias]
        if mapped:
            pairs = ", ".join(f'("{key}", "{alias}")' for key, alias in sorted(mapped))
            maps.append(f'    ("{model_type}", &[{pairs}]),')
        try:
            hidden, heads = config.hidden_size, config.num_attention_heads
        except Exception:  # set per layer, or none
            hidden = heads = None
        if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (hidden, heads)):
            sizes.append(f'    ("{model_type}", {hidden}, {heads}),')
        max_pos = getattr(config, "max_position_embeddings", None)
        if isinstance(max_pos, int) and not isinstance(max_pos, bool):
            max_positions.append(f'    ("{model_type}", {max_pos}),')
        field = getattr(type(config), "__dataclass_fields__", {}).get("head_dim")
        derived = head(model_type, hidden_size=84, num_attention_heads=3)
        qk = head(model_type, hidden_size=64, num_attention_heads=4, qk_rope_head_dim=10)
        file_wins = head(model_type, hidden_size=64, num_attention_heads=4, qk_rope_head_dim=10, head_dim=6) == 6
        if head(model_type, hidden_size=84, num_attention_heads=3, head_dim=6) == 28:
            # `head_dim` is a read-only property (Falcon's): a value in the file is ignored.
            ignored.append(f'    "{model_type}",')
        if qk == 10 and derived != 10:
            from_qk.append(f'    ("{model_type}", {derived}, {str(file_wins).lower()}),')
        elif field is not None and isinstance(field.default, int) and derived != 28 and (
            file_wins or derived == "error"
        ):
            consts.append(f'    ("{model_type}", {field.default}),')
    path = OUT.parent.parent.parent.parent / "src/rotary/hf_config/sizes.rs"
    path.write_text(
        "//! Written by `python3 tools/hf_rope_fixtures.py --defaults` (transformers "
        f"{transformers.__version__}); do not edit.\n\n"
        "/// `(model_type, head_dim)`: the config classes whose `head_dim` has a default of its own\n"
        "/// (not `hidden_size / num_attention_heads`) when a config.json leaves it out.\n"
        "pub(super) const HEAD_DIM_DEFAULTS: &[(&str, usize)] = &[\n"
        + "\n".join(consts)
        + "\n];\n\n"
        "/// `(model_type, default qk_rope_head_dim, a head_dim in the file wins)`: the config classes\n"
        "/// whose `head_dim` is `qk_rope_head_dim` (DeepSeek's multi-head latent attention).\n"
        "pub(super) const HEAD_DIM_IS_QK_ROPE: &[(&str, usize, bool)] = &[\n"
        + "\n".join(from_qk)
        + "\n];\n\n"
        "/// `(model_type, max_position_embeddings)`: each config class's default.\n"
        "pub(super) const MAX_POSITION_DEFAULTS: &[(&str, usize)] = &[\n"
        + "\n".join(max_positions)
        + "\n];\n\n"
        "/// The config classes whose `head_dim` is `hidden_size // num_attention_heads` whatever the\n"
        "/// file says (a read-only property: transformers logs that it cannot set it, and goes on).\n"
        "pub(super) const HEAD_DIM_IGNORED: &[&str] = &[\n"
        + "\n".join(ignored)
        + "\n];\n\n"
        "/// `(model_type, hidden_size, num_attention_heads)`: each config class's defaults.\n"
        "pub(super) const SIZE_DEFAULTS: &[(&str, usize, usize)] = &[\n"
        + "\n".join(sizes)
        + "\n];\n\n"
        "/// `(model_type, [(key, the name the file gives it)])`: each config class's `attribute_map`,\n"
        "/// for the keys this reader reads. The key itself wins when the file has both.\n"
        "pub(super) const ATTRIBUTE_MAPS: &[(&str, &[(&str, &str)])] = &[\n"
        + "\n".join(maps)
        + "\n];\n\n"
        "/// `(name, key)`: every name some config class's `attribute_map` reads as a key this reader\n"
        "/// reads (`n_head` for `num_attention_heads` in GPT-2, ...). A class without that entry\n"
        "/// ignores the name (Falcon's `n_head`).\n"
        "pub(super) const KNOWN_ALIASES: &[(&str, &str)] = &[\n"
        + "\n".join(f'    ("{alias}", "{key}"),' for alias, key in sorted(aliases))
        + "\n];\n"
    )
    print(f"{path}: {len(consts)} head_dim defaults, {len(from_qk)} from qk_rope_head_dim, "
          f"{len(max_positions)} max_position_embeddings, {len(sizes)} sizes, {len(maps)} attribute maps")


# Rotations with no `rotate_half` of their own, read by hand from transformers 5.24's modeling code:
# (model_type, why its pairs are adjacent).
INTERLEAVED_WITHOUT_ROTATE_HALF = [
    ("llama4_text", "apply_rotary_emb multiplies complex numbers made of adjacent pairs "
                    "(view_as_complex(x.reshape(..., -1, 2)))"),
    ("openai_privacy_filter", "_apply_rotary_emb rotates (x[..., ::2], x[..., 1::2])"),
]


def model_rotations():
    """How each model type's own modeling code pairs the dimensions it rotates, as
    `crates/burn-positional/src/rotary/hf_config/rotation.rs`: Llama's `rotate_half` pairs
    `(x[i], x[i + d/2])`; Cohere's, GLM's and a few others' pair `(x[2i], x[2i + 1])` in place
    (`x[..., ::2]`, `x[..., 1::2]`), with cos and sin repeated pair by pair; NanoChat's turns the
    other way (`cat((x2, -x1))`). Found from the source of the module's `rotate_half` and
    `apply_rotary_pos_emb` (which slices `rotary_dim` when it rotates part of the head)."""
    import inspect
    import warnings

    from transformers import CONFIG_MAPPING
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    interleaved, other = [], []
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            config = CONFIG_MAPPING[model_type]()
            folder = model_type_to_module_name(model_type)
            module = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
        except Exception:
            continue
        if not isinstance(getattr(config, "rope_parameters", None), dict):
            continue
        rotate = getattr(module, "rotate_half", None)
        apply = getattr(module, "apply_rotary_pos_emb", None)
        partial = apply is not None and "rotary_dim" in inspect.getsource(apply)
        if rotate is None:
            continue
        source = inspect.getsource(rotate)
        if "::2]" in source or "-1, 2)" in source:
            interleaved.append(f'    ("{model_type}", {str(partial).lower()}),')
        elif "torch.cat((x2, -x1)" in source:
            other.append(f'    ("{model_type}", "its rotate_half is cat((x2, -x1)): it turns each pair '
                         f'the other way (by minus the angle)"),')
        elif "torch.cat((-x2, x1)" not in source:
            raise SystemExit(f"{model_type}: a rotate_half this script does not know:\n{source}")
    for model_type, _why in INTERLEAVED_WITHOUT_ROTATE_HALF:
        interleaved.append(f'    ("{model_type}", false),')
    interleaved.sort()
    path = OUT.parent.parent.parent.parent / "src/rotary/hf_config/rotation.rs"
    path.write_text(
        "//! Written by `python3 tools/hf_rope_fixtures.py --defaults` (transformers "
        f"{transformers.__version__}); do not edit.\n\n"
        "/// `(model_type, a part of the head may rotate)`: the model types whose modeling code rotates\n"
        "/// adjacent pairs `(x[2i], x[2i + 1])` in place (Cohere's `rotate_half` takes `x[..., ::2]` and\n"
        "/// `x[..., 1::2]` and repeats cos and sin pair by pair), not Llama's halves. With `true` its\n"
        "/// `apply_rotary_pos_emb` rotates the first `rotary_dim` dimensions and passes the rest (GLM);\n"
        "/// with `false` it multiplies the whole head by cos and sin, so a partial rotation fails there.\n"
        "pub(super) const INTERLEAVED_ROTATION: &[(&str, bool)] = &[\n"
        + "\n".join(interleaved)
        + "\n];\n\n"
        "/// `(model_type, why)`: the model types whose rotation no [`RopeLayout`](crate::RopeLayout) gives.\n"
        "pub(super) const OTHER_ROTATION: &[(&str, &str)] = &[\n"
        + "\n".join(other)
        + "\n];\n"
    )
    print(f"{path}: {len(interleaved)} interleaved, {len(other)} other")


def random_cases(n, seed):
    """`n` random configurations over every rope_type, for a broader check than the committed
    cases: `python3 tools/hf_rope_fixtures.py --random 300 --out /tmp/hf_rope` then
    `HF_ROPE_FIXTURES=/tmp/hf_rope cargo test -p burn-positional --test behaviour hf_rope`."""
    import random

    rng = random.Random(seed)
    cases = []
    for i in range(n):
        heads = rng.choice([1, 2, 4])
        head_dim = rng.choice([4, 6, 8, 10, 12, 16, 20, 24, 32, 64, 128])
        model_type = rng.choice(["llama", "llama", "qwen2", "phi3", "phi", "gpt_neox"])
        max_pos = rng.choice([8, 16, 32, 64, 100, 128, 512, 2048])
        raw = {"model_type": model_type, "hidden_size": heads * head_dim, "num_attention_heads": heads,
               "max_position_embeddings": max_pos}
        theta = rng.choice([100.0, 1000.0, 10000.0, 500000.0, 1000000.0])
        if model_type == "gpt_neox":
            raw["rotary_emb_base"] = theta
            raw["rotary_pct"] = rng.choice([0.25, 0.5, 1.0])
        else:
            raw["rope_theta"] = theta
            if rng.random() < 0.3:
                raw["partial_rotary_factor"] = rng.choice([0.25, 0.4, 0.5, 0.75, 1.0])
        rope_type = rng.choice(["default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional"])
        original = max(2, max_pos // rng.choice([1, 2, 4, 8]))
        p = {"rope_type": rope_type}
        if rope_type in ("linear", "dynamic"):
            p["factor"] = rng.choice([1.0, 1.5, 2.0, 4.0, 8.0])
        elif rope_type == "yarn":
            p.update(factor=rng.choice([1.0, 2.0, 4.0, 16.0, 40.0]), original_max_position_embeddings=original)
            for key, values in [("beta_fast", [4, 16, 32, 64]), ("beta_slow", [0.5, 1, 2]),
                                ("mscale", [0.5, 0.707, 1.0]), ("mscale_all_dim", [0.5, 0.707, 1.0]),
                                ("attention_factor", [0.5, 1.0, 1.3]), ("truncate", [True, False])]:
                if rng.random() < 0.4:
                    p[key] = rng.choice(values)
        elif rope_type == "longrope":
            pairs = (head_dim * raw.get("partial_rotary_factor", 1.0) if model_type not in ("gpt_neox", "phi")
                     else head_dim * raw.get("rotary_pct", raw.get("partial_rotary_factor", 0.5)))
            pairs = (int(pairs) + 1) // 2
            p["short_factor"] = [round(rng.uniform(1.0, 1.5), 3) for _ in range(pairs)]
            p["long_factor"] = [round(rng.uniform(1.0, 16.0), 3) for _ in range(pairs)]
            p["original_max_position_embeddings"] = original
            if rng.random() < 0.5:
                p["factor"] = rng.choice([1.0, 4.0, 8.0])
            if rng.random() < 0.2:
                p["attention_factor"] = 1.1
        elif rope_type == "llama3":
            p.update(factor=rng.choice([1.0, 8.0, 32.0]), low_freq_factor=rng.choice([1.0, 2.0]),
                     high_freq_factor=rng.choice([4.0, 8.0]), original_max_position_embeddings=original)
        elif rope_type == "proportional":
            p["partial_rotary_factor"] = rng.choice([0.25, 0.5, 1.0])
            if rng.random() < 0.5:
                p["factor"] = rng.choice([1.0, 2.0, 8.0])
        key = rng.choice(["rope_scaling", "rope_parameters"])
        if key == "rope_parameters":
            p["rope_theta"] = theta
        raw[key] = p
        windows = [(0, 3), (max(0, max_pos - 2), 3), (rng.randrange(0, 4 * max_pos + 5), 2)]
        cases.append((f"random_{i:04}_{rope_type}", raw, windows, "random"))
    return cases


def main():
    import argparse

    global OUT
    parser = argparse.ArgumentParser()
    parser.add_argument("--random", type=int, default=0, help="write this many random cases instead")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    parser.add_argument("--defaults", action="store_true", help="write only the Rust tables of defaults")
    args = parser.parse_args()
    if args.defaults:
        model_defaults()
        return
    cases = CASES
    if args.random:
        cases = random_cases(args.random, args.seed)
    else:
        model_defaults()
    OUT = args.out
    torch.manual_seed(0)
    OUT.mkdir(parents=True, exist_ok=True)
    for name, raw, windows, checks, *layer in cases:
        layer_type = layer[0] if layer else None
        try:
            config = transformers.AutoConfig.for_model(**json.loads(json.dumps(raw)))
            module, apply = rotary(config)
        except Exception as err:  # transformers refuses it too: not a case
            print(f"{name}: transformers refuses it ({type(err).__name__}: {err})")
            continue
        prefix = f"{layer_type}_" if layer_type else ""
        if getattr(module, f"{prefix}inv_freq").numel() == 0:  # yarn on one dimension: nothing rotates
            print(f"{name}: no rotated pair, skipped")
            continue
        if layer_type and model_is_gemma4(config):
            # Gemma 4's global layers have their own head width (`global_head_dim`, 512 by default).
            head_dim = raw.get("global_head_dim", 512) if layer_type == "full_attention" else raw["head_dim"]
        elif getattr(config, "qk_rope_head_dim", None):
            head_dim = config.qk_rope_head_dim
        else:
            head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        record = {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "case": name,
            "checks": checks,
            "config": raw,
            "rotary_class": type(module).__name__,
            "head_dim": head_dim,
            "n_heads": 1,
            "layer_type": layer_type,
            "interleaved_input": bool(getattr(config, "rope_interleave", False)),
            "inv_freq": flat(getattr(module, f"{prefix}inv_freq")),
            "attention_factor": float(getattr(module, f"{prefix}attention_scaling")),
            "windows": [],
        }
        for offset, seq in windows:
            module, apply = rotary(config)
            q = torch.randn(1, 1, seq, head_dim)
            position_ids = torch.arange(offset, offset + seq)[None, :]
            cos, sin = module(q, position_ids, layer_type) if layer_type else module(q, position_ids)
            rotated, _ = apply(q, q, cos, sin)
            record["windows"].append({
                "offset": offset,
                "seq": seq,
                "inv_freq": flat(getattr(module, f"{prefix}inv_freq")),
                "q": flat(q),
                "rotated": flat(rotated),
            })
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(record, indent=1) + "\n")
        if not args.random:
            print(f"{path.relative_to(OUT.parent.parent.parent.parent.parent.parent)}: {checks}")


if __name__ == "__main__":
    main()
