#!/usr/bin/env bash
# kiln::lib::conv against PyTorch CPU (oneDNN) in one run, on the convolution layers of
# ResNet-50 (the 7x7 stem, its distinct 3x3 and 1x1 layers) at batch 1 and 8, a MobileNetV2
# depthwise 3x3 block and a 3-d 3x3x3 layer, f32, NCHW, forward and both backward passes: each
# layer through `kiln run conv2d|conv3d[_backward_input|_backward_weight]` (which also checks it
# against a double reference; the median of its timed runs) and through PyTorch with the same
# threads (torch.nn.functional.conv2d/conv3d, and aten.convolution_backward with the gradients
# kiln's pass gives: dx, or dw and the bias's; the median of 10 runs after a warm-up). Prints both times, kiln's speed-up and the
# kernel kiln picked, writes build/conv_bench.csv, and the chart docs/images/conv_cpu.png when
# matplotlib is importable (a full run only: --quick, --forward and --layer leave it alone).
# PyTorch and matplotlib come from PyPI into build/bench-venv (bench_venv.sh); nothing is
# installed into the system.   tools/bench/conv_vs_torch.sh [--quick] [--forward] [--layer NAME]   (build first)
#   --quick: batch 1 only; --forward: the forward pass only; --layer NAME: one layer (stem7x7,
#   res2_3x3, ..., mbv2_dw3x3, c3d_3x3x3)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/bench/bench_venv.sh
bench_venv conv_vs_torch matplotlib
quick=0
passes="forward backward_input backward_weight"
only=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --forward) passes="forward" ;;
    --layer) only=$2; shift ;;
    *) echo "usage: tools/bench/conv_vs_torch.sh [--quick] [--forward] [--layer NAME]" >&2; exit 2 ;;
  esac
  shift
done
# op name | x | w | stride | padding | groups
layers=(
  "stem7x7 conv2d 3x224x224 64x3x7x7 2 3 1"
  "res2_3x3 conv2d 64x56x56 64x64x3x3 1 1 1"
  "res3_3x3 conv2d 128x28x28 128x128x3x3 1 1 1"
  "res4_3x3 conv2d 256x14x14 256x256x3x3 1 1 1"
  "res5_3x3 conv2d 512x7x7 512x512x3x3 1 1 1"
  "res2_1x1a conv2d 64x56x56 64x64x1x1 1 0 1"
  "res2_1x1b conv2d 64x56x56 256x64x1x1 1 0 1"
  "res3_1x1 conv2d 512x28x28 128x512x1x1 1 0 1"
  "res4_1x1 conv2d 1024x14x14 256x1024x1x1 1 0 1"
  "res5_1x1 conv2d 2048x7x7 512x2048x1x1 1 0 1"
  "mbv2_dw3x3 conv2d 144x56x56 144x1x3x3 1 1 144"
  "c3d_3x3x3 conv3d 64x16x28x28 64x64x3x3x3 1 1 1"
)
batches="1 8"
[ $quick = 1 ] && batches="1"
host=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
# The machine's copy rate (bytes read plus written per second): PyTorch's copy_ of 2^26 floats
# with the same threads, the median of 10; a layer whose time is near its bytes at this rate
# (the depthwise one) is memory-bound, and "of copy" says how near.
copy=$("$py" - "$(nproc)" <<'PY' 2>/dev/null
import statistics, sys, time
import torch
torch.set_num_threads(int(sys.argv[1]))
a, b = torch.ones(1 << 26), torch.empty(1 << 26)
b.copy_(a)
times = []
for _ in range(10):
    t0 = time.perf_counter()
    b.copy_(a)
    times.append(time.perf_counter() - t0)
print(f"{8 * (1 << 26) / statistics.median(times) / 1e9:.1f}")
PY
)
echo "kiln::lib::conv against PyTorch CPU ($host, $(nproc) threads, $(date +%Y-%m-%d)), f32 NCHW"
echo "copy rate ${copy} GB/s (bytes read plus written; PyTorch's copy_ of 2^26 floats)"
printf "%-12s %-5s %-16s %10s %10s %9s %8s  %s\n" layer batch pass "kiln ms" "torch ms" speed-up \
  "of copy" "kiln's kernel"
