#!/usr/bin/env python3
"""Generation speed, three sides in one session on the same folders: ours
(`generation_speed`, flex), PyTorch eager (`tools/generation_speed.py`) and candle-transformers
(`candle_generation`, Llama-shaped models only), one process per run, back to back, and a
markdown table of the ratios (ours / peer; above 1 is ours faster, or for load and memory,
ours larger).

Run by hand, from the repository root (never by CI), on an idle machine:

    python3 tools/generation_speed.py write /tmp/burn-positional-speed --models gpt2,llama,llama-1b --dtypes f32,bf16
    cargo build --release -p burn-positional-models --example generation_speed
    cargo build --release -p burn-positional-benches --example candle_generation
    python3 tools/generation_table.py /tmp/burn-positional-speed > /tmp/table.md

Every run's JSON line goes to stderr as it comes; the CPU (model and vector features) heads the
table. PyTorch runs with `--threads` threads (default: the machine's CPUs), candle with
`RAYON_NUM_THREADS` at the same number; ours uses flex's pool (all CPUs).
"""

import argparse
import json
import os
import subprocess
import sys

TARGET = os.environ.get("CARGO_TARGET_DIR",
                        os.path.expanduser("~/.cache/burn-positional/target"))
OURS = os.path.join(TARGET, "release/examples/generation_speed")
CANDLE = os.path.join(TARGET, "release/examples/candle_generation")


def run(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        sys.stderr.write(out.stdout + out.stderr)
        return None
    sys.stderr.write(lines[-1] + "\n")
    return json.loads(lines[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root")
    p.add_argument("--models", default="gpt2,llama,llama-1b")
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--new-1b", type=int, default=16, help="new tokens for llama-1b")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()
    rows = []
    cpu = None
    for model in args.models.split(","):
        for dtype in args.dtypes.split(","):
            folder = os.path.join(args.root, model if dtype == "f32" else f"{model}-{dtype}")
            if not os.path.isdir(folder):
                sys.stderr.write(f"skipped: no {folder}\n")
                continue
            for batch in [int(b) for b in args.batches.split(",")]:
                new = args.new_1b if model == "llama-1b" else args.new
                common = ["--batch", str(batch), "--prompt", str(args.prompt), "--new", str(new)]
                # In the row's dtype: on the CPU the default for a bf16 file is f32 now.
                ours = run([OURS, folder, "--dtype", dtype] + common)
                torch = run([sys.executable, "tools/generation_speed.py", "run", folder,
                             "--threads", str(args.threads)] + common)
                candle = None
                if model.startswith("llama") and os.path.exists(CANDLE):
                    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
                    candle = run([CANDLE, folder] + common, env)
                cpu = cpu or (ours or {}).get("cpu")
                rows.append((model, dtype, batch, new, ours, torch, candle))
    print(f"CPU: {cpu}; prompt {args.prompt} tokens; PyTorch {args.threads} threads\n")
    print("| model | dtype | batch | new | prefill tok/s ours / PyTorch / candle | decode tok/s "
          "ours / PyTorch / candle | load s ours / PyTorch / candle | peak MiB ours / PyTorch "
          "/ candle |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")

    def cell(key, ours, *peers, ratio=True):
        vals = [ours] + list(peers)
        text = " / ".join("-" if v is None else f"{v[key]:g}" for v in vals)
        if ratio and ours:
            r = [f"{ours[key] / v[key]:.2f}x" for v in peers if v and v[key]]
            text += f" ({', '.join(r)})" if r else ""
        return text

    for model, dtype, batch, new, ours, torch, candle in rows:
        if ours is None:
            print(f"| {model} | {dtype} | {batch} | {new} | ours failed (stderr) | | | |")
            continue
        print(f"| {model} | {dtype} | {batch} | {new} | "
              f"{cell('prefill_tokens_per_s', ours, torch, candle)} | "
              f"{cell('decode_tokens_per_s', ours, torch, candle)} | "
              f"{cell('load_s', ours, torch, candle, ratio=False)} | "
              f"{cell('peak_rss_mib', ours, torch, candle, ratio=False)} |")


if __name__ == "__main__":
    main()
