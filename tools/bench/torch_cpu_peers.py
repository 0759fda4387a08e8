#!/usr/bin/env python3
"""PyTorch CPU peers of cpu_kernels_bench: the same jobs and shapes, timed the same way (median
of repeated runs), with the same number of threads. Prints one line per job, or why it is
skipped. Run it beside build/bin/cpu_kernels_bench and compare the milliseconds.

    python3 tools/bench/torch_cpu_peers.py [--quick] [--threads N]
"""
import argparse
import os
import statistics
import sys
import time


def median_ms(f, reps, samples):
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        times.append((time.perf_counter() - t0) / reps * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("skipped: torch is not importable here (install the CPU wheel of torch from PyPI "
              "in a virtual environment to measure this peer)")
        return 0
    torch.set_num_threads(args.threads)
    reps, samples = (1, 3) if args.quick else (3, 7)
    print(f"torch {torch.__version__} on the CPU, {torch.get_num_threads()} threads")
    nc, h = (8, 64) if args.quick else (64, 512)
    x = torch.rand(2, nc // 2, h, h) * 2 - 1
    for k, s, p in ((3, 2, 1), (5, 1, 2)):
        ms = median_ms(lambda: F.max_pool2d(x, k, s, p), reps, samples)
        print(f"max_pool2d   (2,{nc // 2},{h},{h}) k{k} s{s} p{p}     torch {ms:8.2f} ms")
    n = 128 if args.quick else 512
    a, b = torch.rand(n, n), torch.rand(n, n)
    print(f"gemm         {n}^3                   torch {median_ms(lambda: a @ b, reps, samples):8.2f} ms")
    n = 256 if args.quick else 4096
    t = torch.rand(n, n)
    ms = median_ms(lambda: t.t().contiguous(), reps, samples)
    print(f"transpose    {n}x{n}                torch {ms:8.2f} ms")
    rows = 256 if args.quick else 4096
    r = torch.rand(rows, 1024) * 8 - 4
    ms = median_ms(lambda: torch.softmax(r, dim=1), reps, samples)
    print(f"softmax      {rows}x1024 rows           torch {ms:8.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
