#!/usr/bin/env python3
"""Compile every GPU kernel for NVIDIA without a GPU, and say what each would cost on one.

Past 700 lines for one reason: `.ci/checks` runs it as one standard-library
script (the compile, the SASS reader, the occupancy calculator, the inner-loop gate, the
tables), with its self-test beside it in `tools/cuda/selftest/`.

    python3 tools/cuda/kernels.py FOLDER [--jobs N]
    python3 tools/cuda/kernels.py --self-test

FOLDER holds `manifest.json` (written by the Rust side) and one CUDA C++ file per entry:

    [{"kernel": "attention forward, tensor cores",    family name, for the table
      "spec": "f16 d64 group 1 planes 4 stage 32",    the specialization, free text
      "arch": 90,                                     compute capability: 90 or 80
      "file": "0007.cu",                              source, relative to FOLDER
      "entrypoint": "flash_tensor_cores_kernel_...",  the __global__ function
      "cube_dim": [128, 1, 1],                        threads per block
      "dynamic_shared_bytes": 33792,                  shared memory the launch reserves
      "tensor_cores": true}, ...]                     must its SASS hold a tensor-core MMA?

Each entry is compiled as cubecl-cuda 0.11.3 compiles it (NVRTC, `--gpu-architecture=sm_90a`
from 90 on, `sm_80` below; `--include-path` for the toolkit's include folder and its `cccl`
folder; `-lineinfo`), plus `-Xptxas=-v` so the program log holds ptxas's resource lines. The
target is a real `sm_`, so NVRTC hands back a cubin; `cuobjdump -res-usage -sass` reads it back.
From the log: registers, spill stores/loads, stack frame, static shared memory, barriers; from
the SASS: the tensor-core instructions (HMMA on sm_80/sm_90 for `mma.sync`/wmma, HGMMA for
Hopper's wgmma). Theoretical occupancy follows NVIDIA's own calculator (`cuda_occupancy.h`,
CUDA 13): registers allocated per warp in units of 256 from four sub-partitions of 16384; shared
memory per block = static + dynamic + 1 KiB the driver reserves, in units of 128 bytes. (On
sm_90 ptxas 13 already places that 1 KiB inside the cubin's shared section, where
`cuobjdump -res-usage` shows it; the static size taken here is ptxas's, without it.)

Writes `FOLDER/report.md` (the table printed on stdout), `FOLDER/report.json` (the same rows and
each program's log) and `FOLDER/build/` (cubin, SASS and log of each compiled program). Exits 1,
with a line per failure on stderr, when a kernel does not compile, spills, is marked
`tensor_cores` but has no tensor-core MMA in its SASS, or cannot launch (shared memory above the
per-block maximum, a block above 1024 threads, registers that do not fit); 2 on a usage or
installation error.

NVRTC, the headers and cuobjdump come from `bash tools/cuda/nvrtc-setup`, found through the
`env` file of its install folder: `$BURN_POSITIONAL_CUDA` when set, else
`${XDG_DATA_HOME:-$HOME/.local/share}/burn-positional/cuda-13`. Standard library only.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

# --------------------------------------------------------------------------------------------
# The machines. Numbers as in cuda_occupancy.h (CUDA 13) and the devices' properties:
# H100/H200 report sharedMemPerMultiprocessor 233472 (228 KiB), sharedMemPerBlockOptin 232448
# (227 KiB); A100 167936 (164 KiB) and 166912 (163 KiB); both reserve 1024 bytes per block.

COMMON = {
    "warp_size": 32,
    "max_threads_per_block": 1024,
    "max_threads_per_sm": 2048,
    "max_warps_per_sm": 64,
    "max_blocks_per_sm": 32,
    "regs_per_sm": 65536,
    "regs_per_block": 65536,
    "reg_alloc_unit": 256,  # per warp
    "sub_partitions": 4,  # registers and warps are allocated per quarter SM
    "max_regs_per_thread": 255,
    "smem_alloc_unit": 128,
    "smem_reserved_per_block": 1024,
    "smem_per_block_default": 48 * 1024,  # above this, the launch must opt in
}
ARCHS = {
    90: {**COMMON, "name": "H100/H200", "smem_per_sm": 228 * 1024, "smem_per_block_optin": 227 * 1024},
    80: {**COMMON, "name": "A100", "smem_per_sm": 164 * 1024, "smem_per_block_optin": 163 * 1024},
}


def round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(arch: int, threads: int, registers: int, shared_per_block: int) -> dict:
    """Blocks per SM, occupancy and limiter, as cudaOccMaxActiveBlocksPerMultiprocessor with
    the opt-in shared memory limit (cubecl-cuda sets MAX_DYNAMIC_SHARED_SIZE_BYTES on every
    launch) and the default carveout (all of the SM's shared memory available)."""
    p = ARCHS[arch]
    warps = -(-threads // p["warp_size"])
    limits = {}
    # Warps (and threads: 2048 / 32 = 64 warps).
    limits["warps"] = 0 if threads > p["max_threads_per_block"] else p["max_warps_per_sm"] // warps
    # Registers: per warp, rounded up to the allocation unit, out of each sub-partition.
    if registers > 0:
        per_warp = round_up(registers * p["warp_size"], p["reg_alloc_unit"])
        hardware = per_warp * round_up(warps, p["sub_partitions"])
        if hardware > p["regs_per_block"] or per_warp * warps > p["regs_per_block"] or registers > p["max_regs_per_thread"]:
            limits["registers"] = 0
        else:
            per_partition = (p["regs_per_sm"] // p["sub_partitions"]) // per_warp
            limits["registers"] = per_partition * p["sub_partitions"] // warps
    else:
        limits["registers"] = p["max_blocks_per_sm"]
    # Shared memory: static + dynamic + the driver's reserve, rounded to the allocation unit.
    allocated = round_up(shared_per_block + p["smem_reserved_per_block"], p["smem_alloc_unit"])
    opt_in = shared_per_block > p["smem_per_block_default"]
    block_limit = (p["smem_per_block_optin"] if opt_in else p["smem_per_block_default"]) + p["smem_reserved_per_block"]
    limits["shared memory"] = 0 if allocated > block_limit else p["smem_per_sm"] // allocated
    limits["blocks"] = p["max_blocks_per_sm"]
    blocks = min(limits.values())
    limiter = ", ".join(name for name, value in limits.items() if value == blocks)
    return {
        "warps_per_block": warps,
        "blocks_per_sm": blocks,
        "occupancy": blocks * warps / p["max_warps_per_sm"],
        "limiter": limiter,
        "limits": limits,
        "shared_allocated_per_block": allocated,
        "opt_in": opt_in,
    }


# --------------------------------------------------------------------------------------------
# The installation.


def install_folder() -> str:
    if os.environ.get("BURN_POSITIONAL_CUDA"):
        return os.environ["BURN_POSITIONAL_CUDA"]
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "burn-positional", "cuda-13")


class SetupError(Exception):
    pass


def read_env(folder: str) -> dict:
    path = os.path.join(folder, "env")
    if not os.path.isfile(path):
        raise SetupError(f"no NVRTC installation at {folder} (no {path}). Fix: bash tools/cuda/nvrtc-setup")
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, value = line.split("=", 1)
            env[key] = " ".join(shlex.split(value))
    for key in ("NVRTC_LIB", "CUDA_INCLUDE_DIRS", "CUDA_BIN"):
        if key not in env:
            raise SetupError(f"{path} lacks {key}. Fix: bash tools/cuda/nvrtc-setup")
    return env


class Nvrtc:
    """NVRTC through ctypes: the calls cubecl-cuda makes through cudarc, plus the cubin."""

    def __init__(self, libdir: str):
        # libnvrtc dlopens `libnvrtc-builtins.so.13.0` by name, which only LD_LIBRARY_PATH (read
        # at process start) would find in a wheel's folder; loaded first, globally, it is found.
        builtins = sorted(glob.glob(os.path.join(libdir, "libnvrtc-builtins.so.*")))
        library = os.path.join(libdir, "libnvrtc.so.13")
        if not builtins or not os.path.isfile(library):
            raise SetupError(f"no libnvrtc.so.13 / libnvrtc-builtins in {libdir}. Fix: bash tools/cuda/nvrtc-setup")
        for path in builtins:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        lib = ctypes.CDLL(library)
        prog, prog_p, size_p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)
        strings = ctypes.POINTER(ctypes.c_char_p)
        signatures = {
            "nvrtcVersion": [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)],
            "nvrtcCreateProgram": [prog_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, strings, strings],
            "nvrtcCompileProgram": [prog, ctypes.c_int, strings],
            "nvrtcGetProgramLogSize": [prog, size_p],
            "nvrtcGetProgramLog": [prog, ctypes.c_char_p],
            "nvrtcGetCUBINSize": [prog, size_p],
            "nvrtcGetCUBIN": [prog, ctypes.c_char_p],
            "nvrtcDestroyProgram": [prog_p],
        }
        for name, argtypes in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
        lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        self.lib = lib

    def version(self) -> str:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        return f"{major.value}.{minor.value}"

    def _check(self, result: int, call: str):
        if result != 0:
            raise RuntimeError(f"{call}: {self.lib.nvrtcGetErrorString(result).decode()}")

    def compile(self, source: bytes, name: str, options: list[str]) -> tuple[bool, str, bytes | None, str]:
        """(compiled, program log, cubin, NVRTC's result name)."""
        lib = self.lib
        program = ctypes.c_void_p()
        self._check(lib.nvrtcCreateProgram(ctypes.byref(program), source, name.encode(), 0, None, None), "nvrtcCreateProgram")
        try:
            array = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            result = lib.nvrtcCompileProgram(program, len(options), array)
            size = ctypes.c_size_t()
            self._check(lib.nvrtcGetProgramLogSize(program, ctypes.byref(size)), "nvrtcGetProgramLogSize")
            buffer = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetProgramLog(program, buffer), "nvrtcGetProgramLog")
            log = buffer.value.decode(errors="replace")
            status = lib.nvrtcGetErrorString(result).decode()
            if result != 0:
                return False, log, None, status
            self._check(lib.nvrtcGetCUBINSize(program, ctypes.byref(size)), "nvrtcGetCUBINSize")
            buffer = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetCUBIN(program, buffer), "nvrtcGetCUBIN")
            return True, log, buffer.raw, status
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(program))


