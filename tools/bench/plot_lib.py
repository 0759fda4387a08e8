#!/usr/bin/env python3
"""The chart of docs/performance.md "The library II": kiln::lib's speed-up over PyTorch CPU per
job, and its fraction of the memory-bandwidth limit, from tools/bench/lib_vs_torch.sh's CSV.

    python3 tools/bench/plot_lib.py build/lib_bench.csv docs/images/lib_cpu.png [TITLE]
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["torch_ms"]]
    labels = [f"{r['op']}\n{r['shape']}" for r in rows]
    speed = [float(r["torch_ms"]) / float(r["kiln_ms"]) for r in rows]
    frac = [float(r["limit_ms"]) / float(r["kiln_ms"]) for r in rows]
    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 7), dpi=110, sharex=True)
    a.bar(range(len(rows)), speed, color="#c0504d")
    a.axhline(1, color="black", linewidth=0.8)
    a.set_yscale("log")
    a.set_ylabel("speed-up over PyTorch CPU")
    for i, s in enumerate(speed):
        a.text(i, s, f"{s:.1f}x", ha="center", va="bottom", fontsize=8)
    b.bar(range(len(rows)), [100 * f for f in frac], color="#4f81bd")
    b.axhline(100, color="black", linewidth=0.8)
    b.set_ylabel("% of the bandwidth limit\n(bytes moved / triad)")
    b.set_xticks(range(len(rows)))
    b.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    a.set_title(sys.argv[3] if len(sys.argv) > 3 else "kiln::lib on the CPU", fontsize=9)
    fig.tight_layout()
    fig.savefig(sys.argv[2])


if __name__ == "__main__":
    main()
