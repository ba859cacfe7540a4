#!/usr/bin/env python3
"""A small byte-level BPE tokenizer for the `tokenizers` feature's tests: 256 tokens, the
vocabulary size of the fixture models, so any id the Llama fixture generates decodes to text.

Run by hand (never by CI, which reads the committed files), from the repository root:

    pip install tokenizers==0.23.3   # as transformers 5.24 installs it
    python3 tools/tokenizer_fixture.py

Writes crates/burn-positional-models/tests/fixtures/tokenizer/:

- `tokenizer.json`: Hugging Face `tokenizers`' BPE trained on CORPUS below with a ByteLevel
  pre-tokenizer and decoder (GPT-2's scheme, without the 256-byte initial alphabet: the
  characters of the corpus, then merges, 256 tokens in all);
- `expected.json`: for each of TEXTS, the ids Python's `tokenizers` encodes it to and the text
  it decodes those ids back to; and `decode`: id sequences (every id, one by one and in runs)
  with the text Python decodes each to. The Rust side (the `tokenizers` crate) must give the
  same ids and texts.
"""

import json
import os
import random

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

OUT = "crates/burn-positional-models/tests/fixtures/tokenizer"
CORPUS = [
    "The dog bites the man. The man bites the dog.",
    "Attention without positions cannot tell dog bites man from man bites dog.",
    "A transformer adds a position to every token: sines, a learned table, a rotation, "
    "a bias on the scores.",
    "Who bites whom? The order of the words says it, and only positions carry the order.",
    "Sinusoidal encodings, learned absolute tables, rotary embeddings, ALiBi slopes and "
    "T5's relative buckets each give attention a sense of where a token sits.",
    "Queries and keys meet in a dot product; softmax turns the scores into weights; values "
    "are summed with them. Without positions, a permutation of the input permutes the output.",
    "Length generalization: a model trained on short sequences is tested on longer ones, "
    "and the schemes differ in how gracefully they extrapolate beyond the trained context.",
    "Checkpoints come as safetensors files, sharded past a few gigabytes, in bfloat16 or "
    "float16, with a tokenizer, a config and a generation config beside them.",
    "Greedy decoding takes the most likely token; sampling draws from the distribution after "
    "temperature, top-k, top-p and a repetition penalty reshape it.",
    "0123456789 + - * / = ( ) [ ] { } < > : ; , . ! ? ' \" # $ % & @ ^ _ | ~ `",
] * 20
TEXTS = [
    "The dog bites the man.",
    "man bites dog",
    "Positions carry the order of the words!",
]


def main():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=256, show_progress=False, initial_alphabet=[])
    tok.train_from_iterator(CORPUS, trainer)
    assert tok.get_vocab_size() == 256, tok.get_vocab_size()
    os.makedirs(OUT, exist_ok=True)
    tok.save(os.path.join(OUT, "tokenizer.json"))
    rng = random.Random(0)
    runs = [[i] for i in range(256)] + [[rng.randrange(256) for _ in range(12)] for _ in range(20)]
    expected = {
        "tokenizers": tokenizers.__version__,
        "encode": [
            {"text": t, "ids": tok.encode(t).ids, "decoded": tok.decode(tok.encode(t).ids)}
            for t in TEXTS
        ],
        "decode": [{"ids": ids, "text": tok.decode(ids)} for ids in runs],
    }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    print(f"256 tokens; {TEXTS[0]!r} -> {expected['encode'][0]['ids']}")


if __name__ == "__main__":
    main()
