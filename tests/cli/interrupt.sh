#!/usr/bin/env bash
# SIGTERM and SIGHUP to `dtsim search` and `dtsim predict` while they work
# (Note [Interrupted commands] in cli/main.cpp): one line naming the command
# and the signal, exit status 2, and no temporary file left beside an output.
# They used to die of the signal without a word.
#   interrupt.sh DTSIM
set -uo pipefail
dtsim=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "interrupt: $*" >&2; exit 1; }
check() {  # check SIGNAL COMMAND WORD...: run, signal after a second, judge
  local sig=$1 cmd=$2
  shift 2
  "$dtsim" "$cmd" "$@" >"$out/stdout" 2>"$out/err" &
  local pid=$!
  sleep 1
  kill -0 $pid 2>/dev/null || fail "dtsim $cmd ended within a second; the case is too small to interrupt"
  kill -"$sig" $pid
  wait $pid
  local rc=$?
  (( rc == 2 )) || fail "dtsim $cmd: exit status $rc after SIG$sig, wanted 2 ($(cat "$out/err"))"
  [[ "$(cat "$out/err")" == "dtsim $cmd: interrupted by SIG$sig; no file is left half-written" ]] ||
    fail "dtsim $cmd: not the one line wanted: $(cat "$out/err")"
}
# A search of every axis for Llama 3.1 405B on 16,384 H100s: tens of seconds.
check TERM search --model llama-3.1-405b --cluster dgx-h100 --set cluster.nodes=2048 --json
check HUP search --model llama-3.1-405b --cluster dgx-h100 --set cluster.nodes=2048
# 300,000 micro-batches simulated one by one for a trace: about 15 s.
check TERM predict --model gpt2 --cluster dgx-a100 --plan 1f1b --set plan.pp=8 --set plan.grad_accum=300000 --unabridged \
  --trace "$out/trace.json"
[[ ! -e "$out/trace.json" ]] || fail "a trace was written by an interrupted predict"
leftover=$(find "$out" -name '.*tmp*')
[[ -z "$leftover" ]] || fail "temporary files left: $leftover"
echo "interrupt: ok"
