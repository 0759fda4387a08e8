#!/usr/bin/env bash
# The boundary tests once more under AddressSanitizer + UndefinedBehaviorSanitizer (ctest runs
# it as `sanitize`): a build of its own (KILN_SANITIZE=address at -O1, only the targets these
# tests need), then the view property test, the cache's safety tests, the CPU runs of matmul_tma
# with clusters (fibers on reused stacks), NVRTC crashing in its worker, the Python module on
# NumPy arrays, and the `kiln run` sweep of hostile arguments.
#   tests/sanitize.sh SOURCE_DIR WORK_DIR
set -euo pipefail
src=$1
work=$2
mkdir -p "$work"
if [ ! -f "$work/build/build.ninja" ]; then
  cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_C_FLAGS="-O1 -g1" -DCMAKE_CXX_FLAGS="-O1 -g1" -DKILN_SANITIZE=address \
    -DKILN_BUILD_BENCH=OFF >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
fi
targets=(test_runtime test_kernels test_cuda kiln)
if ninja -C "$work/build" -t query kiln_python >/dev/null 2>&1; then
  targets+=(kiln_python kiln_user_plugin)
fi
cmake --build "$work/build" --target "${targets[@]}" >"$work/build.log" 2>&1 ||
  { tail -50 "$work/build.log"; exit 1; }
bin=$work/build/bin
export KILN_CACHE_DIR=$work/cache
rm -rf "$KILN_CACHE_DIR"
# Any report ends the run with a failure (UBSan is built not to recover).
export ASAN_OPTIONS=abort_on_error=0:halt_on_error=1:detect_stack_use_after_return=0
"$bin/test_runtime" "[views]"
"$bin/test_runtime" "[safety]"
"$bin/test_kernels" "matmul_tma with clusters multicasting B: every input type\, swizzle and ring depth on the CPU"
"$bin/test_cuda" "a crash inside NVRTC in the worker is a compile error and the program goes on"
if [[ " ${targets[*]} " == *" kiln_python "* ]]; then
  ctest --test-dir "$work/build" -R '^python_numpy$' --output-on-failure
fi
"${KILN_SWEEP_PYTHON:-python3}" "$src/tests/cli/run_sweep.py" "$bin/kiln" --jobs 2
echo "sanitize: passed"
