#!/usr/bin/env python3
"""`kiln run` over every registered kernel and library operation with hostile arguments: shapes
of the wrong rank, zero, negative and huge sizes, and out-of-range, negative and non-numeric
values. Each run must end with a result or a clear error: no signal, no abort, no internal
error, no hang. Usage: run_sweep.py KILN [--quick] [--jobs N]."""
import concurrent.futures
import os
import re
import subprocess
import sys

SHAPES = ["0", "1", "100000", "3x5x7", "0x4", "7x0", "-3", "2x-1",
          "99999999999x99999999999", "1x1x1x1x1x1x1x1"]
VALUES = ["-1", "0", "99999999999", "1e40", "nan", "-99999999999", "abc"]
BAD = ("terminate called", "internal error", "Assertion", "AddressSanitizer",
       "runtime error:", "std::out_of_range", "Segmentation")


def params(kiln, env):
    """{kernel: [(name, kind)]} from `kiln list`; kind: tensor, scalar or comptime."""
    out = subprocess.run([kiln, "list"], capture_output=True, text=True, env=env,
                         check=True).stdout
    kernels, current = {}, None
    for line in out.splitlines():
        m = re.match(r"^(\S+)\s+-\s", line)
        if m:
            current = m.group(1)
            kernels[current] = []
            continue
        m = re.match(r"^  (\w+): (.*)$", line)
        if m and current and m.group(1) not in ("instantiations",):
            kind = ("tensor" if m.group(2).startswith(("tensor", "array")) else
                    "comptime" if "(comptime)" in m.group(2) else "scalar")
            kernels[current].append((m.group(1), kind))
    return kernels


def cases(kernels, quick):
    for k, ps in sorted(kernels.items()):
        tensors = [p for p, kind in ps if kind == "tensor"]
        values = [p for p, kind in ps if kind != "tensor"]
        shapes = SHAPES[:6] if quick else SHAPES
        for i, s in enumerate(shapes):
            if tensors:
                yield [k, "--shape", f"{tensors[i % len(tensors)]}={s}"]
        for i, v in enumerate(VALUES[:4] if quick else VALUES):
            if values:
                yield [k, "--set", f"{values[i % len(values)]}={v}"]
        if len(tensors) >= 2:  # two shapes that disagree
            yield [k, "--shape", f"{tensors[0]}=1x1000", "--shape", f"{tensors[1]}=1x1"]


def main():
    kiln = sys.argv[1]
    quick = "--quick" in sys.argv
    jobs = int(sys.argv[sys.argv.index("--jobs") + 1]) if "--jobs" in sys.argv else 2
    env = dict(os.environ)
    kernels = params(kiln, env)
    todo = list(cases(kernels, quick))

    def one(args):
        try:
            p = subprocess.run([kiln, "run", *args, "--repeat", "0"], capture_output=True,
                               text=True, env=env, timeout=300)
        except subprocess.TimeoutExpired:
            return args, "no answer within 300 s"
        text = p.stdout + p.stderr
        if p.returncode < 0:
            return args, f"killed by signal {-p.returncode}: {text[-400:]}"
        if p.returncode not in (0, 1, 2):
            return args, f"exit status {p.returncode}: {text[-400:]}"
        for bad in BAD:
            if bad in text:
                return args, f"'{bad}' in the output: {text[-400:]}"
        return args, None

    failures = 0
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for args, why in pool.map(one, todo):
            if why:
                failures += 1
                print(f"FAIL kiln run {' '.join(args)}: {why}")
    print(f"run sweep: {len(todo)} argument lists over {len(kernels)} kernels")
    print(f"{len(todo) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
