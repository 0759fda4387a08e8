#!/usr/bin/env bash
# kiln::lib::matmul against OpenBLAS and PyTorch CPU in one run: build/bin/matmul_bench (kiln and
# OpenBLAS's sgemm, checked against each other), then tools/bench/torch_matmul.py on the same
# shapes with the same threads; prints the ratios and writes build/matmul_bench.csv, and the plot
# docs/images/matmul_cpu.png when matplotlib is importable. PyTorch and matplotlib come from PyPI
# into a virtual environment this script makes (build/bench-venv); nothing is installed into the
# system. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are cleared: they make OpenBLAS pick slower
# kernels.
#   tools/bench/matmul_vs_peers.sh [--quick]      (run ./setup.sh build first)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/bench/bench_venv.sh
bench_venv matmul_vs_peers numpy matplotlib
kiln_csv=build/matmul_kiln.csv
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bin/matmul_bench --csv "$kiln_csv" "$@" |
  tee build/matmul_kiln.txt
echo
"$py" tools/bench/torch_matmul.py --shapes "$kiln_csv" --out build/matmul_bench.csv --threads "$(nproc)"
echo
"$py" - build/matmul_bench.csv <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("kiln::lib::matmul against its peers (GFLOP/s; ratios above 1: kiln is faster)")
print(f"{'shape':<12} {'batch':>5} {'m':>6} {'n':>6} {'k':>6} {'kiln':>8} {'OpenBLAS':>9} "
      f"{'PyTorch':>8} {'/OpenBLAS':>10} {'/PyTorch':>9}")
for r in rows:
    k, b = float(r["kiln_gflops"]), float(r["openblas_gflops"] or 0)
    t = float(r["torch_gflops"] or 0)
    print(f"{r['kind']:<12} {r['batch']:>5} {r['m']:>6} {r['n']:>6} {r['k']:>6} {k:8.1f} "
          f"{b:9.1f} {t:8.1f} {k / b if b else 0:10.2f} {k / t if t else 0:9.2f}")
PY
if "$py" -c "import matplotlib" 2>/dev/null; then
  host=$(sed -n 's/^matmul_bench: //p' build/matmul_kiln.txt | head -1)
  "$py" tools/bench/plot_matmul.py build/matmul_bench.csv docs/images/matmul_cpu.png \
    "$host, $(date +%Y-%m-%d)"
fi
