#!/usr/bin/env python3
"""PyTorch CPU's torch.matmul on the shapes of a matmul_bench run (its --csv file), timed the same
way (median of repeated calls), with the same number of threads; writes the same CSV with a
torch_gflops column added. Prints why it is skipped when torch is not importable.

    python3 tools/bench/torch_matmul.py --shapes kiln.csv --out joined.csv [--threads N]
"""
import argparse
import csv
import os
import statistics
import sys
import time


def median_s(f, reps, samples):
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True, help="matmul_bench --csv output")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    with open(args.shapes) as f:
        rows = list(csv.DictReader(f))
    try:
        import torch
    except ImportError:
        print("torch_matmul: skipped: torch is not importable here (tools/bench/matmul_vs_peers.sh "
              "installs the CPU wheel into build/bench-venv)")
        for r in rows:
            r["torch_gflops"] = ""
    else:
        torch.set_num_threads(args.threads)
        print(f"torch {torch.__version__} on the CPU, {torch.get_num_threads()} threads")
        g = torch.Generator().manual_seed(7)
        for r in rows:
            b, m, n, k = (int(r[x]) for x in ("batch", "m", "n", "k"))
            shape = lambda *s: s if b == 1 else (b,) + s
            x = torch.rand(shape(m, k), generator=g) * 2 - 1
            y = torch.rand(shape(k, n), generator=g) * 2 - 1
            out = torch.empty(shape(m, n))
            flops = 2.0 * b * m * n * k
            reps = max(1, int(2e9 / flops))
            torch.matmul(x, y, out=out)
            s = median_s(lambda: torch.matmul(x, y, out=out), reps, 7)
            r["torch_gflops"] = f"{flops / s / 1e9:.2f}"
            print(f"  {r['kind']:<12} {b:>4} x {m} x {n} x {k}: {s * 1e3:9.3f} ms "
                  f"{flops / s / 1e9:8.1f} GFLOP/s", flush=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
