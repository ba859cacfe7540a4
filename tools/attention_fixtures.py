#!/usr/bin/env python3
"""Reference fixtures for `burn_positional::attend`, from PyTorch's own `flex_attention`.

Run by hand (never by CI, which reads the committed JSON), from the repository root:

    pip install torch==2.6.0 numpy    # torch: the version the committed files were written with
    python3 tools/attention_fixtures.py

Written with torch 2.6.0 (+cu124 wheel, run on the CPU). Writes one file per case to
crates/burn-positional/tests/fixtures/torch/attention/<case>.json, read by
crates/burn-positional/tests/behaviour/attention_fixtures.rs.

What is computed (exactly what `attend` computes):

- q `[batch, n_heads, seq_q, d_head]`, k and v `[batch, n_kv_heads, seq_k, d_head]`; query
  head h reads kv head `h // (n_heads // n_kv_heads)` (flex_attention's `enable_gqa=True`,
  Hugging Face's `repeat_kv`).
- positions: sequential (query i at `offset + i`, key j at j) or explicit per-token
  `q_pos [batch, seq_q]`, `k_pos [batch, seq_k]`; `rel = key_pos - query_pos`.
- scores `scale * q.k` (scale default `1/sqrt(d_head)`), then with a softcap c
  `c * tanh(s / c)`, then `+ bias(h, rel)`: ALiBi `-slope[h] * |rel|`, or "by distance"
  `table[h, clamp(rel, -reach, reach) + reach]`.
- hidden where: causal and rel > 0; a window {before, after} and (rel < -before or
  rel > after); key_padding[b, j]; segments given and q_seg[b, i] != k_seg[b, j]. A query
  that sees no key gives 0 and no gradient.
- gradients of `sum(out * w)` (w fixed, random, the shape of out) on q, k, v and the bias
  parameter (ALiBi's slopes, the by-distance table).

Every case is computed three ways, all in float64 from inputs first rounded to float32 (so the
Rust side gets exactly the inputs torch used):

1. `torch.nn.attention.flex_attention.flex_attention` with a `score_mod` (softcap and bias) and
   a `block_mask` from `create_block_mask` (the masks as a `mask_mod`), run eagerly on the CPU
   (torch 2.6 runs its reference path there: no `torch.compile`). This is what is stored.
2. The same attention spelled out in plain float64 tensor ops (below, `spelled_out`).
3. Where it can express the case (not with a softcap, which acts on `q.k` before the bias),
   `torch.nn.functional.scaled_dot_product_attention` with a dense float bias whose hidden
   entries are -inf (a row that sees no key is unmasked, then its output zeroed: sdpa itself
   gives NaN there).

The script asserts 1 and 2 agree to 1e-6 (output and every gradient) and 3 too where it runs,
and writes which ones ran into each file's "source" and "checks" fields. Should flex_attention
not run on the CPU of a later torch, the stored values come from sdpa instead (and the
"source" field says so); a softcap case then fails, as sdpa cannot express it.

Values are stored as float32 (rounded from float64), each in its shortest round-trip form,
tensors as {"shape": [...], "data": [flat, row-major]}.
"""

import json
import math
import pathlib

import torch
import torch.nn.functional as F

OUT_DIR = pathlib.Path(__file__).resolve().parent.parent / (
    "crates/burn-positional/tests/fixtures/torch/attention"
)
TOL = 1e-6
DTYPE = torch.float64


def alibi_slopes(n_heads):
    """The standard ALiBi slopes, 2^(-8/n * (h+1)) (exact in float32)."""
    return [2.0 ** (-8.0 / n_heads * (h + 1)) for h in range(n_heads)]


