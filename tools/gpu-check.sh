#!/usr/bin/env bash
# The GPU check, run on a machine with an NVIDIA GPU, its driver and the CUDA toolkit (NVRTC):
# builds kiln, runs the GPU tests (every example kernel against its C++ reference on cuda:0,
# the CPU's numeric op tests compiled for the GPU, prints/asserts/checked faults, streams,
# events, memory; the NVRTC compile tests for every target; the driver tests), `kiln demo`, and
# the GPU benchmarks with their peers measured in the same run (axpy against a device-to-device
# copy, launch overhead against a raw cuLaunchKernel, matmul_mma's TFLOP/s against
# torch.matmul, kiln::lib::matmul against cuBLAS, kiln::lib::conv against cuDNN,
# kiln::lib::attention against PyTorch's SDPA). Aims at well
# under 8 minutes in all.
#
#   tools/gpu-check.sh OUT_DIR [--quick]
#
# Everything goes to OUT_DIR: gpu-check.log (all output, the tests' too) and results.txt (the
# machine, the test summaries and every benchmark line: what to record in docs/performance.md).
# Each phase prints the seconds since the start, so the log shows where the time went.
#
# With a pack from tools/gpu-pack.sh in .gpu-pack/ (or $KILN_GPU_PACK) it builds without the CPU
# backend against the pack alone (the bare GPU machine has no LLVM, fmt, CLI11, nlohmann-json,
# xxhash or Catch2); without one, the usual build with the system's packages. Exit status: 0
# when everything passed, 1 when something failed, 77 when there is no GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-}
if [ -z "$out" ] || [ "${out#--}" != "$out" ]; then
  echo "usage: tools/gpu-check.sh OUT_DIR [--quick]" >&2
  exit 2
fi
quick=""
[ "${2:-}" = "--quick" ] && quick="--quick"
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
log=$out/gpu-check.log
results=$out/results.txt
exec > >(tee "$log") 2>&1
: >"$results"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

start=$(date +%s)
phase() { echo "== [$(($(date +%s) - start)) s] $*"; }
record() { tee -a "$results"; }
status=0
fail() {
  echo "gpu-check: $*"
  echo "FAILED: $*" >>"$results"
  status=1
}

phase "kiln gpu-check, $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), $(nproc) cores" | record
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | record
fi
git log -1 --format='commit %h %s' 2>/dev/null | record

pack=${KILN_GPU_PACK:-.gpu-pack}
build=build-gpu
config=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
if [ -f "$pack/MANIFEST" ]; then
  config+=(-DKILN_CPU=OFF "-DKILN_DEPS_PREFIX=$(cd "$pack" && pwd)")
  echo "dependencies: the pack in $pack (KILN_CPU=OFF: no CPU backend)" | record
else
  echo "dependencies: the system's packages (no pack in $pack)" | record
  build=build
fi
command -v ninja >/dev/null || config=(-DCMAKE_BUILD_TYPE=Release "${config[@]:2}")

phase "configure"
if ! cmake -S . -B "$build" "${config[@]}" >"$tmp/configure.log" 2>&1; then
  cat "$tmp/configure.log"
  fail "configure"
  exit 1
fi
phase "build ($(nproc) jobs)"
if ! cmake --build "$build" -j "$(nproc)" >"$tmp/build.log" 2>&1; then
  grep -E -A5 'error|FAILED' "$tmp/build.log" | head -100
  fail "build"
  exit 1
fi
tail -n 1 "$tmp/build.log"

phase "devices"
"$build/bin/kiln" version | record
"$build/bin/kiln" devices | record
if ! "$build/bin/kiln" devices | grep -q '^cuda:0 '; then
  echo "gpu-check: no GPU here (see the reason above); nothing to check" | record
  exit 77
fi

phase "GPU tests"
"$build/bin/test_gpu" 2>&1 | tee "$tmp/test_gpu.log"
rc=${PIPESTATUS[0]}
grep -E '^running on|^skipped|^(All tests passed|test cases:|assertions:)' "$tmp/test_gpu.log" |
  sed 's/^/test_gpu: /' | record
[ $rc -eq 0 ] || fail "test_gpu (exit $rc)"

