#!/usr/bin/env python3
"""Sampling fixtures for `burn-positional-models`: rows of logits and what transformers' own
logits processors and warpers make of them.

Run by hand (never by CI, which reads the committed files), from the repository root:

    pip install torch==2.6.0 transformers==5.24.0 safetensors
    python3 tools/sampling_fixtures.py

Written with torch 2.6.0 (run on the CPU) and transformers 5.24.0. Seeded: a rerun with those
versions rewrites the same files. No network (the tiny model whose `_get_logits_processor` builds
the chains is made from its config class).

Writes crates/burn-positional-models/tests/fixtures/sampling/:

- `expected.safetensors`: `logits` [4, 50] float32 (row 0 random, row 1 with a run of ten equal
  scores at the top-p threshold and equal scores at the top-k boundary, row 2 with very negative
  scores and one -inf, row 3 dominated by one token), `input_ids` [4, 12] int64 (the sequences so
  far, repeats included, left-padded with id 0) and `attention_mask` [4, 12] int64; per case
  `<case>.scores` [4, 50] float32 (the processed scores, -inf where removed) and `<case>.probs`
  (their softmax, float32).
- `expected.json`: versions, and per case the processor and its arguments, or for a chain the
  GenerationConfig values and the processor classes `_get_logits_processor` built, in order.
"""

import json
import pathlib

import safetensors.torch
import torch
import transformers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

OUT = pathlib.Path("crates/burn-positional-models/tests/fixtures/sampling")
VOCAB = 50
BATCH = 4
SEQ = 12


def logits_and_ids():
    g = torch.Generator().manual_seed(43)
    logits = torch.randn(BATCH, VOCAB, generator=g) * 3
    # Row 1: ten equal scores above the rest (top-p's threshold falls inside the run, set per
    # case below) and equal scores at the top-k boundary.
    logits[1, 10:20] = 2.5
    logits[1, 20:30] = torch.randn(10, generator=g).clamp(max=1.0)
    logits[1, [33, 34, 35]] = 3.5
    # Row 2: very negative scores and one -inf.
    logits[2, 0:8] = -1e9
    logits[2, 8] = float("-inf")
    logits[2, 40:45] = -30.0
    # Row 3: one token far above the rest.
    logits[3, 7] = 25.0
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    # Repeats, and ids whose scores are negative and positive.
    ids[:, 5] = ids[:, 6]
    ids[1, 8:] = torch.tensor([12, 12, 33, 21])
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    # Left padding (id 0) on rows 0 and 2: the chain's repetition penalty skips it.
    for row, n in ((0, 3), (2, 5)):
        mask[row, :n] = 0
        ids[row, :n] = 0
    return logits, ids, mask


