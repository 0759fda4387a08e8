#!/usr/bin/env bash
# kiln::lib::conv against PyTorch CPU (oneDNN) in one run, on the convolution layers of
# ResNet-50 (the 7x7 stem, its distinct 3x3 and 1x1 layers) at batch 1 and 8, a MobileNetV2
# depthwise 3x3 block and a 3-d 3x3x3 layer, forward, f32, NCHW: each layer through
# `kiln run conv2d|conv3d` (which also checks it against a double reference; the median of its
# timed runs) and through torch.nn.functional.conv2d/conv3d with the same threads (the median
# of 10 runs after a warm-up). Prints both times, kiln's speed-up and the kernel kiln picked.
# PyTorch comes from PyPI into build/bench-venv (bench_venv.sh); nothing is installed into the
# system.   tools/bench/conv_vs_torch.sh [--quick]      (run ./setup.sh build first)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/bench/bench_venv.sh
bench_venv conv_vs_torch
quick=0
[ "${1:-}" = "--quick" ] && quick=1
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
echo "kiln::lib::conv against PyTorch CPU ($host, $(nproc) threads, $(date +%Y-%m-%d)), f32 NCHW forward"
printf "%-12s %-5s %10s %10s %9s  %s\n" layer batch "kiln ms" "torch ms" speed-up "kiln's kernel"
for n in $batches; do
  for l in "${layers[@]}"; do
    read -r name op x w stride pad groups <<<"$l"
    out=$(build/bin/kiln run "$op" --shape "x=${n}x$x" --shape "w=$w" --set stride="$stride" \
      --set padding="$pad" --set groups="$groups" --repeat 10 2>&1) || {
      echo "$name: kiln failed: $out"
      continue
    }
    k=$(sed -n 's/.*median \([0-9.]*\) ms.*/\1/p' <<<"$out")
    kernel=$(sed -n 's/^  kernel *\([a-z0-9_]*\):.*/\1/p' <<<"$out")
    grep -q "passed" <<<"$out" || echo "$name: kiln's result did not pass its check"
    t=$("$py" - "$op" "${n}x$x" "$w" "$stride" "$pad" "$groups" "$(nproc)" <<'PY' 2>/dev/null || echo "-"
import statistics, sys, time
import torch
op, xs, ws, stride, pad, groups, threads = sys.argv[1:]
torch.set_num_threads(int(threads))
x = torch.rand(*map(int, xs.split("x"))) * 2 - 1
w = torch.rand(*map(int, ws.split("x"))) * 2 - 1
f = torch.nn.functional.conv2d if op == "conv2d" else torch.nn.functional.conv3d
with torch.no_grad():
    f(x, w, stride=int(stride), padding=int(pad), groups=int(groups))
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        f(x, w, stride=int(stride), padding=int(pad), groups=int(groups))
        times.append(time.perf_counter() - t0)
print(f"{statistics.median(times) * 1e3:.3f}")
PY
)
    if [ "$t" = "-" ]; then
      printf "%-12s %-5s %10s %10s %9s  %s\n" "$name" "$n" "$k" - - "$kernel"
    else
      printf "%-12s %-5s %10s %10s %8.2fx  %s\n" "$name" "$n" "$k" "$t" \
        "$(python3 -c "print($t / $k)")" "$kernel"
    fi
  done
done