phase "CUDA compile and driver tests"
ctest --test-dir "$build" -j "$(nproc)" -R 'test_cuda|cuda driver' --output-on-failure 2>&1 |
  tee "$tmp/ctest.log" | grep -v -E '^ *(Start|[0-9]+/[0-9]+ Test) '
rc=${PIPESTATUS[0]}
grep -E 'tests passed' "$tmp/ctest.log" | sed 's/^/ctest (compile, driver): /' | record
[ $rc -eq 0 ] || fail "ctest (compile, driver)"

phase "kiln demo"
"$build/bin/kiln" demo --repeat 5 2>&1 | record || fail "kiln demo"

phase "benchmarks"
"$build/bin/gpu_bench" $quick 2>&1 | record
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "gpu_bench"

# kiln::lib::matmul (the path each target takes) against cuBLAS on the same shapes in the same
# process: squares to 16384, a decode product, a short K; f16 and bf16; both layouts of B.
phase "library matmul against cuBLAS"
"$build/bin/gpu_matmul_bench" $quick 2>&1 | record
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "gpu_matmul_bench"

# The peer of gpu_bench's matmul: torch.matmul (cuBLAS) on the same shape and type, when the
# machine's python3 has PyTorch with CUDA.
phase "torch.matmul peer"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  KILN_QUICK="$quick" python3 - <<'PY' 2>&1 | record
import os, torch
n = 2048 if os.environ.get("KILN_QUICK") else 8192
a = torch.rand(n, n, device="cuda", dtype=torch.bfloat16) * 2 - 1
b = torch.rand(n, n, device="cuda", dtype=torch.bfloat16) * 2 - 1
for _ in range(3):
    c = (a @ b).float()
torch.cuda.synchronize()
times = []
for _ in range(5):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    c = torch.matmul(a, b)
    end.record()
    torch.cuda.synchronize()
    times.append(start.elapsed_time(end))
ms = sorted(times)[len(times) // 2]
print(f"torch.matmul bf16 {n}x{n}x{n} (torch {torch.__version__}): {ms:.3f} ms, "
      f"{2 * n ** 3 / ms / 1e9:.1f} TFLOP/s")
PY
else
  echo "torch.matmul: skipped (this python3 has no PyTorch with CUDA)" | record
fi

# kiln::lib::conv on the GPU (the path it picks: im2col chunks on the tensor cores, the depthwise
# and direct kernels) against cuDNN through PyTorch on the same layers, bf16, NCHW, batch 8:
# ResNet-50's stem and 3x3 layers, a 1x1 layer, MobileNetV2's depthwise 3x3; forward and both
# backward passes. cuDNN's column is skipped, with the reason, where PyTorch has no CUDA.
phase "library convolution against cuDNN"
torch_cuda=0
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && torch_cuda=1
[ $torch_cuda = 1 ] || echo "conv: cuDNN skipped (this python3 has no PyTorch with CUDA)" | record
for l in "stem7x7 3x224x224 64x3x7x7 2 3 1" "res2_3x3 64x56x56 64x64x3x3 1 1 1" \
  "res4_3x3 256x14x14 256x256x3x3 1 1 1" "res3_1x1 512x28x28 128x512x1x1 1 0 1" \
  "mbv2_dw3x3 144x56x56 144x1x3x3 1 1 144"; do
  read -r name x w stride pad groups <<<"$l"
  for pass in forward backward_input backward_weight; do
    case $pass in
      forward) run=conv2d xs="x=8x$x" ws="w=$w" dt="x=bf16" ;;
      backward_input) run=conv2d_backward_input xs="dx=8x$x" ws="w=$w" dt="dy=bf16" ;;
      backward_weight) run=conv2d_backward_weight xs="x=8x$x" ws="dw=$w" dt="dy=bf16" ;;
    esac
    out=$("$build/bin/kiln" run "$run" --device cuda:0 --shape "$xs" --shape "$ws" \
      --dtype "$dt" --set stride="$stride" --set padding="$pad" --set groups="$groups" \
      --repeat 10 2>&1) || { echo "$out"; fail "conv $name $pass"; continue; }
    k=$(sed -n 's/.*median \([0-9.]*\) ms.*/\1/p' <<<"$out")
    kernel=$(sed -n 's/^  kernel *\([a-z0-9_]*\):.*/\1/p' <<<"$out")
    grep -q "passed" <<<"$out" || fail "conv $name $pass: the result did not pass its check"
    t=-
    if [ $torch_cuda = 1 ]; then
      t=$(python3 - "8x$x" "$w" "$stride" "$pad" "$groups" "$pass" <<'PY' 2>/dev/null || echo -
import sys, torch
xs, ws, stride, pad, groups, what = sys.argv[1:]
x = torch.rand(*map(int, xs.split("x")), device="cuda", dtype=torch.bfloat16) * 2 - 1
w = torch.rand(*map(int, ws.split("x")), device="cuda", dtype=torch.bfloat16) * 2 - 1
s, p, g = [int(stride)] * 2, [int(pad)] * 2, int(groups)
torch.backends.cudnn.benchmark = True
with torch.no_grad():
    y = torch.nn.functional.conv2d(x, w, stride=s, padding=p, groups=g)
    dy = torch.rand_like(y) * 2 - 1
    mask = [what == "backward_input", what == "backward_weight", False]
    def run():
        if what == "forward":
            torch.nn.functional.conv2d(x, w, stride=s, padding=p, groups=g)
        else:
            torch.ops.aten.convolution_backward(dy, x, w, None, s, p, [1, 1], False, [0, 0], g,
                                                mask)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
print(f"{sorted(times)[5]:.3f}")
PY
)
    fi
    if [ "$t" = "-" ]; then
      echo "conv $name batch 8 $pass bf16: kiln $k ms ($kernel), cuDNN -" | record
    else
      echo "conv $name batch 8 $pass bf16: kiln $k ms ($kernel), cuDNN $t ms, speed-up" \
        "$(python3 -c "print(f'{$t / $k:.2f}x')")" | record
    fi
  done