def tie_top_p(logits):
    """A top_p whose threshold 1 - top_p falls in the middle of row 1's run of equal scores."""
    row = logits[1].double()
    probs = torch.softmax(row, -1)
    sorted_probs, _ = torch.sort(probs, stable=True)
    cumulative = sorted_probs.cumsum(-1)
    tied = (torch.sort(row, stable=True).values == 2.5).nonzero().flatten()
    at = tied[len(tied) // 2].item()
    threshold = (cumulative[at] + cumulative[at + 1]).item() / 2
    return round(1 - threshold, 6)


def main():
    torch.manual_seed(0)
    logits, ids, mask = logits_and_ids()
    padding = (mask != 0).int().argmax(dim=1)
    top_p_ties = tie_top_p(logits)

    single = {
        "repetition_penalty_1.3": (
            RepetitionPenaltyLogitsProcessor(1.3, prompt_ignore_length=padding),
            {"kind": "repetition_penalty", "penalty": 1.3, "skip_left_padding": True},
        ),
        "repetition_penalty_0.7_all_ids": (
            RepetitionPenaltyLogitsProcessor(0.7),
            {"kind": "repetition_penalty", "penalty": 0.7, "skip_left_padding": False},
        ),
        "temperature_0.7": (TemperatureLogitsWarper(0.7), {"kind": "temperature", "temperature": 0.7}),
        "temperature_2": (TemperatureLogitsWarper(2.0), {"kind": "temperature", "temperature": 2.0}),
        "top_k_5": (TopKLogitsWarper(5), {"kind": "top_k", "top_k": 5, "min_tokens_to_keep": 1}),
        "top_k_2_ties": (TopKLogitsWarper(2), {"kind": "top_k", "top_k": 2, "min_tokens_to_keep": 1}),
        "top_k_3_keep_8": (
            TopKLogitsWarper(3, min_tokens_to_keep=8),
            {"kind": "top_k", "top_k": 3, "min_tokens_to_keep": 8},
        ),
        "top_p_0.8": (TopPLogitsWarper(0.8), {"kind": "top_p", "top_p": 0.8, "min_tokens_to_keep": 1}),
        "top_p_ties": (
            TopPLogitsWarper(top_p_ties),
            {"kind": "top_p", "top_p": top_p_ties, "min_tokens_to_keep": 1},
        ),
        "top_p_0.3_keep_4": (
            TopPLogitsWarper(0.3, min_tokens_to_keep=4),
            {"kind": "top_p", "top_p": 0.3, "min_tokens_to_keep": 4},
        ),
        "min_p_0.1": (MinPLogitsWarper(0.1), {"kind": "min_p", "min_p": 0.1, "min_tokens_to_keep": 1}),
        # Row 1's three equal scores at 3.5 straddle the fifth place: torch's `topk` keeps one
        # of them, not always the first.
        "min_p_0.6_keep_5_ties": (
            MinPLogitsWarper(0.6, min_tokens_to_keep=5),
            {"kind": "min_p", "min_p": 0.6, "min_tokens_to_keep": 5},
        ),
        "min_p_0": (MinPLogitsWarper(0.0), {"kind": "min_p", "min_p": 0.0, "min_tokens_to_keep": 1}),
    }

    # The chains `generate` builds: `_get_logits_processor` of a tiny decoder-only model, on a
    # GenerationConfig with transformers' global defaults under the case's values (as
    # `_prepare_generation_config` fills them).
    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=VOCAB, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                    num_attention_heads=1, num_key_value_heads=1)
    )
    chains = {
        "chain_sample_all": dict(do_sample=True, temperature=0.7, top_k=10, top_p=0.9, repetition_penalty=1.3),
        "chain_sample_defaults": dict(do_sample=True),
        "chain_hot_top_p": dict(do_sample=True, temperature=1.5, top_k=0, top_p=0.5),
        "chain_greedy_penalty": dict(do_sample=False, repetition_penalty=1.2, temperature=0.5, top_k=3),
        "chain_cold_top_k_ties": dict(do_sample=True, temperature=0.5, top_k=2, top_p=top_p_ties),
        "chain_min_p": dict(do_sample=True, temperature=1.5, top_k=0, min_p=0.05),
        "chain_all_min_p": dict(do_sample=True, temperature=0.7, top_k=10, top_p=0.9, min_p=0.2, repetition_penalty=1.3),
        "chain_greedy_min_p": dict(do_sample=False, min_p=0.3),
    }

    tensors = {"logits": logits.contiguous(), "input_ids": ids.contiguous(), "attention_mask": mask.contiguous()}
    cases = {}
    for name, (processor, meta) in single.items():
        scores = processor(ids, logits.clone())
        tensors[f"{name}.scores"] = scores.contiguous()
        tensors[f"{name}.probs"] = torch.softmax(scores, -1).contiguous()
        cases[name] = meta
    defaults = GenerationConfig._get_default_generation_params()
    for name, values in chains.items():
        config = GenerationConfig(**{**defaults, **values})
        processors = model._get_logits_processor(
            generation_config=config,
            input_ids_seq_length=SEQ,
            device="cpu",
            model_kwargs={"attention_mask": mask},
        )
        scores = processors(ids, logits.clone())
        tensors[f"{name}.scores"] = scores.contiguous()
        tensors[f"{name}.probs"] = torch.softmax(scores, -1).contiguous()
        cases[name] = {
            "kind": "chain",
            "config": values,
            "processors": [type(p).__name__ for p in processors],
        }

    OUT.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file(tensors, OUT / "expected.safetensors")
    meta = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "vocab": VOCAB,
        "notes": "rows of logits and transformers' processors on them (tools/sampling_fixtures.py)",
        "cases": cases,
    }
    (OUT / "expected.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {OUT} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
