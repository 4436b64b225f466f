#!/usr/bin/env bash
# dtsim_validate_suite --replay over a CPU suite's recorded rounds (Note
# [Replayed rounds]): docs/validation-cpu-epyc/runs holds the 29 rows as the
# suite of 2026-12-02 recorded them, among them bilstm-tiny's 1F1B (3
# rounds and 2 make-up passes) and ZeRO-1 (3 rounds and 1 make-up pass).
# Every round of those two is reported, 5 and 4, running nothing and
# writing nothing into the recordings.
#   suite_replay_cpu.sh DTSIM_VALIDATE_SUITE SOURCE_DIR
set -uo pipefail
suite=$1
root=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
runs="$out/runs"
cp -r "$root/docs/validation-cpu-epyc/runs" "$runs"
before=$(cd "$runs" && find . -type f | sort | xargs md5sum)
"$suite" --profile "$root/docs/validation-cpu-epyc/tiny.h5" --models bilstm-tiny --plans 1f1b,zero1 \
  --replay "$runs" --out "$out/suite.md" >/dev/null 2>"$out/err"
rc=$?
# Exit status 1: the targets are not all met; 2 or more: it failed.
(( rc <= 1 )) || { cat "$out/err" >&2; echo "suite_replay_cpu: exit status $rc" >&2; exit 1; }
grep -Eq "^\| bilstm-tiny \| 1f1b \|.* of 5( \(all counted\))? \|$" "$out/suite.md" ||
  { echo "suite_replay_cpu: 1f1b's 5 rounds not all reported: $(grep 1f1b "$out/suite.md")" >&2; exit 1; }
grep -Eq "^\| bilstm-tiny \| zero1 \|.* of 4( \(all counted\))? \|$" "$out/suite.md" ||
  { echo "suite_replay_cpu: zero1's 4 rounds not all reported: $(grep zero1 "$out/suite.md")" >&2; exit 1; }
grep -q "predictions by this build from the rounds recorded in $runs" "$out/suite.md" ||
  { echo "suite_replay_cpu: the footer does not say the rounds were replayed" >&2; exit 1; }
grep -q "make-up pass" "$out/err" && { echo "suite_replay_cpu: a make-up pass was run, not replayed" >&2; exit 1; }
after=$(cd "$runs" && find . -type f | sort | xargs md5sum)
[[ "$before" == "$after" ]] || { echo "suite_replay_cpu: the recordings changed" >&2; exit 1; }
echo "suite_replay_cpu: ok"
