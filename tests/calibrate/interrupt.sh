#!/usr/bin/env bash
# Note [Stopping calibration] (calibrate/src/driver.cpp): stopping `dtsim
# calibrate` leaves nothing behind.
#  1. SIGTERM while the measured dtsim_torch_bench and its copy run in
#     lockstep: both are stopped with their process groups, the temporary
#     folder is removed, and calibrate says so in one line, exit status 2,
#     within a few seconds.
#  2. SIGKILL, which calibrate cannot catch: its programs die with it (Note
#     [Children die with their parent]) instead of going on alone.
#  3. Note [Partner gone] (torch_bench.cpp): a copy in lockstep whose partner
#     has ended goes on at once instead of waiting a minute at the barrier.
#   interrupt.sh DTSIM_BINARY DTSIM_TORCH_BENCH
# Exit status 77 (skipped) where dtsim_torch_bench was not built.
set -uo pipefail
dtsim=$1
bench=${2:-}
if [[ -z $bench || ! -x $bench ]]; then
  echo "skipped: dtsim_torch_bench was not built (LibTorch not found at configure time)"
  exit 77
fi
work=$(mktemp -d)
export TMPDIR=$work/tmp  # calibrate's temporary folder goes here, where we can see it
mkdir "$TMPDIR"
pids=()  # everything we started, stopped on the way out whatever happens
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "interrupt: $*" >&2; exit 1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# procps's ps reads /proc (proc(5)) once per call.
children_of() { ps -o pid= --ppid "$1" | tr -d ' '; }  # the pids whose parent is $1
alive_in_groups() {  # the live (not zombie) processes in the process groups $@
  local pid stat pgid g
  while read -r pid stat pgid; do
    [[ $stat == Z* ]] && continue
    for g in "$@"; do [[ $pgid == "$g" ]] && echo "$pid"; done
  done < <(ps -e -o pid=,stat=,pgid=)
}

# Starts a quick 2-rank calibration and waits until the measured bench and
# its copy both run (with "lockstep" as $1: in lockstep, each holding its
# alive-RANK file: Note [Partner gone]); sets $cal, $kids (the benches' pids)
# and $lockdir.
start_calibration() {
  "$dtsim" calibrate --device cpu --procs 2 --quick --models gpt2-tiny --out "$work/out.h5" 2>"$work/err" >/dev/null &
  cal=$!
  pids+=("$cal")
  local t0 k
  t0=$(now_ms)
  while :; do
    lockdir=$(ls -d "$TMPDIR"/dtsim-calibrate-* 2>/dev/null | head -1)
    kids=($(children_of "$cal"))
    if [[ -n $lockdir && ${#kids[@]} -eq 2 ]] && [[ $(cat "/proc/${kids[0]}/comm" "/proc/${kids[1]}/comm" 2>/dev/null | grep -c dtsim_torch_ben) -eq 2 ]] &&
       [[ ${1:-} != lockstep || (-e $lockdir/alive-0 && -e $lockdir/alive-1) ]]; then
      break
    fi
    (( $(now_ms) - t0 < 30000 )) || fail "calibrate did not start its two benches within 30 s: $(cat "$work/err")"
    kill -0 "$cal" 2>/dev/null || fail "calibrate ended early: $(cat "$work/err")"
    sleep 0.05
  done
  pids+=("${kids[@]}")
  for k in "${kids[@]}"; do
    grep -q dtsim_torch_ben "/proc/$k/comm" || fail "child $k of calibrate is $(cat "/proc/$k/comm"), not dtsim_torch_bench"
  done
}

# Within $1 ms, no live process is left in the benches' groups.
expect_groups_gone() {
  local t0 left
  t0=$(now_ms)
  while :; do
    left=$(alive_in_groups "${kids[@]}")
    [[ -z $left ]] && return 0
    (( $(now_ms) - t0 < $1 )) || fail "$2: still running after $1 ms: $left"
    sleep 0.05
  done
}

# ---- 1. SIGTERM ----------------------------------------------------------------
start_calibration lockstep
t0=$(now_ms)
kill -TERM "$cal"
wait "$cal"
rc=$?
took=$(( $(now_ms) - t0 ))
echo "SIGTERM: calibrate exited $rc after $took ms; benches were ${kids[*]}"
[[ $rc -eq 2 ]] || fail "SIGTERM: exit status $rc, expected 2: $(cat "$work/err")"
(( took < 5000 )) || fail "SIGTERM: took $took ms to stop"
last=$(tail -n 1 "$work/err")
[[ $last == "dtsim: calibrate: interrupted by SIGTERM: "*"nothing was written to $work/out.h5"* ]] ||
  fail "SIGTERM: the last line does not say what happened: $last"
expect_groups_gone 500 "SIGTERM"
[[ ! -e $lockdir ]] || fail "SIGTERM: the temporary folder $lockdir was left behind"
[[ -z $(ls -A "$TMPDIR") ]] || fail "SIGTERM: left in \$TMPDIR: $(ls -A "$TMPDIR")"
[[ ! -e $work/out.h5 ]] || fail "SIGTERM: a profile was written"

# ---- 2. SIGKILL ----------------------------------------------------------------
start_calibration
kill -KILL "$cal"
wait "$cal" 2>/dev/null
expect_groups_gone 2000 "SIGKILL of calibrate"
echo "SIGKILL: benches ${kids[*]} ended with calibrate"
rm -rf "$TMPDIR"/dtsim-calibrate-*  # what a killed calibrate cannot remove (calibrate/README.md)

# ---- 3. a partner that is gone -------------------------------------------------
# Copy 1 of 2 "ran" and ended: its alive file exists, unlocked (flock(1) took
# and released it). Copy 0 must go on alone at its first barrier, not in 60 s.
lock=$work/lockstep
mkdir "$lock"
flock "$lock/alive-1" true
t0=$(now_ms)
"$bench" --device cpu --quick --models gpt2-tiny --lockstep "$lock,0,2" >/dev/null 2>"$work/bench-err" &
b=$!
pids+=("$b")
while ! grep -q "copy 1 ended before barrier 0; going on without lockstep" "$work/bench-err"; do
  (( $(now_ms) - t0 < 20000 )) || fail "partner gone: no word after 20 s: $(cat "$work/bench-err")"
  kill -0 "$b" 2>/dev/null || fail "partner gone: the bench ended: $(cat "$work/bench-err")"
  sleep 0.05
done
echo "partner gone: noticed after $(( $(now_ms) - t0 )) ms (start-up included)"
kill -TERM "$b"
wait "$b" 2>/dev/null
echo ok
