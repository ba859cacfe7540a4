#!/usr/bin/env python3
"""Tokens per second of greedy generation in transformers (PyTorch eager, CPU), the side the
Rust ports are measured against (`crates/burn-positional-models/examples/generation_speed.rs`).

Run by hand, from the repository root (never by CI):

    pip install torch==2.6.0 transformers==5.24.0 safetensors
    python3 tools/generation_speed.py write /tmp/burn-positional-speed   # random checkpoints
    python3 tools/generation_speed.py run /tmp/burn-positional-speed/gpt2 --batch 1

`write` saves randomly initialised checkpoints (seed 0), the same files both sides load; by default two:
`gpt2` (GPT2Config's defaults: GPT-2 small, 124 M parameters) and `llama` (Llama-shaped,
about 100 M: hidden 768, 12 layers, 12 heads over 4 key/value heads, intermediate 2048,
vocabulary 32000, tied embeddings). Two more of that scale are written on request
(`--models qwen3,gemma2`): `qwen3` (Qwen3Config: hidden 768, 12 layers, 12 heads over 4
key/value heads, head_dim 64, intermediate 2048, vocabulary 32000, tied embeddings, rope_theta
1000000, max_position_embeddings 2048) and `gemma2` (Gemma2Config: the same sizes,
query_pre_attn_scalar 64, sliding_window 4096, softcaps 50 on the scores and 30 on the logits,
tied embeddings; its other fields Gemma2Config's defaults: layers alternating sliding and full,
GELU (tanh), rope_theta 10000).

`run` generates, in one process: a batch of `--batch` random prompts of `--prompt` tokens
(ids in 3..1000 from the linear congruential generator, seed 1, that the Rust sides use too), `--new` greedy tokens with `model.generate(do_sample=False,
eos_token_id=None)` and its default cache, float32, `attn_implementation="eager"`, with
`torch.set_num_threads(--threads)` (2: this project's machine). A streamer stamps the time of
each new token: prefill is the time to the first token (the prompt's forward included),
decode the time of the others. `--runs` generations (default 2) in the process: the first is
reported apart as cold (`cold_*`), the others' last as warm. Peak memory is the process's peak
resident set (ru_maxrss). Prints one JSON line.

For the GPU kit (`tools/gpu/`, docs/gpu.md), on a machine with CUDA:

    python3 tools/generation_speed.py write DIR --models gpt2,llama-1b --dtypes f32,f16 --device cuda
    python3 tools/generation_speed.py run DIR/llama-1b-f16 --batch 8 --device cuda

`llama-1b` is Llama-3.2-1B's shape (hidden 2048, 16 layers, 32 heads over 8 key/value heads,
intermediate 8192, vocabulary 128256, tied embeddings, rope_theta 500000 with llama3 scaling),
randomly initialised; `--layers N` and `--vocab N` shrink every model (the kit's rehearsal on
lavapipe, whose buffers stop at 128 MiB: GPT-2's f32 table is 154 MB, Llama-3.2-1B's 1 GB).
A folder per model and dtype (`gpt2`, `gpt2-f16`, ...): the weights saved in that dtype, which
both sides then compute in. On CUDA, `run` synchronizes before each stamp (the streamer's copy
of each token to the host already waits for it).
"""

import argparse
import json
import os
import resource
import sys
import time

import torch
import transformers
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)


DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def configs(layers, vocab=None):
    llama = dict(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    # Llama-3.2-1B's config.json, weights random.
    llama_1b = dict(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        tie_word_embeddings=True,
        bos_token_id=128000,
        eos_token_id=128001,
    )
    # The llama one's scale in the newer families: Qwen 3 (a norm on each head's queries and
    # keys) and Gemma 2 (norms around each block, GELU, softcapped scores and logits, sliding
    # layers), weights random.
    qwen3 = dict(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=2048,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=True,
    )
    gemma2 = dict(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        head_dim=64,
        query_pre_attn_scalar=64,
        sliding_window=4096,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        tie_word_embeddings=True,
    )
    gpt2 = {}
    if layers:
        gpt2["n_layer"] = layers
        for config in (llama, llama_1b, qwen3, gemma2):
            config["num_hidden_layers"] = layers
    if vocab:
        gpt2["vocab_size"] = vocab
        llama["vocab_size"] = vocab
        llama_1b.update(vocab_size=vocab, bos_token_id=1, eos_token_id=2)
        qwen3["vocab_size"] = vocab
        gemma2["vocab_size"] = vocab
    return {
        "gpt2": lambda: GPT2LMHeadModel(GPT2Config(**gpt2)),
        "llama": lambda: LlamaForCausalLM(LlamaConfig(**llama)),
        "llama-1b": lambda: LlamaForCausalLM(LlamaConfig(**llama_1b)),
        "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**qwen3)),
        "gemma2": lambda: Gemma2ForCausalLM(Gemma2Config(**gemma2)),
    }


def write(root, models=("gpt2", "llama"), dtypes=("f32",), device="cpu", layers=None, vocab=None):
    builders = configs(layers, vocab)
    for name in models:
        torch.manual_seed(0)
        with torch.device(device):
            model = builders[name]()
        n = sum(p.numel() for p in model.parameters())
        for dtype in dtypes:
            path = os.path.join(root, name if dtype == "f32" else f"{name}-{dtype}")
            model.to(DTYPES[dtype]).save_pretrained(path)
            print(f"{path}: {n / 1e6:.1f} M parameters, {dtype}")
        del model


class Stamps:
    """A streamer that stamps the time of every `put` after the prompt's."""

    def __init__(self):
        self.times = []
        self.prompt_seen = False

    def put(self, value):
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.times.append(time.perf_counter())

    def end(self):
        pass


def lcg_prompts(batch, prompt):
    """The prompts every side uses (ours: generation_speed.rs, candle: candle_generation.rs): a
    linear congruential generator, seed 1, ids in 3..1000."""
    state, rows = 1, []
    for _ in range(batch):
        row = []
        for _ in range(prompt):
            state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
            row.append(3 + (state >> 33) % 997)
        rows.append(row)
    return rows


def cpu_features():
    """The CPU's model and the vector features PyTorch dispatches on (from /proc/cpuinfo)."""
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return "unknown"
    model = next((l.split(":", 1)[1].strip() for l in info.splitlines()
                  if l.startswith("model name")), "unknown")
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines()
                  if l.startswith("flags")), [])
    wanted = ["avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"]
    return f"{model} [{' '.join(f for f in wanted if f in flags)}]"