def nvrtc_options(arch: int, include_dirs: list[str]) -> list[str]:
    # cubecl-cuda 0.11.3, CudaContext::compile_to_ptx: the arch, its include folder(s), -lineinfo.
    target = f"--gpu-architecture=sm_{arch}a" if arch >= 90 else f"--gpu-architecture=sm_{arch}"
    return [target, *[f"--include-path={d}" for d in include_dirs], "-lineinfo", "-Xptxas=-v"]


# --------------------------------------------------------------------------------------------
# Reading ptxas's log, cuobjdump's resource usage and the SASS.

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
PROPERTIES = re.compile(r"Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"ptxas info\s*: Used (\d+) registers(.*)")


def parse_ptxas(log: str) -> tuple[dict, dict]:
    """({entry: resources}, {function: frame}) from the program log of `-Xptxas=-v`:

        ptxas info    : Compiling entry function 'k' for 'sm_80'
        ptxas info    : Function properties for k
        ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 10 registers, used 1 barriers, 4096 bytes smem, 372 bytes cmem[0]

    (sm_90 leaves cmem out; non-inlined device functions get a `Function properties` block of
    their own, with no `Used` line.)"""
    entries: dict = {}
    frames: dict = {}
    entry = props = None
    for line in log.splitlines():
        if m := ENTRY.search(line):
            entry = m.group(1)
            entries[entry] = {"target": m.group(2)}
        elif m := PROPERTIES.search(line):
            props = m.group(1)
        elif (m := FRAME.search(line)) and props is not None:
            frames[props] = {"stack_frame": int(m.group(1)), "spill_stores": int(m.group(2)), "spill_loads": int(m.group(3))}
        elif (m := USED.search(line)) and entry is not None:
            rest = m.group(2)
            found = entries[entry]
            found["registers"] = int(m.group(1))
            found["barriers"] = int(b.group(1)) if (b := re.search(r"used (\d+) barriers", rest)) else 0
            found["smem"] = int(s.group(1)) if (s := re.search(r"(\d+) bytes smem", rest)) else 0
            found["cmem"] = {f"cmem[{c.group(2)}]": int(c.group(1)) for c in re.finditer(r"(\d+) bytes cmem\[(\d+)\]", rest)}
            if c := re.search(r"(\d+) bytes cumulative stack size", rest):
                found["cumulative_stack"] = int(c.group(1))
    for name, found in entries.items():
        found.update(frames.get(name, {}))
    return entries, frames


def parse_res_usage(text: str) -> dict:
    """{function: {"REG": 22, "SHARED": 0, "STACK": 0, "CONSTANT[0]": 552, ...}}"""
    usage = {}
    function = None
    for line in text.splitlines():
        if m := re.match(r"\s*Function (\S+):\s*$", line):
            function = m.group(1)
        elif function and re.match(r"\s*REG:\d+", line):
            usage[function] = {k: int(v) for k, v in re.findall(r"([A-Z_]+(?:\[\d+\])?):(\d+)", line)}
            function = None
    return usage


SASS = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def count_mma(sass: str) -> tuple[int, dict]:
    """(HMMA instructions, every tensor-core MMA instruction by full mnemonic). HMMA is
    mma.sync/wmma on half/bf16/tf32; HGMMA/IGMMA/QGMMA are Hopper's wgmma; IMMA, DMMA..."""
    counts: dict = {}
    for line in sass.splitlines():
        if m := SASS.match(line):
            mnemonic = m.group(1)
            if mnemonic.split(".")[0].endswith("MMA"):
                counts[mnemonic] = counts.get(mnemonic, 0) + 1
    hmma = sum(n for k, n in counts.items() if k.split(".")[0] == "HMMA")
    return hmma, dict(sorted(counts.items()))


INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)([^;]*);")


