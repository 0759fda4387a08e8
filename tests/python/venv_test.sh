#!/usr/bin/env bash
# Runs the Python tests under NumPy 2 from PyPI: venv_test.sh PYTHON TEST [ARGS...] makes (once)
# or reuses a virtual environment outside the checkout for the interpreter the module was built
# for, with numpy>=2, and runs TEST there. When PyPI cannot be reached the test is reported as
# skipped (exit 77) with the reason, never as passed. KILN_PY_VENV names another folder.
set -uo pipefail
python=$1
shift
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
venv=${KILN_PY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/python$version-numpy2}
ready() {
  "$venv/bin/python" -c 'import numpy, sys; sys.exit(int(numpy.__version__.split(".")[0]) < 2)' \
    2>/dev/null
}
if ! ready; then
  echo "venv_test: making $venv with NumPy 2 from PyPI"
  mkdir -p "$(dirname "$venv")"
  if ! "$python" -m venv --clear "$venv" >/tmp/kiln-venv-$$.log 2>&1; then
    echo "skipped: '$python -m venv' failed (is python3-venv installed?):"
    cat /tmp/kiln-venv-$$.log
    rm -f /tmp/kiln-venv-$$.log
    exit 77
  fi
  if ! timeout 300 "$venv/bin/pip" install -q --disable-pip-version-check "numpy>=2" \
    >/tmp/kiln-venv-$$.log 2>&1; then
    echo "skipped: NumPy 2 could not be installed from PyPI (unreachable?):"
    tail -3 /tmp/kiln-venv-$$.log
    rm -f /tmp/kiln-venv-$$.log
    exit 77
  fi
  rm -f /tmp/kiln-venv-$$.log
fi
"$venv/bin/python" -c 'import numpy; print("venv_test: NumPy", numpy.__version__)'
exec "$venv/bin/python" "$@"
