#!/usr/bin/env bash
# The GPU lease of 2026-11-27, second session (issue 23): seed 003's six measured on one H100
# (the rows of bench/gpu-cases.txt from vgg11 on), then their layers calibrated and joined to
# configs/profiles/h100-sxm.h5, and the rows replayed against that profile. Run in the repository root
# on the GPU machine with $OUT set (docs/gpu.md).
set -o pipefail; t0=$SECONDS; L=$OUT/lease.log; mkdir -p g
say() { echo "$* at $((SECONDS - t0))s" | tee -a $L; }
nvidia-smi > $OUT/machine.txt 2>&1
cp -r docs/validation-gpu/runs g/runs
scripts/build-cuda > g/build.log 2>&1; say "build rc $?"; tail -3 g/build.log >> $L
grep -v '^#' bench/gpu-cases.txt | sed -n '/^vgg11 /,$p' > g/cases.txt; wc -l g/cases.txt >> $L
timeout -s INT 150 build-cuda/bench/dtsim_validate_suite --device cuda --cluster 1xh100 --profile configs/profiles/h100-sxm.h5 --cases g/cases.txt --steps 6 --warmup 2 --runs g/runs --resume --out g/suite0.md --json g/suite0.json > g/suite0.log 2>&1; say "suite rc $?"; cat g/suite0.md >> $L 2>/dev/null; tail -5 g/suite0.log >> $L
(cd g/runs && tar czf $OUT/runs.tgz $(ls -d vgg11* cnn* mlp* nbow* seq2seq* conv-autoencoder* 2>/dev/null)); say "runs packed"
left=$((530 - (SECONDS - t0))); say "calibrate gets $left s"
timeout -s INT $left build-cuda/dtsim calibrate --device cuda --models cnn,mlp,configs/models/vgg11-cifar10.yaml,configs/models/vgg11-bn-cifar10.yaml,nbow,seq2seq,conv-autoencoder --out g/calibrated.h5 > g/calibrate.log 2>&1; say "calibrate rc $?"; grep -E "done in|interrupted|error" g/calibrate.log >> $L
build-cuda/dtsim profile import-layers configs/profiles/h100-sxm.h5 --into g/calibrated.h5 --out g/profile.h5 >> g/calibrate.log 2>&1; say "import rc $?"
cp g/calibrate.log $OUT/ ; [ -f g/profile.h5 ] && cp g/profile.h5 $OUT/profile.h5 && build-cuda/dtsim profile show g/profile.h5 > $OUT/profile-show.txt 2>&1
[ -f g/profile.h5 ] && build-cuda/bench/dtsim_validate_suite --device cuda --cluster 1xh100 --profile g/profile.h5 --cases g/cases.txt --replay g/runs --out $OUT/suite.md --json $OUT/suite.json >> $L 2>&1; say "replay rc $?"
cat $OUT/suite.md 2>/dev/null | head -40
