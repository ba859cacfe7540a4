#!/usr/bin/env python3
"""Sharded fixtures for `burn-positional-models`: the committed f32 Llama and GPT-2 fixture
checkpoints saved again by transformers in shards, as every checkpoint past a few GB is
downloaded (`model-00001-of-0000N.safetensors` and `model.safetensors.index.json`).

Run by hand (never by CI, which reads the committed files), from the repository root, after
`tools/model_fixtures.py`:

    pip install torch==2.6.0 transformers==5.24.0 safetensors
    python3 tools/sharded_fixtures.py

For `llama` and `gpt2`: `from_pretrained(tests/fixtures/<name>)`, then
`save_pretrained(tests/fixtures/<name>_sharded, max_shard_size="120kB")` (several shards;
`generation_config.json` deleted as in model_fixtures.py), and the f32 fixture's
`expected.safetensors` and `expected.json` copied beside it: the same weights must give the same
logits. The script checks that the model reloaded from the shards gives the stored logits.
"""

import json
import os
import shutil

import torch
import transformers
from safetensors.torch import load_file

ROOT = "crates/burn-positional-models/tests/fixtures"
CLASSES = {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel"}


def main():
    for name, cls_name in CLASSES.items():
        src = os.path.join(ROOT, name)
        out = os.path.join(ROOT, f"{name}_sharded")
        shutil.rmtree(out, ignore_errors=True)
        cls = getattr(transformers, cls_name)
        model = cls.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
        model.save_pretrained(out, max_shard_size="120kB")
        gc = os.path.join(out, "generation_config.json")
        if os.path.exists(gc):
            os.remove(gc)
        for f in ("expected.safetensors", "expected.json"):
            shutil.copy(os.path.join(src, f), os.path.join(out, f))
        index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
        shards = sorted(set(index["weight_map"].values()))
        assert len(shards) >= 2, shards
        t = load_file(os.path.join(src, "expected.safetensors"))
        reloaded = cls.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
        with torch.no_grad():
            logits = reloaded(t["input_ids"], attention_mask=t["attention_mask"],
                              position_ids=t["position_ids"], use_cache=False).logits
        err = ((logits - t["logits"]).abs().max() / t["logits"].abs().max()).item()
        assert err < 1e-6, (name, err)
        where = {k: v for k, v in index["weight_map"].items() if "wte" in k or "wpe" in k or "embed" in k}
        print(f"{name}: {len(shards)} shards, {where}")


if __name__ == "__main__":
    main()
