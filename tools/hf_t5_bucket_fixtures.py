#!/usr/bin/env python3
"""T5's relative-position buckets from Hugging Face transformers, for `t5_bias.rs`'s unit test.

Run by hand, never by CI (CI reads the committed JSON):

    pip install torch transformers
    python3 tools/hf_t5_bucket_fixtures.py

For a grid of `num_buckets` and `max_distance` (every pair our `T5BiasConfig::validate`
accepts: `num_buckets >= 4`, `max_distance > num_buckets / 2`), both directions, it evaluates
`T5Attention._relative_position_bucket` on relative positions -3000..=3000 and writes only the
places where the bucket changes (`[relative_position, bucket]`, the first entry at -3000), so
the file stays small while every boundary of every log-spaced bucket is recorded.
"""

import json
import pathlib

import torch
import transformers
from transformers.models.t5.modeling_t5 import T5Attention

OUT = (pathlib.Path(__file__).resolve().parent.parent
       / "crates/burn-positional/tests/fixtures/hf/t5_buckets.json")
REACH = 3000

cases = []
for num_buckets in [4, 5, 6, 8, 9, 10, 12, 16, 31, 32, 33, 64, 128]:
    for max_distance in sorted({num_buckets // 2 + 1, num_buckets // 2 + 2, num_buckets,
                                20, 50, 100, 128, 129, 1000, 2000}):
        if max_distance <= num_buckets // 2:
            continue
        for bidirectional in [True, False]:
            rel = torch.arange(-REACH, REACH + 1)
            buckets = T5Attention._relative_position_bucket(
                rel, bidirectional=bidirectional, num_buckets=num_buckets,
                max_distance=max_distance).tolist()
            changes = [[-REACH, buckets[0]]]
            for r, (a, b) in enumerate(zip(buckets, buckets[1:]), start=-REACH + 1):
                if a != b:
                    changes.append([r, b])
            cases.append({"num_buckets": num_buckets, "max_distance": max_distance,
                          "bidirectional": bidirectional, "changes": changes})

OUT.write_text(json.dumps({"transformers": transformers.__version__,
                           "torch": torch.__version__, "reach": REACH,
                           "cases": cases}, separators=(",", ":")) + "\n")
print(f"{len(cases)} cases -> {OUT}")
