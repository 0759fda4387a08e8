#!/usr/bin/env python3
"""The chart of docs/performance.md "Convolution": kiln::lib::conv's speed-up over PyTorch CPU
(oneDNN) per layer and pass, batch 1 and 8, from tools/bench/conv_vs_torch.sh's CSV.

    python3 tools/bench/plot_conv.py build/conv_bench.csv docs/images/conv_cpu.png [TITLE]
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PASSES = ["forward", "backward_input", "backward_weight"]
COLORS = {"forward": "#c0504d", "backward_input": "#4f81bd", "backward_weight": "#9bbb59"}


def main():
    rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["torch_ms"] not in ("", "-")]
    batches = sorted({int(r["batch"]) for r in rows})
    fig, axes = plt.subplots(len(batches), 1, figsize=(10, 3.6 * len(batches)), dpi=110,
                             squeeze=False)
    for ax, batch in zip(axes[:, 0], batches):
        mine = [r for r in rows if int(r["batch"]) == batch]
        layers = list(dict.fromkeys(r["layer"] for r in mine))
        width = 0.8 / len(PASSES)
        for j, p in enumerate(PASSES):
            xs, ys = [], []
            for i, layer in enumerate(layers):
                for r in mine:
                    if r["layer"] == layer and r["pass"] == p:
                        xs.append(i + (j - 1) * width)
                        ys.append(float(r["torch_ms"]) / float(r["kiln_ms"]))
            ax.bar(xs, ys, width, color=COLORS[p], label=p.replace("_", " "))
        ax.axhline(1, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylabel(f"speed-up over PyTorch CPU\n(batch {batch})")
        ax.set_xticks(range(len(layers)))
        ax.set_xticklabels(layers, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=7, loc="upper right")
    title = sys.argv[3] if len(sys.argv) > 3 else "kiln::lib::conv on the CPU"
    axes[0, 0].set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(sys.argv[2])


if __name__ == "__main__":
    main()
