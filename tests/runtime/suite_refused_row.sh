#!/usr/bin/env bash
# A row validate refuses before it runs (cnn has no attention heads to split,
# so megatron-tp is refused) must not end the suite: with --runs DIR the
# refusal is recorded in DIR/<row>/report.json, the row is reported as
# failed and the suite exits 1 (targets not met), not 2 and never an abort
# (134). It once threw out of main: the row's folder did not exist.
#   suite_refused_row.sh DTSIM_VALIDATE_SUITE
set -uo pipefail
suite=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$suite" --models cnn --plans megatron-tp --rounds 1 --make-up 0 --runs "$out/runs" --out "$out/suite.md" >/dev/null 2>"$out/err"
rc=$?
(( rc == 1 )) || { cat "$out/err" >&2; echo "suite_refused_row: exit status $rc, wanted 1" >&2; exit 1; }
report="$out/runs/cnn-megatron-tp/report.json"
[[ -s "$report" ]] || { echo "suite_refused_row: $report not written" >&2; exit 1; }
grep -q "^dtsim: " "$report" || { echo "suite_refused_row: $report holds no refusal: $(head -c 200 "$report")" >&2; exit 1; }
grep -q "^| cnn | megatron-tp | failed: dtsim: " "$out/suite.md" || { echo "suite_refused_row: the row is not reported as failed" >&2; exit 1; }
grep -q "^no row completed (0 of 1)" "$out/suite.md" || { echo "suite_refused_row: the summary reports errors of no row" >&2; exit 1; }
echo "suite_refused_row: ok"