csv=build/conv_bench.csv
echo "layer,batch,pass,kiln_ms,torch_ms,of_copy,kernel" >"$csv"
for n in $batches; do
  for l in "${layers[@]}"; do
   read -r name op x w stride pad groups <<<"$l"
   [ -n "$only" ] && [ "$name" != "$only" ] && continue
   for pass in $passes; do
    case $pass in
      forward) run=$op xs="x=${n}x$x" ws="w=$w" ;;
      backward_input) run=${op}_backward_input xs="dx=${n}x$x" ws="w=$w" ;;
      backward_weight) run=${op}_backward_weight xs="x=${n}x$x" ws="dw=$w" ;;
    esac
    out=$(build/bin/kiln run "$run" --shape "$xs" --shape "$ws" --set stride="$stride" \
      --set padding="$pad" --set groups="$groups" --repeat 10 2>&1) || {
      echo "$name $pass: kiln failed: $out"
      continue
    }
    k=$(sed -n 's/.*median \([0-9.]*\) ms.*/\1/p' <<<"$out")
    kernel=$(sed -n 's/^  kernel *\([a-z0-9_]*\):.*/\1/p' <<<"$out")
    grep -q "passed" <<<"$out" || echo "$name $pass: kiln's result did not pass its check"
    t=$("$py" - "$op" "${n}x$x" "$w" "$stride" "$pad" "$groups" "$(nproc)" "$pass" <<'PY' 2>/dev/null || echo "-"
import statistics, sys, time
import torch
op, xs, ws, stride, pad, groups, threads, what = sys.argv[1:]
torch.set_num_threads(int(threads))
x = torch.rand(*map(int, xs.split("x"))) * 2 - 1
w = torch.rand(*map(int, ws.split("x"))) * 2 - 1
f = torch.nn.functional.conv2d if op == "conv2d" else torch.nn.functional.conv3d
dims = x.dim() - 2
s, p, g = [int(stride)] * dims, [int(pad)] * dims, int(groups)
with torch.no_grad():
    y = f(x, w, stride=s, padding=p, groups=g)
    dy = torch.rand_like(y) * 2 - 1
    # The weights' pass asks for the bias's gradient too, as `kiln run` computes both.
    mask = [what == "backward_input", what == "backward_weight", what == "backward_weight"]
    def run():
        if what == "forward":
            f(x, w, stride=s, padding=p, groups=g)
        else:
            torch.ops.aten.convolution_backward(dy, x, w, None, s, p, [1] * dims, False,
                                                [0] * dims, g, mask)
    run()
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
# The bytes the pass reads and writes at least: x (dx), w (dw) and y (dy).
print(f"{statistics.median(times) * 1e3:.3f} {4 * (x.numel() + w.numel() + y.numel())}")
PY
)
    if [ "$t" = "-" ]; then
      printf "%-12s %-5s %-16s %10s %10s %9s %8s  %s\n" "$name" "$n" "$pass" "$k" - - - "$kernel"
      echo "$name,$n,$pass,$k,-,-,$kernel" >>"$csv"
    else
      read -r t bytes <<<"$t"
      of=$(python3 -c "print(f'{$bytes / ($k * 1e-3) / ($copy * 1e9) * 100:.0f}%')" 2>/dev/null ||
        echo -)
      printf "%-12s %-5s %-16s %10s %10s %8.2fx %8s  %s\n" "$name" "$n" "$pass" "$k" "$t" \
        "$(python3 -c "print($t / $k)")" "$of" "$kernel"
      echo "$name,$n,$pass,$k,$t,$of,$kernel" >>"$csv"
    fi
   done
  done
done
full=0
[ $quick = 0 ] && [ -z "$only" ] && [ "$passes" != forward ] && full=1
if [ $full = 1 ] && "$py" -c "import matplotlib" 2>/dev/null; then
  mkdir -p docs/images
  "$py" tools/bench/plot_conv.py "$csv" docs/images/conv_cpu.png "$host, $(date +%Y-%m-%d)"
  echo "chart: docs/images/conv_cpu.png"
fi