def sass_functions(sass: str) -> dict:
    """Each function's instructions as (address, mnemonic, operands), from cuobjdump -sass."""
    out: dict = {}
    current = None
    for line in sass.splitlines():
        if m := re.match(r"\s*Function : (\S+)", line):
            current = m.group(1)
            out[current] = []
        elif current and (m := INSTRUCTION.match(line)):
            out[current].append((int(m.group(1), 16), m.group(2), m.group(3)))
    return out


def inner_loop(instructions: list) -> dict | None:
    """The loop a FlashAttention kernel spends its time in, read from the SASS (issue 72): of the
    back edges (a `BRA` whose target is at or before its own address, the target after an `EXIT`
    that branches to itself excluded), the region [target, branch] with the most HMMA. Returns
    its counts: instructions, HMMA, MUFU.EX2, LDSM (plain and transposed), SHFL.BFLY, BAR, plain
    shared loads and stores (LDS, STS), local memory (LDL, STL), async copies (LDGSTS), and the
    accurate exp's FFMA.SAT and FFMA.RM; None without a back edge."""
    best = None
    for address, mnemonic, operands in instructions:
        if not mnemonic.startswith("BRA"):
            continue
        target = re.search(r"0x([0-9a-f]+)", operands)
        if not target or int(target.group(1), 16) >= address:
            continue
        start = int(target.group(1), 16)
        body = [m for a, m, _ in instructions if start <= a <= address]
        count = lambda *names: sum(1 for m in body if any(m == n or m.startswith(n + ".") for n in names))
        found = {
            "start": start, "end": address, "instructions": len(body), "hmma": count("HMMA"),
            "mufu_ex2": sum(1 for m in body if m.startswith("MUFU.EX2")),
            "ldsm": count("LDSM"), "ldsm_trans": sum(1 for m in body if m.startswith("LDSM") and ".MT" in m),
            "shfl_bfly": sum(1 for m in body if m.startswith("SHFL.BFLY")), "bar": count("BAR"),
            "lds": count("LDS"), "sts": count("STS"), "local": count("LDL", "STL"), "ldgsts": count("LDGSTS"),
            "accurate_exp": sum(1 for m in body if m.startswith(("FFMA.SAT", "FFMA.RM"))),
        }
        if best is None or found["hmma"] > best["hmma"]:
            best = found
    return best


FLASH_FORWARD = "attention forward: tensor cores"
FLASH_KEYS = "attention backward: tensor cores, keys"
FLASH_QUERIES = "attention backward: tensor cores, queries"


