#!/usr/bin/env python3
"""Random RoPE configurations checked against Hugging Face transformers, for
`crates/burn-positional/tests/behaviour/hf_rope_fuzz.rs`.

Run by hand, never by CI (CI runs only the Rust side against the committed JSON):

    pip install torch transformers==5.24.0
    python3 tools/hf_rope_fuzz.py                 # writes the committed fixture (150 cases)
    cargo test -p burn-positional --test behaviour hf_rope_fuzz

    # a wider, uncommitted check:
    python3 tools/hf_rope_fuzz.py --cases 600 --seed 9 --out /tmp/fuzz.json
    HF_ROPE_FUZZ=/tmp/fuzz.json cargo test -p burn-positional --test behaviour hf_rope_fuzz

    # wide heads (64, 128, 256) with windows of 8 positions at 8192 and 131000 in every case:
    python3 tools/hf_rope_fuzz.py --far --cases 150 --seed 5 --out /tmp/far.json
    HF_ROPE_FUZZ=/tmp/far.json cargo test -p burn-positional --test behaviour hf_rope_fuzz

Where `tools/hf_rope_fixtures.py` writes hand-picked cases, this script draws `config.json`s at
random (seeded) over every `rope_type` and the model types whose config classes differ in how
they read them (Llama, Mistral, Qwen 2/3, Phi, Phi-3, GPT-NeoX, StableLM, Gemma 1/2/3/4,
DeepSeek V3, Falcon, and a multimodal `text_config`) or rotate differently (Cohere 1/2, GLM 1/4,
Helium and ERNIE 4.5 pair adjacent dimensions in place), with the edge cases a hand-written config hits:
optional keys left out (so the config class's defaults are used: `rope_theta`, `head_dim`,
`max_position_embeddings`, `partial_rotary_factor`, yarn's `truncate` / `beta_*` / `mscale*`,
longrope's `factor`), the old `rope_scaling` / `type` spelling beside `rope_parameters`,
top-level and nested keys, head_dim explicit or derived (up to 256 wide), odd partial widths,
and positions on both sides of the original context and far past it (8192, 32768 or 131000 and
a few): there a 1-ulp difference in one `inv_freq` entry turns the angle by more than 1e-5, so
the Rust side must compute transformers' `base ** exponents` as torch does, to the bit.

For each configuration it builds the model type's own config class (`AutoConfig.for_model`) and
rotary module, as `tools/hf_rope_fixtures.py` does, and writes transformers' `inv_freq`,
`attention_scaling`, and, for a few windows of positions (a fresh module each, so the
length-dependent types see only that call), the window's `inv_freq` and a fixed `q` rotated by
the model's `apply_rotary_pos_emb` with the module's cos and sin (GPT-NeoX's, which also rotates
part of a head, for the families that pair halves as Llama does; the family's own for those that
pair adjacent dimensions in place, recorded as `interleaved_rotation`). `q[k] = ((k * 7919) % 23
- 11) / 8` over the flattened `[seq, head_dim]` window (exact in f32), so it is not stored.

Configurations transformers refuses (it raises) are kept too, with its error: the Rust side
must refuse them as well.
"""

import argparse
import importlib
import json
import pathlib
import random
import sys

import torch
import transformers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from hf_rope_fixtures import ROTARY, flat  # noqa: E402

OUT = (pathlib.Path(__file__).resolve().parent.parent
       / "crates/burn-positional/tests/fixtures/hf/rope_fuzz/cases.json")

ROTARY = dict(ROTARY)
ROTARY.update({
    "mistral": ("mistral", "MistralRotaryEmbedding"),
    "qwen3": ("qwen3", "Qwen3RotaryEmbedding"),
    "gemma": ("gemma", "GemmaRotaryEmbedding"),
    "gemma2": ("gemma2", "Gemma2RotaryEmbedding"),
    "stablelm": ("stablelm", "StableLmRotaryEmbedding"),
    "cohere": ("cohere", "CohereRotaryEmbedding"),
    "cohere2": ("cohere2", "Cohere2RotaryEmbedding"),
    "glm": ("glm", "GlmRotaryEmbedding"),
    "glm4": ("glm4", "Glm4RotaryEmbedding"),
    "helium": ("helium", "HeliumRotaryEmbedding"),
    "ernie4_5": ("ernie4_5", "Ernie4_5RotaryEmbedding"),
    "falcon": ("falcon", "FalconRotaryEmbedding"),
})

