#!/usr/bin/env python3
"""What a kiln launch costs from Python, against the framework's own smallest operation in the
same process: a cached launch of `axpy` on 16 floats (with and without the sync) against
np.add on 16 floats, and, when torch imports, the same with torch tensors against torch.add.

Run from a build: PYTHONPATH=build/python python3 tools/bench/python_launch_bench.py
(torch: the interpreter of a venv that has it, e.g. build/bench-venv/bin/python).
Timings never gate tests; docs/performance.md records them with the machine and date."""
import platform
import statistics
import sys
import timeit

import numpy as np

import kiln


def per_call_us(fn, number=20000, repeat=15):
    fn()
    times = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(times) / number * 1e6


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def row(name, us, peer_us):
    print(f"  {name:44s} {us:7.2f} us   {us / peer_us:5.1f}x the peer")


def main():
    print(f"python launch overhead: {cpu_name()}, Python {platform.python_version()}, "
          f"NumPy {np.__version__}, kiln {kiln.__version__}")
    rt = kiln.Runtime("cpu")
    k = rt.kernel("axpy")
    x = np.ones(16, np.float32)
    y = np.zeros(16, np.float32)
    out = np.empty(16, np.float32)
    rt.launch(k, 1, 256, x, y, 1.0)  # compiles (or loads from the disk cache)
    rt.sync()
    peer = per_call_us(lambda: np.add(x, y, out=out))
    print(f"  {'peer: np.add(x, y, out=) on 16 floats':44s} {peer:7.2f} us")
    row("kiln launch, NumPy arrays", per_call_us(lambda: rt.launch(k, 1, 256, x, y, 1.0)), peer)

    def launch_sync():
        rt.launch(k, 1, 256, x, y, 1.0)
        rt.sync()

    row("kiln launch + sync, NumPy arrays", per_call_us(launch_sync), peer)
    tx = rt.tensor(x)
    ty = rt.tensor(y)
    row("kiln launch, kiln.Tensor arguments", per_call_us(lambda: rt.launch(k, 1, 256, tx, ty, 1.0)),
        peer)
    try:
        import torch
    except ImportError:
        print("  torch: not importable in this interpreter; its rows are left out")
        return
    a = torch.ones(16)
    b = torch.zeros(16)
    c = torch.empty(16)
    tpeer = per_call_us(lambda: torch.add(a, b, out=c))
    print(f"  {'peer: torch.add(a, b, out=) on 16 floats':44s} {tpeer:7.2f} us   (torch "
          f"{torch.__version__})")
    row("kiln launch, torch tensors", per_call_us(lambda: rt.launch(k, 1, 256, a, b, 1.0)), tpeer)


if __name__ == "__main__":
    sys.exit(main())
