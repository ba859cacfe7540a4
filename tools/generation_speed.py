#!/usr/bin/env python3
"""Tokens per second of greedy generation in transformers (PyTorch eager, CPU), the side the
Rust ports are measured against (`crates/burn-positional-models/examples/generation_speed.rs`).

Run by hand, from the repository root (never by CI):

    pip install torch==2.6.0 transformers==5.24.0 safetensors
    python3 tools/generation_speed.py write /tmp/burn-positional-speed   # random checkpoints
    python3 tools/generation_speed.py run /tmp/burn-positional-speed/gpt2 --batch 1

`write` saves two randomly initialised checkpoints (seed 0), the same files both sides load:
`gpt2` (GPT2Config's defaults: GPT-2 small, 124 M parameters) and `llama` (Llama-shaped,
about 100 M: hidden 768, 12 layers, 12 heads over 4 key/value heads, intermediate 2048,
vocabulary 32000, tied embeddings).

`run` generates, in one process: a batch of `--batch` random prompts of `--prompt` tokens
(seed 1, ids in 3..1000), `--new` greedy tokens with `model.generate(do_sample=False,
eos_token_id=None)` and its default cache, float32, `attn_implementation="eager"`, with
`torch.set_num_threads(--threads)` (2: this project's machine). A streamer stamps the time of
each new token: prefill is the time to the first token (the prompt's forward included),
decode the time of the others. Peak memory is the process's peak resident set (ru_maxrss).
Prints one JSON line.
"""

import argparse
import json
import os
import resource
import sys
import time

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


def write(root):
    torch.manual_seed(0)
    models = {
        "gpt2": GPT2LMHeadModel(GPT2Config()),
        "llama": LlamaForCausalLM(
            LlamaConfig(
                vocab_size=32000,
                hidden_size=768,
                intermediate_size=2048,
                num_hidden_layers=12,
                num_attention_heads=12,
                num_key_value_heads=4,
                max_position_embeddings=2048,
                tie_word_embeddings=True,
            )
        ),
    }
    for name, model in models.items():
        path = os.path.join(root, name)
        model.save_pretrained(path)
        n = sum(p.numel() for p in model.parameters())
        print(f"{path}: {n / 1e6:.1f} M parameters")


class Stamps:
    """A streamer that stamps the time of every `put` after the prompt's."""

    def __init__(self):
        self.times = []
        self.prompt_seen = False

    def put(self, value):
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.times.append(time.perf_counter())

    def end(self):
        pass


def run(path, batch, prompt, new, threads):
    torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 1000, (batch, prompt), generator=g)
    mask = torch.ones_like(ids)
    stamps = Stamps()
    with torch.no_grad():
        start = time.perf_counter()
        out = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            num_beams=1,
            eos_token_id=None,
            pad_token_id=0,
            streamer=stamps if batch == 1 else None,
        )
        total = time.perf_counter() - start
    # The streamer takes one row; for a batch, time the first token with a second call.
    if batch == 1:
        prefill = stamps.times[0] - start
    else:
        with torch.no_grad():
            t = time.perf_counter()
            model.generate(ids, attention_mask=mask, max_new_tokens=1, do_sample=False,
                           eos_token_id=None, pad_token_id=0)
            prefill = time.perf_counter() - t
    decode = total - prefill
    assert out.shape[1] == prompt + new
    print(json.dumps({
        "side": "transformers (PyTorch eager)",
        "model": os.path.basename(path.rstrip("/")),
        "batch": batch,
        "prompt": prompt,
        "new": new,
        "threads": threads,
        "prefill_s": round(prefill, 4),
        "prefill_tokens_per_s": round(batch * prompt / prefill, 1),
        "decode_s": round(decode, 4),
        "decode_tokens_per_s": round(batch * (new - 1) / decode, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("root")
    r = sub.add_parser("run")
    r.add_argument("path")
    r.add_argument("--batch", type=int, default=1)
    r.add_argument("--prompt", type=int, default=128)
    r.add_argument("--new", type=int, default=128)
    r.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.command == "write":
        write(args.root)
    else:
        run(args.path, args.batch, args.prompt, args.new, args.threads)


if __name__ == "__main__":
    sys.exit(main())
