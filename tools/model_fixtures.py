#!/usr/bin/env python3
"""Whole-model fixtures for `burn-positional-models`: tiny random Hugging Face checkpoints and what
transformers computes with them (forward logits, greedy generation and the logits of every step).

Run by hand (never by CI, which reads the committed files), from the repository root:

    pip install torch==2.6.0 transformers==5.24.0 safetensors
    python3 tools/model_fixtures.py

Written with torch 2.6.0 (+cu124 wheel, run on the CPU), transformers 5.24.0 and safetensors
0.8.0. Everything is seeded (the model's init, the weight perturbation and the token ids all come
from the fixture's seed), so a rerun with those versions rewrites the same files. No network: the
models are built from their config classes, never downloaded.

Writes one folder per fixture to crates/burn-positional-models/tests/fixtures/<name>/:

- `config.json`, `model.safetensors`: exactly what `model.save_pretrained(dir)` writes (float32).
  `save_pretrained` also writes a `generation_config.json`; it is deleted, as nothing needs it
  (every value generation used is in `config.json` or `expected.json`: the generate call below
  overrides eos and pad, and T5's `decoder_start_token_id` is in `config.json` too).
- `expected.safetensors` (`safetensors.torch.save_file`; ids int64, floats float32, contiguous).
- `expected.json`: family, versions, seed, prompt lengths, max_new_tokens, min_margin (the
  smallest gap between the two largest logits of a row, over every generate step and row; for
  BERT over every real, unpadded, position), notes, the family's positional facts (below) and the
  small integer arrays of `expected.safetensors` again, for reading.

The models: hidden width 64 (BLOOM 96), 2 layers, head_dim 16, vocab 256, `attn_implementation=
"eager"`, float32, `eval()`; MLP width 128 where the family has one to set (Llama, Qwen2, Phi-3,
Mistral, BERT, T5's d_ff; GPT-2 and BLOOM keep their fixed 4x). Each config is written the Python
way (`LlamaConfig(...)`, RoPE settings as `rope_parameters`) and `save_pretrained` writes the JSON;
a value not set here is transformers' default. `initializer_range` is raised to 0.3 (T5:
`initializer_factor` 1.5) so logits spread and greedy generation does not settle on one token.
After the init every 1-D parameter (norm weights and every bias, which init to 1 and 0) gets
Gaussian noise (std 0.2), and every all-zero row of a 2-D parameter (the embedding row of the pad
id 0, which transformers zeroes when `pad_token_id` is set) is refilled with random values: a port
that drops a bias or a norm weight, or zeroes the pad row, then fails. For T5, before that noise,
the `relative_attention_bias` tables are multiplied by 4 (std 0.75, so the bucket bias visibly
moves the logits) and the decoder's self-attention output projection `o` by 6 (with the tied
embedding, greedy decoding otherwise copies its last token forever); t5_v1_1's own
`lm_head.weight` is drawn with std 0.4. The folders are 0.4 to 1.1 MB: BLOOM (hidden 96, fixed 4x
MLP) and the two T5 (2 encoder + 2 decoder layers, the decoder's with cross-attention) are the
largest; the script fails above 1.5 MB.

Decoder-only fixtures (gpt2, llama, qwen2, phi3, phi3_partial, mistral, bloom): a LEFT-padded batch
of two prompts, 20 and 12 tokens (Phi-3: 24 and 14), random ids in 3..255, pad id 0 on the left
(`pad_token_id=0` in the config).
Stored: `input_ids` [2, L], `attention_mask` [2, L], `position_ids` [2, L] (not for BLOOM),
`logits` [2, L, V] from one forward `model(input_ids, attention_mask=, position_ids=,
use_cache=False)`, `generated` [2, L+16] from `model.generate(input_ids, attention_mask=,
max_new_tokens=16, do_sample=False, num_beams=1, eos_token_id=None, pad_token_id=0,
output_logits=True, return_dict_in_generate=True)` (its default cache, DynamicCache), and
`step_logits` [16, 2, V], the raw logits of each step. Logits at padded positions are whatever
transformers computes there (a left-padded query sees no key: every score is masked by the same
float32 min, so its softmax is uniform over all keys); compare them only if the port does the same.

The position ids (read in generation/utils.py, 5.24): `generate` calls
`_prepare_position_ids_for_generation` when the model's forward takes `position_ids`:
`attention_mask.long().cumsum(-1) - 1`, then `masked_fill(attention_mask == 0, 0)`: padded slots
get 0 (transformers 4.x filled them with 1); each step appends `last + 1`
(`_update_model_kwargs_for_generation`) and `prepare_inputs_for_generation` slices the new ones.
The script checks that the forward inside generate received exactly the stored `position_ids`.
The attention mask (masking_utils.py): key j is visible to query i iff `j <= i` (indices in the
padded sequence, cache included) and `attention_mask[b, j] == 1`; eager adds 0 or
`torch.finfo(float32).min` to the scores.

Checks the script makes (a failing one raises; margin or repetition failures retry with the next
seed, and the seed used is recorded): step 0's logits equal `logits[:, -1]` (1e-5); each new
token is the argmax of its step's logits and generation ran the full 16 steps; every step's
top-two margin is > 1e-3 in both rows; each row's 16 new tokens hold at least 5 distinct ids;
every step's logits equal a cache-free forward over the whole sequence so far (1e-4; so a port
may check either way, and this also holds for Phi-3, see below); the folder reloads with
`from_pretrained` to the same logits (on the full generated sequence, so Phi-3's long factors are
covered); each folder is under 1.5 MB.

Encoder fixtures: `bert` (BertForMaskedLM) on a RIGHT-padded batch of two (20 and 12 tokens) with
`token_type_ids` (two segments per row, 0 then 1, padded slots 0); stored `input_ids`,
`attention_mask`, `token_type_ids`, `logits` [2, L, V] (no position_ids: BERT uses
`arange(L)` for every row). `t5`, `t5_v1_1` (T5ForConditionalGeneration): RIGHT-padded encoder
batch (24 and 14 tokens); stored `input_ids`, `attention_mask`, `decoder_input_ids` [2, 10]
(0, then random ids in 3..255), `logits` [2, 10, V] (teacher forced, no decoder mask),
`encoder_hidden` [2, L, 64] (the encoder's last hidden state, after its final norm),
`generated` [2, 17] and `step_logits` [16, 2, V] from greedy generate (eos_token_id=None,
pad 0, decoder_start 0); T5's step 0 equals `logits[:, 0]`, and every step equals a
teacher-forced forward over the tokens so far.

Source facts a port must follow, read in transformers 5.24.0 (models/<family>/modeling_*.py,
modeling_rope_utils.py, masking_utils.py, cache_utils.py, pytorch_utils.py, activations.py):

GPT-2 (gpt2): `Conv1D` weights are stored [in, out] and applied as `x @ W + b` (the transpose of
nn.Linear). `attn.c_attn.weight` [64, 192]: output columns 0:64 are q, 64:128 k, 128:192 v, each
split into heads of 16 contiguous columns. Scores scaled by 1/sqrt(head_dim)
(`scale_attn_weights=True`, no per-layer scaling). Pre-LN blocks (`ln_1`, `ln_2`, final `ln_f`),
LayerNorm eps 1e-5; MLP `c_fc` [64, 256], `gelu_new` (tanh approximation), `c_proj` [256, 64].
Input = `wte[ids] + wpe[position_ids]` with generate's position ids (padded slots read `wpe[0]`).
`lm_head` is tied to `transformer.wte.weight` and is not in the file.

Llama (llama): RMSNorm `x * rsqrt(mean(x^2) + eps) * w` in float32, eps 1e-6 (`rms_norm_eps`);
q/k/v/o and gate/up/down without bias; MLP `down(silu(gate(x)) * up(x))`; GQA: query head h
uses kv head `h // (n_heads / n_kv_heads)` (`repeat_kv`). RoPE is the rotate-half form:
`q*cos + rotate_half(q)*sin` with `cos = cat(freqs, freqs)`, `rotate_half(x) = cat(-x2, x1)`
(first and second halves, not interleaved pairs); `freqs = position_ids * inv_freq`, cos and sin
multiplied by the rope type's attention factor (1 for llama3). llama3 inv_freq
(`_compute_llama3_parameters`): `wavelen = 2*pi/inv_freq`; `wavelen < orig/high_freq_factor`:
kept; `wavelen > orig/low_freq_factor`: divided by `factor`; otherwise
`(1 - s) * inv_freq/factor + s * inv_freq` with `s = (orig/wavelen - low_freq_factor) /
(high_freq_factor - low_freq_factor)`. It is fixed (no length dependence). Here rope_theta 10000,
orig 32: frequency 0 is kept, 1 smoothed, 2..7 divided (recorded in expected.json). Scores
scaled by head_dim^-0.5, softmax in float32. `tie_word_embeddings=True`: no `lm_head.weight` in
the file.

Qwen2 (qwen2): Llama's layout plus biases on q_proj, k_proj, v_proj (o_proj has none), RMSNorm
eps 1e-6, untied `lm_head.weight`; no sliding window (`use_sliding_window` False, so
`sliding_window` is None and every layer is full attention). YaRN (`_compute_yarn_parameters`):
`dim = head_dim`, `low = max(floor(d(beta_fast=32)), 0)`, `high = min(ceil(d(beta_slow=1)), dim-1)`
with `d(r) = dim * ln(orig / (2*pi*r)) / (2 * ln(theta))` (`truncate` defaults to True), ramp
`clamp((i - low) / (high - low), 0, 1)` for i = 0..dim/2-1, `inv_freq = inv/factor * ramp +
inv * (1 - ramp)`; the attention factor `0.1 * ln(factor) + 1` (no mscale given) multiplies cos
AND sin, so q.k picks it up squared; it is not a change of the 1/sqrt(head_dim) scale. Fixed (no
length dependence). Here theta 10000, orig 32, factor 4: low 0, high 2, so frequency 0 is kept,
1 is half/half, 2..7 are divided by 4; attention factor 1.1386.

Phi-3 (phi3, phi3_partial): fused `qkv_proj` (no bias), output rows [q: n_heads*hd | k: n_kv*hd |
v: n_kv*hd]; fused `gate_up_proj` [2*intermediate, hidden]: the first half of the output is the
gate, `down(up * silu(gate))`; no biases anywhere; RMSNorm eps 1e-5; untied lm_head. Partial
rotary (`partial_rotary_factor` in `rope_parameters`): only the first `int(head_dim * f)`
channels of each head rotate (rotate-half within them), the rest pass through; the factor lists
have `rotary_dim / 2` entries. longrope (`_compute_longrope_parameters`): `inv_freq = 1 /
(ext * theta^(2i/dim))` with `ext` the short or the long factors; the attention factor
`sqrt(1 + ln(factor) / ln(orig))` with `factor = max_position_embeddings / orig` (128/32 = 4:
1.1832) multiplies cos and sin for both sets. The top-level `original_max_position_embeddings`
(set here to 32) overrides the one in `rope_parameters` (`standardize_rope_params`). The switch
(`dynamic_rope_update` / `longrope_frequency_update`): on every rotary call,
`seq_len = max(position_ids) + 1` over the whole batch; long factors iff `seq_len > orig`, else
short (it switches back for a shorter call). Cached keys are not re-rotated by the rotary module,
but `Phi3ForCausalLM.prepare_inputs_for_generation` drops the cache when `input_ids.shape[1]`
(the padded length so far, prompt + generated) is >= orig + 1 while the cache holds <= orig
tokens: that step re-runs the whole sequence with no cache. With the longest prompt unpadded
(24 tokens, positions 0..23) both happen at the same step: step k (k >= 1) feeds position 23+k,
so step 9 (0-based; sequence length 33) re-runs all 33 tokens with the long factors, and later
steps use that (all-long) cache. Steps 0..8 are short. So every step equals a cache-free forward
of the sequence so far, which the script checks. expected.json records `longrope_switch_step`,
`longrope_recompute_step` and, per step, the rotary call's query length, `max(position_ids)+1`
and which factor set it used.

Mistral (mistral): Llama's layout (no biases, RMSNorm eps 1e-6, untied lm_head, default RoPE,
theta 10000) with `sliding_window=8` on every layer (`create_sliding_window_causal_mask`): key j
is visible to query i iff `i - 8 < j <= i` (at most 8 keys, itself included; `q - k < window`),
on indices of the padded sequence, AND-ed with the padding mask. During generation the cache
(`DynamicSlidingWindowLayer`) keeps the last `window - 1 = 7` keys and the mask is built with
the matching offset, so the same rule holds at every step.

BLOOM (bloom): no positional embedding; ALiBi. `word_embeddings_layernorm` right after the
embedding; pre-LN blocks, LayerNorm eps 1e-5, `apply_residual_connection_post_layernorm` False;
MLP `dense_h_to_4h` (4x) with BLOOM's tanh GELU `x*0.5*(1+tanh(0.79788456*x*(1+0.044715*x*x)))`,
`dense_4h_to_h`; all linears have biases. Fused `query_key_value` [3*hidden, hidden] is laid out
per head: the output is viewed as [n_heads, 3, head_dim], so for head h rows 48h..48h+16 are q,
+16..32 k, +32..48 v (bias likewise). Slopes (`_get_alibi_slopes`, 6 heads, not a power of two):
for p = 4 (the largest power of two <= 6) `2^(-8/p * k)`, k = 1..4 (1/4, 1/16, 1/64, 1/256), then
`2^(-4/p * k)` for odd k = 1, 3 (1/2, 1/8), in that order. `build_alibi_tensor(attention_mask)`:
a per-KEY bias `slope[h] * ((cumsum(mask) - 1) * mask)[b, j]` (so padded keys get 0 before the
mask hides them), the same for every query; by softmax's shift invariance it equals
`-slope * (query_pos - key_pos)` on visible keys. It is rebuilt from the full 2-D mask at every
step. Scores `alibi + (q.k) / sqrt(head_dim)` (baddbmm, beta 1), then the causal+padding mask,
softmax in float32. `lm_head` tied to `transformer.word_embeddings.weight`. BLOOM's forward takes
no `position_ids`, so generate makes none; no `position_ids` is stored.

BERT (bert): embeddings `word[ids] + token_type[tt] + position[arange(L)]` (the same absolute
positions for every row, padding or not), then LayerNorm (eps 1e-12); no `position_ids` passed.
Post-LN layers: `LN(x + dense(attn))`, `LN(h + dense2(gelu(dense1(h))))`, with exact (erf) GELU;
q/k/v/dense all with biases; scores scaled by head_dim^-0.5; bidirectional, padded keys hidden
(`create_bidirectional_mask`); padded query rows are computed normally. MLM head
(`cls.predictions`): `transform.dense` -> gelu (erf) -> `transform.LayerNorm` (eps 1e-12) ->
decoder with the weight tied to `bert.embeddings.word_embeddings.weight` plus the bias
`cls.predictions.bias` (`decoder.bias` is tied to it). The file holds
`cls.predictions.bias` but no `cls.predictions.decoder.*`. The pad row (id 0) of the word
embeddings is non-zero here (and the MLM bias random), so a port that zeroes it fails.

T5 (t5, t5_v1_1): `shared` embedding (encoder and decoder `embed_tokens` are tied to it; not in
the file); no absolute positions; T5LayerNorm = RMSNorm without bias or mean, eps 1e-6,
pre-norm, final norm in each stack. Attention is UNSCALED (`scaling = 1.0`), no biases. A
relative bias `relative_attention_bias` [num_buckets, n_heads] only in layer 0 of each stack
(`has_relative_attention_bias=bool(i == 0)`), computed there and reused by the later layers;
added to the scores with the mask after it. `relative_position = key_pos - query_pos`
(query positions offset by the cached length when decoding). Buckets
(`_relative_position_bucket`): the encoder (bidirectional) uses `nb = num_buckets / 2 = 4` per
direction on `n = |rel|` and adds 4 when `rel > 0`; the decoder (causal) uses `nb = 8` on
`n = max(-rel, 0)`; with `max_exact = nb / 2` (2 and 4) the bucket is `n` if `n < max_exact`,
else `max_exact + int(ln(n / max_exact) / ln(max_distance / max_exact) * (nb - max_exact))`
(truncated toward zero, in float32), capped at `nb - 1`. Here num_buckets 8 and max_distance 16:
the encoder (24 tokens) and the generated decoder (17 tokens) both reach distances >= 16.
Cross-attention has no position bias. The encoder mask hides padded keys; the decoder is causal.
FF: t5 `wo(relu(wi(x)))`; t5_v1_1
(`feed_forward_proj="gated-gelu"`, `dense_act_fn` "gelu_new", tanh approximation)
`wo(gelu_new(wi_0(x)) * wi_1(x))`. Output: `T5Config.__post_init__` (5.24) stores
`scale_decoder_outputs = (tie_word_embeddings passed is not False)` and then forces
`tie_word_embeddings = True`: t5 scales the decoder output by `d_model^-0.5` before `lm_head`
(tied to `shared`, not in the file); t5_v1_1 does not scale. A fresh T5ForConditionalGeneration
would tie lm_head even for t5_v1_1, so the script gives t5_v1_1 its own random `lm_head.weight`
(as T5 v1.1 checkpoints have); both keys are then in the file, and `from_pretrained` leaves them
untied (it only ties equal tensors). config.json says `"tie_word_embeddings": true` for both:
read `scale_decoder_outputs` and whether `lm_head.weight` is in the file, not that flag.
`decoder_start_token_id` 0 (pad), eos 1 (ignored: eos_token_id=None in generate).
"""

