"""The PyTorch twin of `cargo run --release -p burn-positional-models --example train_speed`:
a GPT-2-small-shaped model (transformers' GPT2LMHeadModel, default GPT2Config: vocab 50257,
1024 learned positions, width 768, 12 layers of 12 heads, tied head), random init, in PyTorch
eager on the CPU with as many threads as the machine has cores (torch's default), f32.

A step: the forward of a batch of `--batch` random sequences of `--seq` ids (seed 1), the
next-token cross-entropy (`labels=ids`, transformers shifts them), the backward and one AdamW
update (lr 1e-4, weight decay 0.01). The first `--warmup` steps are not timed. Attention is
transformers' default (`sdpa`, causal). Prints one JSON line, as the Rust side.

    python3 tools/train_speed.py --steps 3

Never run by CI.
"""

import argparse
import json
import os
import time

import torch
import transformers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()

    torch.manual_seed(1)
    config = transformers.GPT2Config(n_layer=args.layers)
    model = transformers.GPT2LMHeadModel(config)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    optim = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        ids = torch.randint(0, config.vocab_size, (args.batch, args.seq))
        start = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        forward = time.perf_counter() - start
        loss.backward()
        backward = time.perf_counter() - start - forward
        optim.step()
        optim.zero_grad(set_to_none=True)
        elapsed = time.perf_counter() - start
        update = elapsed - forward - backward
        print(
            f"step {step}: {elapsed:.2f} s (forward {forward:.2f}, backward {backward:.2f}, "
            f"AdamW {update:.2f}), loss {loss.item():.4f}",
            flush=True,
        )
        if step >= args.warmup:
            times.append((elapsed, forward, backward, update))
        losses.append(round(loss.item(), 4))
    times.sort()
    median, forward, backward, update = times[len(times) // 2]
    print(
        json.dumps(
            {
                "side": "pytorch",
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "threads": torch.get_num_threads(),
                "cores": os.cpu_count(),
                "attention": model.config._attn_implementation,
                "params": params,
                "batch": args.batch,
                "seq": args.seq,
                "layers": args.layers,
                "step_s": round(median, 3),
                "forward_s": round(forward, 3),
                "backward_s": round(backward, 3),
                "update_s": round(update, 3),
                "steps_per_s": round(1.0 / median, 4),
                "tokens_per_s": round(args.batch * args.seq / median, 1),
                "losses": losses,
            }
        )
    )


if __name__ == "__main__":
    main()
