# examples/python_quickstart.py runs whole and prints what each cell computes.
import os
import subprocess
import sys


def test_quickstart_runs(source_dir):
    script = os.path.join(source_dir, "examples", "python_quickstart.py")
    out = subprocess.run([sys.executable, script], check=True, capture_output=True, text=True).stdout
    assert "gpt2-xl on 8 x A100-SXM4-80GB" in out
    assert "my-llama:" in out
    assert "refused: --set plan.zero_stage: 4 is not one of 0, 1, 2, 3" in out
