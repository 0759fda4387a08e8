#!/usr/bin/env bash
# The first result of a library operation in a new process (issue 44's measurement): `kiln run
# matmul` at 1024^3 (f32, the host CPU), its "first run" (compiling or loading every kernel the
# operation launches, tuning, and the first launch, as kiln reports it) with an empty disk cache
# and then with the disk cache that run filled, three fresh caches, the median of each; and the
# process's start-up (`kiln list`, which loads the kernel library and opens nothing).
#   tools/bench/cold_start.sh [--device DEVICE] [--shape M]   (build first)
set -euo pipefail
cd "$(dirname "$0")/../.."
device=cpu m=1024
while [ $# -gt 0 ]; do
  case $1 in
    --device) device=$2; shift ;;
    --shape) m=$2; shift ;;
    *) echo "usage: tools/bench/cold_start.sh [--device DEVICE] [--shape M]" >&2; exit 2 ;;
  esac
  shift
done
kiln=build/bin/kiln
first_run() {  # the first run's milliseconds, from kiln's own report
  KILN_CACHE_DIR=$1 "$kiln" run matmul --device "$device" --shape "a=${m}x${m}" \
    --shape "b=${m}x${m}" --repeat 0 --seed 1 | sed -n 's/^  first run *\([0-9.]*\) ms.*/\1/p'
}
median() { sort -g | sed -n 2p; }
cold=() warm=() start=()
for i in 1 2 3; do
  dir=$(mktemp -d)
  cold+=("$(first_run "$dir")")
  warm+=("$(first_run "$dir")")
  rm -rf "$dir"
  a=$(date +%s%N)
  "$kiln" list >/dev/null
  start+=("$(( ($(date +%s%N) - a) / 1000000 ))")
done
host=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "kiln run matmul ${m}^3 on $device ($host, $(nproc) threads, $(date +%Y-%m-%d)), first run, median of 3:"
printf "  empty disk cache   %8.1f ms   (runs: %s)\n" "$(printf '%s\n' "${cold[@]}" | median)" "${cold[*]}"
printf "  warm disk cache    %8.1f ms   (runs: %s)\n" "$(printf '%s\n' "${warm[@]}" | median)" "${warm[*]}"
printf "  process start-up   %8.1f ms   (kiln list; runs: %s)\n" "$(printf '%s\n' "${start[@]}" | median)" "${start[*]}"
echo "  with a bundle: not built yet (kiln bundle, issue 44)"
