#!/usr/bin/env bash
# dtsim_validate_suite checks what it can before its rounds: an unknown
# plan, a missing profile, a --replay folder that is not there, an --out
# that is a folder: each one line, exit 2, in well under a second (each
# had started training, or reported a table of failed rows at the end).
#   suite_bad_args.sh DTSIM_VALIDATE_SUITE
set -uo pipefail
suite=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir "$out/folder"
check() {  # check EXPECTED ARGS...
  local want=$1
  shift
  local start=$(date +%s%N)
  timeout 20 "$suite" "$@" >/dev/null 2>"$out/err"
  local rc=$? ms=$(( ($(date +%s%N) - start) / 1000000 ))
  (( rc == 2 )) || { echo "suite_bad_args: $*: exit status $rc, wanted 2 ($(head -c 300 "$out/err"))" >&2; exit 1; }
  [[ $(wc -l < "$out/err") == 1 && "$(cat "$out/err")" == *"$want"* ]] ||
    { echo "suite_bad_args: $*: not one line with '$want': $(head -c 300 "$out/err")" >&2; exit 1; }
  (( ms < 5000 )) || { echo "suite_bad_args: $*: took $ms ms" >&2; exit 1; }
  [[ -z "$(ls "$out/folder")" ]] || { echo "suite_bad_args: $*: wrote into a folder" >&2; exit 1; }
}
check "--plans nosuch: " --models gpt2-tiny --plans nosuch --runs "$out/folder/runs"
check "--profile /no/such.h5: no such profile file" --profile /no/such.h5 --models gpt2-tiny --plans ddp
check "--replay /no/such/dir: no such folder of recorded runs" --models gpt2-tiny --plans ddp --replay /no/such/dir
check "--out $out/folder: is a folder; give a file's path" --models gpt2-tiny --plans ddp --out "$out/folder"
check "--json $out/none/x.json: no folder $out/none to write it in" --models gpt2-tiny --plans ddp --json "$out/none/x.json"
echo "suite_bad_args: ok"
