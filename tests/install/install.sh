#!/usr/bin/env bash
# cmake --install into a temporary prefix, then, from outside the source and
# build trees and without $DTSIM_CONFIG_DIR:
#  1. a consumer project configured with find_package(dtsim) builds against
#     dtsim::sim and dtsim::models and predicts what the installed dtsim predicts;
#  2. the installed dtsim finds its configs in <prefix>/share/dtsim/configs (a
#     cluster that exists only there is found) and a missing config folder is
#     one line naming it, exit status 2;
#  3. the installed Python package (where built) imports, finds the same
#     configs and predicts what the installed dtsim does;
#  4. `pip install --no-build-isolation .` (offline, Debian's setuptools,
#     into a target folder; setup.py builds the module in BUILD_DIR, which
#     ctest already built) gives a package that imports outside the tree,
#     finds the configs it carries and predicts the same.
#   install.sh BUILD_DIR CONSUMER_SOURCE GENERATOR CXX [PYTHON PYTHON_INSTALL_DIR [SOURCE_DIR]]
set -euo pipefail
build=$1 consumer=$2 generator=$3 cxx=$4 python=${5:-} pydir=${6:-} source=${7:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset DTSIM_CONFIG_DIR
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
for f in bin/dtsim share/dtsim/configs/clusters/dgx-a100.yaml include/dtsim/sim/predict.hpp \
         include/dtsim/models/models.hpp lib/cmake/dtsim/dtsimConfig.cmake; do
  [[ -e "$prefix/$f" ]] || { echo "not installed: $f"; exit 1; }
done
cd "$tmp"

# 1. The consumer.
cmake -S "$consumer" -B "$tmp/consumer" -G "$generator" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > "$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log"; exit 1; }
cmake --build "$tmp/consumer" >> "$tmp/consumer.log" 2>&1 || { tail -40 "$tmp/consumer.log"; exit 1; }
"$tmp/consumer/dtsim_consumer" > consumer.json
"$prefix/bin/dtsim" predict --model gpt2 --cluster dgx-a100 --plan ddp --json > installed.json
cmp consumer.json installed.json || { echo "the consumer's prediction differs from the installed dtsim's"; diff consumer.json installed.json | head; exit 1; }
grep -q '"iteration_time_s"' consumer.json
echo "consumer: find_package(dtsim), dtsim::sim and dtsim::models predict as the installed dtsim does"

# 2. The installed dtsim reads <prefix>/share/dtsim/configs: a cluster only
# there is found by name.
sed 's/^name: .*/name: only-installed/' "$prefix/share/dtsim/configs/clusters/dgx-a100.yaml" \
  > "$prefix/share/dtsim/configs/clusters/only-installed.yaml"
"$prefix/bin/dtsim" predict --model gpt2 --cluster only-installed --plan ddp --json > only.json
grep -q '"only-installed"' only.json
echo "installed dtsim: configs found in $prefix/share/dtsim/configs"
status=0
DTSIM_CONFIG_DIR=$tmp/nowhere "$prefix/bin/dtsim" predict --model gpt2 --cluster dgx-a100 2> err.txt || status=$?
[[ $status == 2 && $(wc -l < err.txt) == 1 ]] && grep -q "DTSIM_CONFIG_DIR=$tmp/nowhere: no such directory" err.txt \
  || { echo "a missing config folder: status $status, said:"; cat err.txt; exit 1; }
echo "installed dtsim: a missing config folder is one line: $(cat err.txt)"

# 3. The Python package.
if [[ -n "$python" && -n "$pydir" ]]; then
  PYTHONPATH="$prefix/$pydir" "$python" - "$prefix" <<'PY'
import json, os, subprocess, sys
import dtsim
prefix = sys.argv[1]
assert dtsim.__file__.startswith(prefix), dtsim.__file__
assert os.path.realpath(dtsim.config_dir()) == os.path.realpath(os.path.join(prefix, "share/dtsim/configs")), dtsim.config_dir()
assert "only-installed" in dtsim.clusters()
cli = json.loads(open("installed.json").read())
assert dtsim.predict("gpt2", "dgx-a100", "ddp") == cli
print("python: the installed package imports from", os.path.dirname(dtsim.__file__), "and predicts as the installed dtsim")
PY
fi

# 4. pip's way in (setup.py), where pip is.
if [[ -n "$python" && -n "$source" ]]; then
  if ! "$python" -m pip --version > /dev/null 2>&1; then
    echo "pip: $python -m pip is missing (apt install python3-pip): not tried"
  else
    DTSIM_CMAKE_BUILD_DIR=$build DTSIM_PYTHON_BUILD_BASE=$tmp/pybuild PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
      "$python" -m pip install --no-build-isolation --no-deps --target "$tmp/site" "$source" > "$tmp/pip.log" 2>&1 \
      || { tail -40 "$tmp/pip.log"; exit 1; }
    PYTHONPATH="$tmp/site" "$python" - "$tmp/site" <<'PY'
import json, os, sys
import dtsim
site = sys.argv[1]
assert dtsim.__file__.startswith(site), dtsim.__file__
assert os.path.realpath(dtsim.config_dir()) == os.path.realpath(os.path.join(site, "dtsim", "configs")), dtsim.config_dir()
assert "dgx-a100" in dtsim.clusters()
cli = json.loads(open("installed.json").read())
assert dtsim.predict("gpt2", "dgx-a100", "ddp") == cli
print("pip: pip install --no-build-isolation . gives a package that imports from", os.path.dirname(dtsim.__file__),
      "with its own configs and predicts as the installed dtsim")
PY
  fi
fi
