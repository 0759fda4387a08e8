#!/usr/bin/env bash
# Run here, before a GPU session: gathers into .gpu-pack/ (ignored by git) what the bare GPU
# machine lacks to build kiln without its CPU backend: the header-only forms of fmt, CLI11,
# nlohmann-json, xxhash and Catch2 (copied from this machine's Debian packages, never
# committed) and Catch2's CMake helpers. Prints the pack's size, the paths that must travel with
# the working tree, and the one command to run on the GPU machine.
#   tools/gpu-pack.sh [PACK_DIR]        (default .gpu-pack)
set -euo pipefail
cd "$(dirname "$0")/.."
pack=${1:-.gpu-pack}

# source path | Debian package that installs it
items=(
  "/usr/include/fmt|libfmt-dev"
  "/usr/include/CLI|libcli11-dev"
  "/usr/include/nlohmann|nlohmann-json3-dev"
  "/usr/include/xxhash.h|libxxhash-dev"
  "/usr/include/xxh3.h|libxxhash-dev"
  "/usr/include/catch2/catch.hpp|catch2"
  "/usr/lib/cmake/Catch2/Catch.cmake|catch2"
  "/usr/lib/cmake/Catch2/CatchAddTests.cmake|catch2"
)
missing=()
for item in "${items[@]}"; do
  src=${item%%|*}
  [ -e "$src" ] || missing+=("${item##*|}")
done
if ((${#missing[@]})); then
  echo "gpu-pack: missing $(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')- run ./setup.sh build first (it installs them)" >&2
  exit 1
fi
# fmt must be usable header-only (FMT_HEADER_ONLY needs format-inl.h).
[ -e /usr/include/fmt/format-inl.h ] || { echo "gpu-pack: fmt has no format-inl.h; it cannot be used header-only" >&2; exit 1; }

# The folder is replaced whole, so it must be a pack this script made (or not exist yet).
if [ -e "$pack" ] && ! [ -f "$pack/MANIFEST" ] && [ -n "$(ls -A "$pack" 2>/dev/null)" ]; then
  echo "gpu-pack: $pack exists and is not a pack made by gpu-pack.sh; refusing to replace it" >&2
  exit 1
fi
rm -rf "$pack"
mkdir -p "$pack/include/catch2" "$pack/cmake"
cp -r /usr/include/fmt /usr/include/CLI /usr/include/nlohmann "$pack/include/"
cp /usr/include/xxhash.h /usr/include/xxh3.h "$pack/include/"
cp /usr/include/catch2/catch.hpp "$pack/include/catch2/"
cp /usr/lib/cmake/Catch2/Catch.cmake /usr/lib/cmake/Catch2/CatchAddTests.cmake "$pack/cmake/"
{
  echo "# kiln GPU pack, made $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -n) by tools/gpu-pack.sh"
  echo "# header-only dependencies for: cmake -DKILN_CPU=OFF -DKILN_DEPS_PREFIX=<this folder>"
  for p in libfmt-dev libcli11-dev nlohmann-json3-dev libxxhash-dev catch2; do
    dpkg-query -W -f='${Package} ${Version}\n' "$p" 2>/dev/null || echo "$p (version unknown)"
  done
} >"$pack/MANIFEST"

bytes=$(du -sb "$pack" | cut -f1)
limit=$((20 * 1024 * 1024))
awk -v p="$pack" -v n="$(find "$pack" -type f | wc -l)" -v b="$bytes" \
  'BEGIN { printf "gpu-pack: %s holds %d files, %.1f MiB\n", p, n, b / 1048576 }'
if ((bytes > limit)); then
  echo "gpu-pack: the pack is larger than 20 MiB; something unexpected was copied" >&2
  exit 1
fi
cat <<MSG
gpu-pack: paths to carry with the working tree (the device tool's carry): ["$pack"]
gpu-pack: the command on the GPU machine (results in the folder given, e.g. \$OUT):
  tools/gpu-check.sh "\$OUT"
MSG
