#!/usr/bin/env python3
"""The GPU kit's run: everything a lent GPU measures, from binaries built here, in two calls.

Past 700 lines for one reason: the GPU machine gets one Python file of the standard library
(no packages, no network), which runs every part, keeps the report written as it goes, and
prints it; splitting it would add an import path to carry and keep in step.

On the GPU machine (from the repository root, with `gpu-kit/` carried; docs/gpu.md), the two
device calls of a lease, back to back on the warm machine, each at most 6 minutes:

    bash tools/gpu/run --call 1              # tests, embedding, RoPE, attention f32, PyTorch's f32 rows
    bash tools/gpu/run --call 2              # generation, attention f16/long/memory, PyTorch's rest, the demo

The CUDA kit (`KIT_FEATURES=cuda bash tools/gpu/build`, carried as `gpu-kit-cuda`) runs the same
parts on `--device cuda`, without the tests: `bash tools/gpu/run --backend cuda --call 1`.

Here, the rehearsal on lavapipe (the same binaries, smaller sizes, the adapter check relaxed):

    bash tools/gpu/run --allow-cpu-adapter --quick --out /tmp/gpu-rehearsal

Parts, in order (`--only` and `--skip` take their names, comma-separated; `--call N` picks the
call's): `setup` (unpack, Vulkan loader, `nvidia-smi`), `adapter` (what wgpu opened; a CPU
adapter such as llvmpipe fails the run unless `--allow-cpu-adapter`), `tests` (the layer's
behaviour, the kernels' flash, rope and fused tests, the model families: the three binaries at
once, every device they name, each test's seconds from libtest's JSON events), `embedding` and
`rope` (criterion benches on wgpu beside a copy of the same bytes and burn's own modules),
`attention` (the op alone, each bias, each kernel variant, beside burn's `attention`, forward and
forward plus backward, with device memory), `torch` (the PyTorch twin, tools/gpu/torch_twin.py,
on the same shapes: ours over PyTorch for every row both measured), `generation` (greedy tokens
per second of a GPT-2 124M and a Llama-3.2-1B-shaped random checkpoint in f16 and f32 against
PyTorch eager, cold and warm, and a profile of the decode step from cubecl's own log),
`dog_bites_man` (the demo on wgpu and on flex: the verdicts must agree; the first step's seconds,
compiles included, apart).

How each figure is taken: the benches sync the device every `--launches` calls (20; benches/
lib.rs, `iter_synced`) inside criterion's timed region, and the attention cases time groups of
`--attention-launches` steps (10) with one sync, the median of 3 groups; the twin times the
same number of launches between two CUDA events. One sync per call would time the host's round
trip: the first run's copy floor took 185 us that way where PyTorch took 56 us for the same
bytes. The kit's build has no autotune (a user's default build has none either).

Each part is timed; a failing part is recorded and the run goes on. The report
(`gpu-report.md`), the raw numbers (`gpu-report.json`) and every log (`logs.tar.gz`) are
written to `--out` (default `$OUT`) after every part, so a run cut short still returns what it
measured. Standard library only: the GPU machine has Python but no network.
"""

import argparse
import contextlib
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTS = ["setup", "adapter", "tests", "embedding", "rope", "attention", "torch", "generation",
         "dog_bites_man"]
# The two device calls of a 15-minute lease (docs/gpu.md), each at most 6 minutes, the most
# wanted rows first in each: the tests and the f32 kernel rows with their PyTorch twin, then
# generation, the halves, the long lengths, memory and the demo.
CALLS = {
    "1": ["tests", "embedding", "rope", "attention", "torch"],
    "2": ["generation", "attention", "torch", "dog_bites_man"],
    # The CUDA kit's tensor-core call (issue 72): the check of the `mma.sync` kernels against the
    # register kernel and the slow twin (without its sweep), then their timings at the issue's
    # shapes beside SDPA, SDPA with bias tensors and FlexAttention.
    "3": ["tests", "attention", "torch"],
    # The SIMT call (issue 73), once through each kit (`--backend wgpu`, then `cuda`): through
    # wgpu the blocked kernel's tests on the GPU (its plane path: Vulkan reports subgroups), then
    # both kits' timings of the blocked forward beside the shared kernel and SDPA.
    "4": ["tests", "attention", "torch"],
}
# The test filters of call 4 (the kernels' binary alone): the blocked forward's cases and sweep.
SIMT_FILTERS = ["flash::blocked", "flash_sweep::blocked"]
# Issue 72's shapes for call 3: (query heads, head width, length), f16 then bf16; the decoding
# step (one query row over `length` keys) after them. The rehearsal's are smaller.
MMA_SHAPES = [(8, 32, 8192), (32, 64, 2048), (32, 128, 4096)]
MMA_QUICK_SHAPES = [(8, 32, 1024), (8, 64, 512)]
MMA_DECODE = (32, 128, 4096)

# The test binaries and the package folder each runs in (their fixtures are found from there).
# `test-kernels` is the kernels' flash, rope and fused tests in one binary (tools/gpu/kit).
TESTS = [
    ("test-kernels", "crates/burn-positional-kernels"),
    ("test-behaviour", "crates/burn-positional"),
    ("test-families", "crates/burn-positional-models"),
]
# The rehearsal's sample of each binary (libtest filters, any of which selects a test): on
# lavapipe every distinct kernel compiles with LLVM, seconds each, and the whole binaries take
# tens of minutes there; on a GPU every test runs.
QUICK_FILTERS = {
    "test-kernels": ["flash::alibi_weights", "flash::auto_follows", "fused_vs_reference::"],
    "test-behaviour": ["sinusoidal::", "bad_input::"],
    "test-families": ["gpt2"],
}
# The programs of the multi-call binary `gpu-kit` (tools/gpu/kit/main.rs), each a link to it.
# The op-alone attention cases' heads and width where a case does not set them (the
# bench's and the twin's defaults).
HEADS, HEAD_DIM = 8, 32
PROGRAMS = ["bench-embedding", "bench-rope", "bench-attention_memory", "example-dog_bites_man",
            "example-generation_speed"]


class Fatal(Exception):
    """Stops the run (after the report is written): the kit cannot measure what it claims."""


