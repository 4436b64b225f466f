#!/usr/bin/env bash
# Note [Copies in lockstep]: a bad --lockstep is one line naming the option
# and what would be valid, with exit status 2.
#   bad_lockstep.sh DTSIM_TORCH_BENCH
set -uo pipefail
bench=$1
check() {  # check WANT ARGS...
  local want=$1
  shift
  local out rc
  out=$("$bench" "$@" 2>&1)
  rc=$?
  [[ $rc -eq 2 ]] || { echo "$*: exit status $rc, expected 2: $out"; exit 1; }
  [[ $(wc -l <<<"$out") -eq 1 ]] || { echo "$*: more than one line: $out"; exit 1; }
  grep -qF -- "$want" <<<"$out" || { echo "$*: '$out' does not say '$want'"; exit 1; }
}
check "--lockstep: RANK must be in 0..N-1" --lockstep /tmp,2,2
check "--lockstep: expected DIR,RANK,N" --lockstep /tmp
check "--passes: 0 is not in 1..10" --passes 0
echo ok
