#!/usr/bin/env python3
"""Fixtures for `burn_positional::pretrained`: tiny Hugging Face checkpoints and transformers'
own outputs for them.

Run by hand (never by CI), from the repository root:

    python3 tools/hf_weight_fixtures.py

It builds tiny randomly initialised (seeded) GPT2LMHeadModel, BertModel and T5Model with
transformers, keeps only the tensors `pretrained` loads (plus one other tensor per file, so the
loader must pick its tensors out of a file that holds more), saves them with transformers' key
names, and writes transformers' outputs as JSON beside them:

- GPT-2: `wte(ids) + wpe(pos)`, in `gpt2.safetensors` (keys `transformer.wte.weight`,
  `transformer.wpe.weight`, as GPT2LMHeadModel saves them) and `gpt2_model.bin` (torch.save of
  a GPT2Model state dict: keys `wte.weight`, `wpe.weight`), for burn's PytorchStore.
- BERT: `word_embeddings(ids) + position_embeddings(pos)` (no token types, no LayerNorm), in
  `bert.safetensors` (keys `embeddings.*`, as BertModel saves them).
- T5: `compute_bias(q_len, k_len)` of the encoder (bidirectional) and of the decoder (causal),
  including q_len != k_len, a query offset (`past_seen_tokens`) and distances past
  max_distance, in `t5.safetensors` (keys `encoder.block.0...` and `decoder.block.0...`); and
  `T5Attention._relative_position_bucket` itself for every relative position in -200..=200,
  both directions and several (num_buckets, max_distance), in `t5_buckets.json`.

Writes into crates/burn-positional/tests/fixtures/hf/pretrained/.
"""

import json
import pathlib

import safetensors.torch
import torch
import transformers
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, T5Config, T5Model

OUT = pathlib.Path(__file__).resolve().parent.parent / (
    "crates/burn-positional/tests/fixtures/hf/pretrained"
)


def versions():
    return {"transformers": transformers.__version__, "torch": torch.__version__}


def rows(t):
    return t.detach().to(torch.float64).tolist()


def keep(state, keys):
    # Contiguous copies, so the file holds these tensors only (not a view of a bigger one).
    return {k: state[k].detach().clone().contiguous() for k in keys}