# Model types whose own `rotate_half` pairs adjacent dimensions in place (`x[..., ::2]`,
# `x[..., 1::2]`): their own `apply_rotary_pos_emb` rotates q, and its output is interleaved too.
INTERLEAVED_ROTATION = {"cohere", "cohere2", "glm", "glm4", "helium", "ernie4_5"}

# Model types drawn, with their weight. `llava` and `gemma3` stand for multimodal configs
# whose language model sits under `text_config`.
MODEL_TYPES = [
    ("llama", 4), ("mistral", 2), ("qwen2", 3), ("qwen3", 2), ("phi3", 3), ("phi", 2),
    ("gpt_neox", 2), ("stablelm", 1), ("gemma", 1), ("gemma2", 1), ("gemma3_text", 3),
    ("gemma4_text", 2), ("deepseek_v3", 2), ("llava", 1), ("gemma3", 1),
    ("cohere", 3), ("cohere2", 2), ("glm", 2), ("glm4", 2), ("helium", 1), ("ernie4_5", 1),
    ("falcon", 3),
]
HEAD_DIMS = [4, 6, 8, 10, 12, 16, 20, 24, 32, 128]
# One window per case starts near one of these: a 1-ulp difference in an inv_freq entry grows
# with the position, so far windows check that `inv_freq` is torch's to the bit (its SLEEF pow
# on vector chunks of 32, glibc's powf on the tail), not merely within 1 ulp.
FAR_POSITIONS = [8192, 32768, 131000]
ROPE_TYPES = ["default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional"]


def q_values(seq, head_dim):
    return torch.tensor([((k * 7919) % 23 - 11) / 8 for k in range(seq * head_dim)],
                        dtype=torch.float32).reshape(1, 1, seq, head_dim)


def maybe(rng, p):
    return rng.random() < p