import json
import math
import pathlib
import shutil

import safetensors
import safetensors.torch
import torch
import transformers
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BloomConfig,
    BloomForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)

OUT = pathlib.Path(__file__).resolve().parent.parent / (
    "crates/burn-positional-models/tests/fixtures"
)
VOCAB = 256
PAD = 0
NEW_TOKENS = 16
MIN_MARGIN = 1e-3
MIN_DISTINCT = 5
MAX_SEED_TRIES = 50
MAX_FOLDER_BYTES = 1_500_000
PERTURB_STD = 0.2
T5_BIAS_GAIN = 4.0
T5_DECODER_SELF_O_GAIN = 6.0
T5_V1_1_HEAD_STD = 0.4


class Retry(Exception):
    """The seed gave a degenerate fixture (small margin, repeated tokens): try the next one."""


def versions():
    return {"transformers": transformers.__version__, "torch": torch.__version__}


# ---------------------------------------------------------------------------------------------
# Configs (the Python way; `save_pretrained` writes the JSON).

COMMON = dict(vocab_size=VOCAB, pad_token_id=PAD, attn_implementation="eager")


def gpt2_model():
    config = GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64, initializer_range=0.3, **COMMON)
    return GPT2LMHeadModel(config)


def llama_model():
    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, tie_word_embeddings=True, max_position_embeddings=128,
        rope_parameters=dict(
            rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
            high_freq_factor=4.0, original_max_position_embeddings=32,
        ),
        initializer_range=0.3, **COMMON,
    )
    return LlamaForCausalLM(config)


