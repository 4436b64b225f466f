#!/usr/bin/env bash
# dtsim_interference_bench (calibrate/src/interference_bench.cpp): a bad
# option is one line naming it, exit 2; without a CUDA device (hidden here
# by CUDA_VISIBLE_DEVICES, so a GPU machine runs no sweep) one line, exit 3,
# which `dtsim calibrate` reports as the phase skipped.
#   interference_bench.sh BENCH_BINARY
set -uo pipefail
bench=$1
fail() { echo "interference_bench: $*" >&2; exit 1; }
check() {  # check WANT_RC WANT_TEXT ARGS...
  local want=$1 text=$2 err rc
  shift 2
  err=$(CUDA_VISIBLE_DEVICES="" timeout 20 "$bench" "$@" 2>&1 >/dev/null)
  rc=$?
  [[ $rc == "$want" ]] || fail "$* exited $rc, not $want: $err"
  [[ $(printf '%s\n' "$err" | wc -l) == 1 ]] || fail "$*: not one line: $err"
  [[ $err == *"$text"* ]] || fail "$*: '$err' does not say '$text'"
}
check 2 "--channels: Value 0 not in range 1 to 1024" --channels 0
check 2 "--gemm" --gemm x
check 2 "--reps" --reps 2
check 2 "The following argument was not expected: --bogus" --bogus
check 3 "no CUDA device"
check 3 "no CUDA device" --quick
echo "interference_bench: bad options and a missing GPU each end in one line"
