#!/usr/bin/env python3
"""The chart of docs/performance.md "Attention": kiln::lib::attention's speed-up over PyTorch
CPU's scaled_dot_product_attention per shape, forward, backward and decoding, from the CSVs
tools/bench/attention_vs_torch.sh writes (a pass whose CSV is missing is left out).

    python3 tools/bench/plot_attention.py OUT.png TITLE FORWARD.csv BACKWARD.csv DECODE.csv
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PASSES = [("forward", "forward"), ("backward", "backward (dq, dk, dv)"),
          ("decode", "decoding (1 query, 32 heads, 8 key/value heads)")]


def rows(path):
    if not os.path.exists(path):
        return []
    return [r for r in csv.DictReader(open(path)) if r["torch_ms"] not in ("", "-")]


def main():
    out, title, paths = sys.argv[1], sys.argv[2], sys.argv[3:6]
    panels = [(name, label, rows(p)) for (name, label), p in zip(PASSES, paths)]
    panels = [p for p in panels if p[2]]
    if not panels:
        sys.exit("plot_attention.py: no rows in " + ", ".join(paths))
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3.2 * len(panels)), dpi=110,
                             squeeze=False)
    for ax, (name, label, rs) in zip(axes[:, 0], panels):
        causal = [r for r in rs if r["causal"] == "1"]
        groups = [("not causal", [r for r in rs if r["causal"] == "0"], "#4f81bd"),
                  ("causal", causal, "#c0504d")] if causal else [("", rs, "#4f81bd")]
        shapes = list(dict.fromkeys(f'{r["batch"]}x{r["heads"]}x{r["seq"]}x{r["head_dim"]}'
                                    for r in rs))
        width = 0.8 / len(groups)
        for j, (what, mine, color) in enumerate(groups):
            xs, ys = [], []
            for r in mine:
                shape = f'{r["batch"]}x{r["heads"]}x{r["seq"]}x{r["head_dim"]}'
                xs.append(shapes.index(shape) + (j - (len(groups) - 1) / 2) * width)
                ys.append(float(r["torch_ms"]) / float(r["kiln_ms"]))
            ax.bar(xs, ys, width, color=color, label=what or None)
        ax.axhline(1, color="black", linewidth=0.8)
        ax.set_ylabel(f"speed-up over\nPyTorch CPU, {label.split(' ')[0]}")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, rotation=20, ha="right", fontsize=8)
        ax.set_title(label, fontsize=8)
        if len(groups) > 1:
            ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out)


if __name__ == "__main__":
    main()
