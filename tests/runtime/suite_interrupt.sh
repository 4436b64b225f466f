#!/usr/bin/env bash
# SIGTERM to dtsim_validate_suite while a round trains (Note [Stopping the
# suite] in bench/validate_suite.cpp): the round's validate is stopped with
# its ranks, the round's folder removed, and the suite ends at once with one
# line and exit status 2. It used to die silently with the round's folder
# half-written, or (SIGTERM to it alone) wait for the round to end.
#   suite_interrupt.sh DTSIM_VALIDATE_SUITE SOURCE_DIR
set -uo pipefail
suite=$1
root=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$suite" --profile "$root/configs/profiles/local-cpu-tiny.h5" --models gpt2-tiny --plans ddp --steps 3000 \
  --rounds 1 --make-up 0 --runs "$out/runs" --out "$out/suite.md" >/dev/null 2>"$out/err" &
pid=$!
# Wait until the round has started training (its folder and a rank's heartbeat).
for _ in $(seq 1 300); do
  compgen -G "$out/runs/gpt2-tiny-ddp/*" >/dev/null && break
  sleep 0.1
done
[[ -d "$out/runs/gpt2-tiny-ddp" ]] || { echo "suite_interrupt: the round never started" >&2; kill -9 $pid; exit 1; }
sleep 1
kill -TERM $pid
start=$(date +%s%N)
wait $pid
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
(( rc == 2 )) || { cat "$out/err" >&2; echo "suite_interrupt: exit status $rc, wanted 2" >&2; exit 1; }
(( ms < 10000 )) || { echo "suite_interrupt: took $ms ms to stop" >&2; exit 1; }
msg=$(grep -v '^ *\[' "$out/err" | grep -v '^$')
[[ $(printf '%s\n' "$msg" | wc -l) == 1 && "$msg" == "dtsim_validate_suite: interrupted by SIGTERM during round 1 of gpt2-tiny ddp: "* ]] ||
  { echo "suite_interrupt: not one line naming the signal and the round: $msg" >&2; exit 1; }
[[ ! -e "$out/runs/gpt2-tiny-ddp" ]] || { echo "suite_interrupt: the stopped round's folder was left" >&2; exit 1; }
[[ ! -e "$out/suite.md" ]] || { echo "suite_interrupt: a report was written for an interrupted suite" >&2; exit 1; }
sleep 0.5
if pgrep -f -- "--run-dir $out/runs" >/dev/null; then echo "suite_interrupt: a validate or rank was left running" >&2; exit 1; fi
echo "suite_interrupt: ok ($ms ms)"