done

# kiln::lib::attention on the GPU against PyTorch's scaled_dot_product_attention (its flash
# backend), bf16 forward: a checked run against the double reference first (a small shape), then
# the times of B x H x S x D = 4 x 16 x S x D, S 1024 and 4096, D 64 and 128, causal and not, with
# the throughput (4 B H S^2 D flops, causal counted whole). The issue's goal on an H200: 600
# TFLOP/s at D 128, S 4096; docs/performance.md "Attention" estimates 150-250 for this kernel.
phase "library attention against PyTorch SDPA"
out=$("$build/bin/kiln" run attention --device cuda:0 --shape q=2x8x300x128 \
  --shape k=2x4x300x128 --set causal=1 --set use_bias=1 2>&1) || fail "attention check"
grep -q "FAILED" <<<"$out" && fail "attention: the result did not pass its check"
echo "$out" | grep -E "reference|kernel" | record
for d in 64 128; do
  for s in 1024 4096; do
    for causal in 0 1; do
      read -r k kg < <("$build/bin/attention_bench" 4 16 "$s" "$d" "$causal" bf16 cuda:0) ||
        { fail "attention_bench 4x16x${s}x$d causal $causal"; continue; }
      t="- -"
      if [ $torch_cuda = 1 ]; then
        t=$(python3 - "$s" "$d" "$causal" <<'PY' 2>/dev/null || echo "- -"
import sys, torch
s, d, causal = map(int, sys.argv[1:])
q, k, v = (torch.rand(4, 16, s, d, device="cuda", dtype=torch.bfloat16) * 2 - 1 for _ in range(3))
f = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
for _ in range(3):
    f()
torch.cuda.synchronize()
times = []
for _ in range(10):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    f()
    end.record()
    torch.cuda.synchronize()
    times.append(start.elapsed_time(end))
m = sorted(times)[5]
print(f"{m:.3f} {4.0 * 4 * 16 * s * s * d / (m * 1e-3) / 1e12 * 1e3:.1f}")
PY
)
      fi
      read -r tm tg <<<"$t"
      echo "attention 4x16x${s}x$d causal $causal bf16: kiln $k ms ($kg GFLOP/s), PyTorch SDPA" \
        "$tm ms ($tg GFLOP/s)" | record
    done
  done
done

phase "done: $([ $status = 0 ] && echo passed || echo FAILED)" | record
exit $status