def run(path, batch, prompt, new, threads, device="cpu", dtype=None, runs=2):
    torch.set_num_threads(threads)
    if dtype is None:
        # The dtype the weights were saved in (the folder's config.json).
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
        saved = config.get("dtype") or config.get("torch_dtype")
        dtype = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}.get(saved, "f32")
    loading = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=DTYPES[dtype], attn_implementation="eager"
    ).to(device).eval()
    if device != "cpu":
        torch.cuda.synchronize()
    load = time.perf_counter() - loading
    ids = torch.tensor(lcg_prompts(batch, prompt)).to(device)
    mask = torch.ones_like(ids)

    def once():
        """One generation: (prefill, decode) seconds."""
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
            if device != "cpu":
                torch.cuda.synchronize()
            total = time.perf_counter() - start
        assert out.shape[1] == prompt + new
        # The streamer takes one row; for a batch, time the first token with a second call.
        if batch == 1:
            prefill = stamps.times[0] - start
        else:
            with torch.no_grad():
                t = time.perf_counter()
                model.generate(ids, attention_mask=mask, max_new_tokens=1, do_sample=False,
                               eos_token_id=None, pad_token_id=0)
                if device != "cpu":
                    torch.cuda.synchronize()
                prefill = time.perf_counter() - t
        return prefill, total - prefill

    # The first generation is cold (CUDA's context, cuBLAS's handles, the allocator's pools):
    # reported apart, the others' last one as warm, as the Rust side does.
    timings = [once() for _ in range(runs)]
    (cold_prefill, cold_decode), (prefill, decode) = timings[0], timings[-1]
    print(json.dumps({
        "side": "transformers (PyTorch eager)",
        "device": torch.cuda.get_device_name() if device != "cpu" else "cpu",
        "dtype": dtype,
        "model": os.path.basename(path.rstrip("/")),
        "batch": batch,
        "prompt": prompt,
        "new": new,
        "threads": threads,
        "cpu": cpu_features(),
        "runs": runs,
        "load_s": round(load, 3),
        "cold_prefill_s": round(cold_prefill, 4),
        "cold_decode_tokens_per_s": round(batch * (new - 1) / cold_decode, 1),
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
    w.add_argument("--models", default="gpt2,llama", help="gpt2, llama, llama-1b, qwen3, gemma2")
    w.add_argument("--dtypes", default="f32", help="f32, f16, bf16")
    w.add_argument("--device", default="cpu", help="where to initialise: cpu or cuda")
    w.add_argument("--layers", type=int, default=None, help="override every model's depth")
    w.add_argument("--vocab", type=int, default=None,
                   help="override every model's vocabulary (lavapipe's buffers stop at 128 MiB)")
    r = sub.add_parser("run")
    r.add_argument("path")
    r.add_argument("--batch", type=int, default=1)
    r.add_argument("--prompt", type=int, default=128)
    r.add_argument("--new", type=int, default=128)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--device", default="cpu", help="cpu or cuda")
    r.add_argument("--dtype", default=None, choices=sorted(DTYPES),
                   help="compute dtype (default: the dtype the weights were saved in)")
    r.add_argument("--runs", type=int, default=2,
                   help="generations in the process: the first reported as cold, the last as warm")
    args = parser.parse_args()
    if args.command == "write":
        write(args.root, args.models.split(","), args.dtypes.split(","), args.device, args.layers,
              args.vocab)
    else:
        run(args.path, args.batch, args.prompt, args.new, args.threads, args.device, args.dtype,
            args.runs)


if __name__ == "__main__":
    sys.exit(main())
