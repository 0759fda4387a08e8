#!/usr/bin/env bash
# kiln::lib's pooling, softmax, layer norm, sums and an elementwise chain against PyTorch CPU and
# the memory bandwidth in one run: build/bin/lib_bench (kiln and a plain C++ loop, checked
# against each other, and the STREAM triad), then tools/bench/torch_lib.py on the same jobs with
# the same threads; prints kiln's speed-up over PyTorch and its fraction of the bandwidth limit,
# writes build/lib_bench.csv, and the chart docs/images/lib_cpu.png when matplotlib is
# importable. PyTorch and matplotlib come from PyPI into build/bench-venv (bench_venv.sh);
# nothing is installed into the system.
#   tools/bench/lib_vs_torch.sh [--quick]      (run ./setup.sh build first)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/bench/bench_venv.sh
bench_venv lib_vs_torch matplotlib
build/bin/lib_bench --csv "$@" | tee build/lib_kiln.csv
echo
"$py" tools/bench/torch_lib.py --threads "$(nproc)" "$@" | tee build/lib_torch.txt
echo
"$py" - build/lib_kiln.csv build/lib_torch.txt build/lib_bench.csv <<'PY'
import csv, re, sys
lines = open(sys.argv[1]).read().splitlines()
host = lines[0].lstrip("# ")
kiln = list(csv.DictReader(l for l in lines if not l.startswith("#")))
torch = {}
for line in open(sys.argv[2]):
    m = re.match(r"(\S+)\s+(.*?)\s+torch\s+([0-9.]+) ms", line)
    if m:
        torch[(m.group(1), m.group(2).strip())] = float(m.group(3))
print(f"kiln::lib against PyTorch CPU and the bandwidth ({host})")
print(f"{'op':<12} {'shape':<28} {'kiln ms':>8} {'torch ms':>9} {'speed-up':>9} "
      f"{'limit ms':>9} {'of limit':>9}")
with open(sys.argv[3], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["op", "shape", "kiln_ms", "plain_ms", "torch_ms", "limit_ms"])
    for r in kiln:
        k, lim = float(r["kiln_ms"]), float(r["bandwidth_limit_ms"])
        t = torch.get((r["op"], r["shape"]))
        w.writerow([r["op"], r["shape"], k, r["plain_ms"], t or "", lim])
        ts = f"{t:9.2f} {t / k:8.2f}x" if t else f"{'-':>9} {'-':>9}"
        print(f"{r['op']:<12} {r['shape']:<28} {k:8.2f} {ts} {lim:9.2f} {100 * lim / k:8.0f}%")
PY
if "$py" -c "import matplotlib" 2>/dev/null; then
  host=$(head -1 build/lib_kiln.csv | sed 's/^# //')
  "$py" tools/bench/plot_lib.py build/lib_bench.csv docs/images/lib_cpu.png "$host, $(date +%Y-%m-%d)"
fi
