#!/usr/bin/env python3
"""Low-precision fixtures for `burn-positional-models`: every committed f32 fixture checkpoint
saved again as bf16 (and, for Llama and GPT-2, as f16), as a user downloads them, with the logits
transformers computes from each in that dtype.

Run by hand (never by CI, which reads the committed files), from the repository root, after
`tools/model_fixtures.py`:

    pip install torch==2.6.0 transformers==5.24.0 safetensors
    python3 tools/dtype_fixtures.py
    python3 tools/dtype_fixtures.py --only qwen3,gemma2   # only these fixtures, the others untouched

For each fixture folder `crates/burn-positional-models/tests/fixtures/<name>/` (gpt2, llama,
qwen2, phi3, mistral, bloom, bert, t5, t5_v1_1, qwen3, gemma2, gemma3 (Gemma3ForCausalLM,
model_type gemma3_text), gpt_neox) and each dtype of DTYPES[name]:

- the model is read with `from_pretrained(folder, dtype=torch.float32, attn_implementation=
  "eager")`, its forward on the fixture's inputs is checked against the stored f32 logits (1e-6 of the largest),
  then `model.to(dtype)` and `save_pretrained(<name>_<dtype>/)`: config.json (its `dtype` says
  bfloat16 or float16) and model.safetensors in that dtype (`generation_config.json` deleted, as
  in model_fixtures.py);
- the same forward in that dtype (torch on the CPU: bf16 and f16 matmuls in the dtype, as
  transformers runs them) gives `logits` (cast to f32 for storage); `logits_f32` is the f32 run;
- `expected.json`: versions, dtype, and `deviation`: max |logits - logits_f32| / max |logits_f32|,
  the distance transformers' own low-precision run keeps from its f32 run. The Rust tests hold
  ours in that dtype to the same distance from transformers' run in that dtype.
"""

import argparse
import json
import os
import shutil
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file

ROOT = "crates/burn-positional-models/tests/fixtures"
DTYPES = {
    "gpt2": ["bfloat16", "float16"],
    "llama": ["bfloat16", "float16"],
    "qwen2": ["bfloat16"],
    "phi3": ["bfloat16"],
    "mistral": ["bfloat16"],
    "bloom": ["bfloat16"],
    "bert": ["bfloat16"],
    "t5": ["bfloat16"],
    "t5_v1_1": ["bfloat16"],
    "qwen3": ["bfloat16"],
    "gemma2": ["bfloat16"],
    "gemma3": ["bfloat16"],
    "gpt_neox": ["bfloat16"],
}
# All the low-precision folders together, in bytes (4 MB until qwen3, gemma2, gemma3 and gpt_neox).
BUDGET = 5.5e6
SHORT = {"bfloat16": "bf16", "float16": "f16"}
CLASSES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "mistral": "MistralForCausalLM",
    "bloom": "BloomForCausalLM",
    "bert": "BertForMaskedLM",
    "t5": "T5ForConditionalGeneration",
    "t5_v1_1": "T5ForConditionalGeneration",
    "qwen3": "Qwen3ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM",
}
# What a fixture's low-precision file exercises beyond the f32 one, added to its notes.
EMBED_SCALE = ("embeddings times sqrt(hidden_size) = sqrt(48) cast to the weights' dtype first "
               "(Gemma's embed_scale.to(weight.dtype)): bf16 6.9375, not 6.928203 as in f32; "
               "this file exercises that rounding")
NOTES = {
    "gemma2": EMBED_SCALE,
    "gemma3": EMBED_SCALE,
}


def size_of(folder):
    if not os.path.isdir(folder):
        return 0
    return sum(os.path.getsize(os.path.join(folder, p)) for p in os.listdir(folder))


def forward(name, model, t):
    with torch.no_grad():
        if name == "bert":
            return model(t["input_ids"], attention_mask=t["attention_mask"],
                         token_type_ids=t["token_type_ids"]).logits
        if name.startswith("t5"):
            return model(t["input_ids"], attention_mask=t["attention_mask"],
                         decoder_input_ids=t["decoder_input_ids"]).logits
        kwargs = dict(attention_mask=t["attention_mask"], use_cache=False)
        if "position_ids" in t:
            kwargs["position_ids"] = t["position_ids"]
        return model(t["input_ids"], **kwargs).logits


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated fixture names (default: all of DTYPES)")
    args = parser.parse_args()
    names = list(DTYPES) if args.only is None else args.only.split(",")
    unknown = [n for n in names if n not in DTYPES]
    if unknown:
        parser.error(f"unknown fixtures {unknown}; known: {', '.join(DTYPES)}")
    for name in names:
        dtypes = DTYPES[name]
        src = os.path.join(ROOT, name)
        t = load_file(os.path.join(src, "expected.safetensors"))
        cls = getattr(transformers, CLASSES[name])
        with open(os.path.join(src, "config.json")) as f:
            assert json.load(f)["architectures"] == [CLASSES[name]], name
        base = cls.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
        f32 = forward(name, base, t).float()
        err = ((f32 - t["logits"]).abs().max() / t["logits"].abs().max()).item()
        assert err < 1e-6, (name, err)
        for dtype in dtypes:
            out = os.path.join(ROOT, f"{name}_{SHORT[dtype]}")
            shutil.rmtree(out, ignore_errors=True)
            model = cls.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
            model.to(getattr(torch, dtype))
            model.save_pretrained(out)
            gc = os.path.join(out, "generation_config.json")
            if os.path.exists(gc):
                os.remove(gc)
            low = forward(name, model, t).float()
            deviation = ((low - f32).abs().max() / f32.abs().max()).item()
            tensors = {k: v.contiguous() for k, v in t.items()
                       if k in ("input_ids", "attention_mask", "position_ids", "token_type_ids",
                                "decoder_input_ids")}
            tensors["logits"] = low.contiguous()
            tensors["logits_f32"] = f32.contiguous()
            save_file(tensors, os.path.join(out, "expected.safetensors"))
            meta = {
                "family": name,
                "dtype": dtype,
                "source": f"tests/fixtures/{name}",
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "deviation": deviation,
                "notes": "logits: transformers' forward in this dtype on the CPU (cast to f32); "
                         "logits_f32: the same in f32; deviation: max|logits - logits_f32| / "
                         "max|logits_f32|" + (f"; {NOTES[name]}" if name in NOTES else ""),
            }
            with open(os.path.join(out, "expected.json"), "w") as f:
                json.dump(meta, f, indent=1)
                f.write("\n")
            print(f"{name} {dtype}: deviation {deviation:.3g}, {size_of(out) / 1e3:.0f} kB")
    # Every low-precision folder on disk, those this run left alone (--only) included.
    total = sum(size_of(os.path.join(ROOT, f"{name}_{SHORT[dtype]}"))
                for name, dtypes in DTYPES.items() for dtype in dtypes)
    print(f"total {total / 1e6:.2f} MB")
    assert total < BUDGET, total


if __name__ == "__main__":
    sys.exit(main())