# Each case: the inputs' sizes, the options, and the masks as Python lists.
CASES = [
    dict(
        case="alibi_causal_gqa",
        checks="ALiBi (standard slopes), causal, GQA (4 query heads over 2 kv heads)",
        seed=101, batch=2, n_heads=4, n_kv_heads=2, seq_q=7, seq_k=7, d_head=8,
        causal=True, bias="alibi",
    ),
    dict(
        case="t5_window_bidirectional",
        checks="a bias per distance (table, reach 3), a window 3 before and 2 after, not "
        "causal, n_kv_heads = n_heads, the second sequence's first 2 keys padded",
        seed=102, batch=2, n_heads=4, n_kv_heads=4, seq_q=9, seq_k=9, d_head=8,
        causal=False, window=(3, 2), bias="by_distance", reach=3,
        key_padding=[[], [0, 1]],
    ),
    dict(
        case="packed_segments_mqa",
        checks="packed sequences: segment ids, explicit positions restarting at 0 in each "
        "segment, causal by those positions, one kv head (MQA), no bias",
        seed=103, batch=2, n_heads=4, n_kv_heads=1, seq_q=9, seq_k=9, d_head=8,
        causal=True, bias="none",
        segments=[[0, 0, 0, 1, 1, 1, 1, 2, 2], [0, 0, 0, 0, 0, 1, 1, 1, 1]],
        positions="restart",
    ),
    dict(
        case="packed_segments_mqa_alibi",
        checks="packed_segments_mqa with ALiBi measured from the explicit positions",
        seed=104, batch=2, n_heads=4, n_kv_heads=1, seq_q=9, seq_k=9, d_head=8,
        causal=True, bias="alibi",
        segments=[[0, 0, 0, 1, 1, 1, 1, 2, 2], [0, 0, 0, 0, 0, 1, 1, 1, 1]],
        positions="restart",
    ),
    dict(
        case="softcap_scale_offset",
        checks="softcap 5 then a bias per distance (reach 4, clamped), scale 0.3, 3 queries "
        "at offset 6 over 9 keys, causal, key padding, GQA (4 over 2)",
        seed=105, batch=2, n_heads=4, n_kv_heads=2, seq_q=3, seq_k=9, d_head=8,
        causal=True, scale=0.3, softcap=5.0, offset=6, bias="by_distance", reach=4,
        key_padding=[[4], [0, 1]],
    ),
    dict(
        case="sliding_window_hf",
        checks="Hugging Face's sliding window 4: causal, window 3 before and 0 after, no "
        "bias, GQA (4 over 2)",
        seed=106, batch=2, n_heads=4, n_kv_heads=2, seq_q=11, seq_k=11, d_head=8,
        causal=True, window=(3, 0), bias="none",
    ),
    dict(
        case="no_visible_key",
        checks="rows that see no key (segments whose keys are all padded): output 0, no "
        "gradient, no NaN; causal, a bias per distance (reach 2), GQA (4 over 2)",
        seed=107, batch=2, n_heads=4, n_kv_heads=2, seq_q=8, seq_k=8, d_head=8,
        causal=True, bias="by_distance", reach=2,
        segments=[[0, 0, 0, 1, 1, 1, 2, 2], [0, 0, 0, 0, 1, 1, 1, 1]],
        key_padding=[[6, 7], [0, 1, 2, 3]],
        expect_empty_rows=True,
    ),
]


def f32(t):
    """Rounded to float32, kept in float64: what both sides start from."""
    return t.to(torch.float32).to(DTYPE)


def setup(c):
    """The case's inputs, as float64 tensors holding float32 values."""
    torch.manual_seed(c["seed"])
    b, h, hkv, sq, sk, d = (c[k] for k in ("batch", "n_heads", "n_kv_heads", "seq_q",
                                            "seq_k", "d_head"))
    t = dict(
        q=f32(torch.randn(b, h, sq, d, dtype=DTYPE)),
        k=f32(torch.randn(b, hkv, sk, d, dtype=DTYPE)),
        v=f32(torch.randn(b, hkv, sk, d, dtype=DTYPE)),
        w=f32(torch.randn(b, h, sq, d, dtype=DTYPE)),
    )
    kind = c.get("bias", "none")
    if kind == "alibi":
        t["bias"] = torch.tensor(alibi_slopes(h), dtype=DTYPE)
    elif kind == "by_distance":
        t["bias"] = f32(torch.randn(h, 2 * c["reach"] + 1, dtype=DTYPE))
    else:
        t["bias"] = None
    if c.get("positions") == "restart":
        assert sq == sk
        seg = torch.tensor(c["segments"])
        pos = torch.zeros_like(seg)
        for i in range(1, sk):
            pos[:, i] = torch.where(seg[:, i] == seg[:, i - 1], pos[:, i - 1] + 1, 0)
        t["q_pos"], t["k_pos"], t["explicit_positions"] = pos.clone(), pos.clone(), True
    else:
        off = c.get("offset", 0)
        t["q_pos"] = torch.arange(off, off + sq).expand(b, sq).clone()
        t["k_pos"] = torch.arange(sk).expand(b, sk).clone()
        t["explicit_positions"] = False
    pad = torch.zeros(b, sk, dtype=torch.bool)
    for bi, js in enumerate(c.get("key_padding") or []):
        pad[bi, js] = True
    t["key_padding"] = pad if c.get("key_padding") else None
    if c.get("segments"):
        seg = torch.tensor(c["segments"])
        t["q_seg"], t["k_seg"] = seg.clone(), seg.clone()
    else:
        t["q_seg"] = t["k_seg"] = None
    return t


def scale_of(c):
    return c.get("scale") or 1.0 / math.sqrt(c["d_head"])


