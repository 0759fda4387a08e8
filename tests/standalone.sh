#!/usr/bin/env bash
# The installed kiln, used as a dependency: install the build into a prefix, build
# examples/standalone against it (find_package(kiln), kiln_add_kernels) with no path into the
# source tree, run its program, and run its kernels through the installed CLI.
#   tests/standalone.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
src=$1 build=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
# Nothing under the prefix may point back into the source or build tree.
if grep -rlI -e "$src/" -e "$build/" "$prefix/lib/cmake" "$prefix/include" >"$work/leaks.txt"; then
  echo "the installed package names the source or build tree:" >&2
  cat "$work/leaks.txt" >&2
  exit 1
fi
# The project is copied out of the source tree first: it must not need anything next to it.
cp -r "$src/examples/standalone" "$work/project"
cmake -S "$work/project" -B "$work/project/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/project/build" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
plugin=$work/project/build/libmy_kernels.so
"$work/project/build/app"
"$work/project/build/app_c"
"$work/project/build/app_linked"
# From Python, when the prefix has the module (built where python3-dev and pybind11-dev are).
if ls "$prefix"/lib/python/kiln/_kiln*.so >/dev/null 2>&1; then
  PYTHONPATH="$prefix/lib/python" "${KILN_PYTHON:-/usr/bin/python3}" "$work/project/app.py" \
    "$work/project/build/libmy_kernels.so"
else
  echo "standalone: no Python module in the prefix; app.py not run"
fi
"$prefix/bin/kiln" run row_sum --plugin "$plugin" --set units=128 --shape in=300x1000 --repeat 1
"$prefix/bin/kiln" show axpy --plugin "$plugin" | grep -q 'file #1 "my_kernels.cpp"' || {
  echo "kiln show axpy --plugin did not show the project's axpy" >&2
  exit 1
}
echo "standalone: passed"
