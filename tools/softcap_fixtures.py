#!/usr/bin/env python3
"""Gemma 2 in bf16 with softcaps that bite: the fixture behind `dtypes::softcap_in_bf16` and the
study of where bf16 rounding departs (issue 71, item 6).

Run by hand (never by CI, which reads the committed files), from the repository root, after
`tools/model_fixtures.py` and `tools/dtype_fixtures.py`:

    pip install torch==2.6.0 transformers==5.24.0 safetensors
    python3 tools/softcap_fixtures.py            # writes the fixture and prints the study

The model is the `gemma2` fixture's (`model_fixtures.gemma2_model`: hidden 48, 4 layers, 4 heads,
2 key/value heads, head_dim 16, window 16, `initializer_range` 0.3, then `perturb`), built at
each seed of SEEDS exactly as `model_fixtures.run_decoder` builds it, with the caps of each entry
of CAPS (`attn_logit_softcapping`, `final_logit_softcapping`) set in the config before the model
is built (`Gemma2Attention` copies its cap at init). The weights do not depend on the caps. Seed
1100 is the `gemma2` fixture itself (checked: the same f32 weights, the same bf16 file as
`gemma2_bf16`), so its folder is not written again.

For each seed and caps, on the seed's left-padded batch (lengths 12 and 7, positions as
`generate` computes them):

- `f32`: transformers' forward in f32 (eager attention);
- `bf16`: `model.to(torch.bfloat16)`, the same forward (torch on the CPU: every op in bf16,
  softmax in f32 then rounded to bf16, as `eager_attention_forward` does);
- the study (printed, not stored): the bf16 model with the attention computed as our kernels
  compute it (scores, scale, cap, softmax and P V in f32 from the bf16 q, k, v, rounded to bf16
  once at the output), and with only the score chain in bf16, to show which rounding moves the
  logits.

Writes crates/burn-positional-models/tests/fixtures/gemma2_softcap/:
- `seed_<s>/config.json` + `seed_<s>/model.safetensors` (bf16, `save_pretrained`) for the seeds
  other than 1100; the test edits the caps in a copy of the config;
- `expected.safetensors`: `s<seed>_<caps>_bf16` and `s<seed>_<caps>_f32` logits [2, 12, 256],
  stored as float16 (half the size; 2^-11 relative, against distances of 2-10 % of the largest
  logit), `s<seed>_input_ids`, `s<seed>_attention_mask` (int64);
- `expected.json`: versions, seeds, caps, each case's distance (max |bf16 - f32| / max |f32|
  over the unpadded positions) and the largest |score| before the attention cap.
"""

import json
import os
import shutil
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_fixtures as mf  # noqa: E402
from transformers import Gemma2Config, Gemma2ForCausalLM  # noqa: E402
from transformers.models.gemma2 import modeling_gemma2 as mg  # noqa: E402

ROOT = "crates/burn-positional-models/tests/fixtures"
OUT = os.path.join(ROOT, "gemma2_softcap")
SEEDS = [1100, 2200, 3300]
# (attention cap, final cap); "none" turns both off.
CAPS = {"c3_4": (3.0, 4.0), "c8_10": (8.0, 10.0), "none": (None, None)}
LENGTHS = [12, 7]
BUDGET = 1.0e6


def build(seed, caps):
    """`model_fixtures.gemma2_model` with other caps, seeded and perturbed as `run_decoder` does."""
    attn, final = caps
    torch.manual_seed(seed)
    config = Gemma2Config(
        hidden_size=48, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, sliding_window=16,
        attn_logit_softcapping=attn, final_logit_softcapping=final, hidden_activation="gelu_pytorch_tanh",
        rope_parameters=dict(rope_type="default", rope_theta=10000.0), max_position_embeddings=128,
        initializer_range=0.3, **mf.COMMON,
    )
    model = mf.gemma_gains(Gemma2ForCausalLM(config))
    mf.perturb(model, seed)
    return model.eval()


def inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    ids, mask = mf.left_padded(gen, LENGTHS)
    return ids, mask


def ours(module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None, **kwargs):
    """The attention as our kernels compute it: f32 from the bf16 q, k, v, rounded once."""
    k = mg.repeat_kv(key, module.num_key_value_groups).float()
    v = mg.repeat_kv(value, module.num_key_value_groups).float()
    s = torch.matmul(query.float() * scaling, k.transpose(2, 3))
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    if attention_mask is not None:
        s = s + attention_mask[:, :, :, : k.shape[-2]].float()
    p = torch.softmax(s, dim=-1, dtype=torch.float32)
    return torch.matmul(p, v).to(query.dtype).transpose(1, 2).contiguous(), p


