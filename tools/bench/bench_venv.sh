# Sourced by the benchmark scripts that measure Python peers: bench_venv WHO [PACKAGE...] makes
# build/bench-venv (once) with PyTorch from PyPI (the CPU-only wheels when their index is
# reachable, else PyPI's with CUDA libraries) and the packages named, installing nothing into
# the system, and sets $venv and $py (python3 when the venv could not be made). A package that
# cannot be installed is said, not fatal: its peer or plot is then left out.
bench_venv() {
  local who=$1
  shift
  venv=build/bench-venv
  local imports="torch"
  for p in "$@"; do imports="$imports, $p"; done
  if ! "$venv/bin/python" -c "import $imports" 2>/dev/null; then
    echo "$who: installing PyTorch${*:+ and $*} into $venv (once)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu 2>/dev/null ||
      "$venv/bin/pip" install -q torch || echo "$who: no PyTorch; its numbers are left out"
    if [ $# -gt 0 ]; then
      "$venv/bin/pip" install -q "$@" || echo "$who: could not install $*"
    fi
  fi
  py="$venv/bin/python"
  [ -x "$py" ] || py=python3
}
