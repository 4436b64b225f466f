#!/usr/bin/env bash
# The CPU --quick calibration end to end, as CI runs it: measure, write a
# profile, read it back, and predict with it.
#   quick_calibration.sh DTSIM_BINARY OUT.h5
set -euo pipefail
dtsim=$1
out=$2
fail() { echo "quick_calibration: $*" >&2; exit 1; }

rm -f "$out"
start=$(date +%s)
"$dtsim" calibrate --device cpu --procs 2 --quick --out "$out" >/dev/null 2>"$out.stderr"
echo "quick calibration took $(( $(date +%s) - start )) s"
[[ -s "$out" ]] || fail "no profile written"
# Note [Copies in lockstep]: the measured copy met its partner at every point.
! grep -q "without lockstep" "$out.stderr" || fail "the copies fell out of lockstep: $(cat "$out.stderr")"
rm -f "$out.stderr"

show=$("$dtsim" profile show "$out")
grep -q "gpt2.block:h=768,a=12,f=3072,drop=1 fp32" <<<"$show" || fail "profile has no GPT-2 block: $show"
grep -q "kernel.gemm.fp32" <<<"$show" || fail "profile has no GEMM fit"
grep -q "comm.gloo.all_reduce.2" <<<"$show" || fail "profile has no Gloo all-reduce fit"
grep -q "gpt2.block:h=768,a=12,f=3072,drop=1,tp=2 fp32" <<<"$show" || fail "profile has no tensor-parallel GPT-2 block share"
# Note [Sequence-parallel shares]: and its sequence-parallel share.
grep -q "gpt2.block:h=768,a=12,f=3072,drop=1,tp=2,sp=1 fp32" <<<"$show" || fail "profile has no sequence-parallel GPT-2 block share"
grep -q "gloo.api: c10d ProcessGroupGloo" <<<"$show" || fail "the collectives were not measured through c10d: $show"
grep -q "layers_measured_with: 2 concurrent ranks, in lockstep" <<<"$show" || fail "the layers were not timed beside a copy in lockstep: $show"
# Note [Waiting receiver]: send_recv timed to a receiver that waited, as in a pipeline.
grep -q "gloo.send_recv_impl: .*Note \[Waiting receiver\]" <<<"$show" || fail "send_recv was not timed to a waiting receiver: $show"
grep -q "comm.gloo.send_recv.2" <<<"$show" || fail "profile has no Gloo send_recv fit"
# all_to_all as nccl-tests' alltoall_perf, and a MoE's experts as grouped GEMMs (Note [Grouped GEMMs]).
grep -q "comm.gloo.all_to_all.2" <<<"$show" || fail "profile has no Gloo all_to_all fit"
! grep -v "python loop:" <<<"$show" | grep -q "not measured:" || fail "a collective was not measured: $show"
grep -q "kernel.grouped_gemm.fp32" <<<"$show" || fail "profile has no grouped GEMM fit"
# Note [Gradient buckets]: the buckets' copies were timed and fitted.
grep -q "kernel.bucket_in.fp32" <<<"$show" || fail "profile has no bucket copy-in fit"
grep -q "kernel.bucket_out.fp32" <<<"$show" || fail "profile has no bucket copy-out fit"
# Note [Loop and step interleaved]: a quick sweep times a step's loops and chain in one round.
grep -q '"torch.step_rounds": "1"' <<<"$("$dtsim" profile show --json "$out")" || fail "the profile does not say its steps took one round"

