#!/usr/bin/env bash
# Note [Check the output first] (calibrate/src/driver.cpp): `dtsim calibrate
# --out` into a place no profile can be written is refused at once, before
# any measuring: one line naming the path and what is wrong, exit status 2.
#   bad_out.sh DTSIM_BINARY
set -uo pipefail
dtsim=$1
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
chmod 755 "$work"  # so that the unprivileged user below can reach it
fail() { echo "bad_out: $*" >&2; exit 1; }

check() {  # check WANT OUT [RUN-AS-PREFIX...]
  local want=$1 out=$2
  shift 2
  local err rc start took_ms
  start=$(date +%s%N)
  # A regression would start measuring (minutes): 20 s bounds it.
  err=$(timeout 20 "$@" "$dtsim" calibrate --device cpu --procs 2 --quick --out "$out" 2>&1 >/dev/null)
  rc=$?
  took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  [[ $rc -eq 2 ]] || fail "--out $out: exit status $rc, expected 2: $err"
  [[ $(wc -l <<<"$err") -eq 1 ]] || fail "--out $out: more than one line: $err"
  grep -qF -- "dtsim: $out: cannot write: $want" <<<"$err" || fail "--out $out: '$err' does not say '$out: cannot write: $want'"
  (( took_ms < 3000 )) || fail "--out $out: took $took_ms ms to refuse, expected well under 3 s"
  [[ ! -e $out ]] || [[ -d $out ]] || fail "--out $out: a file was written"
  echo "ok: $err ($took_ms ms)"
}

check "directory '$work/missing' does not exist" "$work/missing/p.h5"
mkdir "$work/is-a-dir"
check "it is a directory; name a file in it, e.g. --out $work/is-a-dir/profile.h5" "$work/is-a-dir"
: >"$work/a-file"
check "'$work/a-file' is not a directory" "$work/a-file/p.h5"

# A read-only directory. Root writes into one regardless of its mode bits, so
# as root the check runs as the unprivileged user nobody (setpriv, util-linux).
mkdir "$work/read-only"
chmod 555 "$work/read-only"
if [[ $(id -u) -ne 0 ]]; then
  check "directory '$work/read-only' does not take new files (Permission denied)" "$work/read-only/p.h5"
elif command -v setpriv >/dev/null && setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null; then
  check "directory '$work/read-only' does not take new files (Permission denied)" "$work/read-only/p.h5" \
    setpriv --reuid=nobody --regid=nogroup --clear-groups
else
  echo "skipped: the read-only directory (running as root, and setpriv cannot drop to nobody)"
fi
left=$(find "$work/is-a-dir" "$work/read-only" -mindepth 1)
[[ -z $left ]] || fail "files left behind: $left"
echo ok