def rope_params(rng, rope_type, pairs_hint, max_pos):
    """The parameters of one rope_type, some optional keys left out."""
    p = {}
    original = max(2, max_pos // rng.choice([1, 2, 4, 8]))
    if rope_type in ("linear", "dynamic"):
        p["factor"] = rng.choice([1.0, 1.5, 2.0, 4.0, 8, 3.7])
    elif rope_type == "yarn":
        p["factor"] = rng.choice([1.0, 2.0, 4.0, 16.0, 40, 2.5])
        if maybe(rng, 0.1):
            p["factor"] = None  # max_position_embeddings / original
        if maybe(rng, 0.7):
            p["original_max_position_embeddings"] = original
        for key, values in [("beta_fast", [0, 4, 16, 32, 64]), ("beta_slow", [0, 0.5, 1, 2]),
                            ("mscale", [0, 0.5, 0.707, 1.0]), ("mscale_all_dim", [0, 0.5, 0.707, 1.0]),
                            ("attention_factor", [0.5, 1.0, 1.3]), ("truncate", [True, False, None])]:
            if maybe(rng, 0.3):
                p[key] = rng.choice(values)
    elif rope_type == "longrope":
        p["short_factor"] = [round(rng.uniform(1.0, 1.5), 3) for _ in range(pairs_hint)]
        p["long_factor"] = [round(rng.uniform(1.0, 16.0), 3) for _ in range(pairs_hint)]
        if maybe(rng, 0.7):
            p["original_max_position_embeddings"] = original
        if maybe(rng, 0.4):
            p["factor"] = rng.choice([1.0, 4.0, 8.0, 0.5])
        if maybe(rng, 0.2):
            p["attention_factor"] = rng.choice([1.1, 0.9])
    elif rope_type == "llama3":
        p.update(factor=rng.choice([1.0, 8.0, 32.0]), low_freq_factor=rng.choice([1.0, 2.0]),
                 high_freq_factor=rng.choice([4.0, 8.0]))
        if maybe(rng, 0.8):
            p["original_max_position_embeddings"] = original
    elif rope_type == "proportional":
        if maybe(rng, 0.8):
            p["partial_rotary_factor"] = rng.choice([0.25, 0.5, 1.0, 0.3])
        if maybe(rng, 0.5):
            p["factor"] = rng.choice([1.0, 2.0, 8.0])
    return p


def draw(rng, i, wide=False):
    """One random config.json, and the layer type to read (None when there is one rope); with
    `wide`, heads of 64, 128 or 256 dimensions."""
    model_type = rng.choices([m for m, _ in MODEL_TYPES], [w for _, w in MODEL_TYPES])[0]
    wrapper = None
    if model_type in ("llava", "gemma3"):
        wrapper = model_type
        model_type = "llama" if wrapper == "llava" else "gemma3_text"
    heads = rng.choice([1, 2, 4])
    head_dim = rng.choice([64, 128, 256] if wide else HEAD_DIMS)
    raw = {"model_type": model_type, "hidden_size": heads * head_dim, "num_attention_heads": heads}
    if model_type in ("gemma3_text", "gemma4_text", "cohere2"):
        raw["num_hidden_layers"] = 6
    if model_type == "falcon":
        # Falcon's published files: `n_head` and `n_layer` (transformers 5's FalconConfig has no
        # attribute_map for them: it ignores them and keeps its defaults, 71 heads of 4544), or
        # the sizes left out.
        style = rng.choice(["n_head", "n_head", "default", "both"])
        if style in ("n_head", "default"):
            heads = 71
            head_dim = rng.choice([4, 8, 64] if not wide else [64])
            raw = {"model_type": model_type, "hidden_size": 71 * head_dim}
            if style == "default":
                head_dim = 64
                del raw["hidden_size"]
            else:
                raw.update(n_head=71, n_layer=rng.choice([2, 32]))
        elif style == "both":
            raw.update(n_head=heads, n_layer=2)
    # Falcon's `head_dim` is a read-only property: a value in the file makes its class raise.
    if model_type != "falcon" and (
            model_type in ("gemma", "gemma2", "gemma3_text", "gemma4_text", "qwen3") or maybe(rng, 0.3)):
        # Explicit, and most often not hidden_size / num_attention_heads; left out sometimes for
        # the classes that default it (Gemma 256, Qwen 3 128).
        if not maybe(rng, 0.15):
            raw["head_dim"] = rng.choice([head_dim, head_dim, 128] if wide else [head_dim, 8, 12, 16])
    if model_type == "deepseek_v3":
        raw["qk_rope_head_dim"] = rng.choice([64, 128] if wide else [8, 12, 16, 64])
        raw["qk_nope_head_dim"] = 8
        raw["v_head_dim"] = 8
        if maybe(rng, 0.3):
            raw["rope_interleave"] = rng.choice([True, False])
    if model_type == "gemma4_text" and maybe(rng, 0.7):
        raw["global_head_dim"] = rng.choice([8, 16, 24])
    max_pos = rng.choice([8, 16, 32, 64, 100, 128, 512, 1000])
    if maybe(rng, 0.85):
        raw["max_position_embeddings"] = max_pos
    theta = rng.choice([100.0, 1000.0, 10000.0, 500000.0, 1000000, 12345.5])

    rope_type = rng.choice(ROPE_TYPES)
    if model_type == "phi3" and rope_type not in ("default", "longrope") and maybe(rng, 0.6):
        rope_type = rng.choice(["longrope", "default"])
    if model_type == "gemma4_text" and rope_type != "default" and maybe(rng, 0.3):
        rope_type = "proportional"

    partial = None
    if model_type == "gpt_neox":
        if maybe(rng, 0.8):
            raw["rotary_emb_base"] = theta
        if maybe(rng, 0.7):
            raw["rotary_pct"] = rng.choice([0.25, 0.5, 1.0])
        if maybe(rng, 0.2):
            raw["rope_theta"] = 777.0  # ignored by GPT-NeoX's config class
    elif model_type == "gemma3_text":
        if maybe(rng, 0.7):
            raw["rope_theta"] = theta
        if maybe(rng, 0.6):
            raw["rope_local_base_freq"] = rng.choice([10000.0, 5000.0])
    elif maybe(rng, 0.75):
        raw["rope_theta"] = theta
    if model_type in ("phi", "phi3", "stablelm", "llama", "qwen2", "gpt_neox", "glm", "glm4", "cohere") \
            and maybe(rng, 0.35):
        partial = rng.choice([0.25, 0.4, 0.5, 0.75, 1.0])
        raw["partial_rotary_factor"] = partial

    eff_head = raw.get("head_dim") or head_dim
    if model_type == "deepseek_v3":
        eff_head = raw["qk_rope_head_dim"]
    eff_partial = partial or {"phi": 0.5, "stablelm": 0.25, "glm": 0.5, "glm4": 0.5}.get(model_type, 1.0)
    if model_type == "gpt_neox":  # its config class ignores a top-level partial_rotary_factor
        eff_partial = raw.get("rotary_pct", 0.25)
    pairs_hint = (int(eff_head * eff_partial) + 1) // 2 if model_type != "phi3" else \
        int(raw["hidden_size"] // heads * eff_partial) // 2
    if maybe(rng, 0.1):
        pairs_hint = 1
    params = rope_params(rng, rope_type, max(1, pairs_hint), max_pos)
    layer_type = None

    if model_type == "gemma4_text":
        # Nested per layer type, or the class's defaults.
        layer_type = rng.choice(["full_attention", "sliding_attention"])
        if rope_type != "default" or maybe(rng, 0.5):
            full = {"rope_type": rope_type, **params}
            sliding = {"rope_type": "default"}
            for entry in (full, sliding):
                if maybe(rng, 0.85):
                    entry["rope_theta"] = rng.choice([10000.0, 1000000.0, theta])
            raw["rope_parameters"] = {"full_attention": full, "sliding_attention": sliding}
    elif model_type == "gemma3_text":
        layer_type = rng.choice(["full_attention", "sliding_attention"])
        style = rng.choice(["rope_scaling", "rope_scaling", "nested", "flat", "none"])
        if style == "rope_scaling" and rope_type != "default":
            raw["rope_scaling"] = {rng.choice(["rope_type", "type"]): rope_type, **params}
        elif style == "nested":
            full = {"rope_type": rope_type, **params}
            sliding = {"rope_type": "default"}
            if maybe(rng, 0.5):
                full["rope_theta"] = theta
            if maybe(rng, 0.5):
                sliding["rope_theta"] = 20000.0
            raw["rope_parameters"] = {"full_attention": full, "sliding_attention": sliding}
        elif style == "flat":
            raw["rope_parameters"] = {"rope_type": rope_type, **params}
    elif rope_type != "default" or maybe(rng, 0.5):
        key = rng.choice(["rope_scaling", "rope_parameters"])
        type_key = rng.choice(["rope_type", "type"]) if key == "rope_scaling" else "rope_type"
        p = {type_key: rope_type, **params}
        if key == "rope_parameters" and maybe(rng, 0.6):
            p["rope_theta"] = theta
        if maybe(rng, 0.1) and model_type not in ("gpt_neox",):
            p["partial_rotary_factor"] = rng.choice([0.5, 1.0])
        raw[key] = p
    if model_type in ("phi3", "llama") and maybe(rng, 0.2):
        raw["original_max_position_embeddings"] = rng.choice([8, 16, 64])

    if wrapper == "llava":
        raw = {"model_type": "llava", "text_config": raw}
    elif wrapper == "gemma3":
        raw = {"model_type": "gemma3", "text_config": raw}
    return f"fuzz_{i:03}_{model_type}_{rope_type}", raw, layer_type


def rotary(config):
    module_name, class_name = ROTARY[config.model_type]
    module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb

    if config.model_type in INTERLEAVED_ROTATION:
        return getattr(module, class_name)(config), module.apply_rotary_pos_emb
    if getattr(config, "rope_interleave", False):
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import apply_rotary_pos_emb_interleave

        return getattr(module, class_name)(config), apply_rotary_pos_emb_interleave
    return getattr(module, class_name)(config), apply_rotary_pos_emb


def run_case(name, raw, layer_type, rng, far):
    config = transformers.AutoConfig.for_model(**json.loads(json.dumps(raw)))
    text = getattr(config, "text_config", None) or config
    module, apply = rotary(text)
    prefix = f"{layer_type}_" if layer_type else ""
    inv_freq = getattr(module, f"{prefix}inv_freq")
    if inv_freq.numel() == 0:
        raise ValueError("no rotated pair")
    layer_config = text
    if layer_type and text.model_type.startswith("gemma4"):
        layer_config = text.per_layer_config[layer_type]
    head_dim = getattr(layer_config, "head_dim", None) or text.hidden_size // text.num_attention_heads
    max_pos = text.max_position_embeddings
    original = (text.rope_parameters.get(layer_type, {}) if layer_type else text.rope_parameters) or {}
    original = original.get("original_max_position_embeddings") or max_pos
    windows = {(0, 2), (max(0, original - 1), 2), (max(0, max_pos - 1), 2),
               (rng.randrange(0, 3 * max_pos + 5), 2),
               (rng.choice(FAR_POSITIONS) + rng.randrange(0, 8), 2)}
    if far:
        windows |= {(8192, 8), (131000, 8)}
    windows = sorted(windows)
    record = {
        "case": name,
        "config": raw,
        "layer_type": layer_type,
        "rotary_class": type(module).__name__,
        "head_dim": head_dim,
        "interleaved_input": bool(getattr(text, "rope_interleave", False)),
        "interleaved_rotation": text.model_type in INTERLEAVED_ROTATION,
        "inv_freq": flat(inv_freq),
        "attention_factor": float(getattr(module, f"{prefix}attention_scaling")),
        "windows": [],
    }
    for offset, seq in windows:
        module, apply = rotary(text)
        q = q_values(seq, head_dim)
        position_ids = torch.arange(offset, offset + seq)[None, :]
        cos, sin = module(q, position_ids, layer_type) if layer_type else module(q, position_ids)
        rotated, _ = apply(q, q, cos, sin)
        record["windows"].append({
            "offset": offset,
            "seq": seq,
            "inv_freq": flat(getattr(module, f"{prefix}inv_freq")),
            "rotated": flat(rotated),
        })
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=150, help="configurations transformers accepts")
    parser.add_argument("--rejected", type=int, default=8, help="configurations it refuses, at most")
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    parser.add_argument("--far", action="store_true",
                        help="heads of 64, 128 or 256 dimensions, and windows of 8 positions at "
                             "8192 and 131000 in every case")
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()
    rng = random.Random(args.seed)
    torch.manual_seed(0)
    accepted, rejected = [], []
    i = 0
    while len(accepted) < args.cases:
        name, raw, layer_type = draw(rng, i, args.far)
        i += 1
        try:
            accepted.append(run_case(name, raw, layer_type, rng, args.far))
        except Exception as err:  # transformers refuses it
            message = f"{type(err).__name__}: {err}"[:300]
            if message.startswith("ValueError: no rotated pair"):
                continue
            if len(rejected) < args.rejected:
                rejected.append({"case": name, "config": raw, "layer_type": layer_type,
                                 "transformers_error": message})
    out = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "seed": args.seed,
        "q": "q[k] = ((k * 7919) % 23 - 11) / 8 over the flattened [seq, head_dim] window",
        "cases": accepted,
        "rejected": rejected,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    kinds = {}
    for case in accepted:
        kinds[case["case"].split("_", 2)[2]] = kinds.get(case["case"].split("_", 2)[2], 0) + 1
    print(f"{args.out}: {len(accepted)} cases, {len(rejected)} refused "
          f"({args.out.stat().st_size // 1024} KiB) of {i} drawn")
    for kind, n in sorted(kinds.items()):
        print(f"  {kind}: {n}")


if __name__ == "__main__":
    main()