def qwen2_model():
    config = Qwen2Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=False, max_position_embeddings=128,
        rope_parameters=dict(
            rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=32,
        ),
        initializer_range=0.3, **COMMON,
    )
    return Qwen2ForCausalLM(config)


def phi3_factors(gen, n):
    """n distinct factors in [1, 4], rounded to 3 decimals (exact in the JSON)."""
    while True:
        values = [round(1.0 + 3.0 * float(x), 3) for x in torch.rand(n, generator=gen)]
        if len(set(values)) == n:
            return values


def phi3_model(partial):
    gen = torch.Generator().manual_seed(4242 + int(partial))
    factor = 0.5 if partial else 1.0
    n = int(16 * factor) // 2
    rope = dict(
        rope_type="longrope", rope_theta=10000.0, short_factor=phi3_factors(gen, n),
        long_factor=phi3_factors(gen, n),
    )
    if partial:
        rope["partial_rotary_factor"] = factor
    config = Phi3Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, original_max_position_embeddings=32,
        sliding_window=None, rope_parameters=rope, initializer_range=0.3, **COMMON,
    )
    assert config.rope_parameters["original_max_position_embeddings"] == 32
    return Phi3ForCausalLM(config)


def mistral_model():
    config = MistralConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=8, initializer_range=0.3, **COMMON,
    )
    return MistralForCausalLM(config)


