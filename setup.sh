#!/usr/bin/env bash
# Sets kiln up on a fresh Debian 12 machine and runs the main job or the tests:
#   ./setup.sh demo    install what is missing, build, run `kiln demo`
#   ./setup.sh test    install what is missing, build, run every test
#   ./setup.sh build   install what is missing, build
# Installing is idempotent and silent when every package is present. The build goes to
# build/ (binaries in build/bin/); ccache is used when installed.
set -euo pipefail
cd "$(dirname "$0")"

packages=(
  cmake ninja-build g++ ccache python3
  python3-venv  # the PyTorch peer of tools/bench/cpu_vs_torch.sh lives in a venv
  llvm-22-dev llvm-22-tools  # LLVM (ORC, NVPTX) and lit/FileCheck for the text tests
  libfmt-dev catch2 libcli11-dev nlohmann-json3-dev libxxhash-dev
  python3-dev pybind11-dev python3-numpy python3-pytest  # the Python module and its tests
  libopenblas-dev  # the sgemm peer of tools/bench/matmul_mma_bench (never linked into kiln)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

if [ ! -f build/build.ninja ]; then
  mkdir -p build
  if ! cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >build/configure.log 2>&1; then
    cat build/configure.log >&2
    exit 1
  fi
fi
cmake --build build

case "${1:-build}" in
  demo) exec build/bin/kiln demo ;;
  test) exec ctest --test-dir build --output-on-failure -j "$(nproc)" ;;
  build) ;;
  *) echo "usage: $0 [demo|test|build]" >&2; exit 2 ;;
esac
