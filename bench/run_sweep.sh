#!/usr/bin/env bash
# Runs the CLI over a shape list and writes one CSV (header once, a row per shape).
#   bench/run_sweep.sh <cli> <shapes-file> <out.csv> [extra CLI options...]
# A shapes file has one "R,B,H,K" per line; '#' starts a comment.
set -uo pipefail
cli=$1 shapes=$2 out=$3
shift 3
header_written=0
: > "$out"
while IFS= read -r line; do
  shape=${line%%#*}
  shape=${shape//[[:space:]]/}
  [[ -z "$shape" ]] && continue
  result=$("$cli" --shape "$shape" --format csv "$@")
  status=$?
  if [[ $status -ne 0 && $status -ne 1 ]]; then
    echo "run_sweep: $shape failed (exit $status)" >&2
    continue
  fi
  if [[ $header_written -eq 0 ]]; then
    echo "$result" | head -1 >> "$out"
    header_written=1
  fi
  echo "$result" | tail -1 >> "$out"
  echo "$result" | tail -1 >&2
done < "$shapes"
