#!/usr/bin/env bash
# kiln's GPU-style CPU kernels against PyTorch CPU on the same jobs and shapes: runs
# build/bin/cpu_kernels_bench and tools/bench/torch_cpu_peers.py with the same number of threads
# and prints kiln's speed-up over PyTorch per job. PyTorch comes from PyPI into a virtual
# environment this script makes (build/bench-venv); nothing is installed into the system.
#   tools/bench/cpu_vs_torch.sh [--quick]      (run ./setup.sh build first)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/bench/bench_venv.sh
bench_venv cpu_vs_torch
threads=$(nproc)
kiln_out=$(build/bin/cpu_kernels_bench "$@")
torch_out=$("$py" tools/bench/torch_cpu_peers.py --threads "$threads" "$@")
echo "$kiln_out"
echo "$torch_out"
# Join the two on job and shape: kiln ms (first number after "kiln") against torch ms.
python3 - "$kiln_out" "$torch_out" <<'PY'
import re, sys
def rows(text, who):
    out = {}
    for line in text.splitlines():
        m = re.match(r"(\S+)\s+(.*?)\s+" + who + r"\s+([0-9.]+) ms", line)
        if m:
            out[(m.group(1), " ".join(m.group(2).split(", ")[0].split()))] = float(m.group(3))
    return out
kiln, torch = rows(sys.argv[1], "kiln"), rows(sys.argv[2], "torch")
print("kiln against PyTorch CPU (same threads):")
for key, t in torch.items():
    k = kiln.get(key)
    if k:
        print(f"  {key[0]:<12} {key[1]:<24} kiln {k:8.2f} ms  torch {t:8.2f} ms  {t / k:6.2f}x")
PY
