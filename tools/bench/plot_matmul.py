#!/usr/bin/env python3
"""The plot of docs/performance.md: GFLOP/s against the size of square products for kiln,
OpenBLAS and PyTorch CPU, from tools/bench/matmul_vs_peers.sh's CSV.

    python3 tools/bench/plot_matmul.py build/matmul_bench.csv docs/images/matmul_cpu.png [TITLE]
"""
import csv
import os
import platform
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "square"]
    n = [int(r["n"]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for col, label, style in (("kiln_gflops", "kiln::lib::matmul (DSL)", "o-"),
                              ("openblas_gflops", "OpenBLAS sgemm", "s--"),
                              ("torch_gflops", "PyTorch CPU torch.matmul", "^:")):
        ys = [float(r[col]) if r.get(col) else None for r in rows]
        pts = [(x, y) for x, y in zip(n, ys) if y]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(n)
    ax.set_xticklabels([str(x) for x in n])
    ax.set_xlabel("n (C = A B, all n x n, f32)")
    ax.set_ylabel("GFLOP/s")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    title = sys.argv[3] if len(sys.argv) > 3 else f"{os.cpu_count()} threads, {platform.machine()}"
    ax.set_title(f"sgemm: {title}", fontsize=10)
    os.makedirs(os.path.dirname(sys.argv[2]) or ".", exist_ok=True)
    fig.tight_layout()
    fig.savefig(sys.argv[2])
    print(f"plot_matmul: wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
