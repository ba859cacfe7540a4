"""PyTorch eager's rotary embedding on the shapes of `benches/benches/rope.rs`, for the table in
docs/performance.md: transformers' own `apply_rotary_pos_emb` (Llama's, half-split) on q and k
of [8, 32, 2048, 128] at positions 0..2048, and a decoding step [8, 32, 1, 128] at position
4000, f32, on the CPU with the same thread count as the Rust side (2 here).

    python3 tools/rope_speed.py [--threads 2]

Prints the median of 10 timed calls (after 2 warm-up calls) per shape, and the throughput in
the bench's unit (bytes of q and k per second). Needs torch and transformers (run by hand;
CI never runs Python).
"""

import argparse
import statistics
import time

import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

HEADS, D_HEAD, BASE = 32, 128, 10000.0
SHAPES = [(8, 2048, 0), (8, 1, 4000)]


def angles(offset, seq):
    inv_freq = 1.0 / (BASE ** (torch.arange(0, D_HEAD, 2, dtype=torch.int64).float() / D_HEAD))
    positions = torch.arange(offset, offset + seq).float()
    freqs = torch.outer(positions, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[None], emb.sin()[None]  # [1, seq, d_head], as LlamaRotaryEmbedding gives


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for batch, seq, offset in SHAPES:
        q = torch.rand(batch, HEADS, seq, D_HEAD)
        k = torch.rand(batch, HEADS, seq, D_HEAD)
        cos, sin = angles(offset, seq)
        times = []
        for i in range(12):
            start = time.perf_counter()
            out = apply_rotary_pos_emb(q, k, cos, sin)
            elapsed = time.perf_counter() - start
            del out
            if i >= 2:
                times.append(elapsed)
        median = statistics.median(times)
        size = 2 * q.numel() * 4
        print(
            f"rope/torch_eager/b{batch}_h{HEADS}_s{seq}_at{offset}: "
            f"{median * 1e3:.3f} ms, {size / median / 2**30:.3f} GiB/s"
        )


if __name__ == "__main__":
    main()
