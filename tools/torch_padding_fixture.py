#!/usr/bin/env python3
"""Fixture for `padding_idx`: what PyTorch's own `nn.Embedding(padding_idx=..)` does with a
padding row that is not zero (a converted checkpoint may hold one).

Run by hand (never by CI), from the repository root:

    python3 tools/torch_padding_fixture.py

PyTorch zeroes the padding row at init, returns the *stored* row in forward (whatever it
holds), and gives that row no gradient. This script builds a token table with
`padding_idx`, writes a non-zero padding row into it, and records, for a batch of ids that
includes the padding id:

- `tokens_only`: `tok(ids)` and the gradient of `sum(tok(ids) * loss_weights)` on `tok.weight`;
- `with_positions`: `tok(ids) + pos(arange(seq))` (a learned position table, a plain
  `nn.Embedding`), and the gradients on both tables.

Writes crates/burn-positional/tests/fixtures/torch/padding_idx.json.
"""

import json
import pathlib

import torch

OUT = pathlib.Path(__file__).resolve().parent.parent / (
    "crates/burn-positional/tests/fixtures/torch/padding_idx.json"
)


def rows(t):
    return t.detach().to(torch.float64).tolist()


def main():
    torch.manual_seed(32)
    vocab, d, pad, max_len = 7, 6, 2, 5
    tok = torch.nn.Embedding(vocab, d, padding_idx=pad)
    # PyTorch's init: the padding row is zero.
    assert torch.count_nonzero(tok.weight[pad]) == 0
    init_pad_row = rows(tok.weight[pad])
    with torch.no_grad():
        tok.weight[pad] = torch.randn(d)  # a checkpoint's non-zero padding row
    pos = torch.nn.Embedding(max_len, d)
    ids = torch.tensor([[1, 2, 2, 4], [2, 6, 0, 2]])
    seq = ids.shape[1]
    loss_weights = torch.randn(ids.shape[0], seq, d)

    out = tok(ids)
    (out * loss_weights).sum().backward()
    tokens_only = {"output": rows(out), "tokens_grad": rows(tok.weight.grad)}

    tok.weight.grad = None
    out = tok(ids) + pos(torch.arange(seq)).unsqueeze(0)
    (out * loss_weights).sum().backward()
    with_positions = {
        "output": rows(out),
        "tokens_grad": rows(tok.weight.grad),
        "positions_grad": rows(pos.weight.grad),
    }

    fixture = {
        "torch": torch.__version__,
        "vocab_size": vocab,
        "d_model": d,
        "padding_idx": pad,
        "max_len": max_len,
        "init_padding_row": init_pad_row,
        "ids": ids.tolist(),
        "tokens": rows(tok.weight),
        "positions": rows(pos.weight),
        "loss_weights": rows(loss_weights),
        "tokens_only": tokens_only,
        "with_positions": with_positions,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(fixture, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
