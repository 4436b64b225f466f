#!/usr/bin/env bash
# Note [A calibration cut short] (calibrate/src/driver.cpp): `dtsim calibrate
# --time-limit S` stops measuring after S seconds and writes what it had.
#  1. A quick 2-rank CPU sweep of the MLP and the tiny GPT-2, BERT and Bi-LSTM
#     (about 40 s here) cut at 8 s:
#     exit status 0 within a few seconds of the limit, a profile whose info
#     says it was cut, with the layers measured by then (one pass: each is
#     printed as measured), no collectives; no bench left running and no
#     temporary folder.
#  2. Its layers join, with `profile import-layers`, another calibration of
#     this machine (bilstm-tiny's, cut the same way): layers are imported only
#     between calibrations of one device, so not into a shipped profile,
#     which another CPU measured (local-cpu-tiny.h5: an AMD EPYC; a CI or
#     development machine may be an Intel Xeon).
#  3. A limit that is not a positive number of seconds: one line, exit 2.
#   time_limit.sh DTSIM_BINARY
# Exit status 77 (skipped) where dtsim_torch_bench was not built.
set -uo pipefail
dtsim=$1
bench=$(dirname "$dtsim")/calibrate/dtsim_torch_bench
[[ -x $bench ]] || bench=$(dirname "$dtsim")/dtsim_torch_bench
if [[ ! -x $bench ]]; then
  echo "skipped: dtsim_torch_bench was not built (LibTorch not found at configure time)"
  exit 77
fi
work=$(mktemp -d)
export TMPDIR=$work/tmp
mkdir "$TMPDIR"
trap 'rm -rf "$work"' EXIT
fail() { echo "time_limit: $*" >&2; exit 1; }

start=$(date +%s)
"$dtsim" calibrate --device cpu --procs 2 --quick --models mlp,gpt2-tiny,bert-tiny,bilstm-tiny --time-limit 8 --out "$work/cut.h5" >"$work/out" 2>"$work/err"
rc=$?
took=$(( $(date +%s) - start ))
[[ $rc == 0 ]] || { cat "$work/err" >&2; fail "exit status $rc, expected 0"; }
(( took >= 8 && took <= 30 )) || fail "took $took s for an 8 s limit"
grep -q "cut by --time-limit" "$work/err" || fail "no 'cut by --time-limit' in the progress: $(cat "$work/err")"
grep -q "^  cut: --time-limit 8 s reached during the layers and kernels" "$work/out" || fail "profile show does not say it was cut"
grep -q "^    comm\.gloo\|^  best gloo" "$work/out" && fail "collectives measured after the cut"
layers=$(sed -n 's/^  layers (\([0-9]*\) shapes)$/\1/p' "$work/out")
(( layers > 0 )) || fail "no layer kept (each is printed as it is measured on one pass)"
for p in $(pgrep -f dtsim_torch_bench); do  # ours carry our TMPDIR
  grep -qz "^TMPDIR=$TMPDIR$" "/proc/$p/environ" 2>/dev/null && fail "a bench is still running: pid $p"
done
[[ -z $(ls -A "$TMPDIR") ]] || fail "temporary files left: $(ls "$TMPDIR")"

"$dtsim" calibrate --device cpu --procs 2 --quick --models bilstm-tiny --time-limit 8 --out "$work/into.h5" >/dev/null 2>"$work/err" ||
  { cat "$work/err" >&2; fail "the second cut calibration failed"; }
"$dtsim" profile import-layers "$work/cut.h5" --into "$work/into.h5" \
  --out "$work/joined.h5" >"$work/imp" 2>&1 || { cat "$work/imp" >&2; fail "import-layers of the cut profile failed"; }
grep -q "wrote $work/joined.h5" "$work/imp" || fail "import-layers wrote nothing: $(cat "$work/imp")"
grep -q "that $work/into.h5 did not measure" "$work/imp" || fail "import-layers took no layer (the MLP's are the cut's alone): $(cat "$work/imp")"

for bad in 0 -3 abc 1e9; do
  out=$("$dtsim" calibrate --device cpu --out "$work/x.h5" --time-limit "$bad" 2>&1)
  rc=$?
  [[ $rc == 2 ]] || fail "--time-limit $bad: exit status $rc, expected 2"
  [[ $(printf '%s\n' "$out" | wc -l) == 1 ]] || fail "--time-limit $bad: more than one line: $out"
  [[ $out == *"--time-limit: '$bad' is not a number of seconds in (0, 2592000]"* ]] || fail "--time-limit $bad: $out"
  [[ -e $work/x.h5 ]] && fail "--time-limit $bad wrote a profile"
done
echo "time_limit: ok (cut after $took s with $layers layer shapes)"