def write_json(name, value):
    path = OUT / name
    path.write_text(json.dumps(value, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def gpt2():
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=50, n_embd=16, n_positions=32, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0
    )
    model = GPT2LMHeadModel(config).eval()
    state = model.state_dict()
    # One unrelated tensor rides along: the loader must leave it.
    safetensors.torch.save_file(
        keep(state, ["transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight"]),
        OUT / "gpt2.safetensors",
        metadata={"format": "pt"},
    )
    inner = model.transformer
    torch.save(
        keep(inner.state_dict(), ["wte.weight", "wpe.weight", "ln_f.bias"]),
        OUT / "gpt2_model.bin",
    )
    ids = torch.tensor([[3, 17, 42, 0, 49], [7, 7, 1, 30, 12]])
    pos = torch.arange(ids.shape[1]).unsqueeze(0)
    # Positions at an offset: incremental decoding of tokens 27..31 (the table's last rows).
    offset = 27
    pos_offset = torch.arange(offset, offset + ids.shape[1]).unsqueeze(0)
    with torch.no_grad():
        out = inner.wte(ids) + inner.wpe(pos)
        out_offset = inner.wte(ids) + inner.wpe(pos_offset)
    write_json(
        "gpt2.json",
        {
            **versions(),
            "model": "GPT2LMHeadModel (safetensors) and GPT2Model (.bin)",
            "vocab_size": config.vocab_size,
            "d_model": config.n_embd,
            "max_len": config.n_positions,
            "ids": ids.tolist(),
            "output": rows(out),
            "offset": offset,
            "output_at_offset": rows(out_offset),
        },
    )


def bert():
    torch.manual_seed(1)
    config = BertConfig(
        vocab_size=50,
        hidden_size=32,
        max_position_embeddings=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    model = BertModel(config).eval()
    state = model.state_dict()
    safetensors.torch.save_file(
        keep(
            state,
            [
                "embeddings.word_embeddings.weight",
                "embeddings.position_embeddings.weight",
                "embeddings.token_type_embeddings.weight",
            ],
        ),
        OUT / "bert.safetensors",
        metadata={"format": "pt"},
    )
    emb = model.embeddings
    ids = torch.tensor([[2, 11, 23, 48, 5, 0], [9, 9, 30, 1, 0, 0]])
    pos = torch.arange(ids.shape[1]).unsqueeze(0)
    with torch.no_grad():
        out = emb.word_embeddings(ids) + emb.position_embeddings(pos)
    write_json(
        "bert.json",
        {
            **versions(),
            "model": "BertModel",
            "vocab_size": config.vocab_size,
            "d_model": config.hidden_size,
            "max_len": config.max_position_embeddings,
            "pad_token_id": config.pad_token_id,
            "ids": ids.tolist(),
            "output": rows(out),
        },
    )


def t5():
    torch.manual_seed(2)
    config = T5Config(
        vocab_size=50,
        d_model=16,
        d_kv=8,
        d_ff=32,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=4,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=64,
    )
    model = T5Model(config).eval()
    state = model.state_dict()
    enc_key = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    dec_key = "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    # The two tables start equal-ish only by chance; make them clearly different.
    with torch.no_grad():
        state[dec_key].add_(1.0)
    safetensors.torch.save_file(
        keep(state, [enc_key, dec_key, "shared.weight"]),
        OUT / "t5.safetensors",
        metadata={"format": "pt"},
    )
    encoder = model.encoder.block[0].layer[0].SelfAttention
    decoder = model.decoder.block[0].layer[0].SelfAttention
    assert encoder.is_decoder is False and decoder.is_decoder is True
    # (q_len, k_len, offset): square, q < k, q > k, one query at a far offset (decoding), and
    # lengths past max_distance (64) so the last bucket is reached on both sides.
    cases = [(6, 6, 0), (3, 9, 0), (9, 3, 0), (1, 100, 90), (3, 80, 0), (80, 2, 0)]
    out = {"encoder": [], "decoder": []}
    with torch.no_grad():
        for q_len, k_len, offset in cases:
            for name, attn in (("encoder", encoder), ("decoder", decoder)):
                bias = attn.compute_bias(q_len, k_len, past_seen_tokens=offset)
                assert tuple(bias.shape) == (1, config.num_heads, q_len, k_len)
                out[name].append(
                    {"q_len": q_len, "k_len": k_len, "offset": offset, "bias": rows(bias[0])}
                )
    write_json(
        "t5.json",
        {
            **versions(),
            "model": "T5Model",
            "n_heads": config.num_heads,
            "num_buckets": config.relative_attention_num_buckets,
            "max_distance": config.relative_attention_max_distance,
            "note": "bias[h][i][j] for the query at offset + i and the key at j",
            **out,
        },
    )


def t5_buckets():
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = torch.arange(-200, 201)
    configs = []
    for num_buckets, max_distance in [(32, 128), (32, 64), (8, 16), (16, 32), (12, 40)]:
        entry = {"num_buckets": num_buckets, "max_distance": max_distance}
        for name, bidirectional in (("bidirectional", True), ("causal", False)):
            buckets = T5Attention._relative_position_bucket(
                relative, bidirectional=bidirectional, num_buckets=num_buckets,
                max_distance=max_distance,
            )
            entry[name] = buckets.tolist()
        configs.append(entry)
    write_json(
        "t5_buckets.json",
        {
            **versions(),
            "function": "T5Attention._relative_position_bucket",
            "relative_positions": [-200, 200],
            "configs": configs,
        },
    )


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    gpt2()
    bert()
    t5()
    t5_buckets()