# Note [Python host probe]: where python3 imports torch (Debian's
# python3-torch, which scripts/setup installs), a Python loop's host cost
# was timed against the C++ loop's, and a plan run from Python pays it.
# Note [Debian's Python]: where the python3 on PATH lacks torch (a pyenv,
# a venv), /usr/bin/python3 is tried.
debian_torch=no
[[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c "import torch" 2>/dev/null && debian_torch=yes
if python3 -c "import torch" 2>/dev/null || [[ $debian_torch == yes ]]; then
  grep -q "python loop: .* us an op, .* us a tensor's step beyond the C++ loop's" <<<"$show" ||
    fail "the Python loop's host cost was not timed: $show"
  # Note [Probe and loop interleaved]: both sides timed in three rounds.
  grep -q '"python.rounds": "3 Python, 3 C++, interleaved' <<<"$("$dtsim" profile show --json "$out")" ||
    fail "the Python probe and the C++ loop were not timed in three interleaved rounds"
  if ! python3 -c "import torch" 2>/dev/null; then
    grep -q "python loop: /usr/bin/python3 " <<<"$show" || fail "python3 lacks torch and /usr/bin/python3 was not tried: $show"
  fi
  t_cpp=$("$dtsim" predict --model gpt2-tiny --cluster local-cpu --plan ddp --profile "$out" --json |
          grep -o '"iteration_time_s": [0-9.e+-]*' | awk '{print $2}') || fail "no iteration time for the C++ loop"
  t_py=$("$dtsim" predict --model gpt2-tiny --cluster local-cpu --plan ddp --profile "$out" --set plan.runtime=python --json |
         grep -o '"iteration_time_s": [0-9.e+-]*' | awk '{print $2}') || fail "no iteration time for the Python loop"
  awk -v a="$t_cpp" -v b="$t_py" 'BEGIN { exit !(b > a) }' || fail "runtime python ($t_py s) is not slower than libtorch ($t_cpp s)"
else
  grep -q "python loop: not measured: torch cannot be imported" <<<"$show" || fail "no word of the Python probe: $show"
fi

# gpt2 at micro-batch 1, 128 tokens, fp32 is a measured shape of the quick
# sweep: its 14 layers (embeddings, 12 blocks, head) x forward and backward
# = 28 lookups, every one a measured median, none from the datasheet.
json=$("$dtsim" predict --model gpt2 --cluster local-cpu --plan ddp --profile "$out" \
  --set plan.micro_batch=1 --set plan.seq_len=128 --set plan.precision=fp32 --json)
field() { grep -o "\"$1\": [0-9.e+-]*" <<<"$json" | head -1 | awk '{print $2}'; }
[[ $(field layers_measured) == 28 ]] || fail "layers_measured $(field layers_measured), expected 28"
[[ $(field layers_analytic) == 0 ]] || fail "layers_analytic $(field layers_analytic), expected 0"
[[ $(field comm_measured) -ge 1 ]] || fail "no collective priced from the profile"
grep -q "\"cost_source\": \"profile:$out\"" <<<"$json" || fail "cost_source does not name the profile"

# Megatron TP over the 2 ranks: the same 28 lookups, now of the tp=2 shares.
json=$("$dtsim" predict --model gpt2 --cluster local-cpu --plan megatron-tp --profile "$out" \
  --set plan.micro_batch=1 --set plan.seq_len=128 --set plan.precision=fp32 --json)
[[ $(field layers_measured) == 28 ]] || fail "tp: layers_measured $(field layers_measured), expected 28"

# Note [Expert-parallel shares]: moe-tiny's block at ep 1 and its ep 2
# share, each measured; at ep 2 its 4 layers (embedding, 2 blocks, head) x
# forward and backward = 8 lookups, every one measured, and the all-to-alls
# priced from the all_to_all fit.
moe=${out%.h5}-moe.h5
rm -f "$moe"
# This calibration's python3 is one without torch (site-packages off), so
# that Note [Debian's Python]'s fallback is seen on every machine that
# has Debian's python3-torch.
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
printf '#!/bin/sh\nexec /usr/bin/python3 -S "$@"\n' >"$fake/python3"
chmod +x "$fake/python3"
PATH="$fake:$PATH" "$dtsim" calibrate --device cpu --procs 2 --quick --models moe-tiny --out "$moe" >/dev/null 2>"$moe.stderr" ||
  fail "moe-tiny calibration failed: $(cat "$moe.stderr")"
rm -f "$moe.stderr"
show=$("$dtsim" profile show "$moe")
if [[ $debian_torch == yes ]]; then
  grep -q "python loop: /usr/bin/python3 " <<<"$show" || fail "python3 without torch: /usr/bin/python3 was not tried: $show"
else
  grep -q "python loop: not measured: " <<<"$show" || fail "python3 without torch: no word of the probe: $show"
fi
grep -q "moe.block:h=128,.*,qkn=0 fp32" <<<"$show" || fail "profile has no moe-tiny block: $show"
grep -q "moe.block:h=128,.*,qkn=0,ep=2 fp32" <<<"$show" || fail "profile has no ep=2 share of moe-tiny's block: $show"
json=$("$dtsim" predict --model moe-tiny --cluster local-cpu --plan ddp --profile "$moe" --set plan.ep=2 \
  --set plan.micro_batch=1 --set plan.seq_len=128 --set plan.precision=fp32 --json)
[[ $(field layers_measured) == 8 ]] || fail "moe ep 2: layers_measured $(field layers_measured), expected 8"
[[ $(field layers_fitted) == 0 ]] || fail "moe ep 2: layers_fitted $(field layers_fitted), expected 0"
[[ $(field comm_scaled) == 0 && $(field comm_analytic) == 0 ]] || fail "moe ep 2: a collective was not priced from its fit"
rm -f "$moe"
echo "ok"
