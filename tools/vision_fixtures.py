#!/usr/bin/env python3
"""Vision fixtures: what PyTorch and Hugging Face transformers compute for image position encodings
(resampling, 2-D sin-cos tables, learned-table interpolation, multimodal and 2-D rotary) and two
tiny whole vision models (ViT, DINOv2).

Run by hand (never by CI, which reads the committed files; CI never needs Python), from the
repository root:

    pip install torch==2.6.0 transformers==5.24.0 safetensors==0.8.0
    python3 tools/vision_fixtures.py

Written with torch 2.6.0 (+cu124 wheel, run on the CPU, `torch.set_num_threads(1)`), transformers
5.24.0 and safetensors 0.8.0. Every random tensor comes from a `torch.Generator` seeded per part
(A 1000, C 2000, D 3000, E 4000, F: vit 5000, dinov2 6000; a model's init from
`torch.manual_seed(seed)`), so a rerun with those versions rewrites byte-identical files (the
script was run twice and the sha256 of every file compared). No network: every model is built
from its config class with random weights, never downloaded. Every expected value is computed by
transformers' own functions and modules (or `torch.nn.functional.interpolate` itself for part A);
nothing here re-implements a formula. Tensors are stored with `safetensors.torch.save_file`:
floats float32, ids int64, contiguous. The JSON files hold the metadata, the small integer arrays
again for reading, and the source facts a port must follow (quoted from transformers 5.24).
Size check: the script fails if `crates/burn-positional/tests/fixtures/vision/` is over 1.5 MB or
a model folder is over 1.5 MB.

Writes, under crates/burn-positional/tests/fixtures/vision/:

A. `interpolate.safetensors` + `interpolate.json`: `F.interpolate` on a seeded random
   `[1, 3, h0, w0]` input, `case_<i>_input` and `case_<i>_output`. Bicubic cases
   (4,4)->size(6,6), (4,4)->size(3,5), (4,4)->size(2,2), (5,3)->size(8,4), (4,4)->size(4,4),
   (1,1)->size(3,2), (2,3)->size(1,1), (4,4)->scale(1.5,1.5), (4,4)->scale(0.75,1.25),
   (6,5)->scale(0.5,2.0) and one extra (5,3)->scale(1.5,0.7), whose scale differs from
   output/input (7/5, 2/3): PyTorch maps coordinates with 1/scale when `scale_factor` is given
   (`recompute_scale_factor=None`), so that case differs from the same call with `size`. Each with
   align_corners in {False, True} x antialias in {False, True}. Then bilinear (4,4)->(6,6),
   (6,6)->(4,3), (7,5)->(3,2) with the same four combinations. The JSON lists per case: mode, h0,
   w0, size or scale_factor (+ output_size), align_corners, antialias, and
   `same_as_size_call` (for scale cases: whether the output equals `size=output_size`).
   Facts (PyTorch 2.6): bicubic without antialias is `upsample_bicubic2d`, a = -0.75, source
   index clamped to the border; with antialias it is `_upsample_bicubic2d_aa` (PIL's separable
   filter), a = -0.5, support widened by the scale when downsampling, taps outside the image
   dropped and the weights renormalised, and it differs from the plain kernel even when
   upsampling. align_corners=True maps `src = dst * (in - 1) / (out - 1)` (0 when out == 1) and
   ignores `scale_factor`; False maps `src = (dst + 0.5) * s - 0.5` with `s = 1/scale` or
   `in/out`.

B. `sincos_2d.safetensors` + `sincos_2d.json`: ViT-MAE's fixed 2-D sin-cos table. transformers
   5.24 has no `get_2d_sincos_pos_embed` any more: modeling_vit_mae.py has
   `build_2d_sinusoidal_position_embedding(height, width, embed_dim=256, temperature=10000.0,
   cls_token=False, device=None, dtype=torch.float32)` (non-square grids supported), computed in
   float64, laid out `[sin_h | cos_h | sin_w | cos_w]` (D/4 each, `omega = 1 / 10000^(i / (D/4))`,
   patches row-major, H outer), and `ViTMAEEmbeddings.initialize_weights` then swaps the two halves
   (`[sin_w | cos_w | sin_h | cos_h]`, the layout of the old numpy `get_2d_sincos_pos_embed` and of
   the checkpoints). Stored: the function's raw output and the checkpoint-layout table from
   `ViTMAEEmbeddings.initialize_weights()`, for (embed 16, grid 4, cls) and (embed 8, grid 3, no
   cls), and one non-square raw case (embed 16, 3 x 5, cls). (A `ViTMAEModel` built from a config
   in 5.24 keeps an all-zero table: `post_init` initialises the children first, the patch
   projection is flagged `_is_hf_initialized`, and `initialize_weights` returns at once; the
   script asserts this, so the tables come from calling `initialize_weights` on a fresh
   `ViTMAEEmbeddings`.)

C. `pos_interpolation.safetensors` + `pos_interpolation.json`: `interpolate_pos_encoding` of ViT,
   DeiT, DINOv2, CLIP vision and SigLIP vision, each built from a tiny config (hidden 8, patch 4,
   image 16: a trained 4 x 4 grid) with a seeded `randn` (std 1) position table. Stored per family
   `<family>_table` (exactly the tensor the checkpoint holds; its key in the JSON) and
   `<family>_<H>x<W>` = `embeddings.interpolate_pos_encoding(embeddings, H, W)` for (16,16) [the
   early return], (24,24), (16,28), (12,20), (8,8), (28,16), (17,23) [not divisible by the patch]
   and (8,32) [16 patches, as trained, but not square]. `embeddings` is the tensor the family's own
   forward passes (captured from a real `embeddings(pixel_values, ...)` call on a seeded random
   image, so its length is patches + class/distillation rows), and the forward's output is checked
   to equal `embeddings + output`. The JSON records per family the prefix rows, the early-return
   condition as written, the interpolate call (bicubic, `size=(H // p, W // p)`,
   align_corners=False, no antialias), the dtype handling (only DINOv2 casts to float32) and the
   key `save_pretrained` writes (found by value; for CLIP and SigLIP also the key inside
   CLIPModel / SiglipModel, `vision_model.embeddings.position_embedding.weight`, which the 5.24
   vision-only models strip on load and do not write).

D. `mrope.safetensors` + `mrope.json`: multimodal RoPE. Qwen2-VL (tiny Qwen2VLConfig: text hidden
   64, 4 heads, 2 kv heads, head_dim 16, rope_theta 10000, mrope_section [2, 3, 3]; vision
   spatial_merge_size 2), a left-padded batch of two prompts (row 0: text, an image of grid
   [1, 4, 6] (6 tokens), text, a video of grid [2, 4, 4] (8 tokens), text; row 1: padding, text, an
   image of grid [1, 2, 4] (2 tokens), text), the default token ids. Stored: `input_ids`,
   `attention_mask`, `mm_token_type_ids`, `image_grid_thw`, `video_grid_thw`, `position_ids`
   [3, b, s] and `rope_deltas` [b, 1] from `Qwen2VLModel.get_rope_index`, `cos`/`sin` [b, s, 16]
   from the model's `Qwen2VLRotaryEmbedding`, `inv_freq`, random `q` [b, 4, s, 16] and `k`
   [b, 2, s, 16] and `q_rot`/`k_rot` from `apply_rotary_pos_emb`. The same with prefix `qwen2_5_`
   for Qwen2.5-VL (tokens_per_second 2, second_per_grid_ts [1.25]: time interval 2.5) and with
   prefix `qwen3_` for Qwen3-VL's interleaved M-RoPE (mrope_section [4, 2, 2], each video frame
   its own vision_start ... vision_end block after two timestamp text tokens, as
   Qwen3VLProcessor writes it). Each is checked against the position ids and cos/sin the model's
   own forward computes.

E. `vision_rope.safetensors` + `vision_rope.json`: 2-D rotary of vision encoders. Qwen2-VL's vision
   tower (embed 32, 2 heads, head_dim 16, merge 2) for grid_thw [[1, 4, 6], [2, 2, 4]]: the
   (h, w) position of each patch in the tower's merged order (`vision_utils.
   get_vision_position_ids`), cos/sin from `Qwen2VLVisionRotaryEmbedding`, and
   `apply_rotary_pos_emb_vision` on random q, k [seq, heads, head_dim]. Pixtral (hidden 32, 2 heads,
   head_dim 16, patch 4): a 3 x 5-patch image (and a second call with two images, 3 x 5 and
   2 x 3), the (h, w) positions `PixtralVisionModel.forward` builds, cos/sin from
   `PixtralVisionRotaryEmbedding`, and `apply_rotary_pos_emb(..., unsqueeze_dim=0)` on random q, k
   [1, heads, seq, head_dim]. Both captured from a real forward of the tower. Pixtral again with a
   head of 18 (hidden 36, prefix `pixtral_odd_`, its own generator seeded 4100): 9 pairs, rows
   taking 5 frequencies and columns 4.

F. Whole models, like tools/model_fixtures.py, in crates/burn-positional-models/tests/fixtures/vit/
   and .../dinov2/: a tiny `ViTForImageClassification` and `Dinov2ForImageClassification`
   (hidden 32, 2 layers, 2 heads, MLP 64 (DINOv2: mlp_ratio 2), patch 4, image 16, 3 channels,
   5 labels, qkv_bias, eager attention; DINOv2 layerscale 1.0, no SwiGLU), `initializer_range`
   0.3, then Gaussian noise (std 0.2) on every 1-D parameter (norm weights, biases, layer scales)
   and on cls_token (and DINOv2's mask_token). `config.json` and `model.safetensors` are what
   `save_pretrained` writes (float32; transformers 5.24 writes the hub key names, e.g.
   `vit.encoder.layer.0.attention.attention.query.weight`, though the module in memory is
   `vit.layers.0.attention.q_proj`). `expected.safetensors`: for (16,16), (24,24), (16,28)
   `pixel_values_<H>x<W>` [2, 3, H, W], `logits_<H>x<W>` [2, 5] and `hidden_<H>x<W>`
   [2, seq, 32] (the base model's `last_hidden_state`, after its final LayerNorm); ViT is called
   with `interpolate_pos_encoding=True`, DINOv2 takes no such flag (it always interpolates).
   `expected.json`: family, versions, seed, sizes, flag, notes and the classifier input.
"""

