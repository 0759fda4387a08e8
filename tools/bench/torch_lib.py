#!/usr/bin/env python3
"""PyTorch CPU peers of lib_bench (kiln::lib's pooling, softmax, layer norm, sums and an
elementwise chain): the same jobs and shapes, timed the same way (median of repeated runs), with
the same number of threads. Prints one line per job in lib_bench's format, or why it is skipped;
tools/bench/lib_vs_torch.sh runs both and joins them.

    python3 tools/bench/torch_lib.py [--quick] [--threads N]
"""
import argparse
import os
import sys

# The same timing as the first PyTorch peer script (a module beside this one).
from torch_cpu_peers import median_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("skipped: torch is not importable here (tools/bench/lib_vs_torch.sh installs the "
              "CPU wheel of torch from PyPI into build/bench-venv)")
        return 0
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    samples = 3 if args.quick else 11

    def reps(nbytes):
        return 1 if args.quick else max(1, int(2e8 / nbytes))

    def row(op, shape, f, nbytes):
        f()  # warm-up
        ms = median_ms(f, reps(nbytes), samples)
        print(f"{op:<12} {shape:<28} torch {ms:8.2f} ms", flush=True)

    print(f"torch {torch.__version__} on the CPU, {torch.get_num_threads()} threads")
    h = 128 if args.quick else 512
    x = torch.rand(2, 32, h, h) * 2 - 1
    for k, s, p in ((5, 1, 2), (3, 2, 1), (2, 2, 0)):
        out = F.max_pool2d(x, k, s, p)
        row("max_pool2d", f"(2,32,{h},{h}) k{k} s{s} p{p}", lambda: F.max_pool2d(x, k, s, p),
            4 * (x.numel() + out.numel()))
    for shape in ((4096, 4096), (32, 128, 1024)):
        shape = (shape[0] // 16,) + shape[1:] if args.quick else shape
        t = torch.rand(*shape) * 8 - 4
        name = "(" + ",".join(str(d) for d in shape) + ")"
        w, b = torch.rand(shape[-1]), torch.rand(shape[-1])
        row("softmax", name, lambda: torch.softmax(t, dim=-1), 8 * t.numel())
        row("layernorm", name, lambda: F.layer_norm(t, (shape[-1],), w, b, 1e-5), 8 * t.numel())
    a = 8 if args.quick else 64
    t = torch.rand(a, 1024, 1024)
    for axis in range(3):
        row("sum", f"({a},1024,1024) axis {axis}", lambda: t.sum(dim=axis),
            4 * (t.numel() + t.numel() // t.shape[axis]))
    n = 1 << (22 if args.quick else 26)
    e = torch.rand(n) * 2 - 1
    # The chain lib_bench runs: exp(x * 0.5 + 1) * x, then max(., 0) (five operations).
    row("elementwise", f"chain of 5 on 2^{n.bit_length() - 1}",
        lambda: torch.relu(torch.exp(e * 0.5 + 1) * e), 8 * n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
