#!/usr/bin/env python3
"""What a kiln launch costs from Python, against the framework's own smallest operation in the
same process: a cached launch of `axpy` on 16 floats (with and without the sync) and
kiln.lib.softmax against np.add on 16 floats, and, when torch imports, launches with torch
tensors, kiln.lib on torch tensors, the kiln.torch operators (torch.ops.kiln.softmax and a
DSL kernel registered with kiln.torch.custom_op) against torch.add on 16 floats.

Run from a build: PYTHONPATH=build/python python3 tools/bench/python_launch_bench.py
(torch: the interpreter of a venv that has it, e.g. the one ctest's python_torch makes,
~/.cache/kiln/python3.X-package/bin/python).
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
    m = np.ones((1, 16), np.float32)
    mo = np.empty((1, 16), np.float32)
    row("kiln.lib.softmax(x, y), NumPy (incl. sync)",
        per_call_us(lambda: kiln.lib.softmax(m, mo), number=5000), peer)
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

    def launch_sync_torch():
        rt.launch(k, 1, 256, a, b, 1.0)
        rt.sync()

    row("kiln launch + sync, torch tensors", per_call_us(launch_sync_torch), tpeer)
    rs = rt.kernel("row_sum")
    s1 = torch.ones(1, 16)
    o1 = torch.empty(1)
    waiting = rt.launcher(rs, wait=True, units=64)
    row("kiln.Launcher(wait=True), torch tensors", per_call_us(lambda: waiting(1, 64, s1, o1)),
        tpeer)
    import kiln.torch as kt
    s = torch.ones(1, 16)
    row("kiln.lib.softmax(x) -> new torch tensor",
        per_call_us(lambda: kiln.lib.softmax(s), number=5000), tpeer)
    row("torch.ops.kiln.softmax(x)", per_call_us(lambda: torch.ops.kiln.softmax(s), number=5000),
        tpeer)
    tsoft = per_call_us(lambda: torch.softmax(s, -1), number=5000)
    print(f"  {'(torch.softmax(x, -1) itself)':44s} {tsoft:7.2f} us")
    row_sum = kt.custom_op("kiln_bench::row_sum", "row_sum", inputs=["a"],
                           outputs=lambda t: t.new_empty(t.shape[0]),
                           grid=lambda t: (t.shape[0], 64), comptime={"units": 64})
    row("custom_op row_sum (torch.ops.kiln_bench)", per_call_us(lambda: row_sum(s), number=5000),
        tpeer)
    tsum = per_call_us(lambda: torch.sum(s, 1), number=5000)
    print(f"  {'(torch.sum(x, 1) itself)':44s} {tsum:7.2f} us")
    # What PyTorch's own C++ operators cost through torch.ops, the route kiln's take: the floor
    # of that route, for comparison.
    aten_sum = torch.ops.aten.sum.dim_IntList
    tops = per_call_us(lambda: aten_sum(s, [1]), number=5000)
    print(f"  {'(torch.ops.aten.sum.dim_IntList(x, [1]))':44s} {tops:7.2f} us")
    aten_softmax = torch.ops.aten._softmax.default
    tops2 = per_call_us(lambda: aten_softmax(s, -1, False), number=5000)
    print(f"  {'(torch.ops.aten._softmax.default(x, -1))':44s} {tops2:7.2f} us")


if __name__ == "__main__":
    sys.exit(main())