def visible_dense(c, t):
    """[batch, 1, seq_q, seq_k] bool: which key each query sees."""
    rel = t["k_pos"][:, None, :] - t["q_pos"][:, :, None]
    vis = torch.ones_like(rel, dtype=torch.bool)
    if c.get("causal"):
        vis &= rel <= 0
    if c.get("window"):
        before, after = c["window"]
        vis &= (rel >= -before) & (rel <= after)
    if t["key_padding"] is not None:
        vis &= ~t["key_padding"][:, None, :]
    if t["q_seg"] is not None:
        vis &= t["q_seg"][:, :, None] == t["k_seg"][:, None, :]
    return vis[:, None]


def bias_dense(c, t, bias):
    """[batch, n_heads, seq_q, seq_k] float64 bias (zeros without one)."""
    rel = t["k_pos"][:, None, :] - t["q_pos"][:, :, None]  # [b, sq, sk]
    kind = c.get("bias", "none")
    if kind == "alibi":
        return -bias[None, :, None, None] * rel.abs()[:, None].to(DTYPE)
    if kind == "by_distance":
        r = c["reach"]
        return bias[:, rel.clamp(-r, r) + r].permute(1, 0, 2, 3)
    b, sq, sk = rel.shape
    return torch.zeros(b, c["n_heads"], sq, sk, dtype=DTYPE)


def leaves(t):
    names = ["q", "k", "v"] + (["bias"] if t["bias"] is not None else [])
    return {n: t[n].clone().requires_grad_(True) for n in names}


def with_grads(c, t, forward):
    """out and the gradients of sum(out * w) on q, k, v (and the bias parameter)."""
    x = leaves(t)
    out = forward(x)
    grads = torch.autograd.grad((out * t["w"]).sum(), list(x.values()))
    res = {"out": out.detach()}
    for name, g in zip(x, grads):
        res["d" + name] = g
    return res


def spelled_out(c, t):
    """Plain float64 attention, every step written out."""
    group = c["n_heads"] // c["n_kv_heads"]
    vis = visible_dense(c, t)
    sees_any = vis.any(dim=-1, keepdim=True)

    def forward(x):
        k = x["k"].repeat_interleave(group, dim=1)
        v = x["v"].repeat_interleave(group, dim=1)
        s = scale_of(c) * x["q"] @ k.transpose(-1, -2)
        if c.get("softcap"):
            cap = c["softcap"]
            s = cap * torch.tanh(s / cap)
        s = s + bias_dense(c, t, x.get("bias"))
        s = s.masked_fill(~vis, -math.inf)
        # A row that sees no key: softmax over zeros (finite), then every weight times 0.
        s = torch.where(sees_any, s, torch.zeros_like(s))
        p = torch.softmax(s, dim=-1) * vis.to(DTYPE)
        return p @ v

    return with_grads(c, t, forward)


