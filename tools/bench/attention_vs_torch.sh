#!/usr/bin/env bash
# kiln::lib::attention against PyTorch CPU's scaled_dot_product_attention in one run, forward
# (--backward: the backward pass alone, kiln::lib::attention_backward against PyTorch's autograd
# of SDPA from a recorded forward), on B x H x S x D = 4 x 16 x S x D (S 512, 1024, 2048; 4096
# too with --long), D 64 and 128, causal and not, bf16 (--quick: 1 x 4 x 512 and 1024). Each
# shape through build/bin/attention_bench (the median of a few calls after the compiling one)
# and through PyTorch with the same threads (the median of as many calls after a warm-up);
# prints both times, kiln's speed-up and both throughputs (4 B H S^2 D flops per forward call,
# 10 per backward, causal counted whole), and writes build/attention_bench.csv (or
# build/attention_backward_bench.csv; with --f32, *_f32.csv), and on a full bf16 run the chart
# docs/images/attention_cpu.png from the forward, backward and decode CSVs there are (when
# matplotlib is importable). PyTorch and matplotlib come from PyPI into build/bench-venv
# (bench_venv.sh); nothing is installed into the system.
# --decode: one query per head (32 heads, 8 key/value heads) against caches of 4096, 16384 and
# 32768 keys, head size 64 and 128, batch 1 and 4, against SDPA with enable_gqa; the throughput
# columns are then the rate K and V are read at, in GB/s.
# --f32: f32 inputs (kiln runs f32 attention on the CPU only) on both sides.
#   tools/bench/attention_vs_torch.sh [--quick] [--long] [--f32] [--backward | --decode]
# (build first)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/bench/bench_venv.sh
bench_venv attention_vs_torch matplotlib
batch=4 heads=16 seqs="512 1024 2048" pass=fwd dtype=bf16 full=1
while [ $# -gt 0 ]; do
  case $1 in
    --quick) batch=1 heads=4 seqs="512 1024" full=0 ;;
    --long) seqs="$seqs 4096" ;;
    --f32) dtype=f32 full=0 ;;
    --backward) pass=bwd ;;
    --decode) pass=decode ;;
    *) echo "usage: tools/bench/attention_vs_torch.sh [--quick] [--long] [--f32] [--backward | --decode]" >&2; exit 2 ;;
  esac
  shift
done
batches=$batch causals="0 1" unit=GFLOP/s
if [ $pass = decode ]; then
  heads=32 seqs="4096 16384 32768" causals=0 batches="1 4" unit=GB/s
fi
host=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
what=kiln::lib::attention
[ $pass = bwd ] && what="kiln::lib::attention_backward (the backward pass alone)"
[ $pass = decode ] && what="kiln::lib::attention decoding (1 query, 32 heads, 8 key/value heads)"
echo "$what against PyTorch CPU ($host, $(nproc) threads, $(date +%Y-%m-%d)), $dtype"
printf "%-22s %-7s %10s %10s %9s %12s %12s\n" shape causal "kiln ms" "torch ms" speed-up \
  "kiln $unit" "torch $unit"
csv=build/attention_bench.csv
[ $pass = bwd ] && csv=build/attention_backward_bench.csv
[ $pass = decode ] && csv=build/attention_decode_bench.csv
[ $dtype = f32 ] && csv=${csv%.csv}_f32.csv
echo "batch,heads,seq,head_dim,causal,kiln_ms,torch_ms,kiln_rate,torch_rate" >"$csv"
for batch in $batches; do
for d in 64 128; do
  for s in $seqs; do
    for causal in $causals; do
      read -r k kg < <(build/bin/attention_bench "$batch" "$heads" "$s" "$d" "$causal" $dtype cpu $pass)
      t=$("$py" - "$batch" "$heads" "$s" "$d" "$causal" "$(nproc)" "$pass" "$dtype" <<'PY' 2>/dev/null || echo "- -"
import statistics, sys, time
import torch
b, h, s, d, causal, threads = map(int, sys.argv[1:7])
backward, decode = sys.argv[7] == "bwd", sys.argv[7] == "decode"
dt = torch.float32 if sys.argv[8] == "f32" else torch.bfloat16
torch.set_num_threads(threads)
hk = h // 4 if decode else h
q = torch.rand(b, h, 1 if decode else s, d, dtype=dt) * 2 - 1
k, v = (torch.rand(b, hk, s, d, dtype=dt) * 2 - 1 for _ in range(2))
sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(causal),
                                                                enable_gqa=decode)
if backward:
    for t in (q, k, v):
        t.requires_grad_()
    out, g = sdpa(), torch.rand(b, h, s, d, dtype=dt) * 2 - 1
    f = lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True)
else:
    f = sdpa
flops = (10.0 if backward else 4.0) * b * h * q.shape[2] * s * d
n = 15 if decode else 3 if flops > 2e11 else 5 if flops > 2e10 else 9
with torch.set_grad_enabled(backward):
    f()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
m = statistics.median(times)
rate = 2.0 * k.numel() * k.element_size() if decode else flops
print(f"{m * 1e3:.3f} {rate / m / 1e9:.1f}")
PY
)
      read -r tm tg <<<"$t"
      speed=$([ "$tm" = "-" ] && echo - || python3 -c "print(f'{$tm / $k:.2f}x')")
      printf "%-22s %-7s %10s %10s %9s %12s %12s\n" "${batch}x${heads}x${s}x${d}" "$causal" "$k" \
        "$tm" "$speed" "$kg" "$tg"
      echo "$batch,$heads,$s,$d,$causal,$k,$tm,$kg,$tg" >>"$csv"
    done
  done
done
done
if [ $full = 1 ] && "$py" -c "import matplotlib" 2>/dev/null; then
  "$py" tools/bench/plot_attention.py docs/images/attention_cpu.png \
    "kiln::lib::attention against PyTorch CPU, bf16 ($host, $(nproc) threads, $(date +%Y-%m-%d))" \
    build/attention_bench.csv build/attention_backward_bench.csv build/attention_decode_bench.csv
  echo "chart: docs/images/attention_cpu.png"
fi
