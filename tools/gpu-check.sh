#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, its driver and a CUDA toolkit (NVRTC), builds
# kiln, lists the devices, runs the GPU tests (the CPU's numeric tests on cuda:0, the runtime's
# GPU tests, the CUDA compile and driver tests) and benchmarks axpy bandwidth against a
# device-to-device copy and kiln's launch overhead against a raw cuLaunchKernel. About 3 to 5
# minutes. Results go to stdout (and gpu-check.log); record them in docs/performance.md.
#   tools/gpu-check.sh [--quick]
set -uo pipefail
cd "$(dirname "$0")/.."
quick=""
[ "${1:-}" = "--quick" ] && quick="--quick"
log=gpu-check.log
exec > >(tee "$log") 2>&1

echo "== kiln gpu-check, $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
./setup.sh build || { echo "gpu-check: the build failed"; exit 1; }
build/bin/kiln version
build/bin/kiln devices
if ! build/bin/kiln devices | grep -q '^cuda:0'; then
  echo "gpu-check: no GPU here (see the reason above); nothing to check"
  exit 77
fi
status=0
echo "== GPU tests"
ctest --test-dir build --output-on-failure -R 'test_gpu|test_cuda|cuda driver' || status=1
build/bin/test_gpu --durations yes 2>&1 | tail -5
echo "== kiln demo (every example on every device)"
build/bin/kiln demo --repeat 5 || status=1
echo "== benchmarks"
build/bin/gpu_bench $quick || status=1
echo "== gpu-check done: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