def bf16_scores(module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None, **kwargs):
    """transformers' score chain in bf16 (q.k, scale, /cap, tanh, *cap), the rest as ours."""
    k = mg.repeat_kv(key, module.num_key_value_groups)
    v = mg.repeat_kv(value, module.num_key_value_groups).float()
    s = torch.matmul(query, k.transpose(2, 3)) * scaling
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    s = s.float()
    if attention_mask is not None:
        s = s + attention_mask[:, :, :, : k.shape[-2]].float()
    p = torch.softmax(s, dim=-1, dtype=torch.float32)
    return torch.matmul(p, v).to(query.dtype).transpose(1, 2).contiguous(), p


def forward(model, ids, mask, attention=None):
    original = mg.eager_attention_forward
    if attention is not None:
        mg.eager_attention_forward = attention
    try:
        with torch.no_grad():
            return model(ids, attention_mask=mask, position_ids=mf.generate_position_ids(mask),
                         use_cache=False).logits.float()
    finally:
        mg.eager_attention_forward = original


def distance(a, b, mask):
    keep = mask.bool()
    return ((a - b)[keep].abs().max() / b[keep].abs().max()).item()


def main():
    torch.set_num_threads(1)
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    tensors, cases = {}, {}
    print("seed caps: transformers bf16 / ours-style attention / bf16 score chain only, each from "
          "transformers' f32 run (max |diff| / max |f32 logit|); the last two from transformers' bf16 run")
    for seed in SEEDS:
        ids, mask = inputs(seed)
        tensors[f"s{seed}_input_ids"] = ids
        tensors[f"s{seed}_attention_mask"] = mask
        for name, caps in CAPS.items():
            model = build(seed, caps)
            if seed == 1100 and name == "c3_4":
                # The gemma2 fixture's weights: caps do not change them.
                fixture = load_file(os.path.join(ROOT, "gemma2", "model.safetensors"))
                for key, value in model.state_dict().items():
                    if key in fixture:
                        assert torch.equal(fixture[key], value), key
            f32 = forward(model, ids, mask)
            score = mf.gemma2_precap(model, ids, mask, lambda i, m: forward(model, i, m))[0] if caps[0] else None
            model = model.to(torch.bfloat16)
            if name == "c3_4" and seed != 1100:
                folder = os.path.join(OUT, f"seed_{seed}")
                model.save_pretrained(folder)
                generation = os.path.join(folder, "generation_config.json")
                if os.path.exists(generation):
                    os.remove(generation)
            bf16 = forward(model, ids, mask)
            study = forward(model, ids, mask, ours)
            chain = forward(model, ids, mask, bf16_scores)
            d = [distance(x, f32, mask) for x in (bf16, study, chain)]
            near = [distance(x, bf16, mask) for x in (study, chain)]
            print(f"  {seed} {name:6}: {d[0]:.4f} / {d[1]:.4f} ({d[1] / d[0]:.2f}x) / {d[2]:.4f};"
                  f" from transformers' bf16: {near[0]:.4f} / {near[1]:.4f}"
                  + (f"; max |score| before the cap {score:.1f}" if score else ""))
            tensors[f"s{seed}_{name}_bf16"] = bf16.to(torch.float16)
            tensors[f"s{seed}_{name}_f32"] = f32.to(torch.float16)
            cases[f"s{seed}_{name}"] = {
                "seed": seed, "caps": list(caps), "deviation": d[0], "ours_style_attention": d[1],
                "bf16_score_chain": d[2], "ours_style_from_bf16": near[0], "bf16_score_chain_from_bf16": near[1],
                "max_abs_score_before_cap": score,
            }
    # The seed-1100 bf16 file is the gemma2_bf16 fixture's.
    theirs = load_file(os.path.join(ROOT, "gemma2_bf16", "model.safetensors"))
    mine = build(1100, CAPS["c3_4"]).to(torch.bfloat16).state_dict()
    for key, value in theirs.items():
        assert torch.equal(mine[key], value), key
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(OUT, "expected.safetensors"))
    meta = {
        "family": "gemma2",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "seeds": SEEDS,
        "caps": {k: list(v) for k, v in CAPS.items()},
        "weights": {str(s): ("../gemma2_bf16" if s == 1100 else f"seed_{s}") for s in SEEDS},
        "cases": cases,
        "notes": "logits stored as float16; deviation: max|bf16 - f32| / max|f32| over unpadded positions; "
                 "ours_style_attention: the same with the attention in f32 from bf16 q, k, v, rounded once; "
                 "bf16_score_chain: with transformers' bf16 score chain and the rest in f32; *_from_bf16: the same "
                 "distances from transformers' bf16 run",
    }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(OUT) for n in names)
    print(f"  {OUT}: {size} bytes")
    assert size <= BUDGET, size


if __name__ == "__main__":
    main()