def bloom_model():
    config = BloomConfig(hidden_size=96, n_layer=2, n_head=6, initializer_range=0.3, **COMMON)
    return BloomForCausalLM(config)


def bert_model():
    config = BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=64, type_vocab_size=2, initializer_range=0.3, **COMMON,
    )
    return BertForMaskedLM(config)


def t5_model(v1_1):
    config = T5Config(
        d_model=64, d_kv=16, d_ff=128, num_heads=4, num_layers=2, num_decoder_layers=2,
        relative_attention_num_buckets=8, relative_attention_max_distance=16,
        feed_forward_proj="gated-gelu" if v1_1 else "relu", tie_word_embeddings=not v1_1,
        eos_token_id=1, decoder_start_token_id=0, initializer_factor=1.5, **COMMON,
    )
    model = T5ForConditionalGeneration(config)
    with torch.no_grad():
        # Make positions matter (bias std 0.75 instead of 0.19) and keep greedy decoding from copying
        # its last token through the tied embedding (decoder self-attention output x6).
        for name, p in model.named_parameters():
            if "relative_attention_bias" in name:
                p.mul_(T5_BIAS_GAIN)
            if name.startswith("decoder.") and name.endswith("SelfAttention.o.weight"):
                p.mul_(T5_DECODER_SELF_O_GAIN)
    if v1_1:
        # transformers 5.24 ties lm_head to `shared` even with tie_word_embeddings=False; give it
        # its own weights, as T5 v1.1 checkpoints have.
        model.lm_head.weight = torch.nn.Parameter(torch.randn(VOCAB, 64) * T5_V1_1_HEAD_STD)
    return model


