# calibrate/src/python_host_probe.py (Note [Python host probe] in
# calibrate/src/driver.cpp): its records are calibration records of the work
# dtsim_torch_bench times from C++ (host_ops: 16 repeats of Linear,
# LayerNorm, GELU and an add = 64 ops; host_step: 1 and 16 tensors of 64
# elements), and without torch it says so in one skip record and exits 0.
import os
import subprocess
import sys


def probe(source_dir, python, *args):
    path = os.path.join(source_dir, "calibrate", "src", "python_host_probe.py")
    out = subprocess.run([python, path, "--budget", "0.01", *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return [line.split("\t") for line in out.stdout.splitlines()]


def test_probe_times_the_c_plus_plus_loops_work(source_dir):
    try:
        import torch  # noqa: F401
    except ImportError:
        records = probe(source_dir, sys.executable)
        assert len(records) == 1 and records[0][:2] == ["skip", "python"] and "torch cannot be imported" in records[0][2]
        return
    records = probe(source_dir, sys.executable)
    info = {r[1]: r[2] for r in records if r[0] == "info"}
    assert info["python"] == sys.version.split()[0]
    assert info["torch"] == torch.__version__
    kernels = [r for r in records if r[0] == "kernel"]
    # kernel KIND PRECISION M N K BATCH FLOPS BYTES MEDIAN MIN MAX REPS: 13 fields.
    assert all(len(k) == 13 for k in kernels)
    shapes = sorted((k[1], int(k[3]), int(k[4])) for k in kernels)
    assert shapes == [("python_ops", 64, 1), ("python_step", 64, 1), ("python_step", 1024, 16)]
    for k in kernels:
        median, low, high, reps = float(k[9]), float(k[10]), float(k[11]), int(k[12])
        assert 0 < low <= median <= high and reps >= 5


def test_probe_without_torch_skips_in_one_record(source_dir, tmp_path):
    # A Python that cannot import torch: a module named torch that fails.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('no torch here')\n")
    path = os.path.join(source_dir, "calibrate", "src", "python_host_probe.py")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    out = subprocess.run([sys.executable, path], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0
    assert out.stdout.splitlines() == ["skip\tpython\ttorch cannot be imported by " + sys.executable + ": no torch here"]