def flash_expected(kernel: str, spec: str) -> dict | None:
    """The per-block, per-warp counts FlashAttention-2's loops have (FLASH.md section 6, calibrated
    on tools/cuda/selftest/fa2_probe.cu) for a tensor-core spec such as
    `F16 d64/64 group 1: block 32 stages 2 rows 32, plain scores`, the head widths padded to 16:
    the forward (Mw query rows a warp, Bc keys a block: S and P V), the backward's dQ kernel
    (S, dP, dS K: one exp a score) and its dK/dV kernel (16 keys a warp, Bc query rows a step:
    S, dP, dV, dK; each query's log-sum-exp and D read from shared memory, the next block's two
    stored there; with a table gradient, its sums through shared memory). None for an emulated
    spec (no tensor cores) or another kernel."""
    m = re.search(r"d(\d+)/(\d+) .*block (\d+) stages (\d+)(?: rows (\d+))?", spec)
    if not m or "emulated" in spec or kernel not in (FLASH_FORWARD, FLASH_KEYS, FLASH_QUERIES):
        return None
    d, dv, bc = (int(x) for x in m.groups()[:3])
    mw = int(m.group(5) or 16)
    dh, dvp = -(-d // 16) * 16, -(-dv // 16) * 16
    want = {"async": d % 8 == 0, "rows": mw, "keys": bc, "lds": 4, "sts": 0}
    if kernel == FLASH_FORWARD:
        want.update(hmma=mw * bc * (dh + dvp) // 2048, mufu_ex2=mw * bc // 32 + mw // 8,
                    ldsm=bc * dh // 256 + bc * dvp // 256)
    elif kernel == FLASH_QUERIES:
        want.update(hmma=mw * bc * (2 * dh + dvp) // 2048, mufu_ex2=mw * bc // 32,
                    ldsm=bc * (2 * dh + dvp) // 256)
        if "table gradient" in spec:
            # A T5 table's gradient (mma_backward.rs, `table_block`): on the blocks whose
            # distances reach inside the table, each lane stores its dS (Mw Bc / 32 a lane) and
            # sums its diagonals of the warp's tile (Mw loads each, one load and store of the
            # table entry): the gradient's sums, not scores or P for a product.
            rounds = -(-(mw + bc - 1) // 32)
            want.update(sts=mw * bc // 32 + rounds, lds=4 + rounds * (mw + 1))
    else:
        want.update(hmma=16 * bc * 2 * (dh + dvp) // 2048, mufu_ex2=16 * bc // 32,
                    ldsm=2 * bc * (dh + dvp) // 256, lds=4 + bc // 2, sts=2, rows=bc, keys=16)
    return want


def flash_gate(loop: dict | None, want: dict) -> list[str]:
    """Issue 72's inner-loop gate: per key block and warp, HMMA equal to the formula, MUFU.EX2 at
    most 1.1x it, no accurate-exp sequence, no scores or P through shared memory (no STS; LDS only
    for a few per-block values), at most 2 barriers, no local memory, async copies present."""
    if loop is None:
        return ["inner loop: no back edge in the SASS"]
    out = []
    # ptxas may unroll the block loop: blocks per iteration from the HMMA.
    blocks = max(1, round(loop["hmma"] / want["hmma"])) if loop["hmma"] else 1
    per = {k: loop[k] / blocks for k in ("hmma", "mufu_ex2", "ldsm", "bar", "sts", "lds")}
    if per["hmma"] != want["hmma"]:
        out.append(f"inner loop: {per['hmma']:g} HMMA a block, the formula {want['hmma']}")
    if per["mufu_ex2"] > 1.1 * want["mufu_ex2"]:
        out.append(f"inner loop: {per['mufu_ex2']:g} MUFU.EX2 a block, above 1.1 x the formula's {want['mufu_ex2']}")
    if loop["accurate_exp"]:
        out.append(f"inner loop: {loop['accurate_exp']} FFMA.SAT/FFMA.RM (the accurate exp)")
    if per["ldsm"] != want["ldsm"]:
        out.append(f"inner loop: {per['ldsm']:g} LDSM a block, the formula {want['ldsm']}")
    if per["sts"] > want["sts"] or per["lds"] > want["lds"]:
        out.append(f"inner loop: {per['sts']:g} STS and {per['lds']:g} LDS a block (scores or P through shared memory?)")
    if per["bar"] > 2:
        out.append(f"inner loop: {per['bar']:g} barriers a block, above 2")
    if loop["local"] and not want.get("spill_known"):
        out.append(f"inner loop: {loop['local']} local-memory instructions")
    if want["async"] and not loop["ldgsts"]:
        out.append("inner loop: no LDGSTS (async copies)")
    return out


SIMT_FORWARD = "attention forward: blocked"
SIMT_GATED = (SIMT_FORWARD, "attention backward: blocked, keys", "attention backward: blocked, queries")
SIMT_BESIDE = ("attention forward: shared", "attention backward: shared")
SIMT_MAX_REGISTERS = 128


def simt_loops(instructions: list) -> dict:
    """The loops of a SIMT FlashAttention kernel, read from the SASS (issue 73): the innermost
    back-edge regions (none holds another) with FFMA in them, each counted (instructions, FFMA,
    shared loads LDS of any width, barriers), and the block loop (the region with the most
    barriers) with its MUFU.EX2 and the accurate exp's FFMA.SAT/FFMA.RM."""
    edges = []
    for address, mnemonic, operands in instructions:
        target = re.search(r"0x([0-9a-f]+)", operands) if mnemonic.startswith("BRA") else None
        if target and int(target.group(1), 16) < address:
            edges.append((int(target.group(1), 16), address))

    def counts(start: int, end: int) -> dict:
        body = [m for a, m, _ in instructions if start <= a <= end]
        return {"start": start, "end": end, "instructions": len(body),
                "ffma": sum(1 for m in body if m == "FFMA" or m.startswith("FFMA.")),
                "lds": sum(1 for m in body if m == "LDS" or m.startswith("LDS.")),
                "bar": sum(1 for m in body if m.startswith("BAR")),
                "mufu_ex2": sum(1 for m in body if m.startswith("MUFU.EX2")),
                "accurate_exp": sum(1 for m in body if m.startswith(("FFMA.SAT", "FFMA.RM")))}

    inner = [counts(*e) for e in edges
             if not any(o != e and e[0] <= o[0] and o[1] <= e[1] for o in edges)]
    regions = [counts(*e) for e in edges]
    block = max(regions, key=lambda r: (r["bar"], r["instructions"]), default=None)
    return {"inner": [r for r in inner if r["ffma"]], "block": block}


def simt_gate(row: dict, loops: dict | None) -> list[str]:
    """Issue 73's gate for the register-blocked kernels: at most 128 registers a unit (4 cubes of
    128 per multiprocessor); in every inner loop of FFMA, FFMA at least 60 % of the instructions
    and at most one shared-memory load per 4 FFMA; no accurate-exp sequence in the block loop
    (spills fail every kernel already)."""
    out = []
    if row.get("registers", 0) > SIMT_MAX_REGISTERS:
        out.append(f"{row['registers']} registers a unit, above {SIMT_MAX_REGISTERS}")
    if not loops or not loops["inner"]:
        return out + ["inner loops: no loop of FFMA in the SASS"]
    for loop in loops["inner"]:
        where = f"inner loop at {loop['start']:#x}"
        if loop["ffma"] < 0.6 * loop["instructions"]:
            out.append(f"{where}: {loop['ffma']} FFMA of {loop['instructions']} instructions, below 60 %")
        if 4 * loop["lds"] > loop["ffma"]:
            out.append(f"{where}: {loop['lds']} shared loads for {loop['ffma']} FFMA, above one per 4")
    if loops["block"] and loops["block"]["accurate_exp"]:
        out.append(f"block loop: {loops['block']['accurate_exp']} FFMA.SAT/FFMA.RM (the accurate exp)")
    return out


def simt_table(rows: list[dict]) -> str:
    """The SIMT kernels' loops (the register-blocked forward and backward, gated, and the shared
    kernels beside them): per inner loop of FFMA its instructions, FFMA and shared loads; the block loop's
    instructions (each inner loop's body counted once), barriers and MUFU.EX2."""
    head = ["kernel", "spec", "arch", "regs", "spill st/ld", "inner loops: instructions / FFMA / LDS",
            "FFMA share (least)", "FFMA a load (least)", "block loop: instructions, BAR, MUFU.EX2",
            "accurate exp", "gate"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        loops = r.get("simt")
        if r["kernel"] not in (*SIMT_GATED, *SIMT_BESIDE) or not loops or "registers" not in r:
            continue
        inner, block = loops["inner"], loops["block"]
        share = min((l["ffma"] / l["instructions"] for l in inner), default=0)
        per_load = min((l["ffma"] / l["lds"] for l in inner if l["lds"]), default=0)
        values = [r["kernel"].removeprefix("attention "), r["spec"], f"sm_{r['arch']}", r["registers"],
                  f"{r['spill_stores']}/{r['spill_loads']}",
                  ", ".join(f"{l['instructions']}/{l['ffma']}/{l['lds']}" for l in inner) or "none",
                  f"{100 * share:.0f} %", f"{per_load:.1f}",
                  f"{block['instructions']}, {block['bar']}, {block['mufu_ex2']}" if block else "none",
                  block["accurate_exp"] if block else 0,
                  ("FAIL" if r["failures"] else "ok") if r["kernel"] in SIMT_GATED else "not gated"]
        lines.append("| " + " | ".join(cell(v) for v in values) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


# --------------------------------------------------------------------------------------------
# One program: compile, disassemble.


@dataclass
class Program:
    key: str
    arch: int
    source_path: str
    stem: str  # build/<stem>.{cubin,sass,log}
    compiled: bool = False
    status: str = ""
    log: str = ""
    entries: dict = field(default_factory=dict)
    frames: dict = field(default_factory=dict)
    res_usage: dict = field(default_factory=dict)
    hmma: int = 0
    mma: dict = field(default_factory=dict)
    loops: dict = field(default_factory=dict)
    simt: dict = field(default_factory=dict)
    sass_functions: list = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0


def build_program(program: Program, nvrtc: Nvrtc, include_dirs: list[str], bin_dir: str, build: str) -> Program:
    start = time.monotonic()
    with open(program.source_path, "rb") as f:
        source = f.read()
    options = nvrtc_options(program.arch, include_dirs)
    program.compiled, program.log, cubin, program.status = nvrtc.compile(source, os.path.basename(program.source_path), options)
    base = os.path.join(build, program.stem)
    with open(base + ".log", "w") as f:
        f.write(f"nvrtc {' '.join(options)}\n{program.status}\n{program.log}")
    if program.compiled:
        program.entries, program.frames = parse_ptxas(program.log)
        with open(base + ".cubin", "wb") as f:
            f.write(cubin)
        env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
        run = subprocess.run(
            [os.path.join(bin_dir, "cuobjdump"), "-res-usage", "-sass", base + ".cubin"],
            capture_output=True, text=True, env=env,
        )
        if run.returncode != 0:
            program.error = f"cuobjdump failed ({run.returncode}): {run.stderr.strip()}"
        else:
            with open(base + ".sass", "w") as f:
                f.write(run.stdout)
            program.res_usage = parse_res_usage(run.stdout)
            program.hmma, program.mma = count_mma(run.stdout)
            functions = sass_functions(run.stdout)
            program.loops = {name: inner_loop(ins) for name, ins in functions.items()}
            program.simt = {name: simt_loops(ins) for name, ins in functions.items()}
            program.sass_functions = re.findall(r"^\s*Function : (\S+)", run.stdout, re.M)
    program.seconds = time.monotonic() - start
    return program


# --------------------------------------------------------------------------------------------
# The manifest, the rows, the report.

REQUIRED = {"kernel": str, "spec": str, "arch": int, "file": str, "entrypoint": str, "cube_dim": list,
            "dynamic_shared_bytes": int, "tensor_cores": bool}


class ManifestError(Exception):
    pass


def read_manifest(folder: str) -> list[dict]:
    path = os.path.join(folder, "manifest.json")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ManifestError(f"{path}: {e}")
    if not isinstance(manifest, list):
        raise ManifestError(f"{path}: a JSON list of entries expected")
    for i, entry in enumerate(manifest):
        for key, ty in REQUIRED.items():
            value = entry.get(key) if isinstance(entry, dict) else None
            if not isinstance(value, ty) or (ty is int and isinstance(value, bool)):
                raise ManifestError(f"{path}: entry {i}: `{key}` must be a {ty.__name__}, found {value!r}")
        dims = entry["cube_dim"]
        if len(dims) != 3 or not all(isinstance(d, int) and d >= 1 for d in dims):
            raise ManifestError(f"{path}: entry {i}: `cube_dim` must be three positive integers, found {dims!r}")
        if entry["arch"] not in ARCHS:
            raise ManifestError(f"{path}: entry {i}: arch {entry['arch']} has no occupancy table (known: {sorted(ARCHS)})")
        if not os.path.isfile(os.path.join(folder, entry["file"])):
            raise ManifestError(f"{path}: entry {i}: no file {entry['file']}")
    return manifest


def spill_key(row: dict) -> str:
    """How the known spills name an entry: `kernel | spec | sm_XX`."""
    return f"{row['kernel']} | {row['spec']} | sm_{row['arch']}"


def read_spills(path: str | None) -> dict:
    """The known spills: `{"kernel | spec | sm_XX": [stores, loads], ...}` (`_`-keys are notes)."""
    if not path:
        return {}
    with open(path) as f:
        data = json.load(f)
    return {k: v for k, v in data.items() if not k.startswith("_")}


def make_row(index: int, entry: dict, program: Program, known_spills: dict | None = None) -> dict:
    arch = entry["arch"]
    threads = entry["cube_dim"][0] * entry["cube_dim"][1] * entry["cube_dim"][2]
    row = {
        "index": index, "kernel": entry["kernel"], "spec": entry["spec"], "arch": arch,
        "file": entry["file"], "entrypoint": entry["entrypoint"], "threads": threads,
        "tensor_cores": entry["tensor_cores"], "dynamic_shared": entry["dynamic_shared_bytes"],
        "build": program.stem, "compile_seconds": round(program.seconds, 3), "failures": [],
    }
    failures = row["failures"]
    if not program.compiled:
        failures.append(f"NVRTC: {program.status}\n{program.log.rstrip()}")
        return row
    if program.error:
        failures.append(program.error)
        return row
    name = entry["entrypoint"]
    found = program.entries.get(name)
    if found is None or "registers" not in found:
        failures.append(f"ptxas's log has no resource line for entry `{name}` (entries: {sorted(program.entries)})")
        return row
    if name not in program.sass_functions:
        failures.append(f"the cubin has no function `{name}` (functions: {program.sass_functions})")
    row.update({
        "registers": found["registers"], "barriers": found["barriers"], "static_shared": found["smem"],
        "spill_stores": found.get("spill_stores", 0), "spill_loads": found.get("spill_loads", 0),
        "stack_frame": found.get("stack_frame", 0), "cmem": found["cmem"],
    })
    usage = program.res_usage.get(name, {})
    row["res_usage"] = usage
    row["cmem"] = row["cmem"] or {k.replace("CONSTANT", "cmem"): v for k, v in usage.items() if k.startswith("CONSTANT")}
    for key, theirs in (("registers", "REG"), ("static_shared", "SHARED"), ("stack_frame", "STACK")):
        allowed = {row[key]}
        if key == "static_shared" and arch >= 90:
            # ptxas puts the driver's 1 KiB per-block reserve at the start of an sm_90 kernel's
            # `.nv.shared.<kernel>` section (symbol __nv_reservedSMEM_offset_0_alias; the user's
            # shared memory starts at 0x400) whenever the kernel uses shared memory at all, and
            # leaves it out of its own `smem` figure, which is the static size the driver
            # reports: the reserve is counted once, as reservedSharedMemPerBlock.
            allowed.add(row[key] + ARCHS[arch]["smem_reserved_per_block"])
        if theirs in usage and usage[theirs] not in allowed:
            failures.append(f"ptxas's log says {key} {row[key]}, cuobjdump -res-usage says {theirs}:{usage[theirs]}")
    row["shared_per_block"] = row["static_shared"] + row["dynamic_shared"]
    row.update(occupancy(arch, threads, row["registers"], row["shared_per_block"]))
    row["hmma"], row["mma"] = program.hmma, program.mma
    row["loop"] = program.loops.get(name)
    # Spills anywhere in the program (the entry, or a device function it calls), against the
    # known spills (`--spills`): a spill listed there passes while it does not grow.
    stores = sum(f["spill_stores"] for f in program.frames.values())
    loads = sum(f["spill_loads"] for f in program.frames.values())
    row["spill_stores_total"], row["spill_loads_total"] = stores, loads
    known = (known_spills or {}).get(spill_key(row))
    row["known_spill"] = known
    if known is not None and stores <= known[0] and loads <= known[1]:
        pass
    else:
        for function, frame in sorted(program.frames.items()):
            if frame["spill_stores"] or frame["spill_loads"]:
                where = "" if function == name else f" (in device function {function})"
                listed = "" if known is None else f" (the known spills list {known[0]} stored, {known[1]} loaded)"
                failures.append(f"spills{where}: {frame['spill_stores']} bytes stored, {frame['spill_loads']} bytes loaded{listed}")
    if (want := flash_expected(entry["kernel"], entry["spec"])) is not None:
        # A listed spill is the local memory a loop may hold (checked above not to grow).
        want["spill_known"] = known is not None
        row["loop_expected"] = want
        failures.extend(flash_gate(row["loop"], want))
    row["simt"] = program.simt.get(name)
    if entry["kernel"] in SIMT_GATED:
        failures.extend(simt_gate(row, row["simt"]))
    if entry["tensor_cores"] and not program.mma:
        failures.append("marked tensor_cores, but its SASS has no tensor-core MMA (no HMMA/HGMMA)")
    p = ARCHS[arch]
    if threads > p["max_threads_per_block"]:
        failures.append(f"{threads} threads per block, above {p['max_threads_per_block']}")
    if row["shared_per_block"] > p["smem_per_block_optin"]:
        failures.append(f"shared memory {row['static_shared']} static + {row['dynamic_shared']} dynamic = "
                        f"{row['shared_per_block']} bytes, above the {p['smem_per_block_optin']} a block may have on sm_{arch}")
    elif row["blocks_per_sm"] == 0:
        failures.append(f"cannot launch: 0 blocks per SM (limits {row['limits']})")
    return row


def loop_table(rows: list[dict]) -> str:
    """The tensor-core forward's inner loop per key block and warp beside the formula, and a cycle
    bound per cube and block (FLASH.md section 6: 4 warps; the most of HMMA x 2, MUFU x 2, LDSM x 4
    and the instructions / 4, the SM's four schedulers), per 1,024 query-key pairs."""
    head = ["kernel", "spec", "arch", "instructions", "HMMA (formula)", "MUFU.EX2 (formula)", "LDSM (formula)",
            "SHFL", "BAR", "LDS/STS", "local", "LDGSTS", "cycles a block (bound by)", "per 1k pairs", "gate"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        want, loop = r.get("loop_expected"), r.get("loop")
        if not want or not loop:
            continue
        bc, mw = want["keys"], want["rows"]
        bounds = {"HMMA": 4 * loop["hmma"] * 2, "MUFU": 4 * loop["mufu_ex2"] * 2,
                  "LDSM": 4 * loop["ldsm"] * 4, "issue": loop["instructions"]}
        bound = max(bounds, key=bounds.get)
        cycles = bounds[bound]
        kernel = {FLASH_FORWARD: "forward", FLASH_KEYS: "dK/dV", FLASH_QUERIES: "dQ"}[r["kernel"]]
        values = [kernel, r["spec"], f"sm_{r['arch']}", loop["instructions"], f"{loop['hmma']} ({want['hmma']})",
                  f"{loop['mufu_ex2']} ({want['mufu_ex2']})", f"{loop['ldsm']} ({want['ldsm']})",
                  loop["shfl_bfly"], loop["bar"], f"{loop['lds']}/{loop['sts']}", loop["local"], loop["ldgsts"],
                  f"{cycles} ({bound})", f"{1024 * cycles / (4 * mw * bc):.0f}",
                  "FAIL" if any(f.startswith("inner loop") for f in r["failures"]) else "ok"]
        lines.append("| " + " | ".join(cell(v) for v in values) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


def cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def kib(n: int) -> str:
    return f"{n / 1024:.1f}K" if n % 1024 else f"{n // 1024}K"


def table(rows: list[dict]) -> str:
    head = ["kernel", "spec", "arch", "threads", "regs", "spill st/ld", "shared static+dyn", "opt-in",
            "barriers", "blocks/SM", "occupancy", "limiter", "HMMA", "ok"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        if "registers" in r:
            values = [r["kernel"], r["spec"], f"sm_{r['arch']}", r["threads"], r["registers"],
                      f"{r['spill_stores']}/{r['spill_loads']}",
                      f"{kib(r['static_shared'])}+{kib(r['dynamic_shared'])}", "yes" if r["opt_in"] else "no",
                      r["barriers"], r["blocks_per_sm"], f"{100 * r['occupancy']:.1f}%", r["limiter"],
                      r["hmma"] if r["hmma"] or not r["mma"] else f"0 ({sum(r['mma'].values())} other MMA)",
                      "FAIL" if r["failures"] else ("known spill" if r.get("spill_stores_total") or r.get("spill_loads_total") else "ok")]
        else:
            values = [r["kernel"], r["spec"], f"sm_{r['arch']}", r["threads"]] + ["-"] * 9 + ["FAIL"]
        lines.append("| " + " | ".join(cell(v) for v in values) + " |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    families: dict = {}
    for r in rows:
        families.setdefault(r["kernel"], []).append(r)
    lines = ["| kernel | entries | failures | worst occupancy sm_90 | worst occupancy sm_80 |", "|---|---|---|---|---|"]
    for name, members in families.items():
        worst = []
        for arch in (90, 80):
            measured = [r for r in members if r["arch"] == arch and r.get("blocks_per_sm")]
            if measured:
                w = min(measured, key=lambda r: r["occupancy"])
                worst.append(f"{100 * w['occupancy']:.1f}% ({w['limiter']}; {w['spec']})")
            else:
                worst.append("-")
        failed = sum(1 for r in members if r["failures"])
        lines.append("| " + " | ".join(cell(v) for v in [name, len(members), failed, *worst]) + " |")
    return "\n".join(lines)


def failure_lines(rows: list[dict], max_log_lines: int = 200) -> list[str]:
    out = []
    for r in rows:
        for reason in r["failures"]:
            first, _, rest = reason.partition("\n")
            out.append(f"FAIL {r['kernel']} | {r['spec']} | sm_{r['arch']} ({r['file']}, {r['entrypoint']}): {first}")
            log = rest.splitlines()
            for line in log[:max_log_lines]:
                out.append(f"    {line}")
            if len(log) > max_log_lines:
                out.append(f"    ... {len(log) - max_log_lines} more lines: build/{r['build']}.log")
    return out


def run(folder: str, jobs: int, quiet: bool = False, spills: str | None = None,
        write_spills: str | None = None) -> tuple[int, list[dict]]:
    folder = os.path.abspath(folder)
    known_spills = read_spills(spills)
    manifest = read_manifest(folder)
    env = read_env(install_folder())
    nvrtc = Nvrtc(env["NVRTC_LIB"])
    include_dirs = [d for d in env["CUDA_INCLUDE_DIRS"].split(":") if d]
    build = os.path.join(folder, "build")
    shutil.rmtree(build, ignore_errors=True)
    os.makedirs(build)

    # One program per (source, arch): the same source listed under two specs compiles once.
    programs: dict = {}
    keys = []
    for i, entry in enumerate(manifest):
        path = os.path.join(folder, entry["file"])
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        key = f"{digest}:{entry['arch']}"
        keys.append(key)
        if key not in programs:
            stem = f"{i:04d}.sm_{entry['arch']}"
            programs[key] = Program(key=key, arch=entry["arch"], source_path=path, stem=stem)

    start = time.monotonic()
    done = 0
    lock = threading.Lock()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(build_program, p, nvrtc, include_dirs, env["CUDA_BIN"], build) for p in programs.values()]
        for future in concurrent.futures.as_completed(futures):
            p = future.result()
            with lock:
                done += 1
                if not quiet and (done == len(futures) or done % max(1, len(futures) // 10) == 0):
                    print(f"[{done}/{len(futures)}] compiled ({time.monotonic() - start:.1f} s)", file=sys.stderr)

    rows = [make_row(i, entry, programs[key], known_spills) for i, (entry, key) in enumerate(zip(manifest, keys))]
    failures = failure_lines(rows)
    if write_spills:
        observed = {spill_key(r): [r["spill_stores_total"], r["spill_loads_total"]]
                    for r in rows if r.get("spill_stores_total") or r.get("spill_loads_total")}
        with open(write_spills, "w") as f:
            json.dump({"_": "Known spills (bytes stored, loaded) of each kernel specialization, "
                            "as NVRTC " + nvrtc.version() + " compiles them: written by "
                            "`kernels.py --write-spills`; a spill not listed, or larger, fails the check.",
                       **dict(sorted(observed.items()))}, f, indent=1)
            f.write("\n")
    # Listed spills that no longer happen: the list should shrink with them.
    seen = {spill_key(r) for r in rows}
    gone = sorted(k for k in known_spills if k in seen and not any(
        spill_key(r) == k and (r.get("spill_stores_total") or r.get("spill_loads_total")) for r in rows))
    known_count = sum(1 for r in rows if r.get("known_spill") is not None and not r["failures"]
                      and (r.get("spill_stores_total") or r.get("spill_loads_total")))
    elapsed = time.monotonic() - start
    text = "\n".join([
        table(rows), "",
        "Per kernel family, the worst theoretical occupancy of the entries that can launch (limiter; spec):", "",
        summary(rows), "",
    ] + ([f"The tensor-core kernels' inner loops per block and warp, beside FlashAttention-2's formula "
          f"(tools/cuda/selftest/fa2_probe.cu: 335 instructions, 64 HMMA, 34 MUFU.EX2, 32 LDSM, 4 SHFL, 2 BAR, "
          f"8 LDGSTS at 16 rows, 64 keys, width 64: 512 cycles a block, bound by LDSM, 128 per 1k pairs):", "",
          loop_table(rows), ""] if loop_table(rows) else []) + (
        ["The SIMT kernels' loops (issue 73's gate on the register-blocked kernels: at most 128 registers, "
         "FFMA at least 60 % of each inner loop and at least 4 a shared load, no accurate exp; the shared "
         "kernels beside them, not gated):", "", simt_table(rows), ""] if simt_table(rows) else []) + [
        f"{len(rows)} entries, {len(programs)} programs compiled with NVRTC {nvrtc.version()} "
        f"in {elapsed:.1f} s ({jobs} jobs); {sum(1 for r in rows if r['failures'])} failed; "
        f"{known_count} spill as the known spills list (not failures).",
    ] + ([f"No longer spilling (remove from the known spills): {k}" for k in gone]))
    print(text)
    with open(os.path.join(folder, "report.md"), "w") as f:
        f.write(text + "\n")
        if failures:
            f.write("\n## Failures\n\n```\n" + "\n".join(failures) + "\n```\n")
    logs = {p.stem: p.log for p in programs.values()}
    with open(os.path.join(folder, "report.json"), "w") as f:
        json.dump({"nvrtc": nvrtc.version(), "options": {a: nvrtc_options(a, include_dirs) for a in sorted({e["arch"] for e in manifest})},
                   "rows": rows, "logs": logs}, f, indent=1)
    for line in failures:
        print(line, file=sys.stderr)
    return (1 if failures else 0), rows


# --------------------------------------------------------------------------------------------
# Self-test: tools/cuda/selftest/, whose manifest entries also carry `expect`: the failure
# reasons (substrings) each must give, and values worked out by hand.


def self_test(jobs: int) -> int:
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "selftest")
    with tempfile.TemporaryDirectory(prefix="kernels-selftest-") as tmp:
        folder = os.path.join(tmp, "selftest")
        shutil.copytree(here, folder)
        code, rows = run(folder, jobs, quiet=True)
        with open(os.path.join(folder, "manifest.json")) as f:
            manifest = json.load(f)
    problems = []
    for row, entry in zip(rows, manifest):
        expect = dict(entry.get("expect", {}))
        wanted = expect.pop("failures", [])
        what = f"{row['kernel']} sm_{row['arch']}"
        if len(row["failures"]) != len(wanted) or not all(any(w in f for f in row["failures"]) for w in wanted):
            problems.append(f"{what}: failures {row['failures']!r}, expected {wanted!r}")
        for key, value in expect.items():
            if key == "hmma_min":
                if row.get("hmma", 0) < value:
                    problems.append(f"{what}: {row.get('hmma')} HMMA, expected at least {value}")
            elif key == "loop":
                found = row.get("loop") or {}
                for name, want in value.items():
                    if found.get(name) != want:
                        problems.append(f"{what}: inner loop {name} = {found.get(name)!r}, expected {want!r}")
            elif row.get(key) != value:
                problems.append(f"{what}: {key} = {row.get(key)!r}, expected {value!r}")
    if code != (1 if any(e.get("expect", {}).get("failures") for e in manifest) else 0):
        problems.append(f"exit code {code}")
    for p in problems:
        print(f"self-test: {p}", file=sys.stderr)
    print(f"self-test: {'FAILED' if problems else 'ok'} ({len(rows)} entries; the FAIL lines above are expected ones)", file=sys.stderr)
    return 1 if problems else 0


CHECK_SOURCE = b"""// tools/cuda/kernels.py --check-install: every header cubecl-cpp's CUDA dialect includes.
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuComplex.h>
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cuda/barrier>
using namespace nvcuda;
extern "C" __global__ void __launch_bounds__(32) check_kernel(const half* a, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, a + 256, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
"""


def check_install() -> int:
    """What nvrtc-setup runs last: NVRTC loads and finds its builtins, the headers cubecl
    includes compile for sm_90a and sm_80, cuobjdump reads the cubin back and sees HMMA."""
    env = read_env(install_folder())
    nvrtc = Nvrtc(env["NVRTC_LIB"])
    include_dirs = [d for d in env["CUDA_INCLUDE_DIRS"].split(":") if d]
    with tempfile.TemporaryDirectory(prefix="kernels-check-") as tmp:
        for arch in sorted(ARCHS, reverse=True):
            path = os.path.join(tmp, f"check.sm_{arch}.cu")
            with open(path, "wb") as f:
                f.write(CHECK_SOURCE)
            program = build_program(Program("check", arch, path, f"check.sm_{arch}"), nvrtc, include_dirs, env["CUDA_BIN"], tmp)
            if not program.compiled or program.error or not program.hmma or "registers" not in program.entries.get("check_kernel", {}):
                print(f"kernels.py: the install check failed for sm_{arch}: {program.status} {program.error}\n{program.log}", file=sys.stderr)
                return 1
    print(f"NVRTC {nvrtc.version()}: the check kernel compiles for {', '.join(f'sm_{a}' for a in sorted(ARCHS))} and shows HMMA")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", help="folder holding manifest.json and the .cu files")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="programs compiled at once (default: CPU count)")
    parser.add_argument("--self-test", action="store_true", help="run on tools/cuda/selftest/ and check the expected results")
    parser.add_argument("--spills", help="the known spills (JSON): listed spills pass while they do not grow")
    parser.add_argument("--write-spills", help="write the spills observed in this run to this file")
    parser.add_argument("--check-install", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        if args.check_install:
            return check_install()
        if args.self_test:
            return self_test(args.jobs)
        if not args.folder:
            parser.error("a folder, or --self-test")
        return run(args.folder, args.jobs, spills=args.spills, write_spills=args.write_spills)[0]
    except (SetupError, ManifestError) as e:
        print(f"kernels.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
