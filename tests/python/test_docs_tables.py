# The tables docs/ quotes from a script are what the script makes with this
# build: bench/memory-formulas (dtsim's memory beside Megatron's and
# DeepSpeed's own formulas, docs/memory-formulas.md).
import os
import subprocess
import sys


def table(text):
    """The lines of the first Markdown table in `text`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| configuration | category"))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[start:end]


def test_memory_formulas_table_is_this_builds(source_dir):
    binary = os.environ.get("DTSIM_BINARY")
    if not binary or not os.path.exists(binary):
        import pytest
        pytest.skip("DTSIM_BINARY (the built dtsim) is not set; run through ctest")
    script = os.path.join(source_dir, "bench", "memory-formulas")
    made = subprocess.run([sys.executable, script, "--dtsim", binary], check=True, capture_output=True, text=True).stdout
    with open(os.path.join(source_dir, "docs", "memory-formulas.md")) as f:
        quoted = f.read()
    # A row that differs means a change moved dtsim's memory: run
    # bench/memory-formulas --out docs/memory-formulas.md and say why.
    assert table(made) == table(quoted)
