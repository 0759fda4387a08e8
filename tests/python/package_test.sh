#!/usr/bin/env bash
# The Python package as a user gets it: package_test.sh MODE PYTHON SOURCE CC CXX [TEST...]
# makes (once) or reuses a virtual environment outside the checkout for PYTHON, with NumPy 2 and
# pytest from PyPI, and
#   MODE=package: `pip install SOURCE` into it (the package built by pyproject.toml, in
#     SOURCE/build-pip with the compilers of the CMake build, so that ccache reuses build/'s
#     objects), then runs pytest on the TESTs from outside the checkout;
#   MODE=torch: adds PyTorch (CPU use of PyPI's wheel) to it and runs pytest on the TESTs,
#     which need torch, against the package MODE=package installed.
# When PyPI cannot be reached (or PyTorch cannot be installed, e.g. for want of disk space) the
# test is reported as skipped (exit 77) with the reason, never as passed. KILN_PY_VENV names
# another folder for the environment.
set -uo pipefail
mode=$1 python=$2 source=$3 cc=$4 cxx=$5
shift 5
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
venv=${KILN_PY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/python$version-package}
log=$(mktemp /tmp/kiln-package-XXXXXX.log)
trap 'rm -f "$log"' EXIT
skip() {
  echo "skipped: $1"
  tail -5 "$log"
  exit 77
}
pip() {
  timeout "$1" "$venv/bin/pip" --disable-pip-version-check "${@:2}" >"$log" 2>&1
}

if ! "$venv/bin/python" -c 'import numpy, pytest, sys
sys.exit(int(numpy.__version__.split(".")[0]) < 2)' 2>/dev/null; then
  echo "package_test: making $venv with NumPy 2 and pytest from PyPI"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv --clear "$venv" >"$log" 2>&1 ||
    skip "'$python -m venv' failed (is python3-venv installed?)"
  pip 600 install -q "numpy>=2" pytest || skip "NumPy 2 and pytest could not be installed from PyPI"
fi

case "$mode" in
  package)
    echo "package_test: pip install $source (build folder $source/build-pip)"
    start=$(date +%s)
    # Build isolation fetches scikit-build-core and pybind11 from PyPI.
    if ! pip 2400 install --no-deps --force-reinstall "$source" \
      --config-settings=build-dir="$source/build-pip" \
      --config-settings=cmake.define.CMAKE_C_COMPILER="$cc" \
      --config-settings=cmake.define.CMAKE_CXX_COMPILER="$cxx"; then
      if grep -qE "No matching distribution|Could not find a version|NewConnectionError|Temporary failure in name resolution" "$log"; then
        skip "the build requirements (scikit-build-core, pybind11) could not be fetched from PyPI"
      fi
      cat "$log"
      echo "package_test: pip install failed"
      exit 1
    fi
    echo "package_test: installed in $(($(date +%s) - start)) s"
    ;;
  torch)
    if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
      echo "package_test: installing PyTorch into $venv (once; PyPI's wheel, used on the CPU)"
      pip 1800 install -q torch || skip "PyTorch could not be installed from PyPI"
    fi
    ;;
  *)
    echo "usage: package_test.sh package|torch PYTHON SOURCE CC CXX [TEST...]" >&2
    exit 2
    ;;
esac

# From outside the checkout, without PYTHONPATH: the installed package, not build/python.
cd /tmp || exit 1
unset PYTHONPATH
"$venv/bin/python" -c 'import kiln, numpy; print("package_test: kiln", kiln.__version__, "from",
kiln.__file__, "| NumPy", numpy.__version__)' || exit 1
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