class Kit:
    def __init__(self, args):
        self.args = args
        self.out = os.path.abspath(args.out)
        self.work = os.path.abspath(args.work)
        self.bin = os.path.join(self.work, "bin")
        self.logs = os.path.join(self.work, "logs")
        self.report = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "quick": args.quick,
            "allow_cpu_adapter": args.allow_cpu_adapter,
            "parts": [],
        }
        os.makedirs(self.out, exist_ok=True)
        os.makedirs(self.logs, exist_ok=True)
        self.env = dict(os.environ)
        self.env.setdefault("NODEVICE_SELECT", "1")
        self.env.setdefault("RUST_BACKTRACE", "1")
        self.t0 = time.time()

    # ---------------------------------------------------------------- running and recording

    def sh(self, cmd, log, cwd=None, timeout=None, env=None):
        """Runs `cmd`, its output into `logs/<log>`; returns (returncode or 'timeout', text)."""
        path = os.path.join(self.logs, log)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        start = time.time()
        with open(path, "w") as f:
            f.write(f"$ {' '.join(cmd)}\n")
            f.flush()
            try:
                p = subprocess.run(cmd, cwd=cwd or ROOT, env=env or self.env, stdout=f,
                                   stderr=subprocess.STDOUT, timeout=timeout)
                code = p.returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
            f.write(f"\n[exit {code} after {time.time() - start:.1f} s]\n")
        with open(path, errors="replace") as f:
            return code, f.read()

    def exe(self, name):
        path = os.path.join(self.bin, name)
        if not os.path.exists(path):
            raise Fatal(f"{name} is not in the kit: rebuild it with `bash tools/gpu/build`")
        return path

    @contextlib.contextmanager
    def part(self, name):
        entry = {"part": name, "status": "ok", "seconds": None, "data": {}}
        self.report["parts"].append(entry)
        start = time.time()
        print(f"\n=== {name} (at {start - self.t0:.0f} s)", flush=True)
        try:
            yield entry["data"]
        except Fatal as e:
            entry["status"] = f"fatal: {e}"
            raise
        except Exception as e:  # a part that breaks is recorded; the next part runs
            entry["status"] = f"error: {type(e).__name__}: {e}"
            print(f"!!! {name}: {entry['status']}", flush=True)
        finally:
            entry["seconds"] = round(time.time() - start, 1)
            print(f"=== {name}: {entry['status']} in {entry['seconds']} s", flush=True)
            self.save()

    def save(self):
        self.report["elapsed_s"] = round(time.time() - self.t0, 1)
        with open(os.path.join(self.out, "gpu-report.json"), "w") as f:
            json.dump(self.report, f, indent=1)
        with open(os.path.join(self.out, "gpu-report.md"), "w") as f:
            f.write(markdown(self.report))
        with tarfile.open(os.path.join(self.out, "logs.tar.gz"), "w:gz") as t:
            t.add(self.logs, arcname="logs")

    # ---------------------------------------------------------------- the parts

    def setup(self, data):
        kit = os.path.join(ROOT, "gpu-kit" if self.args.backend == "wgpu" else "gpu-kit-cuda")
        archive = os.path.join(kit, "bin.tar.xz")
        if not os.path.exists(archive):
            how = "KIT_FEATURES=cuda bash tools/gpu/build" if self.args.backend == "cuda" else "bash tools/gpu/build"
            raise Fatal(f"{archive} is not here: build the kit with `{how}` and carry "
                        f"`{os.path.basename(kit)}`")
        shutil.rmtree(self.bin, ignore_errors=True)
        with tarfile.open(archive, "r:xz") as t:
            if sys.version_info >= (3, 12):
                t.extractall(self.work, filter="tar")
            else:
                t.extractall(self.work)
            data["binaries"] = [m.name for m in t.getmembers() if m.isfile()]
        with open(os.path.join(kit, "build.json")) as f:
            data["build"] = json.load(f)
        for program in PROGRAMS:
            os.symlink("gpu-kit", os.path.join(self.bin, program))
        print("carried:", ", ".join(data["binaries"]))
        # The Vulkan loader, where the machine lacks it (the device README's recipe).
        ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
        if "libvulkan.so.1" not in ldconfig:
            debs = glob.glob(os.path.join(kit, "gl", "*.deb"))
            if not debs:
                raise Fatal("no libvulkan.so.1 here and no loader packages in gpu-kit/gl")
            for deb in debs:
                subprocess.run(["dpkg", "-x", deb, "/"], check=True)
            subprocess.run(["ldconfig"], check=True)
            data["vulkan_loader"] = "unpacked from gpu-kit/gl"
        else:
            data["vulkan_loader"] = "present"
        icds = glob.glob("/usr/share/vulkan/icd.d/*.json") + glob.glob("/etc/vulkan/icd.d/*.json")
        nvidia_icd = "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json"
        if not any("nvidia" in i for i in icds) and os.path.exists(nvidia_icd):
            self.env["VK_DRIVER_FILES"] = nvidia_icd
            egl = "/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json"
            if os.path.exists(egl):
                self.env["__EGL_VENDOR_LIBRARY_FILENAMES"] = egl
            data["vulkan_icd"] = nvidia_icd
        else:
            data["vulkan_icd"] = icds
        smi = shutil.which("nvidia-smi")
        if smi:
            code, text = self.sh([smi], "nvidia-smi.log", timeout=60)
            data["nvidia_smi"] = text
            code, text = self.sh([smi, "--query-gpu=name,memory.total,driver_version",
                                  "--format=csv,noheader"], "nvidia-smi-query.log", timeout=60)
            data["gpu"] = text.splitlines()[1].strip() if code == 0 else None
            print(text.splitlines()[1] if code == 0 else "nvidia-smi failed")
        else:
            data["gpu"] = None
            print("no nvidia-smi on this machine")
        data["cpus"] = os.cpu_count()

    def adapter(self, data):
        backend = self.args.backend
        code, text = self.sh([self.exe("bench-attention_memory"), "--adapter", backend],
                             "adapter.log", timeout=120)
        # `description<TAB>is_gpu` (wgpu: "wgpu, adapter: NAME"; cuda: "CUDA device 0").
        line = next((l for l in text.splitlines() if l.count("\t") == 1), None)
        if code != 0 or line is None:
            raise Fatal(f"{backend} opened no device (exit {code}): {panic_line(text)}")
        description, is_gpu = line.split("\t")
        data["wgpu"] = description
        data["is_gpu"] = is_gpu == "true"
        self.report["adapter"] = description
        print(description, "(a GPU)" if data["is_gpu"] else "(runs on the CPU)")
        cpu_like = any(s in description.lower() for s in ("llvmpipe", "lavapipe", "swiftshader"))
        if (cpu_like or not data["is_gpu"]) and not self.args.allow_cpu_adapter:
            raise Fatal(f"wgpu picked {description}, which is the CPU, not the GPU: the "
                        "NVIDIA Vulkan driver was not found (see setup's vulkan_icd); "
                        "--allow-cpu-adapter runs the rehearsal on it anyway")

    def tests(self, data):
        """The three test binaries at once (they share the GPU; 16 cores compile their kernels),
        each with libtest's JSON events and per-test times (`--report-time`, unstable, which a
        stable binary accepts under RUSTC_BOOTSTRAP=1), each stopped at `--test-timeout`."""
        if self.args.call == "4" and self.args.backend != "wgpu":
            data["skipped"] = "call 4 through CUDA: timings only (the blocked kernel's tests run through wgpu)"
            print(data["skipped"])
            return
        if self.args.backend != "wgpu":
            # No test binaries in the CUDA kit (the tests name wgpu, ndarray, flex); its check of
            # what only a GPU runs: the tensor-core attention (cmma) against the register
            # kernel, forward and backward, f16 and bf16.
            data["skipped"] = "the CUDA kit carries no test binaries (the tests name wgpu, ndarray, flex)"
            print(data["skipped"])
            # The check and its boundary sweep took 240 s on an H200 without finishing (f16 to
            # width 96): at least 300 s, whatever the tests' limit.
            # Call 3 leaves the sweep to call 1: its timings are what it is for.
            sweep = [] if self.args.call != "3" else ["--no-sweep"]
            code, text = self.sh([self.exe("bench-attention_memory"), "--check-tensor-cores",
                                  self.args.backend] + sweep, "tensor-cores-check.log",
                                 timeout=max(self.args.test_timeout, 300))
            data["tensor_cores"] = {"exit": code, "lines": [
                l for l in text.splitlines()
                if "differs" in l or "Auto picks" in l or "check" in l or "sweep" in l]}
            print("\n".join(data["tensor_cores"]["lines"]), flush=True)
            if code != 0:
                raise RuntimeError(f"the tensor-core check failed: {panic_line(text)}")
            return
        env = dict(self.env, RUSTC_BOOTSTRAP="1")
        running = {}
        for name, package in TESTS:
            filters = QUICK_FILTERS[name] if self.args.quick else []
            if self.args.call == "4":
                if name != "test-kernels":
                    continue
                filters = SIMT_FILTERS
            cwd = os.path.join(ROOT, package)
            cmd = [self.exe(name), "-Z", "unstable-options", "--format", "json", "--report-time"]
            log = open(os.path.join(self.logs, f"{name}.log"), "w")
            log.write(f"$ {' '.join(cmd + filters)}\n")
            log.flush()
            # The tests find their fixtures from CARGO_MANIFEST_DIR, as under `cargo test`.
            proc = subprocess.Popen(cmd + filters, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                    env=dict(env, CARGO_MANIFEST_DIR=cwd), start_new_session=True)
            running[name] = (proc, log, time.time(), filters)
        deadline = time.time() + self.args.test_timeout
        for name, (proc, log, start, filters) in running.items():
            try:
                code = proc.wait(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
                code = "timeout"
            log.write(f"\n[exit {code} after {time.time() - start:.1f} s]\n")
            log.close()
            with open(os.path.join(self.logs, f"{name}.log"), errors="replace") as f:
                result = parse_libtest_json(f.read())
            result.update(exit=code, seconds=round(time.time() - start, 1), filters=filters)
            data[name] = result
            slowest = ", ".join(f"{t} {s:.1f} s" for t, s in result["times"][:3])
            print(f"{name}: {result['passed']} passed, {result['failed']} failed, "
                  f"{result['ignored']} ignored, {len(result['unfinished'])} unfinished, exit {code}, "
                  f"{result['seconds']} s; slowest: {slowest}", flush=True)
            self.save()
        failing = [n for n, r in data.items() if r["exit"] != 0]
        if failing:
            raise RuntimeError(f"failing test binaries: {', '.join(failing)}")

    def criterion(self, bench, filt, log):
        home = os.path.join(self.work, "criterion", log)
        shutil.rmtree(home, ignore_errors=True)
        # N launches per sync, as the PyTorch twin times (benches/lib.rs, `iter_synced`).
        env = dict(self.env, CRITERION_HOME=home, BENCH_DEVICES=self.args.backend,
                   BENCH_LAUNCHES_PER_SYNC=str(self.args.launches))
        # criterion's fewest samples (10) where a CPU adapter makes each iteration slow.
        timing = (["--warm-up-time", "0.5", "--measurement-time", "1", "--sample-size", "10"]
                  if self.args.quick else ["--warm-up-time", "0.5", "--measurement-time", "1.5"])
        code, text = self.sh([self.exe(bench), "--bench", "--noplot"] + timing + [filt],
                             f"{log}.log", env=env, timeout=self.args.bench_timeout)
        if code != 0:
            raise RuntimeError(f"{bench} exited {code}: see logs/{log}.log")
        return read_criterion(home)

    def embedding(self, data):
        shape = "b8_s512_d512" if self.args.quick else "b32_s1024_d768"
        rows = self.criterion("bench-embedding", shape, "embedding")
        data["rows"] = rows
        data["summary"] = against_copy(rows, ["fused_learned", "fused_sinusoidal", "burn",
                                              "two_op", "reference_learned"])
        for line in data["summary"]:
            print(line)

    def rope(self, data):
        # The rehearsal leaves out burn's RotaryEncoding: on lavapipe one call of it took about
        # 100 s (criterion's estimate: 1036 s for its 10 samples).
        b = self.args.backend
        filt = f"rope/{b}/(fused|op_by_op|copy_floor)" if self.args.quick else f"rope/{b}"
        rows = self.criterion("bench-rope", filt, "rope")
        data["rows"] = rows
        data["summary"] = against_copy(rows, ["fused", "op_by_op", "burn"])
        for line in data["summary"]:
            print(line)

    def attention(self, data):
        quick = self.args.quick
        short, target, long_, memory = (512, 1024, 2048, 4096) if quick else (2048, 8192, 32768, 131072)
        schemes = ["8 kv heads", "8 kv heads, alibi", "8 kv heads, t5"]
        # The GPU's own variant first (its forward, backward and split keys are the targets'),
        # the register one (lavapipe's) after it, for comparison, while the budget lasts. The
        # first call takes f32 at the two main lengths with the shared variant; the second the
        # register variant, the halves, the long length and memory.
        call = self.args.call
        first, second = call in (None, "1"), call in (None, "2")
        cases = []  # (dtype, scheme, seq, direction, variant, reps[, env]): most wanted first
        if call == "3":
            cases = self.mma_cases()
        if call == "4":
            cases = self.simt_cases()
        if first:
            for seq in (target, short):
                for direction in ("forward", "backward"):
                    cases.append(("f32", "burn attention", seq, direction, None, None))
                    cases += [("f32", s, seq, direction, "shared", None) for s in schemes]
        if second and self.args.backend == "cuda":
            # The tensor-core kernels (cmma) in f16 and bf16, the targets first.
            for dtype in ("f16", "bf16"):
                for direction in ("forward", "backward"):
                    cases += [(dtype, s, target, direction, "tensor-cores", None) for s in schemes]
        if second:
            # f16 only: WGSL has no bf16, and wgpu refuses it (the twin times bf16 too).
            for dtype in ("f16",):
                for direction in ("forward", "backward"):
                    cases.append((dtype, "burn attention", target, direction, None, None))
                    cases += [(dtype, s, target, direction, "shared", None) for s in schemes]
            for direction in ("forward", "backward"):
                cases += [("f32", s, target, direction, "registers", None) for s in schemes]
            cases.append(("f32", "burn attention", long_, "forward", None, None))
            for direction in ("forward", "backward"):
                cases += [("f32", s, long_, direction, "shared", None) for s in schemes]
            # Memory alone at the longest length: one step each (its time includes compiling).
            cases += [("f32", s, memory, "forward", "auto", 0) for s in schemes]
            cases += [("f32", s, memory, "backward", "auto", 0) for s in schemes]
        deadline = time.time() + self.args.attention_budget
        results = []
        for dtype, scheme, seq, direction, variant, reps, *extra in cases:
            shape = extra[0] if extra else {}
            row = {"dtype": dtype, "scheme": scheme, "seq": seq, "direction": direction,
                   "variant": variant, **{k.lower(): v for k, v in shape.items()}}
            results.append(row)
            if time.time() > deadline:
                row["status"] = "not run (the part's time budget is spent)"
                continue
            env = dict(self.env, DTYPE=dtype,
                       REPS=str(1 if quick and reps is None else (reps if reps is not None else 3)),
                       LAUNCHES=str(1 if reps == 0 else self.args.attention_launches))
            if variant:
                env["BURN_POSITIONAL_FLASH"] = variant
            env.update({k: str(v) for k, v in shape.items()})
            sizes = "-".join(f"{k.lower()}{v}" for k, v in shape.items())
            tag = f"{dtype}-{scheme}-{seq}-{direction}-{variant}-{sizes}".replace(" ", "_").replace(",", "")
            code, text = self.sh([self.exe("bench-attention_memory"), "--case", self.args.backend, scheme,
                                  str(seq), direction], f"attention/{tag}.log", env=env,
                                 timeout=self.args.case_timeout)
            # The child prints `host_mib ms device_mib` on a line of its own.
            numbers = [l.split() for l in text.splitlines()
                       if re.fullmatch(r"\d+ [\d.e+-]+ \d+", l.strip())]
            if code == 0 and numbers:
                _, ms, device_mib = numbers[-1]
                row.update(status="ok", ms=round(float(ms), 2), device_mib=int(device_mib))
            else:
                row["status"] = f"failed (exit {code}): {panic_line(text)}"
            print(f"{dtype} {direction} {scheme} [{variant}] {seq} {sizes}: "
                  f"{row.get('ms', '-')} ms, {row.get('device_mib', '-')} MiB {row['status'] if row['status'] != 'ok' else ''}",
                  flush=True)
        data["cases"] = results
        data["lengths"] = [short, target, long_, memory]
        data["ratios"] = attention_ratios(results, target)

    def mma_cases(self):
        """Call 3's cases (CUDA): the tensor-core kernels (forced, as `Auto` picks them for the
        halves) at issue 72's shapes without a bias, with ALiBi and with a T5 table, forward
        and forward plus backward, f16 then bf16; the shared kernel (`Auto`'s choice before)
        beside them at the first shape in f16; then the decoding step on both kernels (`Auto`
        takes the shared one's split keys there)."""
        shapes = MMA_QUICK_SHAPES if self.args.quick else MMA_SHAPES
        cases = []
        for dtype in ("f16", "bf16"):
            for heads, width, seq in shapes:
                env = {"HEADS": heads, "HEAD_DIM": width}
                for direction in ("forward", "backward"):
                    for bias in ("", ", alibi", ", t5"):
                        cases.append((dtype, f"{heads} kv heads{bias}", seq, direction,
                                      "tensor-cores", None, env))
            if dtype == "f16":
                heads, width, seq = shapes[0]
                env = {"HEADS": heads, "HEAD_DIM": width}
                for direction in ("forward", "backward"):
                    cases += [(dtype, f"{heads} kv heads{bias}", seq, direction, "shared", None, env)
                              for bias in ("", ", alibi", ", t5")]
        heads, width, seq = MMA_DECODE
        for dtype in ("f16", "bf16"):
            for variant in ("shared", "tensor-cores"):
                cases.append((dtype, f"{heads} kv heads", seq, "forward", variant, None,
                              {"HEADS": heads, "HEAD_DIM": width, "QUERIES": 1}))
        return cases

    def simt_cases(self):
        """Call 4's cases (issue 73): the blocked kernels (forced) at issue 72's shapes without
        a bias, with ALiBi and with a T5 table, forward and forward plus backward (the blocked
        backward at widths up to 64 without a bias gradient, else the shared one), f32 (wgpu's
        dtype and SDPA's memory-efficient kernel) then f16; the shared kernel beside them
        without a bias at each shape, in the same run."""
        shapes = MMA_QUICK_SHAPES if self.args.quick else MMA_SHAPES
        cases = []
        for dtype in ("f32", "f16"):
            for heads, width, seq in shapes:
                env = {"HEADS": heads, "HEAD_DIM": width}
                for direction in ("forward", "backward"):
                    cases += [(dtype, f"{heads} kv heads{bias}", seq, direction, "blocked", None, env)
                              for bias in ("", ", alibi", ", t5")]
                    cases.append((dtype, f"{heads} kv heads", seq, direction, "shared", None, env))
        return cases

    def torch(self, data):
        """The PyTorch twin (tools/gpu/torch_twin.py) on the same shapes, timed the same way (N
        launches per sync), and ours over PyTorch for every row both sides measured."""
        stage = self.args.call or "all"
        out = os.path.join(self.work, f"torch-twin-{stage}.jsonl")
        if os.path.exists(out):
            os.remove(out)
        cmd = ["python3", os.path.join(ROOT, "tools", "gpu", "torch_twin.py"), "--device",
               self.args.torch_device, "--out", out, "--stage", stage, "--budget",
               str(self.args.torch_budget)]
        cmd += ["--quick"] if self.args.quick else ["--launches", str(self.args.launches)]
        code, text = self.sh(cmd, f"torch-twin-{stage}.log", timeout=self.args.torch_budget + 180)
        rows = []
        if os.path.exists(out):
            with open(out) as f:
                rows = [json.loads(l) for l in f if l.strip()]
        if rows and "torch" in rows[0]:
            data["header"] = rows.pop(0)
        data["rows"] = rows
        data["ratios"] = torch_ratios(self.report, rows)
        for r in data["ratios"]:
            print(f"{r['row']}: ours {r['ours_ms']:.4g} ms, PyTorch ({r['theirs']}) "
                  f"{r['torch_ms']:.4g} ms: {r['ratio']}x")
        if code != 0:
            raise RuntimeError(f"the twin exited {code}: {panic_line(text)}")

    def dog_bites_man(self, data):
        # The rehearsal: 30 steps (the fewest with every verdict settled, tests/dog_bites_man.rs)
        # and three schemes: on lavapipe, under a concurrent build, all seven ran past 300 s.
        steps = (["--steps", "30", "--schemes", "none,sinusoidal,alibi"] if self.args.quick
                 else [])
        verdicts = {}
        # The GPU side is stored under "wgpu" whatever the backend (the report's columns).
        for device in ("wgpu", "flex"):
            name = self.args.backend if device == "wgpu" else device
            code, text = self.sh([self.exe("example-dog_bites_man"), "--device", name, "--out",
                                  os.path.join(self.work, f"dbm-{device}")] + steps,
                                 f"dog_bites_man-{device}.log", timeout=600)
            if code != 0:
                raise RuntimeError(f"dog_bites_man --device {device} exited {code}")
            verdicts[device] = parse_dog_bites_man(text)
            data[device] = verdicts[device]
            data[f"{device}_output"] = text
        same = {s: verdicts["wgpu"][s]["verdict"] == verdicts["flex"][s]["verdict"]
                for s in verdicts["flex"]}
        data["verdicts_agree"] = all(same.values()) and set(verdicts["wgpu"]) == set(verdicts["flex"])
        print("verdicts agree" if data["verdicts_agree"] else f"verdicts differ: {same}")
        if not data["verdicts_agree"]:
            raise RuntimeError("the wgpu verdicts differ from flex's")

    def generation(self, data):
        quick = self.args.quick
        torch_device = self.args.torch_device
        ckpt = os.path.join(self.work, "checkpoints")
        write = ["python3", os.path.join(ROOT, "tools", "generation_speed.py"), "write", ckpt,
                 "--models", "gpt2,llama-1b", "--dtypes", "f32,f16", "--device", torch_device]
        if quick:
            # Two layers and 12000 tokens: every table within lavapipe's 128 MiB buffers.
            write += ["--layers", "2", "--vocab", "12000"]
        if not os.path.exists(os.path.join(ckpt, "llama-1b-f16", "config.json")):
            code, text = self.sh(write, "generation-write.log", timeout=600)
            if code != 0:
                raise RuntimeError(f"writing the checkpoints failed: {panic_line(text)}")
        prompt, new = ("16", "8") if quick else ("128", "128")
        deadline = time.time() + self.args.generation_budget
        rows = []
        for model in ("gpt2-f16", "llama-1b-f16", "gpt2", "llama-1b"):
            for batch in ("1", "8"):
                for side in ("ours", "pytorch"):
                    row = {"model": model, "batch": int(batch), "side": side}
                    rows.append(row)
                    if time.time() > deadline:
                        row["status"] = "not run (the part's time budget is spent)"
                        continue
                    path = os.path.join(ckpt, model)
                    if side == "ours":
                        cmd = [self.exe("example-generation_speed"), path, "--batch", batch,
                               "--prompt", prompt, "--new", new, "--device", self.args.backend]
                    else:
                        cmd = ["python3", os.path.join(ROOT, "tools", "generation_speed.py"), "run",
                               path, "--batch", batch, "--prompt", prompt, "--new", new,
                               "--device", torch_device, "--threads", str(os.cpu_count())]
                    code, text = self.sh(cmd, f"generation/{model}-{batch}-{side}.log",
                                         timeout=self.args.case_timeout * 3)
                    line = next((l for l in text.splitlines() if l.startswith("{")), None)
                    if code == 0 and line:
                        # Both programs name their side too: keep ours/pytorch as the key.
                        measured = json.loads(line)
                        row["program"] = measured.pop("side", None)
                        row.update(measured, status="ok")
                    else:
                        row["status"] = f"failed (exit {code}): {panic_line(text)}"
                    print(f"{side} {model} batch {batch}: decode "
                          f"{row.get('decode_tokens_per_s', '-')} tok/s, prefill "
                          f"{row.get('prefill_tokens_per_s', '-')} tok/s {'' if row['status'] == 'ok' else row['status']}",
                          flush=True)
                    self.save()
        data["rows"] = rows
        data["prompt"], data["new"] = int(prompt), int(new)
        self.save()
        # The profile of a warm decode step (cubecl's own log: every kernel launched and every
        # kernel compiled): two cold runs of GPT-2 f16 at batch 1, with few and with many new
        # tokens; their difference is what the extra decode steps cost, launches and compiles
        # per step (a compile per step would be a recompile as the keys grow).
        if time.time() < deadline + 60:
            data["profile"] = self.profile_decode(os.path.join(ckpt, "gpt2-f16"), prompt,
                                                  (4, 4 + int(new)))

    def profile_decode(self, path, prompt, news):
        counts = []
        for new in news:
            folder = os.path.join(self.work, f"profile-{new}")
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            log = os.path.join(folder, "cubecl.log")
            # cubecl reads cubecl.toml from the working folder (or a parent).
            with open(os.path.join(folder, "cubecl.toml"), "w") as f:
                f.write(f'[profiling.logger]\nlevel = "minimal"\nfile = "{log}"\n'
                        f'[compilation.logger]\nlevel = "basic"\nfile = "{log}"\n')
            code, text = self.sh([self.exe("example-generation_speed"), path, "--batch", "1",
                                  "--prompt", prompt, "--new", str(new), "--runs", "1",
                                  "--device", self.args.backend], f"generation/profile-{new}.log",
                                 cwd=folder, timeout=self.args.case_timeout * 3)
            if code != 0 or not os.path.exists(log):
                return {"status": f"failed (exit {code}): {panic_line(text)}"}
            launches, compiles = {}, 0
            with open(log, errors="replace") as f:
                for line in f:
                    if line.startswith("Executing "):
                        name = re.sub(r"[<|].*", "", line[len("Executing "):]).strip()
                        launches[name] = launches.get(name, 0) + 1
                    elif "Compiling" in line:
                        compiles += 1
            counts.append((new, launches, compiles))
        (few, short, c_short), (many, long_, c_long) = counts
        steps = many - few
        per_step = {k: round((long_.get(k, 0) - short.get(k, 0)) / steps, 2)
                    for k in set(long_) | set(short)}
        per_step = dict(sorted(((k, v) for k, v in per_step.items() if v), key=lambda kv: -kv[1]))
        profile = {"status": "ok", "steps": steps,
                   "launches_per_step": round(sum(per_step.values()), 1),
                   "compiles_per_step": round((c_long - c_short) / steps, 2),
                   "compiles_cold": c_short, "kernels_per_step": per_step}
        print(f"decode profile: {profile['launches_per_step']} launches and "
              f"{profile['compiles_per_step']} compiles per step; most launched: "
              + ", ".join(f"{k} {v}" for k, v in list(per_step.items())[:5]), flush=True)
        return profile


# -------------------------------------------------------------------- parsing


def panic_line(text):
    lines = text.splitlines()
    for i, l in enumerate(lines):
        if "panicked at" in l and i + 1 < len(lines):
            return lines[i + 1].strip()[:300]
    for l in reversed(lines):
        if "Error" in l or "error" in l:
            return l.strip()[:300]
    return (lines[-2] if len(lines) > 1 else "no output")[:300]


def parse_libtest(text):
    result = {"passed": 0, "failed": 0, "ignored": 0, "failures": []}
    for m in re.finditer(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", text):
        result["passed"] += int(m.group(1))
        result["failed"] += int(m.group(2))
        result["ignored"] += int(m.group(3))
    result["failures"] = re.findall(r"^test (\S+) \.\.\. FAILED", text, re.M)
    result["panics"] = [panic_line(chunk) for chunk in text.split("---- ")[1:]][:20]
    return result


def parse_libtest_json(text):
    """libtest's JSON events (`--format json --report-time`): counts, failures with their
    output, every finished test's seconds (slowest first), and the tests still running when the
    binary was stopped."""
    result = {"passed": 0, "failed": 0, "ignored": 0, "failures": [], "panics": [], "times": [],
              "unfinished": []}
    started = []
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") != "test":
            continue
        name, kind = event.get("name"), event.get("event")
        if kind == "started":
            started.append(name)
            continue
        if name in started:
            started.remove(name)
        if kind == "ok":
            result["passed"] += 1
        elif kind == "ignored":
            result["ignored"] += 1
        elif kind in ("failed", "timeout"):
            result["failed"] += 1
            result["failures"].append(name)
            result["panics"].append(panic_line(event.get("stdout", "")))
        if "exec_time" in event:
            result["times"].append((name, round(float(event["exec_time"]), 2)))
    result["times"].sort(key=lambda t: -t[1])
    result["unfinished"] = started
    return result


def read_criterion(home):
    rows = []
    for bench in glob.glob(os.path.join(home, "**", "new", "benchmark.json"), recursive=True):
        with open(bench) as f:
            meta = json.load(f)
        with open(os.path.join(os.path.dirname(bench), "estimates.json")) as f:
            est = json.load(f)
        ns = est["median"]["point_estimate"]
        throughput = meta.get("throughput") or {}
        nbytes = throughput.get("Bytes") or throughput.get("BytesDecimal")
        rows.append({
            "group": meta["group_id"], "function": meta["function_id"], "value": meta["value_str"],
            "median_ns": ns,
            "low_ns": est["median"]["confidence_interval"]["lower_bound"],
            "high_ns": est["median"]["confidence_interval"]["upper_bound"],
            "bytes": nbytes,
            "gb_per_s": nbytes / ns if nbytes else None,
        })
    rows.sort(key=lambda r: (r["group"], r["value"], r["function"]))
    return rows


def against_copy(rows, functions):
    """Each function's time against the copy floor of its group and shape: percent of the
    copy's bandwidth (the same bytes: 100 % is as fast as reading and writing them once)."""
    lines = []
    for r in rows:
        if r["function"] not in functions:
            continue
        floor = next((c for c in rows if c["group"] == r["group"] and c["value"] == r["value"]
                      and c["function"] == "copy_floor"), None)
        if floor:
            r["percent_of_copy"] = round(100 * floor["median_ns"] / r["median_ns"], 1)
        lines.append(f"{r['group']} {r['function']} {r['value']}: {r['median_ns'] / 1e3:.1f} us, "
                     f"{(r['gb_per_s'] or 0):.2f} GB/s, {r.get('percent_of_copy', '-')} % of the copy")
    return lines


def attention_ratios(cases, seq):
    """ALiBi's and T5's time against burn's `attention` without a bias, at `seq`, per dtype,
    direction and variant (the issue's target: at most 1.2)."""
    ratios = []
    for dtype in ("f32", "f16"):
        for direction in ("forward", "backward"):
            burn = next((c for c in cases if c["scheme"] == "burn attention" and c["seq"] == seq
                         and c["dtype"] == dtype and c["direction"] == direction
                         and c.get("status") == "ok"), None)
            for c in cases:
                if (c["seq"], c["dtype"], c["direction"]) != (seq, dtype, direction):
                    continue
                if c["scheme"] == "burn attention" or c.get("status") != "ok" or not burn:
                    continue
                ratios.append({"dtype": dtype, "direction": direction, "scheme": c["scheme"],
                               "variant": c["variant"], "ratio": round(c["ms"] / burn["ms"], 2)})
    return ratios


def torch_ratios(report, twin):
    """Ours over PyTorch (time over time: below 1 is faster) for every row of this run that the
    twin measured too: the embedding and RoPE benches, the copy floors, and the attention cases
    (our no-bias kernel and burn's `attention` against SDPA without a bias, ALiBi against SDPA
    with its bias tensor and against FlexAttention, T5 against SDPA with its bias tensor)."""
    parts = {p["part"]: p["data"] for p in report["parts"]}
    ok = [t for t in twin if t.get("status") == "ok" and t.get("ms")]

    def theirs(part, case, dtype, direction, **match):
        return next((t for t in ok if (t["part"], t["case"], t["dtype"], t["direction"])
                     == (part, case, dtype, direction)
                     and all(t.get(k) == v for k, v in match.items())), None)

    ratios = []

    def add(row, ours_ms, t):
        if t:
            ratios.append({"row": row, "ours_ms": ours_ms, "theirs": t["case"],
                           "torch_ms": t["ms"], "ratio": round(ours_ms / t["ms"], 2),
                           "launches_per_sync": t.get("launches_per_sync")})

    for r in parts.get("embedding", {}).get("rows", []):
        m = re.fullmatch(r"b(\d+)_s(\d+)_d(\d+)_v(\d+)", r["value"])
        if not m:
            continue
        shape = [int(x) for x in m.groups()]
        direction = "forward" if r["group"].startswith("forward/") else "forward_backward"
        row = f"embedding {direction} {r['function']} {r['value']}"
        if r["function"] == "copy_floor" and direction == "forward":
            add(row, r["median_ns"] / 1e6, theirs("copy", "copy_floor", "f32", "forward",
                                                  shape=shape[:3]))
        elif r["function"] in ("fused_learned", "burn", "two_op"):
            add(row, r["median_ns"] / 1e6, theirs("embedding", "two_op", "f32", direction,
                                                  shape=shape))
    for r in parts.get("rope", {}).get("rows", []):
        m = re.fullmatch(r"b(\d+)_h(\d+)_s(\d+)_at(\d+)", r["value"])
        if not m:
            continue
        b, h, seq, at = (int(x) for x in m.groups())
        shape = [b, h, seq, 128]
        row = f"rope {r['function']} {r['value']}"
        if r["function"] == "copy_floor" and at == 0:
            add(row, r["median_ns"] / 1e6, theirs("copy", "rope_copy_floor", "f32", "forward",
                                                  shape=shape))
        elif r["function"] in ("fused", "burn", "op_by_op"):
            case = "rotate_half" if at == 0 else "rotate_half_decode"
            add(row, r["median_ns"] / 1e6, theirs("rope", case, "f32", "forward", shape=shape))
    # Each of our schemes against its peers: no bias against SDPA without one, ALiBi against
    # SDPA with its bias tensor and FlexAttention's score_mod, T5 likewise; matched by dtype,
    # direction, length, heads and width (8 and 32 unless the case set them), and query rows
    # (a decoding step against SDPA's).
    peers = {"": ["sdpa none"], "alibi": ["sdpa alibi tensor", "flex alibi"],
             "t5": ["sdpa t5 tensor", "flex t5"]}
    for c in parts.get("attention", {}).get("cases", []):
        if c.get("status") != "ok" or c["variant"] == "auto":
            continue
        if c["scheme"] == "burn attention":
            kinds = peers[""]
        else:
            m = re.fullmatch(r"(\d+) kv heads(?:, (alibi|t5))?", c["scheme"])
            if not m:
                continue
            kinds = peers[m.group(2) or ""]
        direction = "forward" if c["direction"] == "forward" else "forward_backward"
        heads, width = c.get("heads", HEADS), c.get("head_dim", HEAD_DIM)
        sizes = "" if (heads, width) == (HEADS, HEAD_DIM) else f" [1, {heads}, seq, {width}]"
        queries = c.get("queries")
        row = (f"attention {c['dtype']} {c['direction']} {c['scheme']} "
               f"{c['variant'] or ''} {c['seq']}{sizes}"
               f"{f' ({queries} query row)' if queries else ''}").replace("  ", " ")
        for case in kinds:
            add(row, c["ms"], theirs("attention", case, c["dtype"], direction, seq=c["seq"],
                                     shape=[1, heads, c["seq"], width], queries=queries))
    return ratios


def parse_dog_bites_man(text):
    """Per scheme: the pooled difference (part 1-2), the held-out accuracy (part 3), and the
    verdict they give: whether the scheme tells the sentences apart, and learns who bites."""
    table = {}
    for m in re.finditer(r"^\s+([a-z0-9-]+)\s+\|\s+([\d.]+)\s+\|\s+([\d.]+)\s*$", text, re.M):
        table.setdefault(m.group(1), {})["pooled_difference"] = float(m.group(3))
    for m in re.finditer(r"^\s+([a-z0-9-]+)\s+\|\s+([\d.]+) %\s+\|\s+([\d.]+) %\s+\|\s+([\d.]+)"
                         r"(?:\s+\|\s+([\d.]+))?\s*$", text, re.M):
        entry = table.setdefault(m.group(1), {})
        entry.update(train=float(m.group(2)), held_out=float(m.group(3)), seconds=float(m.group(4)))
        if m.group(5):
            # The first step alone (compiles included), printed on a device that compiles.
            entry["first_step_seconds"] = float(m.group(5))
    for entry in table.values():
        tells = entry.get("pooled_difference", 0) > 1e-4
        learns = entry.get("held_out", 0) > 75
        entry["verdict"] = ("tells them apart" if tells else "blind") + (
            ", learns who bites" if learns else ", at chance")
    return table


# -------------------------------------------------------------------- the report


def markdown(report):
    parts = {p["part"]: p for p in report["parts"]}
    setup = parts.get("setup", {}).get("data", {})
    out = [
        "# GPU kit report",
        "",
        f"Started {report['started']}; {report.get('elapsed_s')} s in all"
        + (" (rehearsal sizes, `--quick`)" if report["quick"] else "") + ".",
        f"GPU: {setup.get('gpu') or 'none (no nvidia-smi)'}; wgpu adapter: "
        f"{report.get('adapter', 'not opened')}; {setup.get('cpus')} CPUs.",
        f"Built from commit {setup.get('build', {}).get('commit', '?')}.",
        "",
        "| part | status | seconds |",
        "| --- | --- | --- |",
    ]
    out += [f"| {p['part']} | {p['status']} | {p['seconds']} |" for p in report["parts"]]
    tests = parts.get("tests", {}).get("data", {})
    if "tensor_cores" in tests:
        # The CUDA kit: no test binaries, the tensor-core check's lines instead.
        out += ["", f"## Tensor-core check (exit {tests['tensor_cores']['exit']})", "", "```text"]
        out += tests["tensor_cores"]["lines"]
        out += ["```"]
    elif "tests" in parts:
        out += ["", "## Tests (the three binaries at once; each test's own seconds from libtest)", "",
                "| binary | passed | failed | ignored | unfinished | exit | seconds |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for name, r in parts["tests"]["data"].items():
            out.append(f"| {name} | {r['passed']} | {r['failed']} | {r['ignored']} | "
                       f"{len(r.get('unfinished', []))} | {r['exit']} | {r['seconds']} |")
        for name, r in parts["tests"]["data"].items():
            out += ["", f"{name}: the slowest tests (every test's time is in gpu-report.json)", "",
                    "| test | seconds |", "| --- | --- |"]
            out += [f"| `{t}` | {sec} |" for t, sec in r.get("times", [])[:12]]
            out += [f"| `{t}` | still running when stopped |" for t in r.get("unfinished", [])]
            out += [f"| `{f}` | failed: {p} |" for f, p in zip(r["failures"][:10], r.get("panics", []))]
    for name, title in (("embedding", "Fused embedding"), ("rope", "Fused RoPE")):
        if name in parts and parts[name]["data"].get("rows"):
            out += ["", f"## {title} (criterion medians; % of copy = the copy floor's time over this one's)",
                    "", "| group | function | shape | median | GB/s | % of copy |",
                    "| --- | --- | --- | --- | --- | --- |"]
            for r in parts[name]["data"]["rows"]:
                out.append(f"| {r['group']} | {r['function']} | {r['value']} | "
                           f"{r['median_ns'] / 1e3:.1f} us | {(r['gb_per_s'] or 0):.2f} | "
                           f"{r.get('percent_of_copy', '')} |")
    if "attention" in parts and parts["attention"]["data"].get("cases"):
        data = parts["attention"]["data"]
        out += ["", "## Attention, the op alone (causal, q/k/v `[1, heads, seq, width]`)", "",
                "Time per step in ms (median of 3; memory rows: one step, compile included) and "
                "device memory reserved by the step in MiB. Heads and width 8 and 32 unless "
                "named; query rows all `seq` unless named (a decoding step).", "",
                "| dtype | direction | scheme | variant | seq | heads x width (queries) | ms | MiB | status |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for c in data["cases"]:
            sizes = f"{c.get('heads', HEADS)} x {c.get('head_dim', HEAD_DIM)}"
            if c.get("queries"):
                sizes += f" ({c['queries']})"
            out.append(f"| {c['dtype']} | {c['direction']} | {c['scheme']} | {c['variant'] or ''} | "
                       f"{c['seq']} | {sizes} | {c.get('ms', '')} | {c.get('device_mib', '')} | "
                       f"{'' if c.get('status') == 'ok' else c.get('status', '')} |")
        out += ["", f"Against burn's `attention` without a bias at {data['lengths'][1]} (target: at most 1.2):",
                "", "| dtype | direction | scheme | variant | ratio |", "| --- | --- | --- | --- | --- |"]
        out += [f"| {r['dtype']} | {r['direction']} | {r['scheme']} | {r['variant']} | {r['ratio']} |"
                for r in data["ratios"]]
    if "torch" in parts and parts["torch"]["data"].get("rows") is not None:
        data = parts["torch"]["data"]
        header = data.get("header", {})
        out += ["", f"## Against PyTorch {header.get('torch', '?')} on {header.get('device', '?')} "
                "(ours over PyTorch, time over time: below 1 is faster)", "",
                f"Both sides: {data['rows'][0]['method'] if data['rows'] else '?'}; ours: criterion "
                "medians of `BENCH_LAUNCHES_PER_SYNC` calls per sync, attention the median of 3 "
                "groups of `LAUNCHES` steps per sync.", "",
                "| row | ours ms | PyTorch | PyTorch ms | ours / PyTorch |", "| --- | --- | --- | --- | --- |"]
        out += [f"| {r['row']} | {r['ours_ms']:.4g} | {r['theirs']} | {r['torch_ms']:.4g} | {r['ratio']} |"
                for r in data["ratios"]]
        out += ["", "PyTorch's rows:", "", "| part | case | dtype | size | direction | ms | MiB | status |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in data["rows"]:
            ms = r.get("ms")
            out.append(f"| {r['part']} | {r['case']} | {r['dtype']} | {r.get('seq', r.get('shape'))} | "
                       f"{r['direction']} | {'' if ms is None else f'{ms:.4g}'} | {r.get('peak_mib') or ''} | "
                       f"{'' if r['status'] == 'ok' else r['status'][:80]} |")
    if "dog_bites_man" in parts and parts["dog_bites_man"]["data"].get("wgpu"):
        data = parts["dog_bites_man"]["data"]
        out += ["", "## dog_bites_man, wgpu against flex", "",
                f"Verdicts agree: {data.get('verdicts_agree')}.", "",
                "| scheme | wgpu pooled diff | wgpu held-out | wgpu s | wgpu first step s | flex pooled diff | "
                "flex held-out | flex s | wgpu verdict |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for s, w in data["wgpu"].items():
            f = data.get("flex", {}).get(s, {})
            out.append(f"| {s} | {w.get('pooled_difference')} | {w.get('held_out')} % | {w.get('seconds')} | "
                       f"{w.get('first_step_seconds', '')} | {f.get('pooled_difference')} | "
                       f"{f.get('held_out')} % | {f.get('seconds')} | {w['verdict']} |")
    if "generation" in parts and parts["generation"]["data"].get("rows"):
        data = parts["generation"]["data"]
        out += ["", f"## Greedy generation ({data['prompt']} prompt tokens, {data['new']} new; two "
                "generations per process: cold is the first, warm the second)", "",
                "| model | batch | side | cold prefill s | cold decode tok/s | warm prefill tok/s | "
                "warm decode tok/s | warm step ms (first, median, last, slowest) | status |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in data["rows"]:
            steps = r.get("decode_step_ms")
            steps = ", ".join(f"{steps[k]:.2f}" for k in ("first", "median", "last", "slowest")) if steps else ""
            out.append(f"| {r['model']} | {r['batch']} | {r['side']} | {r.get('cold_prefill_s', '')} | "
                       f"{r.get('cold_decode_tokens_per_s', '')} | {r.get('prefill_tokens_per_s', '')} | "
                       f"{r.get('decode_tokens_per_s', '')} | {steps} | "
                       f"{'' if r['status'] == 'ok' else r['status']} |")
        profile = data.get("profile")
        if profile and profile.get("status") == "ok":
            out += ["", f"Decode profile (GPT-2 f16, batch 1; cubecl's log, the difference of two cold "
                    f"runs {profile['steps']} steps apart): {profile['launches_per_step']} launches and "
                    f"{profile['compiles_per_step']} compiles per step ({profile['compiles_cold']} "
                    "compiles in the shorter run).", "", "| kernel | launches per step |", "| --- | --- |"]
            out += [f"| `{k}` | {v} |" for k, v in list(profile["kernels_per_step"].items())[:15]]
        elif profile:
            out += ["", f"Decode profile: {profile['status']}"]
        out += ["", "Ours over PyTorch's decode tokens per second:", ""]
        for r in data["rows"]:
            if r["side"] != "ours" or r["status"] != "ok":
                continue
            theirs = next((t for t in data["rows"] if t["side"] == "pytorch" and t["model"] == r["model"]
                           and t["batch"] == r["batch"] and t["status"] == "ok"), None)
            if theirs:
                out.append(f"- {r['model']} batch {r['batch']}: "
                           f"{r['decode_tokens_per_s'] / theirs['decode_tokens_per_s']:.2f}x")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run", "report"])
    parser.add_argument("--out", default=os.environ.get("OUT", os.path.join(ROOT, "gpu-out")))
    parser.add_argument("--work", default="/tmp/gpu-kit", help="where binaries and logs go")
    parser.add_argument("--allow-cpu-adapter", action="store_true",
                        help="rehearsal: accept a CPU adapter (lavapipe) instead of failing")
    parser.add_argument("--quick", action="store_true", help="rehearsal sizes")
    parser.add_argument("--only", default="", help="comma-separated parts")
    parser.add_argument("--skip", default="", help="comma-separated parts")
    parser.add_argument("--torch-device", default="cuda" if shutil.which("nvidia-smi") else "cpu")
    parser.add_argument("--call", choices=sorted(CALLS),
                        help="one of the lease's two device calls (docs/gpu.md): its parts and rows")
    parser.add_argument("--backend", choices=["wgpu", "cuda"], default="wgpu",
                        help="the GPU backend: wgpu (gpu-kit/) or cuda (gpu-kit-cuda/, "
                             "KIT_FEATURES=cuda bash tools/gpu/build)")
    parser.add_argument("--launches", type=int, default=20,
                        help="launches per device sync in the benches and the twin")
    parser.add_argument("--attention-launches", type=int, default=10,
                        help="attention steps per sync (LAUNCHES of bench-attention_memory)")
    parser.add_argument("--torch-budget", type=int, default=90)
    parser.add_argument("--test-timeout", type=int, default=150)
    parser.add_argument("--bench-timeout", type=int, default=120)
    parser.add_argument("--case-timeout", type=int, default=60)
    parser.add_argument("--attention-budget", type=int, default=120)
    parser.add_argument("--generation-budget", type=int, default=120)
    args = parser.parse_args()
    if args.command == "report":
        with open(os.path.join(args.out, "gpu-report.json")) as f:
            sys.stdout.write(markdown(json.load(f)))
        return 0
    kit = Kit(args)
    only = [p for p in args.only.split(",") if p]
    skip = [p for p in args.skip.split(",") if p]
    for p in only + skip:
        if p not in PARTS:
            parser.error(f"unknown part {p}: the parts are {', '.join(PARTS)}")
    # A call runs its parts in its own order (the most wanted first); otherwise PARTS' order.
    if args.call and not only:
        wanted = ["setup", "adapter"] + [p for p in CALLS[args.call] if p not in skip]
    else:
        wanted = [p for p in PARTS
                  if (not only or p in only or p in ("setup", "adapter")) and p not in skip]
    try:
        for name in wanted:
            with kit.part(name) as data:
                getattr(kit, name)(data)
    except Fatal as e:
        print(f"\nFATAL: {e}", flush=True)
        return 2
    finally:
        print("\n" + "\n".join(f"{p['part']:<14} {p['seconds']:>7} s  {p['status']}"
                               for p in kit.report["parts"]))
        print(f"total {time.time() - kit.t0:.0f} s; report: {kit.out}/gpu-report.md")
    return 0 if all(p["status"] == "ok" for p in kit.report["parts"]) else 1


if __name__ == "__main__":
    sys.exit(main())