# ---------------------------------------------------------------------------------------------
# Helpers.


@torch.no_grad()
def perturb(model, seed):
    """Noise on every 1-D parameter (norm weights, biases) and random values in all-zero rows."""
    gen = torch.Generator().manual_seed(seed + 7919)
    for name, p in model.named_parameters():
        if p.dim() == 1:
            p.add_(torch.randn(p.shape, generator=gen) * PERTURB_STD)
        elif p.dim() == 2:
            zero_rows = (p == 0).all(dim=1)
            if zero_rows.any():
                std = p[~zero_rows].std()
                rows = torch.randn((int(zero_rows.sum()), p.shape[1]), generator=gen) * std
                p[zero_rows] = rows


def margins(logits):
    """Top-two gap of each row of [..., V]."""
    top = logits.topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def random_ids(gen, n):
    return torch.randint(3, VOCAB, (n,), generator=gen)


def left_padded(gen, lengths):
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, width - n:] = random_ids(gen, n)
        mask[row, width - n:] = 1
    return ids, mask


def right_padded(gen, lengths):
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = random_ids(gen, n)
        mask[row, :n] = 1
    return ids, mask


def generate_position_ids(mask):
    """What transformers 5.24's `_prepare_position_ids_for_generation` computes."""
    pos = mask.long().cumsum(-1) - 1
    return pos.masked_fill(mask == 0, 0)


def check_close(what, a, b, tol):
    diff = (a - b).abs().max().item()
    if not diff <= tol:
        raise AssertionError(f"{what}: max |diff| {diff:.3g} > {tol}")
    return diff


def check_generation(name, generated, step_logits, width):
    if generated.shape[1] != width + NEW_TOKENS or step_logits.shape[0] != NEW_TOKENS:
        raise AssertionError(f"{name}: generation stopped early {tuple(generated.shape)}")
    picked = step_logits.argmax(-1).T  # [2, 16]
    if not torch.equal(picked, generated[:, width:]):
        raise AssertionError(f"{name}: a generated token is not its step's argmax")
    m = margins(step_logits)
    if m.min().item() <= MIN_MARGIN:
        raise Retry(f"min margin {m.min().item():.3g}")
    for row in generated[:, width:]:
        if len(set(row.tolist())) < MIN_DISTINCT:
            raise Retry(f"repetitive generation {row.tolist()}")
    return m.min().item()


def write_folder(name, model, tensors, meta, int_arrays):
    folder = OUT / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    model.save_pretrained(folder)
    gen_config = folder / "generation_config.json"
    if gen_config.exists():
        gen_config.unlink()
    tensors = {k: v.detach().contiguous() for k, v in tensors.items()}
    for k, v in tensors.items():
        assert v.dtype in (torch.int64, torch.float32), (k, v.dtype)
    safetensors.torch.save_file(tensors, folder / "expected.safetensors")
    meta = dict(meta)
    for k in int_arrays:
        meta[k] = tensors[k].tolist()
    (folder / "expected.json").write_text(dump_json(meta))
    total = 0
    for path in sorted(folder.iterdir()):
        size = path.stat().st_size
        total += size
        print(f"  wrote {path.relative_to(OUT.parent.parent.parent.parent)} ({size} bytes)")
    print(f"  folder total {total} bytes")
    if total > MAX_FOLDER_BYTES:
        raise AssertionError(f"{name}: folder is {total} bytes")
    with safetensors.safe_open(folder / "model.safetensors", "pt") as f:
        keys = list(f.keys())
    return folder, keys


