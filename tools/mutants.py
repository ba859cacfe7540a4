"""Mutation check of the attention's backward kernels: each mutation below breaks one thing the
backward computes (a sign, a table entry, a mask), the flash tests must fail with it, and the
source is restored after each. Prints one line per mutation and exits non-zero if a mutant
survives. Never run by CI (each mutant is a rebuild and a test run: about 4 minutes here).

    python3 tools/mutants.py            # every mutant
    python3 tools/mutants.py host-alibi-sign

The tests run with FLASH_SHORT_CASES=1 (the cases up to 65 tokens): host mutants with
`kernel_equals_the_slow_twin_outputs_and_gradients` (flex, ndarray), CubeCL mutants with
`register_kernel_equals_the_slow_twin` (wgpu, lavapipe here).
"""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNELS = ROOT / "crates/burn-positional-kernels/src/attention"
HOST_TEST = "kernel_equals_the_slow_twin_outputs_and_gradients"
CUBE_TEST = "register_kernel_equals_the_slow_twin"

# (name, file, original text, mutated text, test)
MUTANTS = [
    (
        "host-alibi-sign",
        KERNELS / "host_backward.rs",
        "acc[0] -= sum;",
        "acc[0] += sum;",
        HOST_TEST,
    ),
    (
        "host-table-entry",
        KERNELS / "host_backward.rs",
        "let from = (rel0 + start as i64 + reach) as usize;",
        "let from = (rel0 + start as i64 + reach) as usize; let from = (from + 1).min(acc.len() - (end - start));",
        HOST_TEST,
    ),
    (
        "host-dropped-padding",
        KERNELS / "host_backward.rs",
        "mask_and_bias(p_row, &rel, row, b, j0, inputs, self.sizes, args);",
        "mask_and_bias(p_row, &rel, row, b, j0, &Inputs { padding: None, ..*inputs }, self.sizes, args);",
        HOST_TEST,
    ),
    (
        "cube-alibi-sign",
        KERNELS / "cube/backward.rs",
        "dbs[0] -= ds * C::cast_from(distance);",
        "dbs[0] += ds * C::cast_from(distance);",
        CUBE_TEST,
    ),
    (
        "cube-table-entry",
        KERNELS / "cube/backward.rs",
        "let at = min(max(rel, -p.reach), p.reach) + p.reach;",
        "let at = min(max(rel + 1, -p.reach), p.reach) + p.reach;",
        CUBE_TEST,
    ),
    (
        "cube-dropped-mask",
        KERNELS / "cube/backward.rs",
        "key_seen[t] == 1,",
        "true,",
        CUBE_TEST,
    ),
]


def run(name, path, original, mutated, test):
    source = path.read_text()
    assert source.count(original) == 1, f"{name}: the original text is not in {path} once"
    path.write_text(source.replace(original, mutated))
    try:
        env = dict(os.environ, FLASH_SHORT_CASES="1")
        result = subprocess.run(
            ["cargo", "test", "-q", "-p", "burn-positional-kernels", "--test", "flash", test],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
    finally:
        path.write_text(source)
    if "error[" in result.stderr and "test result" not in result.stdout:
        print(f"{name}: does not compile\n{result.stderr[-2000:]}")
        return False
    caught = result.returncode != 0
    lines = result.stdout.splitlines()
    # The failed check's message: the line after "panicked at" (it ends in "off by ..." or names
    # the NaN).
    reason = next(
        (lines[i + 1].strip() for i, line in enumerate(lines[:-1]) if "panicked at" in line),
        "",
    )
    print(f"{name}: {'caught' if caught else 'SURVIVED'} {reason[:300]}", flush=True)
    return caught


def main():
    wanted = set(sys.argv[1:])
    results = [run(*m) for m in MUTANTS if not wanted or m[0] in wanted]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
