#!/usr/bin/env python3
"""The GPU kit's PyTorch twin: the PyTorch equivalents of the kit's kernels, same shapes, same timing.

On the GPU machine (from the repository root; torch with CUDA, no network needed):

    python3 tools/gpu/torch_twin.py --out $OUT/torch_twin.jsonl      # about 4 minutes on an H200

Here, the rehearsal on the CPU (smaller sizes, f32 only; under 3 minutes on 2 cores):

    python3 tools/gpu/torch_twin.py --device cpu --quick --out /tmp/twin.jsonl

`--stage 1` and `--stage 2` split the rows between the kit's two device calls (docs/gpu.md): the
f32 rows at the two main lengths first, then the halves, the long length and the small shape.
`--stage 3` is the CUDA kit's tensor-core call (issue 72): attention in f16 and bf16 at
`[1, 8, 8192, 32]`, `[1, 32, 2048, 64]` and `[1, 32, 4096, 128]`, causal, SDPA without a bias and
with ALiBi's and T5's bias tensors, FlexAttention with ALiBi's and T5's score_mod, forward and
forward plus backward, then a decoding step (one query row over 4096 keys, 32 heads of 128).
`--stage 4` is the SIMT call (issue 73): the same shapes in f32 (SDPA's memory-efficient kernel)
then f16, SDPA without a bias and with ALiBi's and T5's bias tensors.

Parts (`--only` takes their names, comma-separated): `copy` (device-to-device copies, the floor
of any elementwise op), `embedding` (token plus learned position embedding, forward and forward
plus backward), `rope` (Hugging Face's rotate_half RoPE, prefill and a decoding step), `attention`
(causal attention: SDPA without bias, SDPA with an ALiBi and a T5 bias tensor, FlexAttention
with an ALiBi score_mod; forward and forward plus backward).

Timing, for every row: warm-up (three launches, then a synchronize), then N launches back to back
between two CUDA events (`--launches`, default 20), ms = elapsed / N; that `--repeats` times
(default 5), the median and the minimum reported. A case whose single launch is slow gets fewer
launches per sync so that its timed part stays near `--case-seconds`; the row says how many.
On the CPU time.perf_counter takes the events' place. `peak_mib` is the CUDA allocator's peak
over the whole case, inputs, bias tensors and block masks included.

Output: one JSON object per line, written and flushed as soon as it is measured (a run cut short
keeps what it measured): first the header (torch, device, cuda), then one row per case with
part, case, dtype, shape or seq, direction, ms, ms_min, launches_per_sync, method, peak_mib,
status, elapsed_s. A case that fails is a row whose status is the error; the run goes on.
Past `--budget` seconds the remaining rows are written with status "not run (budget spent)".
"""

import argparse
import gc
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
HEADS, HEAD_DIM = 8, 32  # the kit's attention: batch 1, 8 heads, head dim 32
# The tensor-core call's shapes (issue 72): (heads, head dim, length), and its decoding step.
MMA_SHAPES = [(8, 32, 8192), (32, 64, 2048), (32, 128, 4096)]
MMA_QUICK_SHAPES = [(8, 32, 1024), (8, 64, 512)]
MMA_DECODE = (32, 128, 4096)


def alibi_slopes(heads):
    """ALiBi's slopes for a power of two of heads: 2^-8/H .. 2^-8."""
    return [2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)]