def dump_json(meta):
    """One key a line; 2-D integer arrays one row a line."""
    lines = []
    for k, v in meta.items():
        if isinstance(v, list) and v and isinstance(v[0], list):
            rows = ",\n".join("    " + json.dumps(r, separators=(", ", ": ")) for r in v)
            text = "[\n" + rows + "\n  ]"
        else:
            text = json.dumps(v, separators=(", ", ": "))
        lines.append(f"  {json.dumps(k)}: {text}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def reload(cls, folder):
    return cls.from_pretrained(folder, attn_implementation="eager").eval()


# ---------------------------------------------------------------------------------------------
# Family-specific facts recorded in expected.json.


def llama3_bands(config):
    rp = config.rope_parameters
    dim = config.head_dim
    inv = 1.0 / (rp["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    orig = rp["original_max_position_embeddings"]
    low_wl, high_wl = orig / rp["low_freq_factor"], orig / rp["high_freq_factor"]
    bands = []
    for f in inv.tolist():
        wl = 2 * math.pi / f
        bands.append("high (kept)" if wl < high_wl else "low (divided)" if wl > low_wl else "smoothed")
    return bands


def yarn_ramp(config):
    rp = config.rope_parameters
    dim = 16
    base, orig = rp["rope_theta"], rp["original_max_position_embeddings"]

    def d(r):
        return dim * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(d(32)), 0), min(math.ceil(d(1)), dim - 1)
    ramp = [min(max((i - low) / (high - low), 0.0), 1.0) for i in range(dim // 2)]
    return low, high, ramp


# ---------------------------------------------------------------------------------------------
# Decoder-only families.


DECODERS = [
    dict(name="gpt2", family="gpt2", build=gpt2_model, cls=GPT2LMHeadModel, seed=100, lengths=[20, 12]),
    dict(name="llama", family="llama", build=llama_model, cls=LlamaForCausalLM, seed=200, lengths=[20, 12]),
    dict(name="qwen2", family="qwen2", build=qwen2_model, cls=Qwen2ForCausalLM, seed=300, lengths=[20, 12]),
    dict(name="phi3", family="phi3", build=lambda: phi3_model(False), cls=Phi3ForCausalLM, seed=400,
         lengths=[24, 14]),
    dict(name="phi3_partial", family="phi3", build=lambda: phi3_model(True), cls=Phi3ForCausalLM, seed=450,
         lengths=[24, 14]),
    dict(name="mistral", family="mistral", build=mistral_model, cls=MistralForCausalLM, seed=500,
         lengths=[20, 12]),
    dict(name="bloom", family="bloom", build=bloom_model, cls=BloomForCausalLM, seed=600, lengths=[20, 12]),
]


def rotary_module(model):
    inner = getattr(model, "model", None)
    return getattr(inner, "rotary_emb", None) if inner is not None else None


def run_decoder(spec, seed):
    torch.manual_seed(seed)
    model = spec["build"]()
    assert model.config._attn_implementation == "eager"
    perturb(model, seed)
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    input_ids, attention_mask = left_padded(gen, spec["lengths"])
    width = input_ids.shape[1]
    takes_positions = spec["family"] != "bloom"
    position_ids = generate_position_ids(attention_mask) if takes_positions else None
    if takes_positions:
        # the same function generate calls
        ref = model._prepare_position_ids_for_generation(input_ids, {"attention_mask": attention_mask})
        assert torch.equal(ref, position_ids), (ref, position_ids)

    def forward(ids, mask):
        kwargs = dict(attention_mask=mask, use_cache=False)
        if takes_positions:
            kwargs["position_ids"] = generate_position_ids(mask)
        return model(ids, **kwargs).logits

    with torch.no_grad():
        logits = forward(input_ids, attention_mask)

    # Watch what the forward inside generate receives, and (Phi-3) which factors the rotary uses.
    seen_positions, rotary_calls = [], []
    hooks = [model.register_forward_pre_hook(
        lambda m, args, kwargs: seen_positions.append(kwargs.get("position_ids")), with_kwargs=True)]
    rotary = rotary_module(model)
    long_inv = None
    if spec["family"] == "phi3":
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
        long_inv, _ = ROPE_INIT_FUNCTIONS["longrope"](model.config, None, seq_len=33)
        short_inv = rotary.original_inv_freq.clone()
        assert not torch.allclose(long_inv, short_inv)

        def record(m, args, kwargs, out):
            pos = kwargs.get("position_ids", args[1] if len(args) > 1 else None)
            which = "long" if torch.equal(m.inv_freq, long_inv) else (
                "short" if torch.equal(m.inv_freq, short_inv) else "?")
            rotary_calls.append(
                dict(query_length=int(pos.shape[-1]), seq_len=int(pos.max()) + 1, factors=which))

        hooks.append(rotary.register_forward_hook(record, with_kwargs=True))
    with torch.no_grad():
        out = model.generate(
            input_ids, attention_mask=attention_mask, max_new_tokens=NEW_TOKENS, do_sample=False,
            num_beams=1, eos_token_id=None, pad_token_id=PAD, output_logits=True,
            return_dict_in_generate=True,
        )
    for h in hooks:
        h.remove()
    generated = out.sequences
    step_logits = torch.stack(out.logits).float()

    check_close("step 0 vs forward logits[:, -1]", step_logits[0], logits[:, -1], 1e-5)
    min_margin = check_generation(spec["name"], generated, step_logits, width)
    if takes_positions:
        assert torch.equal(seen_positions[0], position_ids), "generate used other position_ids"
    else:
        assert all(p is None for p in seen_positions)

    # Every step equals a cache-free forward over the sequence so far.
    worst = 0.0
    with torch.no_grad():
        for k in range(NEW_TOKENS):
            ids = generated[:, : width + k]
            mask = torch.cat([attention_mask, torch.ones((2, k), dtype=torch.long)], dim=1)
            worst = max(worst, check_close(f"step {k} vs cache-free forward", forward(ids, mask)[:, -1],
                                           step_logits[k], 1e-4))

    extra = {}
    notes = []
    if spec["family"] == "llama":
        extra["llama3_bands"] = llama3_bands(model.config)
        print(f"  llama3 bands per frequency: {extra['llama3_bands']}")
        bands = set(extra["llama3_bands"])
        assert bands == {"high (kept)", "low (divided)", "smoothed"}, bands
        notes.append("rope llama3 (theta 10000, factor 8, low 1, high 4, orig 32): frequency 0 kept, 1 "
                     "smoothed, 2..7 divided by 8; generation reaches position 35 (> 32)")
    if spec["family"] == "qwen2":
        low, high, ramp = yarn_ramp(model.config)
        factor = model.model.rotary_emb.attention_scaling
        extra["yarn"] = dict(low=low, high=high, ramp=ramp, attention_factor=factor)
        print(f"  yarn low {low} high {high} ramp {ramp} attention factor {factor}")
        notes.append("rope yarn (theta 10000, factor 4, orig 32, beta 32/1, truncate): ramp 0, 0.5, 1...; "
                     "attention factor 0.1*ln(4)+1 multiplies cos and sin; generation reaches position 35")
    if spec["family"] == "phi3":
        calls = rotary_calls
        assert len(calls) == NEW_TOKENS, len(calls)
        switch = next(k for k, c in enumerate(calls) if c["factors"] == "long")
        recompute = next(k for k, c in enumerate(calls) if k > 0 and c["query_length"] > 1)
        assert 0 < switch < NEW_TOKENS - 1, switch
        assert all(c["factors"] == "short" for c in calls[:switch])
        assert all(c["factors"] == "long" for c in calls[switch:])
        assert all(c["factors"] != "?" for c in calls)
        assert recompute == switch, (recompute, switch)
        print(f"  longrope: switch to long factors at step {switch}, cache dropped and the whole "
              f"sequence ({calls[switch]['query_length']} tokens) re-run at step {recompute}")
        extra["longrope_switch_step"] = switch
        extra["longrope_recompute_step"] = recompute
        extra["longrope_steps"] = calls
        extra["rope_parameters"] = model.config.rope_parameters
        extra["attention_factor"] = rotary.attention_scaling
        notes.append(
            f"longrope: seq_len = max(position_ids)+1 over the batch; long factors iff > 32. Step {switch} "
            f"(0-based) is the first with seq_len 33: Phi3ForCausalLM.prepare_inputs_for_generation drops the "
            f"cache (input_ids.shape[1] = 33 >= 33 and 32 cached) and re-runs all 33 tokens with the long "
            f"factors; later steps use that cache. Every step equals a cache-free forward of the sequence so "
            f"far.")
    if spec["family"] == "mistral":
        notes.append("sliding_window 8: key j visible to query i iff i-8 < j <= i (padded indices) and unpadded")
    if spec["family"] == "bloom":
        from transformers.models.bloom.modeling_bloom import _get_alibi_slopes
        extra["alibi_slopes"] = _get_alibi_slopes(6, "cpu").tolist()
        print(f"  alibi slopes {extra['alibi_slopes']}")
        notes.append("no position_ids: ALiBi per key from (cumsum(mask)-1)*mask, slopes for 6 heads "
                     "[1/4, 1/16, 1/64, 1/256, 1/2, 1/8]")
    notes.append("left padding with pad id 0; logits at padded positions are transformers' own (all keys "
                 "masked: uniform attention)")
    if takes_positions:
        notes.append("position_ids = attention_mask.cumsum(-1) - 1, padded slots 0 (transformers 5.24 generate)")
    notes.append(f"every step's logits equal a cache-free forward of the sequence so far (max diff {worst:.2e})")

    tensors = dict(input_ids=input_ids, attention_mask=attention_mask, logits=logits,
                   generated=generated, step_logits=step_logits)
    int_arrays = ["input_ids", "attention_mask", "generated"]
    if takes_positions:
        tensors["position_ids"] = position_ids
        int_arrays.insert(2, "position_ids")
    return model, tensors, int_arrays, min_margin, extra, notes, generated


def decoder_fixture(spec):
    for seed in range(spec["seed"], spec["seed"] + MAX_SEED_TRIES):
        try:
            model, tensors, int_arrays, min_margin, extra, notes, generated = run_decoder(spec, seed)
        except Retry as why:
            print(f"  seed {seed}: {why}; next seed")
            continue
        break
    else:
        raise AssertionError(f"{spec['name']}: no seed in {MAX_SEED_TRIES} tries")
    meta = dict(family=spec["family"], **versions(), seed=seed, prompt_lengths=spec["lengths"],
                max_new_tokens=NEW_TOKENS, min_margin=min_margin, notes="; ".join(notes), **extra)
    folder, keys = write_folder(spec["name"], model, tensors, meta, int_arrays)
    # The folder reloads to the same model (on the full generated sequence: for Phi-3 > 32 tokens).
    mask = torch.cat([tensors["attention_mask"], torch.ones((2, NEW_TOKENS), dtype=torch.long)], dim=1)
    kwargs = dict(attention_mask=mask, use_cache=False)
    if "position_ids" in tensors:
        kwargs["position_ids"] = generate_position_ids(mask)
    reloaded = reload(spec["cls"], folder)
    with torch.no_grad():
        check_close("reloaded", reloaded(generated, **kwargs).logits, model(generated, **kwargs).logits, 1e-6)
    print(f"  seed {seed}, min margin {min_margin:.4g}, {len(keys)} tensors in model.safetensors, "
          f"lm_head.weight stored: {'lm_head.weight' in keys}")


# ---------------------------------------------------------------------------------------------
# BERT.


def bert_fixture():
    lengths = [20, 12]
    for seed in range(700, 700 + MAX_SEED_TRIES):
        torch.manual_seed(seed)
        model = bert_model()
        perturb(model, seed)
        model.eval()
        emb = model.bert.embeddings.word_embeddings.weight
        assert emb[PAD].abs().min() > 0, "pad row still zero"
        assert model.cls.predictions.decoder.weight is emb
        assert model.cls.predictions.decoder.bias is model.cls.predictions.bias
        gen = torch.Generator().manual_seed(seed)
        input_ids, attention_mask = right_padded(gen, lengths)
        token_type_ids = torch.zeros_like(input_ids)
        for row, n in enumerate(lengths):
            token_type_ids[row, n // 2: n] = 1
        with torch.no_grad():
            logits = model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits
        m = margins(logits)[attention_mask.bool()]
        if m.min().item() <= MIN_MARGIN:
            print(f"  seed {seed}: min margin {m.min().item():.3g}; next seed")
            continue
        break
    else:
        raise AssertionError("bert: no seed")
    min_margin = m.min().item()
    notes = ("encoder only, no generation; RIGHT padding; token_type_ids two segments per row (0 then 1), "
             "padded slots 0; positions arange(L) for every row (no position_ids passed); the word-embedding "
             "pad row (id 0) is random, non-zero, and the MLM bias random; min_margin over unpadded positions")
    meta = dict(family="bert", **versions(), seed=seed, prompt_lengths=lengths, max_new_tokens=None,
                min_margin=min_margin, notes=notes)
    tensors = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                   logits=logits)
    folder, keys = write_folder("bert", model, tensors, meta, ["input_ids", "attention_mask", "token_type_ids"])
    assert "cls.predictions.bias" in keys, keys
    assert not any(k.startswith("cls.predictions.decoder") for k in keys), keys
    reloaded = reload(BertForMaskedLM, folder)
    with torch.no_grad():
        check_close("reloaded", reloaded(input_ids, attention_mask=attention_mask,
                                         token_type_ids=token_type_ids).logits, logits, 1e-6)
    print(f"  seed {seed}, min margin {min_margin:.4g}, {len(keys)} tensors in model.safetensors")


# ---------------------------------------------------------------------------------------------
# T5.


def run_t5(v1_1, seed):
    lengths = [24, 14]
    torch.manual_seed(seed)
    model = t5_model(v1_1)
    assert model.config._attn_implementation == "eager"
    assert model.config.scale_decoder_outputs == (not v1_1)
    assert (model.lm_head.weight is model.shared.weight) == (not v1_1)
    perturb(model, seed)
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    input_ids, attention_mask = right_padded(gen, lengths)
    decoder_input_ids = torch.cat(
        [torch.zeros((2, 1), dtype=torch.long), torch.randint(3, VOCAB, (2, 9), generator=gen)], dim=1)
    with torch.no_grad():
        logits = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        encoder_hidden = model.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        out = model.generate(
            input_ids, attention_mask=attention_mask, max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1,
            eos_token_id=None, pad_token_id=PAD, decoder_start_token_id=0, output_logits=True,
            return_dict_in_generate=True,
        )
    generated = out.sequences
    step_logits = torch.stack(out.logits).float()
    check_close("step 0 vs teacher-forced logits[:, 0]", step_logits[0], logits[:, 0], 1e-5)
    assert torch.equal(generated[:, 0], torch.zeros(2, dtype=torch.long))
    min_margin = check_generation("t5", generated, step_logits, 1)
    worst = 0.0
    with torch.no_grad():
        for k in range(NEW_TOKENS):
            tf = model(input_ids, attention_mask=attention_mask, decoder_input_ids=generated[:, : k + 1],
                       use_cache=False).logits[:, -1]
            worst = max(worst, check_close(f"step {k} vs teacher-forced", tf, step_logits[k], 1e-4))
    tensors = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                   logits=logits, encoder_hidden=encoder_hidden, generated=generated, step_logits=step_logits)
    return model, tensors, min_margin, worst, lengths


def t5_fixture(v1_1):
    name = "t5_v1_1" if v1_1 else "t5"
    base = 900 if v1_1 else 800
    for seed in range(base, base + MAX_SEED_TRIES):
        try:
            model, tensors, min_margin, worst, lengths = run_t5(v1_1, seed)
        except Retry as why:
            print(f"  seed {seed}: {why}; next seed")
            continue
        break
    else:
        raise AssertionError(f"{name}: no seed")
    if v1_1:
        head = ("feed_forward_proj gated-gelu (gelu_new); separate random lm_head.weight, decoder output NOT "
                "scaled (scale_decoder_outputs false; config.json still says tie_word_embeddings true)")
    else:
        head = "feed_forward_proj relu; lm_head tied to shared, decoder output scaled by d_model^-0.5"
    notes = (f"{head}; encoder input RIGHT padded; relative buckets 8, max_distance 16 (encoder distances up to "
             f"23, decoder up to 16); unscaled attention; decoder_input_ids start with 0 (decoder_start); "
             f"generated starts with 0 then 16 greedy tokens (eos ignored); every step equals a teacher-forced "
             f"forward over the tokens so far (max diff {worst:.2e})")
    meta = dict(family="t5", **versions(), seed=seed, prompt_lengths=lengths, max_new_tokens=NEW_TOKENS,
                min_margin=min_margin, notes=notes,
                scale_decoder_outputs=model.config.scale_decoder_outputs)
    folder, keys = write_folder(name, model, tensors, meta,
                                ["input_ids", "attention_mask", "decoder_input_ids", "generated"])
    assert ("lm_head.weight" in keys) == v1_1, keys
    reloaded = reload(T5ForConditionalGeneration, folder)
    with torch.no_grad():
        check_close("reloaded", reloaded(tensors["input_ids"], attention_mask=tensors["attention_mask"],
                                         decoder_input_ids=tensors["generated"]).logits,
                    model(tensors["input_ids"], attention_mask=tensors["attention_mask"],
                          decoder_input_ids=tensors["generated"]).logits, 1e-6)
    print(f"  seed {seed}, min margin {min_margin:.4g}, {len(keys)} tensors in model.safetensors, "
          f"lm_head.weight stored: {'lm_head.weight' in keys}")


def main():
    torch.set_num_threads(1)  # the same reduction order on every run
    transformers.logging.set_verbosity_error()
    OUT.mkdir(parents=True, exist_ok=True)
    for spec in DECODERS:
        print(spec["name"])
        decoder_fixture(spec)
    print("bert")
    bert_fixture()
    for v1_1 in (False, True):
        print("t5_v1_1" if v1_1 else "t5")
        t5_fixture(v1_1)


if __name__ == "__main__":
    main()