def flex(c, t):
    """torch's flex_attention: softcap and bias in score_mod, the masks in a block mask."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q_pos, k_pos = t["q_pos"], t["k_pos"]
    pad, q_seg, k_seg = t["key_padding"], t["q_seg"], t["k_seg"]
    kind, reach, cap = c.get("bias", "none"), c.get("reach"), c.get("softcap")

    def mask_mod(b, h, q_idx, kv_idx):
        rel = k_pos[b, kv_idx] - q_pos[b, q_idx]
        visible = kv_idx >= 0
        if c.get("causal"):
            visible = visible & (rel <= 0)
        if c.get("window"):
            before, after = c["window"]
            visible = visible & (rel >= -before) & (rel <= after)
        if pad is not None:
            visible = visible & ~pad[b, kv_idx]
        if q_seg is not None:
            visible = visible & (q_seg[b, q_idx] == k_seg[b, kv_idx])
        return visible

    block_mask = create_block_mask(mask_mod, c["batch"], None, c["seq_q"], c["seq_k"],
                                   device="cpu")

    def forward(x):
        bias = x.get("bias")

        def score_mod(score, b, h, q_idx, kv_idx):
            if cap:
                score = cap * torch.tanh(score / cap)
            rel = k_pos[b, kv_idx] - q_pos[b, q_idx]
            if kind == "alibi":
                score = score - bias[h] * rel.abs()
            elif kind == "by_distance":
                score = score + bias[h, rel.clamp(-reach, reach) + reach]
            return score

        return flex_attention(x["q"], x["k"], x["v"], score_mod=score_mod,
                              block_mask=block_mask, scale=scale_of(c),
                              enable_gqa=c["n_kv_heads"] != c["n_heads"])

    return with_grads(c, t, forward)


def sdpa(c, t):
    """scaled_dot_product_attention with a dense float bias (-inf where hidden)."""
    if c.get("softcap"):
        return None  # sdpa adds its mask after q.k; a softcap before the bias is beyond it
    vis = visible_dense(c, t)
    sees_any = vis.any(dim=-1, keepdim=True)
    # Rows that see nothing are unmasked (sdpa would give NaN) and zeroed after.
    hidden = ~vis & sees_any

    def forward(x):
        mask = bias_dense(c, t, x.get("bias")).masked_fill(hidden, -math.inf)
        out = F.scaled_dot_product_attention(x["q"], x["k"], x["v"], attn_mask=mask,
                                             scale=scale_of(c),
                                             enable_gqa=c["n_kv_heads"] != c["n_heads"])
        return torch.where(sees_any, out, torch.zeros_like(out))

    return with_grads(c, t, forward)


def max_diff(a, b):
    assert a.keys() == b.keys(), (a.keys(), b.keys())
    return max((a[n] - b[n]).abs().max().item() for n in a)


def tensor(x):
    """{"shape", "data"}: float32 values in their shortest round-trip decimal form."""
    x = x.detach()
    if x.dtype == torch.bool:
        data = [bool(v) for v in x.flatten().tolist()]
    elif not x.is_floating_point():
        data = [int(v) for v in x.flatten().tolist()]
    else:
        import numpy as np

        data = [float(str(np.float32(v))) for v in x.to(torch.float32).flatten().tolist()]
    return {"shape": list(x.shape), "data": data}


def run(c):
    t = setup(c)
    reference = spelled_out(c, t)
    checks = ["float64 spelled out"]
    try:
        stored = flex(c, t)
        source = "flex_attention (eager, CPU)"
        diff = max_diff(stored, reference)
        assert diff < TOL, f"{c['case']}: flex_attention and the spelled-out path differ by {diff}"
        checks.append(f"flex_attention vs spelled out: max |diff| {diff:.1e}")
    except Exception as err:  # flex_attention did not run here: sdpa stores
        if isinstance(err, AssertionError):
            raise
        print(f"{c['case']}: flex_attention failed ({err!r}), falling back to sdpa")
        stored, source = None, None
    by_sdpa = sdpa(c, t)
    if by_sdpa is not None:
        diff = max_diff(by_sdpa, reference)
        assert diff < TOL, f"{c['case']}: sdpa and the spelled-out path differ by {diff}"
        checks.append(f"sdpa vs spelled out: max |diff| {diff:.1e}")
    if stored is None:
        assert by_sdpa is not None, f"{c['case']}: neither flex_attention nor sdpa can run it"
        stored, source = by_sdpa, "scaled_dot_product_attention (CPU)"

    if c.get("expect_empty_rows"):
        sees_any = visible_dense(c, t).any(-1)  # [b, 1, sq]
        empty = ~sees_any.expand(-1, c["n_heads"], -1)
        assert empty.any(), "the case should have rows that see no key"
        assert (stored["out"][empty] == 0).all() and (stored["dq"][empty] == 0).all()
        assert not any(torch.isnan(g).any() for g in stored.values())

    kind = c.get("bias", "none")
    bias = {"kind": kind}
    if kind == "alibi":
        bias["slopes"] = tensor(t["bias"])
    elif kind == "by_distance":
        bias["table"] = tensor(t["bias"])
        bias["reach"] = c["reach"]
    window = c.get("window")
    fixture = {
        "case": c["case"],
        "checks": c["checks"],
        "source": f"torch {torch.__version__}, {source}, float64 (inputs float32-exact, "
        "results rounded to float32)",
        "cross_checks": checks,
        "n_heads": c["n_heads"],
        "n_kv_heads": c["n_kv_heads"],
        "scale": c.get("scale"),
        "softcap": c.get("softcap"),
        "causal": bool(c.get("causal")),
        "window": None if window is None else {"before": window[0], "after": window[1]},
        "offset": c.get("offset", 0),
        "bias": bias,
        "q": tensor(t["q"]),
        "k": tensor(t["k"]),
        "v": tensor(t["v"]),
        "w": tensor(t["w"]),
        "out": tensor(stored["out"]),
        "dq": tensor(stored["dq"]),
        "dk": tensor(stored["dk"]),
        "dv": tensor(stored["dv"]),
        "dbias": tensor(stored["dbias"]) if "dbias" in stored else None,
        "key_padding": None if t["key_padding"] is None else tensor(t["key_padding"]),
        "segments": None if t["q_seg"] is None else {
            "query": tensor(t["q_seg"]), "key": tensor(t["k_seg"])},
        "positions": None if not t["explicit_positions"] else {
            "query": tensor(t["q_pos"]), "key": tensor(t["k_pos"])},
    }
    # One key a line, each value compact: small files, readable diffs.
    text = "{\n" + ",\n".join(
        f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in fixture.items()
    ) + "\n}\n"
    path = OUT_DIR / f"{c['case']}.json"
    path.write_text(text)
    print(f"wrote {path.relative_to(OUT_DIR.parents[5])} ({len(text)} bytes): "
          f"{source}; {'; '.join(checks[1:])}")


def main():
    torch.set_default_dtype(torch.float64)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for c in CASES:
        run(c)


if __name__ == "__main__":
    main()
