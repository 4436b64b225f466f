# bench/cpu-interference.py (docs/validation-cpu.md, "compute beside a
# collective"): bad values in one line with exit status 2, and a short run
# that reports every size with its overlapped cost from its two slowdowns.
# Needs Debian's python3-torch.
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")


def run(source_dir, *args):
    path = os.path.join(source_dir, "bench", "cpu-interference.py")
    return subprocess.run([sys.executable, path, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args", [["--reps", "0"], ["--max-mib", "0"]])
def test_bad_values_one_line_exit_2(source_dir, args):
    out = run(source_dir, *args)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "must be at least 1" in out.stderr


def test_every_size_with_its_overlap_cost(source_dir):
    out = run(source_dir, "--reps", "1", "--max-mib", "1", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    # 16 KiB to 1 MiB by 4x.
    assert [r["bytes"] for r in rows] == [16384, 65536, 262144, 1048576]
    for r in rows:
        s, c = r["compute_slowdown"], r["collective_slowdown"]
        assert s >= 0 and c > -1 and r["count"] >= 4 and r["reps"] == 1
        # An overlapped collective displaces (1 + c) s / (1 + s) of its time.
        assert r["overlap_cost"] == pytest.approx((1 + c) * s / (1 + s))