import hashlib
import inspect
import json
import pathlib
import re
import shutil
import tempfile
import types

import safetensors
import safetensors.torch
import torch
import torch.nn.functional as F
import transformers

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYER_OUT = ROOT / "crates/burn-positional/tests/fixtures/vision"
MODEL_OUT = ROOT / "crates/burn-positional-models/tests/fixtures"
MAX_LAYER_FOLDER_BYTES = 1_500_000
MAX_MODEL_FOLDER_BYTES = 1_500_000
PERTURB_STD = 0.2
MIN_MARGIN = 1e-3
MAX_SEED_TRIES = 50


def versions():
    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "safetensors": safetensors.__version__}


# ---------------------------------------------------------------------------------------------
# Helpers.


def dump_json(value, indent=0):
    """Objects one key a line, lists of scalars on one line, nested lists one row a line."""
    pad = "  " * (indent + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        short = json.dumps(value, separators=(", ", ": "))
        if len(short) <= 130 and all(not isinstance(v, dict) for v in value.values()) and all(
                not isinstance(v, list) or all(not isinstance(x, (dict, list)) for x in v) for v in value.values()):
            return short
        items = [f"{pad}{json.dumps(k)}: {dump_json(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
    if isinstance(value, (list, tuple)):
        scalars = all(not isinstance(v, (dict, list, tuple)) for v in value)
        if scalars and not any(isinstance(v, str) and len(v) > 40 for v in value):
            return json.dumps(list(value), separators=(", ", ": "))
        items = [pad + dump_json(v, indent + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + "  " * indent + "]"
    return json.dumps(value)


def write_json(path, meta):
    path.write_text(dump_json(meta) + "\n")


def save_tensors(path, tensors):
    tensors = {k: v.detach().contiguous() for k, v in tensors.items()}
    for k, v in tensors.items():
        assert v.dtype in (torch.int64, torch.float32), (k, v.dtype)
    safetensors.torch.save_file(tensors, path)
    return tensors


def describe(tensors):
    return {k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
            for k, v in tensors.items()}


def check_close(what, a, b, tol):
    diff = (a - b).abs().max().item()
    if not diff <= tol:
        raise AssertionError(f"{what}: max |diff| {diff:.3g} > {tol}")
    return diff


def source_lines(fn, pattern):
    """The lines of `fn`'s source that match `pattern` (stripped): quoted in the JSON."""
    lines = [line.strip() for line in inspect.getsource(fn).splitlines() if re.search(pattern, line)]
    # code only: not the `def` line, not docstring prose
    lines = [line for line in lines if not line.startswith("def ") and re.search(r"[=(]|return", line)]
    assert lines, (fn, pattern)
    return lines


def interpolate_call(fn):
    """The text of the `nn.functional.interpolate(...)` call in `fn`'s source, on one line."""
    src = inspect.getsource(fn)
    m = re.search(r"nn\.functional\.interpolate\((.*?)\n\s*\)", src, re.S)
    assert m, fn
    return "nn.functional.interpolate(" + ", ".join(
        part.strip() for part in m.group(1).strip().rstrip(",").split(",\n")) + ")"


def randn(gen, *shape):
    return torch.randn(shape, generator=gen, dtype=torch.float32)


# ---------------------------------------------------------------------------------------------
# A. torch.nn.functional.interpolate.

BICUBIC_CASES = [
    ((4, 4), "size", (6, 6)),
    ((4, 4), "size", (3, 5)),
    ((4, 4), "size", (2, 2)),
    ((5, 3), "size", (8, 4)),
    ((4, 4), "size", (4, 4)),
    ((1, 1), "size", (3, 2)),
    ((2, 3), "size", (1, 1)),
    ((4, 4), "scale_factor", (1.5, 1.5)),
    ((4, 4), "scale_factor", (0.75, 1.25)),
    ((6, 5), "scale_factor", (0.5, 2.0)),
    # extra: the scale is not output/input, so scale_factor and size calls differ
    ((5, 3), "scale_factor", (1.5, 0.7)),
]
BILINEAR_CASES = [
    ((4, 4), "size", (6, 6)),
    ((6, 6), "size", (4, 3)),
    ((7, 5), "size", (3, 2)),
]


def part_a_interpolate():
    gen = torch.Generator().manual_seed(1000)
    tensors, cases = {}, []
    specs = [("bicubic", c) for c in BICUBIC_CASES] + [("bilinear", c) for c in BILINEAR_CASES]
    for mode, ((h0, w0), kind, value) in specs:
        for align_corners in (False, True):
            for antialias in (False, True):
                i = len(cases)
                x = randn(gen, 1, 3, h0, w0)
                kwargs = {kind: value, "mode": mode, "align_corners": align_corners, "antialias": antialias}
                y = F.interpolate(x, **kwargs)
                case = {"name": f"case_{i}", "mode": mode, "h0": h0, "w0": w0}
                if kind == "size":
                    assert tuple(y.shape[-2:]) == value
                    case["size"] = list(value)
                else:
                    case["scale_factor"] = list(value)
                    case["output_size"] = list(y.shape[-2:])
                    same = F.interpolate(x, size=tuple(y.shape[-2:]), mode=mode,
                                         align_corners=align_corners, antialias=antialias)
                    case["same_as_size_call"] = bool(torch.equal(same, y))
                case["align_corners"] = align_corners
                case["antialias"] = antialias
                cases.append(case)
                tensors[f"case_{i}_input"] = x
                tensors[f"case_{i}_output"] = y
    # The extra case exercises 1/scale (not in/out) without align_corners.
    extra = [c for c in cases if c.get("scale_factor") == [1.5, 0.7]]
    assert any(not c["same_as_size_call"] for c in extra if not c["align_corners"]), extra
    assert all(c["same_as_size_call"] for c in extra if c["align_corners"] and not c["antialias"]), extra
    # The antialiased kernel differs from the plain one even when upsampling.
    up = [c for c in cases if c["mode"] == "bicubic" and c.get("size") == [6, 6] and not c["align_corners"]]
    assert not torch.equal(tensors[f"{up[0]['name']}_output"], tensors[f"{up[1]['name']}_output"])
    stored = save_tensors(LAYER_OUT / "interpolate.safetensors", tensors)
    meta = {
        "what": "torch.nn.functional.interpolate(input, size= | scale_factor=, mode=, align_corners=, "
                "antialias=) on a seeded randn [1, 3, h0, w0] float32 input; recompute_scale_factor None",
        **versions(),
        "seed": 1000,
        "notes": [
            "bicubic, antialias False: upsample_bicubic2d, cubic convolution a = -0.75, 4 taps, source "
            "indices clamped to [0, in-1]",
            "bicubic, antialias True: _upsample_bicubic2d_aa (PIL-style separable filter), a = -0.5, support "
            "2 * max(1/scale, 1) taps around the centre, taps outside the image dropped and the remaining "
            "weights renormalised; differs from the plain kernel even when upsampling",
            "bilinear, antialias True: _upsample_bilinear2d_aa (triangle filter, support max(1/scale, 1))",
            "align_corners True: src = dst * (in-1)/(out-1) (0 when out == 1); scale_factor is then ignored",
            "align_corners False: src = (dst + 0.5) * s - 0.5 with s = 1/scale_factor when scale_factor is "
            "given, else in/out; output size = floor(in * scale_factor)",
            "case order: for each (mode, base case): align_corners False/True, then antialias False/True "
            "inside; the last bicubic base (5,3)->scale(1.5,0.7) is an extra whose scale is not out/in",
        ],
        "cases": cases,
        "tensors": describe(stored),
    }
    write_json(LAYER_OUT / "interpolate.json", meta)
    print(f"  interpolate: {len(cases)} cases")


# ---------------------------------------------------------------------------------------------
# B. ViT-MAE 2-D sin-cos.


def vit_mae_table(hidden, image, patch):
    """The position table ViT-MAE means to hold: `ViTMAEEmbeddings.initialize_weights()` on a fresh
    embeddings module. (A fresh `ViTMAEModel` in 5.24 keeps an all-zero table: `post_init` initialises
    the children first, so the patch projection is already flagged `_is_hf_initialized` and
    `initialize_weights` returns at its first line. Checked here; checkpoints hold the real table.)"""
    from transformers import ViTMAEConfig, ViTMAEModel
    from transformers.models.vit_mae.modeling_vit_mae import ViTMAEEmbeddings

    config = ViTMAEConfig(hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=2 * hidden, image_size=image, patch_size=patch)
    torch.manual_seed(0)
    assert torch.count_nonzero(ViTMAEModel(config).embeddings.position_embeddings) == 0
    embeddings = ViTMAEEmbeddings(config)
    embeddings.initialize_weights()
    assert not embeddings.position_embeddings.requires_grad
    return embeddings.position_embeddings.detach().clone()[0]


def part_b_sincos():
    from transformers.models.vit_mae import modeling_vit_mae as mae

    build = mae.build_2d_sinusoidal_position_embedding
    tensors = {}
    tensors["raw_d16_g4_cls"] = build(height=4, width=4, embed_dim=16, cls_token=True)
    tensors["checkpoint_d16_g4_cls"] = vit_mae_table(16, 16, 4)
    tensors["raw_d8_g3"] = build(height=3, width=3, embed_dim=8, cls_token=False)
    tensors["checkpoint_d8_g3"] = vit_mae_table(8, 12, 4)[1:]  # drop the (zero) class row
    tensors["raw_d16_h3_w5_cls"] = build(height=3, width=5, embed_dim=16, cls_token=True)
    # The checkpoint layout is the raw one with its halves swapped.
    for raw, ckpt in (("raw_d16_g4_cls", "checkpoint_d16_g4_cls"), ("raw_d8_g3", "checkpoint_d8_g3")):
        r = tensors[raw]
        half = r.shape[-1] // 2
        assert torch.equal(torch.cat([r[..., half:], r[..., :half]], dim=-1), tensors[ckpt]), ckpt
    assert torch.equal(tensors["raw_d16_g4_cls"][0], torch.zeros(16))
    stored = save_tensors(LAYER_OUT / "sincos_2d.safetensors", tensors)
    meta = {
        "what": "ViT-MAE fixed 2-D sin-cos position tables (transformers/models/vit_mae/modeling_vit_mae.py)",
        **versions(),
        "function": "build_2d_sinusoidal_position_embedding" + str(inspect.signature(build)),
        "get_2d_sincos_pos_embed_exists": hasattr(mae, "get_2d_sincos_pos_embed"),
        "supports_non_square": True,
        "raw_layout": "[sin(h*omega) | cos(h*omega) | sin(w*omega) | cos(w*omega)], D/4 columns each, "
                      "omega_i = 1 / temperature^(i / (D/4)), i = 0..D/4-1, temperature 10000; rows row-major "
                      "over (h, w) with h outer (meshgrid indexing='ij'); computed in float64, cast to float32; "
                      "cls_token=True prepends a zero row",
        "checkpoint_layout": "ViTMAEEmbeddings.initialize_weights swaps the halves: [sin_w | cos_w | sin_h | "
                             "cos_h] (the old numpy get_2d_sincos_pos_embed's layout, which the checkpoints "
                             "hold); stored as position_embeddings [1, 1 + N, D] with requires_grad False",
        "fresh_model_table_is_zero": "transformers 5.24 bug: ViTMAEModel(config) built from a config keeps an all-zero "
                                     "position table (post_init's smart_apply initialises children first, the patch "
                                     "projection gets _is_hf_initialized, and initialize_weights returns early); "
                                     "the checkpoint tables here come from calling initialize_weights on a fresh "
                                     "ViTMAEEmbeddings",
        "source": source_lines(build, r"omega|meshgrid|outer|pos_embed = torch.cat|zeros\(1") +
                  source_lines(mae.ViTMAEEmbeddings.initialize_weights,
                               r"half|build_2d|cls_token=True|height=grid|width=grid"),
        "cases": [
            {"name": "raw_d16_g4_cls", "call": "build_2d_sinusoidal_position_embedding(height=4, width=4, "
                                               "embed_dim=16, cls_token=True)"},
            {"name": "checkpoint_d16_g4_cls", "call": "e = ViTMAEEmbeddings(ViTMAEConfig(hidden_size=16, "
                                                      "image_size=16, patch_size=4)); e.initialize_weights(); "
                                                      "e.position_embeddings[0]",
             "equals_old": "get_2d_sincos_pos_embed(16, 4, add_cls_token=True)"},
            {"name": "raw_d8_g3", "call": "build_2d_sinusoidal_position_embedding(height=3, width=3, "
                                          "embed_dim=8, cls_token=False)"},
            {"name": "checkpoint_d8_g3", "call": "e = ViTMAEEmbeddings(ViTMAEConfig(hidden_size=8, image_size=12, "
                                                 "patch_size=4)); e.initialize_weights(); "
                                                 "e.position_embeddings[0, 1:]",
             "equals_old": "get_2d_sincos_pos_embed(8, 3, add_cls_token=False)"},
            {"name": "raw_d16_h3_w5_cls", "call": "build_2d_sinusoidal_position_embedding(height=3, width=5, "
                                                  "embed_dim=16, cls_token=True)",
             "note": "non-square grid; ViT-MAE itself only builds square grids (int(num_patches**0.5))"},
        ],
        "tensors": describe(stored),
    }
    write_json(LAYER_OUT / "sincos_2d.json", meta)
    print("  sincos_2d: 5 tables")


# ---------------------------------------------------------------------------------------------
# C. interpolate_pos_encoding of ViT, DeiT, DINOv2, CLIP vision, SigLIP vision.

PIXEL_SIZES = [(16, 16), (24, 24), (16, 28), (12, 20), (8, 8), (28, 16), (17, 23), (8, 32)]


def pos_families():
    from transformers import (
        CLIPConfig, CLIPModel, CLIPVisionConfig, CLIPVisionModel, DeiTConfig, DeiTModel, Dinov2Config, Dinov2Model,
        SiglipConfig, SiglipModel, SiglipVisionConfig, SiglipVisionModel, ViTConfig, ViTModel,
    )

    tiny = dict(hidden_size=8, patch_size=4, image_size=16, num_channels=3, num_hidden_layers=1,
                num_attention_heads=2)
    text = dict(hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, vocab_size=64,
                bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return [
        dict(name="vit", model=lambda: ViTModel(ViTConfig(intermediate_size=16, **tiny), add_pooling_layer=False),
             embeddings=lambda m: m.embeddings, table="position_embeddings", prefix=1, flag=True,
             dtype="no cast: interpolates in the table's dtype"),
        dict(name="deit", model=lambda: DeiTModel(DeiTConfig(intermediate_size=16, **tiny), add_pooling_layer=False),
             embeddings=lambda m: m.embeddings, table="position_embeddings", prefix=2, flag=True,
             dtype="no cast: interpolates in the table's dtype"),
        dict(name="dinov2", model=lambda: Dinov2Model(Dinov2Config(mlp_ratio=2, **tiny)),
             embeddings=lambda m: m.embeddings, table="position_embeddings", prefix=1, flag=None,
             dtype="casts the patch table to float32 for F.interpolate, then back to the table's dtype "
                   "(`.to(torch.float32)` ... `.to(dtype=target_dtype)`); the class row is not cast"),
        dict(name="clip_vision",
             model=lambda: CLIPVisionModel(CLIPVisionConfig(intermediate_size=16, projection_dim=8, **tiny)),
             dual=lambda: CLIPModel(CLIPConfig(vision_config=dict(intermediate_size=16, **tiny), text_config=text,
                                               projection_dim=8)),
             embeddings=lambda m: getattr(m, "vision_model", m).embeddings, table="position_embedding.weight",
             prefix=1, flag=True,
             dtype="no cast: interpolates in the table's dtype"),
        dict(name="siglip_vision", model=lambda: SiglipVisionModel(SiglipVisionConfig(intermediate_size=16, **tiny)),
             dual=lambda: SiglipModel(SiglipConfig(vision_config=dict(intermediate_size=16, **tiny), text_config=text)),
             embeddings=lambda m: getattr(m, "vision_model", m).embeddings, table="position_embedding.weight",
             prefix=0, flag=True,
             dtype="no cast: interpolates in the table's dtype"),
    ]


def get_param(module, dotted):
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


def checkpoint_key(model, table):
    """The key under which `save_pretrained` writes `table` (found by value)."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        with safetensors.safe_open(f"{tmp}/model.safetensors", "pt") as f:
            keys = [k for k in f.keys() if f.get_tensor(k).shape == table.shape
                    and torch.equal(f.get_tensor(k), table)]
    assert len(keys) == 1, keys
    return keys[0]


def part_c_pos_interpolation():
    gen = torch.Generator().manual_seed(2000)
    tensors, families = {}, []
    for spec in pos_families():
        name = spec["name"]
        torch.manual_seed(2000)
        model = spec["model"]().eval()
        emb = spec["embeddings"](model)
        param = get_param(emb, spec["table"])
        with torch.no_grad():
            param.copy_(randn(gen, *param.shape))
        table = param.detach().clone()
        state_key = next(k for k, p in model.named_parameters() if p is param)
        ckpt_key = checkpoint_key(model, table)
        dual_key = None
        if "dual" in spec:
            # The vision tower inside the dual-encoder model (CLIPModel / SiglipModel), as hub checkpoints hold it.
            torch.manual_seed(2000)
            dual = spec["dual"]()
            dual_param = get_param(spec["embeddings"](dual.vision_model), spec["table"])
            with torch.no_grad():
                dual_param.copy_(table)
            dual_key = checkpoint_key(dual, table)
        tensors[f"{name}_table"] = table
        cls = type(emb)
        patch = emb.patch_size if isinstance(emb.patch_size, int) else emb.patch_size[0]
        if name == "dinov2":
            patch = emb.patch_embeddings.patch_size[0]
        cases = []
        for h, w in PIXEL_SIZES:
            seen = []
            original = emb.interpolate_pos_encoding

            def capture(embeddings, height, width, _orig=original, _seen=seen):
                out = _orig(embeddings, height, width)
                _seen.append((embeddings.detach().clone(), height, width, out.detach().clone()))
                return out

            emb.interpolate_pos_encoding = capture
            pixels = randn(gen, 1, 3, h, w)
            with torch.no_grad():
                forward = emb(pixels) if spec["flag"] is None else emb(pixels, interpolate_pos_encoding=True)
            del emb.interpolate_pos_encoding
            assert len(seen) == 1, name
            embeddings, hh, ww, out_forward = seen[0]
            grid = (h // patch, w // patch)
            seq = spec["prefix"] + grid[0] * grid[1]
            assert (hh, ww) == (h, w) and embeddings.shape == (1, seq, 8), (name, embeddings.shape)
            with torch.no_grad():
                out = cls.interpolate_pos_encoding(emb, embeddings, h, w)
            assert torch.equal(out, out_forward)
            assert out.shape == (1, seq, 8), (name, out.shape)
            check_close(f"{name} {h}x{w} forward", forward, embeddings + out, 0.0)
            early = grid[0] * grid[1] == 16 and h == w
            if early:
                flat = table if table.dim() == 3 else table.unsqueeze(0)
                assert torch.equal(out, flat), name
            key = f"{name}_{h}x{w}"
            tensors[key] = out
            cases.append({"tensor": key, "height": h, "width": w, "grid": list(grid), "embeddings_shape":
                          list(embeddings.shape), "early_return": early})
        families.append({
            "family": name,
            "embeddings_class": cls.__name__,
            "model_class": type(model).__name__,
            "config": {"hidden_size": 8, "patch_size": 4, "image_size": 16, "num_channels": 3},
            "table_tensor": f"{name}_table",
            "table_shape": list(table.shape),
            "state_dict_key": state_key,
            "checkpoint_key": ckpt_key,
            **({"dual_model_checkpoint_key": dual_key,
                "key_note": f"{type(model).__name__} in 5.24 saves without the `vision_model.` prefix and strips it on "
                            "load (conversion_mapping.py: PrefixChange(prefix_to_remove=\"vision_model\")); the "
                            "dual-encoder model and the hub checkpoints keep it"} if dual_key else
               {"key_note": "as the base model saves it; a task model prefixes its base (vit., deit., dinov2.)"}),
            "prefix_rows": spec["prefix"],
            "trained_grid": [4, 4],
            "table_size_source": source_lines(cls.__init__, r"num_patches|num_positions") + (
                source_lines(type(emb.patch_embeddings).__init__, r"self.num_patches =")
                if hasattr(emb, "patch_embeddings") else []),
            "early_return": source_lines(cls.interpolate_pos_encoding, r"is_tracing\(\) and")[0],
            "early_return_value": source_lines(cls.interpolate_pos_encoding, r"^\s*return self\.")[0],
            "new_grid": source_lines(cls.interpolate_pos_encoding,
                                     r"new_height =|new_width =|patch_height, patch_width"),
            "interpolate_call": interpolate_call(cls.interpolate_pos_encoding),
            "mode": "bicubic",
            "align_corners": False,
            "antialias": False,
            "size_or_scale": "size=(height // patch_size, width // patch_size) (floor; never scale_factor)",
            "source_grid": "sqrt_num_positions = torch_int(num_positions**0.5): the patch rows reshaped to "
                           "[1, s, s, dim], permuted to [1, dim, s, s]; after interpolation permuted back and "
                           "flattened row-major (h outer)",
            "dtype_handling": spec["dtype"],
            "forward_flag": "always interpolates (no interpolate_pos_encoding argument)" if spec["flag"] is None
                            else "embeddings(pixel_values, interpolate_pos_encoding=True)",
            "cases": cases,
        })
        print(f"  {name}: table {tuple(table.shape)} key {ckpt_key}")
    stored = save_tensors(LAYER_OUT / "pos_interpolation.safetensors", tensors)
    meta = {
        "what": "<family>_<H>x<W> = embeddings.interpolate_pos_encoding(embeddings, H, W), with `embeddings` the "
                "tensor the family's forward passes for a [1, 3, H, W] image (captured from a real call)",
        **versions(),
        "seed": 2000,
        "pixel_sizes": [list(s) for s in PIXEL_SIZES],
        "notes": [
            "early return: pixel height == width AND the number of patch rows equals the table's (so (8, 32), "
            "16 patches, is interpolated from 4x4 to 2x8; (17, 23) gives a 4x5 grid from floor division)",
            "the early return gives the table itself ([1, N, D]; CLIP and SigLIP: position_embedding(position_ids), "
            "the [N, D] weight as [1, N, D])",
            "the class (and DeiT's distillation) rows are never interpolated; SigLIP has none",
            "the checkpoint holds ViT/DeiT/DINOv2 tables as [1, prefix + 16, 8] parameters and CLIP/SigLIP as "
            "nn.Embedding weights [prefix + 16, 8]",
        ],
        "families": families,
        "tensors": describe(stored),
    }
    write_json(LAYER_OUT / "pos_interpolation.json", meta)


# ---------------------------------------------------------------------------------------------
# D. Multimodal RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL).

IMAGE, VIDEO, VSTART, VEND, PAD = 151655, 151656, 151652, 151653, 151643


def mm_token_type_ids(input_ids):
    """ProcessorMixin.create_mm_token_type_ids, as the Qwen processors call it."""
    from transformers.processing_utils import ProcessorMixin

    fake = types.SimpleNamespace(image_token_ids=[IMAGE], video_token_ids=[VIDEO], audio_token_ids=[])
    return torch.tensor(ProcessorMixin.create_mm_token_type_ids(fake, input_ids.tolist()), dtype=torch.long)


def prompt_batch(gen, per_frame_blocks):
    """Row 0: text 3, [VS, image x6, VE], text 2, video (grid [2, 4, 4]), text 2. Row 1 (left padded):
    text 5, [VS, image x2, VE], text 6. Qwen3-VL (`per_frame_blocks`): each video frame is its own
    [VS, video x4, VE] block after two timestamp text tokens."""

    def text(n):
        return torch.randint(1000, 5000, (n,), generator=gen).tolist()

    if per_frame_blocks:
        video = text(2) + [VSTART] + [VIDEO] * 4 + [VEND] + text(2) + [VSTART] + [VIDEO] * 4 + [VEND]
    else:
        video = [VSTART] + [VIDEO] * 8 + [VEND]
    row0 = text(3) + [VSTART] + [IMAGE] * 6 + [VEND] + text(2) + video + text(2)
    row1 = text(5) + [VSTART] + [IMAGE] * 2 + [VEND] + text(6)
    width = len(row0)
    ids = torch.tensor([row0, [PAD] * (width - len(row1)) + row1], dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[1, : width - len(row1)] = 0
    return ids, mask


def qwen_vl_model(family):
    text = dict(vocab_size=152064, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    if family == "qwen2_vl":
        from transformers import Qwen2VLConfig, Qwen2VLModel

        config = Qwen2VLConfig(
            text_config=dict(**text, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                      "mrope_section": [2, 3, 3]}),
            vision_config=dict(depth=1, embed_dim=32, num_heads=2, hidden_size=64, mlp_ratio=2, patch_size=2,
                               temporal_patch_size=2, spatial_merge_size=2, in_channels=3),
            attn_implementation="eager")
        cls = Qwen2VLModel
    elif family == "qwen2_5_vl":
        from transformers import Qwen2_5_VLConfig, Qwen2_5_VLModel

        config = Qwen2_5_VLConfig(
            text_config=dict(**text, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                      "mrope_section": [2, 3, 3]}),
            vision_config=dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=64,
                               patch_size=2, temporal_patch_size=2, spatial_merge_size=2, in_channels=3,
                               tokens_per_second=2, window_size=8, fullatt_block_indexes=[0]),
            attn_implementation="eager")
        cls = Qwen2_5_VLModel
    else:
        from transformers import Qwen3VLConfig, Qwen3VLModel

        config = Qwen3VLConfig(
            text_config=dict(**{**text, "vocab_size": 151936}, head_dim=16,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                              "mrope_section": [4, 2, 2], "mrope_interleaved": True}),
            vision_config=dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=64,
                               patch_size=2, temporal_patch_size=2, spatial_merge_size=2, in_channels=3,
                               num_position_embeddings=16, deepstack_visual_indexes=[]),
            attn_implementation="eager")
        cls = Qwen3VLModel
    torch.manual_seed(3000)
    return cls(config).eval()


def mrope_case(family, prefix, gen, extra_rope_kwargs):
    import importlib

    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    model = qwen_vl_model(family)
    text_config = model.config.text_config
    assert text_config.hidden_size // text_config.num_attention_heads == 16
    ids, mask = prompt_batch(gen, per_frame_blocks=(family == "qwen3_vl"))
    types_ = mm_token_type_ids(ids)
    image_grid_thw = torch.tensor([[1, 4, 6], [1, 2, 4]], dtype=torch.long)
    video_grid_thw = torch.tensor([[2, 4, 4]], dtype=torch.long)
    assert int((ids == IMAGE).sum()) == int(image_grid_thw.prod(-1).sum()) // 4
    assert int((ids == VIDEO).sum()) == int(video_grid_thw.prod(-1).sum()) // 4
    position_ids, rope_deltas = model.get_rope_index(
        ids, mm_token_type_ids=types_, image_grid_thw=image_grid_thw, video_grid_thw=video_grid_thw,
        attention_mask=mask, **extra_rope_kwargs)
    rotary = model.language_model.rotary_emb
    b, s = ids.shape
    x = torch.zeros(b, s, text_config.hidden_size)
    with torch.no_grad():
        cos, sin = rotary(x, position_ids)
    # The section layout the JSON states: which of T/H/W drives each of the 8 frequencies.
    axis = [0, 0, 1, 1, 1, 2, 2, 2] if family != "qwen3_vl" else [0, 1, 2, 0, 1, 2, 0, 0]
    angles = torch.stack([position_ids[a].float() * rotary.inv_freq[j] for j, a in enumerate(axis)], dim=-1)
    check_close(f"{family} section layout", cos, torch.cat([angles, angles], dim=-1).cos(), 1e-6)
    q = randn(gen, b, text_config.num_attention_heads, s, 16)
    k = randn(gen, b, text_config.num_key_value_heads, s, 16)
    q_rot, k_rot = module.apply_rotary_pos_emb(q, k, cos, sin)

    # What the model's own forward uses (no pixels: the position ids come from the same grids).
    seen = []
    hook = rotary.register_forward_hook(lambda m, args, out: seen.append((args[1].clone(), out[0].clone(),
                                                                           out[1].clone())))
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, mm_token_type_ids=types_, image_grid_thw=image_grid_thw,
              video_grid_thw=video_grid_thw, use_cache=False, **extra_rope_kwargs)
    hook.remove()
    assert len(seen) == 1
    assert torch.equal(seen[0][0], position_ids), family
    assert torch.equal(seen[0][1], cos) and torch.equal(seen[0][2], sin), family

    tensors = {
        "input_ids": ids, "attention_mask": mask, "mm_token_type_ids": types_,
        "image_grid_thw": image_grid_thw, "video_grid_thw": video_grid_thw,
        "position_ids": position_ids, "rope_deltas": rope_deltas,
        "inv_freq": rotary.inv_freq.float(), "cos": cos, "sin": sin,
        "q": q, "k": k, "q_rot": q_rot, "k_rot": k_rot,
    }
    for key in extra_rope_kwargs:
        tensors[key] = extra_rope_kwargs[key].float()
    tensors = {prefix + k: v for k, v in tensors.items()}
    vision = model.config.vision_config
    meta = {
        "prefix": prefix,
        "model_class": type(model).__name__,
        "rotary_class": type(rotary).__name__,
        "text_config": {"hidden_size": text_config.hidden_size, "num_attention_heads": text_config.num_attention_heads,
                        "num_key_value_heads": text_config.num_key_value_heads, "head_dim": 16,
                        "rope_parameters": dict(text_config.rope_parameters)},
        "vision_config": {"spatial_merge_size": vision.spatial_merge_size,
                          **({"tokens_per_second": vision.tokens_per_second} if family == "qwen2_5_vl" else {})},
        "token_ids": {"image_token_id": model.config.image_token_id, "video_token_id": model.config.video_token_id,
                      "vision_start_token_id": model.config.vision_start_token_id,
                      "vision_end_token_id": model.config.vision_end_token_id, "pad": PAD},
        "input_ids": ids.tolist(),
        "attention_mask": mask.tolist(),
        "mm_token_type_ids": types_.tolist(),
        "image_grid_thw": image_grid_thw.tolist(),
        "video_grid_thw": video_grid_thw.tolist(),
        "position_ids": position_ids.tolist(),
        "rope_deltas": rope_deltas.tolist(),
        "get_rope_index": f"{type(model).__name__}.get_rope_index" + str(inspect.signature(model.get_rope_index)),
        "get_rope_index_source": source_lines(
            type(model).get_rope_index,
            r"current_pos \+=|time_interval =|repeat_interleave|video_grid_thw\[:, 0\] = 1|position_ids = torch.zeros|"
            r"mrope_position_deltas.append|llm_pos_ids_list.append\(vision|"
            r"position_ids\[:, batch_idx, attention_mask"),
        "get_vision_position_ids_source": source_lines(
            type(model).get_vision_position_ids,
            r"position_temporal =|position_height =|position_width =|meshgrid|\+= start_position"),
        "rotary_source": source_lines(type(rotary).forward, r"freqs =|expand\(3") +
                         source_lines(type(rotary).recomposition_frequencies,
                                      r"freq|length|idx|return"),
    }
    if extra_rope_kwargs:
        meta["extra_get_rope_index_kwargs"] = {k: v.tolist() for k, v in extra_rope_kwargs.items()}
    return model, tensors, meta


def part_d_mrope():
    gen = torch.Generator().manual_seed(3000)
    tensors, cases = {}, []
    models = {}
    for family, prefix, extra in (
        ("qwen2_vl", "", {}),
        ("qwen2_5_vl", "qwen2_5_", {"second_per_grid_ts": torch.tensor([1.25])}),
        ("qwen3_vl", "qwen3_", {}),
    ):
        model, t, meta = mrope_case(family, prefix, gen, extra)
        models[family] = model
        tensors.update(t)
        cases.append({"family": family, **meta})
        print(f"  {family}: rope_deltas {meta['rope_deltas']}")
    stored = save_tensors(LAYER_OUT / "mrope.safetensors", tensors)
    meta = {
        "what": "multimodal RoPE position ids (get_rope_index) and cos/sin (the text rotary module) of Qwen2-VL, "
                "Qwen2.5-VL (prefix qwen2_5_) and Qwen3-VL (prefix qwen3_); q_rot/k_rot = "
                "apply_rotary_pos_emb(q, k, cos, sin) (rotate-half: pairs (i, i + 8); cos unsqueezed at dim 1)",
        **versions(),
        "seed": 3000,
        "notes": [
            "transformers 5.24 has no apply_multimodal_rotary_pos_emb: the rotary module's forward does the "
            "mrope_section split itself (recomposition_frequencies) and returns cos/sin [b, s, head_dim]; the "
            "attention applies the plain Llama apply_rotary_pos_emb",
            "Qwen2-VL / Qwen2.5-VL sections (contiguous): freqs [3, b, s, 8] split by mrope_section [2, 3, 3] "
            "along the frequency axis; chunk i takes axis i % 3 (T, H, W): frequencies 0-1 from T ids, 2-4 from H "
            "ids, 5-7 from W ids; then cat((freq, freq), -1) (rotate-half pairs (i, i + 8))",
            "Qwen3-VL interleaved (mrope_section [4, 2, 2]): starts from the T angles, then frequencies "
            "slice(1, 3 * 2, 3) = 1, 4 take H and slice(2, 3 * 2, 3) = 2, 5 take W; T keeps 0, 3, 6, 7",
            "get_rope_index groups tokens by mm_token_type_ids (0 text, 1 image, 2 video; vision_start/end are text), "
            "not by token id; padded slots (attention_mask 0) keep position 0 in all three rows; "
            "rope_deltas = max(position) + 1 - (number of unpadded tokens), shape [b, 1]",
            "vision block starting at text position p, grid (t, h, w), merge m: T = p + floor(arange(t) * interval), "
            "H = p + arange(h / m), W = p + arange(w / m), tokens in (t, h, w) row-major order; the next text "
            "starts at p + max(h, w) / m (5.24: NOT max(block) + 1, so a video whose scaled time ids exceed the "
            "spatial extent overlaps the following text ids)",
            "interval: 1 for Qwen2-VL and Qwen3-VL and for Qwen2.5-VL images; tokens_per_second * second_per_grid_ts "
            "for Qwen2.5-VL videos (here 2 * 1.25 = 2.5, so T = p + [0, 2])",
            "Qwen3-VL splits each video into t grids of one frame (repeat_interleave, t set to 1); every frame is its "
            "own vision block, preceded by timestamp text tokens as Qwen3VLProcessor writes `<t seconds>`",
            "checked: the model's own forward (input_ids, attention_mask, mm_token_type_ids, grids; no pixels) feeds "
            "exactly these position_ids to the rotary module, which returns exactly these cos/sin",
        ],
        "cases": cases,
        "tensors": describe(stored),
    }
    write_json(LAYER_OUT / "mrope.json", meta)
    return models


# ---------------------------------------------------------------------------------------------
# E. 2-D rotary of vision encoders (Qwen2-VL's vision tower, Pixtral).


def qwen2_vl_vision(gen, model):
    from transformers.models.qwen2_vl import modeling_qwen2_vl as qvl
    from transformers.vision_utils import get_vision_position_ids

    visual = model.visual
    vision = model.config.vision_config
    grid_thw = torch.tensor([[1, 4, 6], [2, 2, 4]], dtype=torch.long)
    position_ids = get_vision_position_ids(grid_thw, vision.spatial_merge_size)
    n = int(grid_thw.prod(-1).sum())
    assert position_ids.shape == (n, 2)
    patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    pixels = randn(gen, n, patch_dim)
    seen = []
    hook = visual.rotary_pos_emb.register_forward_hook(
        lambda m, args, out: seen.append((args[1].clone(), out[0].clone(), out[1].clone())))
    with torch.no_grad():
        visual(pixels, grid_thw=grid_thw)
    hook.remove()
    assert len(seen) == 1 and torch.equal(seen[0][0], position_ids)
    cos, sin = seen[0][1], seen[0][2]
    heads, head_dim = vision.num_heads, vision.embed_dim // vision.num_heads
    assert head_dim == 16 and cos.shape == (n, 16)
    # The layout the JSON states (a check of the description, not a source of expected values).
    inv = visual.rotary_pos_emb.inv_freq
    angles = torch.cat([position_ids[:, :1] * inv, position_ids[:, 1:] * inv], dim=-1)
    check_close("qwen2_vl vision layout", cos, torch.cat([angles, angles], dim=-1).cos(), 1e-6)
    q = randn(gen, n, heads, head_dim)
    k = randn(gen, n, heads, head_dim)
    q_rot, k_rot = qvl.apply_rotary_pos_emb_vision(q, k, cos, sin)
    tensors = {
        "qwen2_vl_grid_thw": grid_thw, "qwen2_vl_position_ids": position_ids,
        "qwen2_vl_inv_freq": visual.rotary_pos_emb.inv_freq.float(), "qwen2_vl_cos": cos, "qwen2_vl_sin": sin,
        "qwen2_vl_q": q, "qwen2_vl_k": k, "qwen2_vl_q_rot": q_rot, "qwen2_vl_k_rot": k_rot,
    }
    meta = {
        "prefix": "qwen2_vl_",
        "config": {"embed_dim": vision.embed_dim, "num_heads": heads, "head_dim": head_dim,
                   "spatial_merge_size": vision.spatial_merge_size, "patch_size": vision.patch_size,
                   "temporal_patch_size": vision.temporal_patch_size, "rope_parameters": dict(vision.rope_parameters)},
        "grid_thw": grid_thw.tolist(),
        "position_ids": position_ids.tolist(),
        "position_ids_source": source_lines(get_vision_position_ids, r"meshgrid|arange\(|block_shape|transpose\(1, 2\)|"
                                                                     r"repeat\(t, 1\)"),
        "rotary_source": source_lines(qvl.Qwen2VLVisionRotaryEmbedding.compute_axial_rope_parameters,
                                      r"spatial_dim|inv_freq =") +
                         source_lines(qvl.Qwen2VLVisionRotaryEmbedding.forward, r"freqs =") +
                         source_lines(qvl.Qwen2VLVisionRotaryEmbedding.recomposition_frequencies, r"freq"),
        "apply_source": source_lines(qvl.apply_rotary_pos_emb_vision, r"unsqueeze|q_embed =|float\(\)") +
                        source_lines(qvl.rotate_half, r"x1 =|x2 =|return"),
        "layout": "position_ids [N, 2] = (h, w) per patch, in the tower's order: per image, row-major over "
                  "m x m merge blocks (block row, block col), row-major inside a block; repeated t times for a "
                  "video; images concatenated. inv_freq = 1/theta^(arange(0, hd/2, 2)/(hd/2)) (4 values for "
                  "head_dim 16). cos = cat(cos(h*inv), cos(w*inv), cos(h*inv), cos(w*inv)) [N, 16]: rotate-half "
                  "pairs (i, i + 8); i = 0..3 rotate by h * inv_freq[i], i = 4..7 by w * inv_freq[i - 4]. q, k "
                  "are [seq, heads, head_dim] (VisionAttention: qkv(x).reshape(seq, 3, heads, -1)"
                  ".permute(1, 0, 2, 3)); "
                  "cos is unsqueezed at -2; computed in float32 and cast back",
        "note": "transformers 5.24 has no VisionRotaryEmbedding / rot_pos_emb: the tower calls "
                "vision_utils.get_vision_position_ids(grid_thw, spatial_merge_size) and "
                "Qwen2VLVisionRotaryEmbedding(x, position_ids); the old rot_pos_emb angle table [N, hd/2] is "
                "[h * inv_freq | w * inv_freq], the first half of the angles behind cos/sin here",
    }
    return tensors, meta


def pixtral_vision(gen):
    from transformers import PixtralVisionConfig, PixtralVisionModel
    from transformers.models.pixtral import modeling_pixtral as px

    config = PixtralVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                 image_size=20, patch_size=4, attn_implementation="eager")
    torch.manual_seed(4000)
    model = PixtralVisionModel(config).eval()
    rotary = model.patch_positional_embedding

    def run(pixels, image_sizes):
        seen = []
        hook = rotary.register_forward_hook(
            lambda m, args, out: seen.append((args[1].clone(), out[0].clone(), out[1].clone())))
        with torch.no_grad():
            model(pixels, image_sizes=image_sizes)
        hook.remove()
        assert len(seen) == 1
        return seen[0]

    position_ids, cos, sin = run(randn(gen, 1, 3, 12, 20), torch.tensor([[12, 20]]))
    assert position_ids.shape == (15, 2) and cos.shape == (15, 16)
    full = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.float) / 16))
    angles = torch.cat([position_ids[:, :1] * full[0::2], position_ids[:, 1:] * full[1::2]], dim=-1)
    check_close("pixtral layout", cos, torch.cat([angles, angles], dim=-1).cos(), 1e-6)
    q = randn(gen, 1, 2, 15, 16)
    k = randn(gen, 1, 2, 15, 16)
    q_rot, k_rot = px.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=0)
    pos2, cos2, sin2 = run(randn(gen, 2, 3, 12, 20), torch.tensor([[12, 20], [8, 12]]))
    assert pos2.shape == (21, 2)
    tensors = {
        "pixtral_position_ids": position_ids, "pixtral_inv_freq": rotary.inv_freq.float(),
        "pixtral_cos": cos, "pixtral_sin": sin, "pixtral_q": q, "pixtral_k": k,
        "pixtral_q_rot": q_rot, "pixtral_k_rot": k_rot,
        "pixtral_two_images_position_ids": pos2, "pixtral_two_images_cos": cos2, "pixtral_two_images_sin": sin2,
    }
    meta = {
        "prefix": "pixtral_",
        "config": {"hidden_size": 32, "num_attention_heads": 2, "head_dim": 16, "patch_size": 4, "image_size": 20,
                   "rope_parameters": dict(config.rope_parameters)},
        "image": {"pixels": [12, 20], "patch_grid": [3, 5]},
        "two_images": {"pixels": [[12, 20], [8, 12]], "patch_grids": [[3, 5], [2, 3]],
                       "note": "one call, pixel_values [2, 3, 12, 20] with image_sizes; the second image is cropped "
                               "to its size's patches; positions restart at (0, 0) per image and are concatenated"},
        "position_ids": position_ids.tolist(),
        "two_images_position_ids": pos2.tolist(),
        "position_ids_source": source_lines(px.PixtralVisionModel.forward,
                                            r"meshgrid|torch.arange\(patch|torch.stack\(\[hpos"),
        "rotary_source": source_lines(px.PixtralVisionRotaryEmbedding.compute_axial_rope_parameters,
                                      r"inv_freq =|inv_freq_2d =") +
                         source_lines(px.PixtralVisionRotaryEmbedding.forward, r"freqs =") +
                         source_lines(px.PixtralVisionRotaryEmbedding.recomposition_frequencies, r"freq"),
        "apply_source": source_lines(px.PixtralAttention.forward, r"apply_rotary_pos_emb\(") +
                        source_lines(px.rotate_half, r"x1 =|x2 =|return"),
        "layout": "position_ids [N, 2] = (h, w) per patch, row-major (h outer) per image. inv = 1/theta^(arange(0, "
                  "hd, 2)/hd) (8 values for head_dim 16); inv_freq_2d = cat(inv[0::2], inv[1::2]). cos = "
                  "cat(cos(h * inv[0::2]), cos(w * inv[1::2])) twice [N, 16]: rotate-half pairs (i, i + 8); "
                  "i = 0..3 rotate by h * inv[2i], i = 4..7 by w * inv[2(i-4)+1]. q, k [1, heads, N, head_dim], "
                  "cos unsqueezed at 0",
        "note": "transformers 5.24 has no position_ids_in_meshgrid and no max_patches_per_side: the rotary takes "
                "(h, w) pairs computed on the fly, and image_size is not read by it (older versions precomputed a "
                "table of image_size // patch_size rows and columns and indexed it with h * max_width + w)",
    }
    return tensors, meta


def pixtral_odd_pairs(gen):
    """Pixtral with a head of 18 (hidden 36, 2 heads): 9 rotary pairs, which two axes cannot share
    evenly. transformers runs it: rows take inv[0::2] (5 frequencies), columns inv[1::2] (4)."""
    from transformers import PixtralVisionConfig, PixtralVisionModel
    from transformers.models.pixtral import modeling_pixtral as px

    config = PixtralVisionConfig(hidden_size=36, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                 image_size=20, patch_size=4, attn_implementation="eager")
    torch.manual_seed(4100)
    model = PixtralVisionModel(config).eval()
    rotary = model.patch_positional_embedding
    seen = []
    hook = rotary.register_forward_hook(
        lambda m, args, out: seen.append((args[1].clone(), out[0].clone(), out[1].clone())))
    with torch.no_grad():
        model(randn(gen, 1, 3, 12, 20), image_sizes=torch.tensor([[12, 20]]))
    hook.remove()
    assert len(seen) == 1
    position_ids, cos, sin = seen[0]
    assert rotary.inv_freq.shape == (9,) and cos.shape == (15, 18), (rotary.inv_freq.shape, cos.shape)
    q = randn(gen, 1, 2, 15, 18)
    k = randn(gen, 1, 2, 15, 18)
    q_rot, k_rot = px.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=0)
    tensors = {
        "pixtral_odd_position_ids": position_ids, "pixtral_odd_inv_freq": rotary.inv_freq.float(),
        "pixtral_odd_cos": cos, "pixtral_odd_sin": sin, "pixtral_odd_q": q, "pixtral_odd_k": k,
        "pixtral_odd_q_rot": q_rot, "pixtral_odd_k_rot": k_rot,
    }
    meta = {
        "prefix": "pixtral_odd_",
        "config": {"hidden_size": 36, "num_attention_heads": 2, "head_dim": 18, "patch_size": 4, "image_size": 20,
                   "rope_parameters": dict(config.rope_parameters)},
        "image": {"pixels": [12, 20], "patch_grid": [3, 5]},
        "layout": "as pixtral_, with 9 pairs: inv_freq_2d = cat(inv[0::2], inv[1::2]) holds 5 row frequencies "
                  "then 4 column ones; pairs 0..4 rotate by h, 5..8 by w",
    }
    return tensors, meta


def part_e_vision_rope(models):
    gen = torch.Generator().manual_seed(4000)
    t1, m1 = qwen2_vl_vision(gen, models["qwen2_vl"])
    t2, m2 = pixtral_vision(gen)
    # Its own generator, so the cases above keep their draws.
    t3, m3 = pixtral_odd_pairs(torch.Generator().manual_seed(4100))
    stored = save_tensors(LAYER_OUT / "vision_rope.safetensors", {**t1, **t2, **t3})
    meta = {
        "what": "2-D rotary of vision encoders: Qwen2-VL's vision tower (prefix qwen2_vl_) and Pixtral (prefix "
                "pixtral_); cos/sin and position ids captured from a real forward of the tower",
        **versions(),
        "seed": 4000,
        "qwen2_vl": m1,
        "pixtral": m2,
        "pixtral_odd": m3,
        "tensors": describe(stored),
    }
    write_json(LAYER_OUT / "vision_rope.json", meta)
    print(f"  qwen2_vl vision: {len(m1['position_ids'])} patches; pixtral: 15 and 21 patches")


# ---------------------------------------------------------------------------------------------
# F. Whole models: ViT and DINOv2.

MODEL_SIZES = [(16, 16), (24, 24), (16, 28)]


def vit_model():
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       patch_size=4, image_size=16, num_channels=3, num_labels=5, qkv_bias=True,
                       initializer_range=0.3, attn_implementation="eager")
    return ViTForImageClassification(config)


def dinov2_model():
    from transformers import Dinov2Config, Dinov2ForImageClassification

    config = Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
                          patch_size=4, image_size=16, num_channels=3, num_labels=5, qkv_bias=True,
                          layerscale_value=1.0, use_swiglu_ffn=False, initializer_range=0.3,
                          attn_implementation="eager")
    return Dinov2ForImageClassification(config)


@torch.no_grad()
def perturb(model, seed):
    """Noise on every 1-D parameter and on the class / mask tokens."""
    gen = torch.Generator().manual_seed(seed + 7919)
    for name, p in model.named_parameters():
        if p.dim() == 1 or name.endswith("cls_token") or name.endswith("mask_token"):
            p.add_(torch.randn(p.shape, generator=gen) * PERTURB_STD)


def run_vision_model(family, seed):
    torch.manual_seed(seed)
    model = vit_model() if family == "vit" else dinov2_model()
    assert model.config._attn_implementation == "eager"
    perturb(model, seed)
    model.eval()
    base = model.vit if family == "vit" else model.dinov2
    gen = torch.Generator().manual_seed(seed)
    tensors, margins, seqs = {}, [], {}
    for h, w in MODEL_SIZES:
        pixels = randn(gen, 2, 3, h, w)
        with torch.no_grad():
            if family == "vit":
                logits = model(pixels, interpolate_pos_encoding=True).logits
                hidden = base(pixels, interpolate_pos_encoding=True).last_hidden_state
                check_close("classifier on cls", model.classifier(hidden[:, 0]), logits, 1e-6)
                if (h, w) == (16, 16):
                    check_close("flag False at 16x16", model(pixels).logits, logits, 0.0)
            else:
                logits = model(pixels).logits
                hidden = base(pixels).last_hidden_state
                linear_input = torch.cat([hidden[:, 0], hidden[:, 1:].mean(dim=1)], dim=1)
                check_close("classifier on cls + mean", model.classifier(linear_input), logits, 1e-6)
        top = logits.topk(2, dim=-1).values
        margins.append((top[:, 0] - top[:, 1]).min().item())
        key = f"{h}x{w}"
        seqs[key] = hidden.shape[1]
        assert hidden.shape == (2, 1 + (h // 4) * (w // 4), 32)
        tensors[f"pixel_values_{key}"] = pixels
        tensors[f"logits_{key}"] = logits
        tensors[f"hidden_{key}"] = hidden
    return model, tensors, min(margins), seqs


def write_model_folder(name, model, tensors, meta):
    folder = MODEL_OUT / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    model.save_pretrained(folder)
    for extra in folder.iterdir():
        if extra.name not in ("config.json", "model.safetensors"):
            extra.unlink()
    stored = save_tensors(folder / "expected.safetensors", tensors)
    meta = dict(meta, tensors=describe(stored))
    with safetensors.safe_open(folder / "model.safetensors", "pt") as f:
        keys = sorted(f.keys())
        for k in keys:
            assert f.get_tensor(k).dtype == torch.float32, k
    meta["model_safetensors_keys"] = keys
    write_json(folder / "expected.json", meta)
    total = 0
    for path in sorted(folder.iterdir()):
        size = path.stat().st_size
        total += size
        print(f"  wrote {path.relative_to(ROOT)} ({size} bytes)")
    print(f"  folder total {total} bytes")
    if total > MAX_MODEL_FOLDER_BYTES:
        raise AssertionError(f"{name}: folder is {total} bytes")
    return folder


def model_fixture(family, base_seed):
    for seed in range(base_seed, base_seed + MAX_SEED_TRIES):
        model, tensors, margin, seqs = run_vision_model(family, seed)
        if margin > MIN_MARGIN:
            break
        print(f"  seed {seed}: min margin {margin:.3g}; next seed")
    else:
        raise AssertionError(f"{family}: no seed")
    if family == "vit":
        notes = [
            "ViTForImageClassification: logits = classifier(last_hidden_state[:, 0]) (the CLS row after the final "
            "LayerNorm; no pooler: ViTModel(config, add_pooling_layer=False))",
            "called as model(pixel_values, interpolate_pos_encoding=True) at every size; at 16x16 that is the early "
            "return (identical to the flag False); otherwise the 4x4 patch table is resized bicubic, "
            "align_corners=False, size=(H//4, W//4), and the CLS row kept",
            "pre-LN layers: x + o_proj(attn(layernorm_before(x))), then x + fc2(gelu(fc1(layernorm_after(x)))); "
            "LayerNorm eps 1e-12; exact (erf) GELU; q/k/v/o with biases; scores scaled by head_dim^-0.5",
            "patch embedding: Conv2d(3, 32, kernel 4, stride 4) flattened row-major (h outer); input = "
            "cat(cls_token, patches) + position table",
        ]
        flag = True
    else:
        notes = [
            "Dinov2ForImageClassification: linear_input = cat([last_hidden_state[:, 0], last_hidden_state[:, 1:]"
            ".mean(dim=1)], dim=1) (CLS concatenated with the mean of the patch rows, after the final LayerNorm), "
            "logits = classifier(linear_input), classifier Linear(64, 5)",
            "DINOv2 takes no interpolate_pos_encoding flag: Dinov2Embeddings.forward always calls "
            "interpolate_pos_encoding (early return at 16x16), which interpolates in float32",
            "pre-LN layers with layer scale: x + lambda1 * attn(norm1(x)), then "
            "x + lambda2 * fc2(gelu(fc1(norm2(x)))); "
            "LayerNorm eps 1e-6; MLP width int(hidden * mlp_ratio) = 64; no SwiGLU; q/k/v/o with biases",
            "mask_token [1, 32] is in the file (perturbed, non-zero) but unused without bool_masked_pos",
        ]
        flag = None
    notes += [
        f"init: torch.manual_seed(seed), initializer_range 0.3, then N(0, {PERTURB_STD}) noise on every 1-D parameter "
        "(norm weights, biases, layer scales) and on cls_token / mask_token",
        f"save_pretrained (transformers 5.24) writes the hub key names ({family}.encoder.layer.N.attention.attention."
        "query, ...), reversing the in-memory renaming (" + ("vit.layers.N.attention.q_proj, mlp.fc1, ..." if
        family == "vit" else "dinov2.encoder.layer.N.attention.q_proj, ...") + ") of conversion_mapping.py; "
        "model_safetensors_keys lists them; from_pretrained of the folder gives the same logits (checked)",
        "hidden_<H>x<W> is the base model's last_hidden_state (after the final LayerNorm), seq = 1 + (H//4)*(W//4)",
    ]
    meta = {
        "family": family, **versions(), "seed": seed,
        "sizes": [list(s) for s in MODEL_SIZES],
        "seq_lens": seqs,
        "interpolate_pos_encoding": flag,
        "min_margin": margin,
        "classifier_input": "cls" if family == "vit" else "cat(cls, mean(patches))",
        "notes": notes,
    }
    folder = write_model_folder(family, model, tensors, meta)
    cls = type(model)
    reloaded = cls.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        for h, w in MODEL_SIZES:
            key = f"{h}x{w}"
            kwargs = {"interpolate_pos_encoding": True} if family == "vit" else {}
            check_close(f"reloaded {key}", reloaded(tensors[f"pixel_values_{key}"], **kwargs).logits,
                        tensors[f"logits_{key}"], 1e-6)
    print(f"  seed {seed}, min margin {margin:.4g}")


# ---------------------------------------------------------------------------------------------


def folder_report(folder, limit):
    total = 0
    for path in sorted(folder.iterdir()):
        size = path.stat().st_size
        total += size
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        print(f"  {path.relative_to(ROOT)} {size} bytes sha256 {digest}")
    print(f"  total {total} bytes")
    if total > limit:
        raise AssertionError(f"{folder}: {total} bytes")


def main():
    torch.set_num_threads(1)  # the same reduction order on every run
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if LAYER_OUT.exists():
        shutil.rmtree(LAYER_OUT)
    LAYER_OUT.mkdir(parents=True)
    print("A. interpolate")
    part_a_interpolate()
    print("B. sincos_2d")
    part_b_sincos()
    print("C. pos_interpolation")
    part_c_pos_interpolation()
    print("D. mrope")
    models = part_d_mrope()
    print("E. vision_rope")
    part_e_vision_rope(models)
    print("F. vit")
    model_fixture("vit", 5000)
    print("F. dinov2")
    model_fixture("dinov2", 6000)
    print("sizes")
    folder_report(LAYER_OUT, MAX_LAYER_FOLDER_BYTES)
    for name in ("vit", "dinov2"):
        folder_report(MODEL_OUT / name, MAX_MODEL_FOLDER_BYTES)


if __name__ == "__main__":
    main()