class Skip(Exception):
    """A case left out on purpose (its row's status is "skipped: ...")."""


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rope_angles(positions, dim, device, dtype, base=10000.0):
    """cos and sin [1, 1, len(positions), dim] as Hugging Face builds them: in f32, then cast."""
    inv_freq = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    freqs = torch.outer(positions.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return tuple(t.to(device, dtype)[None, None] for t in (emb.cos(), emb.sin()))


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """T5Attention._relative_position_bucket (transformers), written out to stay standalone."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    if_large = max_exact + (torch.log(relative_position.float() / max_exact)
                            / math.log(max_distance / max_exact)
                            * (num_buckets - max_exact)).to(torch.long)
    if_large = torch.min(if_large, torch.full_like(if_large, num_buckets - 1))
    return relative_buckets + torch.where(is_small, relative_position, if_large)


def causal_bias(per_distance, seq, dtype, device, heads=HEADS):
    """[1, H, seq, seq]: per_distance[h, i - j] below the diagonal, -inf above it.

    Both biases depend on i - j alone, so they are built from an [H, seq] row, a block of query
    rows at a time: a whole [seq, seq] index tensor at 32768 would itself be 8 GiB.
    """
    bias = torch.empty(1, heads, seq, seq, dtype=dtype, device=device)
    cols = torch.arange(seq, device=device)
    rows = max(1, 2 ** 25 // seq)  # about 1 GiB of f32 per block
    for i0 in range(0, seq, rows):
        dist = torch.arange(i0, min(i0 + rows, seq), device=device)[:, None] - cols[None, :]
        block = per_distance[:, dist.clamp(min=0)].masked_fill(dist < 0, float("-inf"))
        bias[0, :, i0:i0 + dist.shape[0]] = block.to(dtype)
    return bias


class Twin:
    def __init__(self, args):
        self.args = args
        self.dev = torch.device(args.device)
        self.cuda = self.dev.type == "cuda"
        self.out = open(args.out, "w") if args.out != "-" else sys.stdout
        self.t0 = time.time()
        self.rows = []
        where = "cuda events" if self.cuda else "time.perf_counter"
        self.method = f"{where} over N launches per sync, median of {args.repeats}"

    def write(self, obj):
        self.out.write(json.dumps(obj) + "\n")
        self.out.flush()

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.dev)

    def measure(self, row, fn):
        """Times fn as the docstring says; fills ms, ms_min and launches_per_sync into row."""
        fn()
        fn()
        self.sync()
        start = time.perf_counter()
        fn()
        self.sync()
        one = time.perf_counter() - start
        n = max(1, min(self.args.launches, int(self.args.case_seconds / self.args.repeats / max(one, 1e-9))))
        times = []
        for _ in range(self.args.repeats):
            if self.cuda:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                for _ in range(n):
                    fn()
                end.record()
                end.synchronize()
                times.append(begin.elapsed_time(end) / n)
            else:
                start = time.perf_counter()
                for _ in range(n):
                    fn()
                times.append((time.perf_counter() - start) * 1e3 / n)
        row.update(ms=statistics.median(times), ms_min=min(times), launches_per_sync=n)
        return row["ms"]

    def case(self, body, **row):
        """Runs one planned case into a row (or a "not run" row past the budget) and writes it."""
        row = dict(row, ms=None, ms_min=None, launches_per_sync=None, method=self.method,
                   peak_mib=None, status="ok")
        self.rows.append(row)
        if time.time() - self.t0 > self.args.budget:
            row["status"] = "not run (budget spent)"
        else:
            gc.collect()
            if self.cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(self.dev)
            torch.manual_seed(0)
            try:
                body(row)
            except Skip as e:
                row["status"] = f"skipped: {e}"
            except Exception as e:  # one case failing (OOM, no compiler) is a row, not the end
                row["status"] = " ".join(f"{type(e).__name__}: {e}".split())[:400]
            if self.cuda:
                row["peak_mib"] = round(torch.cuda.max_memory_allocated(self.dev) / 2 ** 20)
        row["elapsed_s"] = round(time.time() - self.t0, 1)
        self.write(row)
        size = row.get("seq", row.get("shape"))
        ms = "-" if row["ms"] is None else f"{row['ms']:.4f}"
        print(f"[{row['elapsed_s']:>6} s] {row['part']} {row['case']} {row['dtype']} {size} "
              f"{row['direction']}: {ms} ms {'' if row['status'] == 'ok' else row['status']}",
              file=sys.stderr, flush=True)

    # ------------------------------------------------------------------------------ the cases

    def copy_floor(self, shape, dt, name):
        def body(row):
            src = torch.randn(*shape, device=self.dev).to(DTYPES[dt])
            dst = torch.empty_like(src)
            ms = self.measure(row, lambda: dst.copy_(src))
            row["gb_per_s"] = 2 * src.numel() * src.element_size() / (ms / 1e3) / 1e9
        self.case(body, part="copy", case=name, dtype=dt, shape=list(shape), direction="forward")

    def rope_copy_floor(self, shape, dt):
        def body(row):
            q, k = (torch.randn(*shape, device=self.dev).to(DTYPES[dt]) for _ in range(2))
            q2, k2 = torch.empty_like(q), torch.empty_like(k)

            def step():
                q2.copy_(q)
                k2.copy_(k)
            ms = self.measure(row, step)
            row["gb_per_s"] = 4 * q.numel() * q.element_size() / (ms / 1e3) / 1e9
        self.case(body, part="copy", case="rope_copy_floor", dtype=dt, shape=list(shape),
                  direction="forward")

    def embedding(self, shape, dt, direction):
        batch, seq, d_model, vocab = shape

        def body(row):
            dtype = DTYPES[dt]
            tok = torch.nn.Embedding(vocab, d_model).to(self.dev, dtype)
            pos = torch.nn.Embedding(seq, d_model).to(self.dev, dtype)
            ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
            ids = ids.to(self.dev)
            # [1, seq]: GPT-2's position_ids, whose rows broadcast over the batch in the add.
            positions = torch.arange(seq, device=self.dev)[None]
            if direction == "forward":
                with torch.no_grad():
                    self.measure(row, lambda: tok(ids) + pos(positions))
                return
            grad = torch.ones(batch, seq, d_model, device=self.dev, dtype=dtype)

            def step():  # zeroing counted, as a training step pays it
                tok.zero_grad(set_to_none=True)
                pos.zero_grad(set_to_none=True)
                (tok(ids) + pos(positions)).backward(grad)
            self.measure(row, step)
            row["note"] = "zero_grad(set_to_none=True) of both tables inside each launch"
        self.case(body, part="embedding", case="two_op", dtype=dt, shape=list(shape),
                  direction=direction)

    def rope(self, shape, dt, offset, name):
        def body(row):
            dtype = DTYPES[dt]
            q, k = (torch.randn(*shape, device=self.dev).to(dtype) for _ in range(2))
            cos, sin = rope_angles(torch.arange(offset, offset + shape[2]), shape[3], self.dev, dtype)
            with torch.no_grad():
                self.measure(row, lambda: apply_rotary_pos_emb(q, k, cos, sin))
        self.case(body, part="rope", case=name, dtype=dt, shape=list(shape), direction="forward",
                  position=offset)

    def attention(self, name, seq, dt, direction, heads=HEADS, head_dim=HEAD_DIM, queries=None):
        """One attention case; `queries` (fewer than `seq`): the last query rows alone over all
        `seq` keys, a decoding step (SDPA without a bias only)."""
        def body(row):
            dtype = DTYPES[dt]
            shape = (1, heads, seq, head_dim)
            q_shape = (1, heads, queries or seq, head_dim)
            train = direction == "forward_backward"
            q = torch.randn(*q_shape, device=self.dev).to(dtype).requires_grad_(train)
            k, v = (torch.randn(*shape, device=self.dev).to(dtype).requires_grad_(train)
                    for _ in range(2))
            slopes = torch.tensor(alibi_slopes(heads), device=self.dev)
            distance = torch.arange(seq, device=self.dev)
            if queries and name != "sdpa none":
                raise Skip("a decoding step is timed against SDPA without a bias only")
            if name == "sdpa none":
                # One last row sees every key: no mask (SDPA's is_causal aligns to the top left).
                causal = not queries
                op = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            elif name in ("sdpa alibi tensor", "sdpa t5 tensor"):
                gib = heads * seq * seq * torch.finfo(dtype).bits / 8 / 2 ** 30
                row["bias_gib"] = gib
                if gib > self.args.max_bias_gib:
                    raise Skip(f"the [1,{heads},{seq},{seq}] {dt} bias is {gib:g} GiB > "
                               f"--max-bias-gib {self.args.max_bias_gib:g}")
                if name == "sdpa alibi tensor":  # slope_h * (j - i) for j <= i
                    per_distance = -slopes[:, None] * distance[None].float()
                else:
                    per_distance = self.t5_per_distance(heads, distance)
                bias = causal_bias(per_distance, seq, dtype, self.dev, heads)
                del per_distance
                op = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            elif name == "flex t5":
                per_distance = self.t5_per_distance(heads, distance).to(dtype)
                op = self.flex_op(row, q, k, v, None, seq, train, per_distance)
            else:  # flex alibi
                op = self.flex_op(row, q, k, v, slopes, seq, train)
            if train:
                grad = torch.randn(*q_shape, device=self.dev).to(dtype)
                # autograd.grad returns fresh gradients: nothing accumulates, nothing to zero.
                step = lambda: torch.autograd.grad(op(), (q, k, v), grad)
                row["note"] = "gradients of q, k, v by torch.autograd.grad (no accumulation, no zeroing)"
            else:
                step = op
            with torch.set_grad_enabled(train):
                if name.startswith("flex"):  # the first call compiles: timed apart, out of ms
                    start = time.perf_counter()
                    step()
                    self.sync()
                    row["compile_s"] = round(time.perf_counter() - start, 2)
                self.measure(row, step)
        extra = {"queries": queries} if queries else {}
        self.case(body, part="attention", case=name, dtype=dt, seq=seq,
                  shape=[1, heads, seq, head_dim], direction=direction, **extra)

    def t5_per_distance(self, heads, distance):
        """[heads, seq]: T5's learned table (32 buckets, random) by causal distance."""
        table = torch.randn(32, heads, generator=torch.Generator().manual_seed(1))
        buckets = relative_position_bucket(-distance, bidirectional=False,
                                           num_buckets=32, max_distance=128)
        return table.to(self.dev)[buckets].T.contiguous()

    def flex_op(self, row, q, k, v, slopes, seq, train, per_distance=None):
        """FlexAttention, causal, with ALiBi's score_mod (`slopes`) or a bias by distance
        (`per_distance`, [heads, seq]: T5's table read by the score_mod)."""
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def alibi(score, b, h, q_idx, kv_idx):
            return score + slopes[h] * (kv_idx - q_idx)

        def by_distance(score, b, h, q_idx, kv_idx):
            return score + per_distance[h, (q_idx - kv_idx).clamp(min=0)]

        def causal(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx

        block_mask = create_block_mask(causal, None, None, seq, seq, device=str(self.dev))
        # A fresh dynamo per (shape, dtype, direction): the first twin's one compiled function
        # met its 8th variant (grad mode, shapes, dtypes) at f16 and fell back, silently, to
        # eager flex, which materialises the scores (108 GiB at 32768). dynamic=False: one
        # specialised kernel per shape, as a model compiled for one length gets.
        torch._dynamo.reset()
        compiled = torch.compile(flex_attention, dynamic=False)
        score_mod = alibi if per_distance is None else by_distance
        return lambda: compiled(q, k, v, score_mod=score_mod, block_mask=block_mask)

    # ------------------------------------------------------------------------------ the plan

    def plan(self):
        """The cases in the order wanted most first (the budget cuts from the end)."""
        quick, cuda = self.args.quick, self.cuda
        halves = ["f16", "bf16"] if cuda else []
        big_emb, small_emb = [32, 1024, 768, 32000], [8, 512, 512, 32000]
        emb_shapes = [small_emb] if quick else [big_emb, small_emb]
        # quick: what the kit's rope bench runs on lavapipe (its batch halved to fit 128 MiB buffers)
        rope_shape = [1, 32, 2048, 128] if quick else [8, 32, 2048, 128]
        decode_shape = [8, 32, 1, 128]
        seqs = [1024, 512] if quick else [8192, 2048]
        long_seqs = [] if quick else [32768]
        schemes = ["sdpa none", "sdpa alibi tensor", "sdpa t5 tensor", "flex alibi"]
        directions = ["forward", "forward_backward"]
        only = set(self.args.only.split(",")) if self.args.only else None
        steps = []

        def add(part, fn, *a):
            if only is None or part in only:
                steps.append((fn, a))

        def embedding(shape, dts):
            for dt in dts:
                for direction in directions:
                    add("embedding", self.embedding, shape, dt, direction)

        def rope(dts):
            for dt in dts:
                add("rope", self.rope, rope_shape, dt, 0, "rotate_half")
                add("rope", self.rope, decode_shape, dt, 4000, "rotate_half_decode")

        def attention(seq_list, dts, dirs):
            for dt in dts:
                for seq in seq_list:
                    for direction in dirs:
                        for name in schemes:
                            add("attention", self.attention, name, seq, dt, direction)

        add("copy", self.copy_floor, emb_shapes[0][:3], "f32", "copy_floor")
        add("copy", self.rope_copy_floor, rope_shape, "f32")
        embedding(emb_shapes[0], ["f32"])
        rope(["f32"])
        attention(seqs, ["f32"], directions)
        first = len(steps)  # the kit's first call ends here (`--stage 1`); the rest is `--stage 2`
        for dt in halves:
            add("copy", self.rope_copy_floor, rope_shape, dt)
        embedding(emb_shapes[0], halves)
        rope(halves)
        attention(seqs, halves, directions)
        for direction in directions:  # the long length: every forward before any backward
            attention(long_seqs, ["f32"] + halves, [direction])
        for shape in emb_shapes[1:]:
            add("copy", self.copy_floor, shape[:3], "f32", "copy_floor")
            embedding(shape, ["f32"] + halves)
        stage = self.args.stage
        if stage == "3":
            return self.mma_plan()
        if stage == "4":
            return self.simt_plan()
        return steps if stage == "all" else steps[:first] if stage == "1" else steps[first:]

    def mma_plan(self):
        """`--stage 3`: the CUDA kit's tensor-core call (issue 72), f16 first, each shape's
        forward before its backward, the decoding step last (the budget cuts from the end)."""
        quick, cuda = self.args.quick, self.cuda
        dtypes = ["f16", "bf16"] if cuda else ["f32"]
        shapes = MMA_QUICK_SHAPES if quick else MMA_SHAPES
        names = ["sdpa none", "flex alibi", "flex t5", "sdpa alibi tensor", "sdpa t5 tensor"]
        steps = []
        for dt in dtypes:
            for heads, head_dim, seq in shapes:
                for direction in ["forward", "forward_backward"]:
                    for name in names:
                        steps.append((self.attention, (name, seq, dt, direction, heads, head_dim)))
        heads, head_dim, seq = MMA_DECODE
        for dt in dtypes:
            steps.append((self.attention, ("sdpa none", seq, dt, "forward", heads, head_dim, 1)))
        return steps

    def simt_plan(self):
        """`--stage 4`: the SIMT call (issue 73), f32 first (SDPA's memory-efficient kernel, the
        blocked forward's peer through wgpu) then f16, each shape's forward before its backward,
        SDPA without a bias and with ALiBi's and T5's bias tensors."""
        dtypes = ["f32", "f16"] if self.cuda else ["f32"]
        shapes = MMA_QUICK_SHAPES if self.args.quick else MMA_SHAPES
        steps = []
        for dt in dtypes:
            for heads, head_dim, seq in shapes:
                for direction in ["forward", "forward_backward"]:
                    for name in ["sdpa none", "sdpa alibi tensor", "sdpa t5 tensor"]:
                        steps.append((self.attention, (name, seq, dt, direction, heads, head_dim)))
        return steps

    def run(self):
        name = torch.cuda.get_device_name(self.dev) if self.cuda else "cpu"
        try:  # deprecated in newer torch in favour of fp32_precision: informative only
            tf32 = torch.backends.cuda.matmul.allow_tf32
        except Exception:
            tf32 = None
        self.write({"torch": torch.__version__, "device": name, "cuda": torch.version.cuda,
                    "quick": self.args.quick, "launches": self.args.launches,
                    "repeats": self.args.repeats, "matmul_allow_tf32": tf32,
                    "threads": torch.get_num_threads()})
        for fn, a in self.plan():
            fn(*a)
        self.table()

    def table(self):
        print(f"\n{'part':<10} {'case':<19} {'dtype':<5} {'size':<20} {'direction':<16} "
              f"{'ms':>10} {'ms_min':>10} {'N':>3} {'MiB':>7}  status", file=sys.stderr)
        for r in self.rows:
            size = str(r.get("seq", r.get("shape"))).replace(" ", "")
            num = lambda x, f: "-" if x is None else format(x, f)
            print(f"{r['part']:<10} {r['case']:<19} {r['dtype']:<5} {size:<20} {r['direction']:<16} "
                  f"{num(r['ms'], '.4f'):>10} {num(r['ms_min'], '.4f'):>10} "
                  f"{num(r['launches_per_sync'], 'd'):>3} {num(r['peak_mib'], 'd'):>7}  "
                  f"{r['status'][:60]}", file=sys.stderr)
        print(f"{len(self.rows)} rows, {sum(r['status'] == 'ok' for r in self.rows)} ok, "
              f"{time.time() - self.t0:.0f} s", file=sys.stderr)


def configure_dynamo():
    """Room for every compile the run makes, and an error rather than a silent eager fallback."""
    import torch._dynamo  # not always imported by `import torch`

    config = torch._dynamo.config
    for names, value in ((("recompile_limit", "cache_size_limit"), 64),
                         (("accumulated_recompile_limit", "accumulated_cache_size_limit"), 4096),
                         (("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit"), True)):
        name = next((n for n in names if hasattr(config, n)), None)
        if name:
            setattr(config, name, value)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"],
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="-", help="JSON lines file (default: stdout)")
    parser.add_argument("--only", default="", help="comma-separated parts: copy,embedding,rope,attention")
    parser.add_argument("--quick", action="store_true", help="rehearsal sizes (the CPU)")
    parser.add_argument("--stage", choices=["1", "2", "3", "4", "all"], default="all",
                        help="the kit's calls: 1 = f32 copies, embedding, rope and attention at the "
                             "two main lengths; 2 = the halves, the long length, the small embedding; "
                             "3 = the tensor-core call's attention shapes (issue 72); 4 = the SIMT "
                             "call's (issue 73: f32 and f16, SDPA with and without bias tensors)")
    parser.add_argument("--launches", type=int, help="launches per sync (default 20, quick 3)")
    parser.add_argument("--repeats", type=int, help="timed repeats (default 5, quick 3)")
    parser.add_argument("--case-seconds", type=float, default=10.0,
                        help="fewer launches per sync where one launch is slow, to stay near this")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds before rows go unrun")
    parser.add_argument("--max-bias-gib", type=float, default=16.0,
                        help="skip bias-tensor cases whose [1,8,seq,seq] bias is larger")
    args = parser.parse_args()
    if args.launches is None:
        args.launches = 3 if args.quick else 20
    if args.repeats is None:
        args.repeats = 3 if args.quick else 5
    parts = {"copy", "embedding", "rope", "attention"}
    bad = [p for p in args.only.split(",") if p and p not in parts]
    if bad:
        parser.error(f"unknown part {', '.join(bad)}: the parts are {', '.join(sorted(parts))}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA device")
    configure_dynamo()
    Twin(args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
