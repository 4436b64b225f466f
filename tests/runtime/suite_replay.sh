#!/usr/bin/env bash
# dtsim_validate_suite --replay over the recorded H100 runs (docs/validation-gpu):
# every row of bench/gpu-cases.txt is reported, running nothing, and without
# --steps or --warmup the footer says what the recordings ran (their
# report.json: 6 steps after 2 warm-up), not the suite's defaults (10 and 3).
#   suite_replay.sh DTSIM_VALIDATE_SUITE SOURCE_DIR
set -uo pipefail
suite=$1
root=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$suite" --device cuda --cluster 1xh100 --profile "$root/configs/profiles/h100-sxm.h5" --cases "$root/bench/gpu-cases.txt" \
  --replay "$root/docs/validation-gpu/runs" --out "$out/suite.md" >/dev/null 2>"$out/err"
# Exit status 1: the GPU targets are not all met (docs/validation-gpu.md says which); 2 or more: it failed.
rc=$?
(( rc <= 1 )) || { cat "$out/err" >&2; echo "suite_replay: exit status $rc" >&2; exit 1; }
grep -q "101 of 101 rows ran" "$out/suite.md" || { echo "suite_replay: not every row replayed: $(grep median "$out/suite.md")" >&2; exit 1; }
grep -q "^measured: the median of 6 steps after 2 warm-up steps" "$out/suite.md" ||
  { echo "suite_replay: the footer does not say the recordings' 6 and 2: $(grep '^measured' "$out/suite.md")" >&2; exit 1; }
echo "suite_replay: ok"
