# bench/python-reference.py (Note [Python reference] in bench/validate_suite.cpp):
# the suite's tiny models as a PyTorch user writes them must be dtsim's
# models, parameter for parameter, and must train under DDP and
# ZeroRedundancyOptimizer on two ranks. Needs Debian's python3-torch.
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def reference(source_dir):
    path = os.path.join(source_dir, "bench", "python-reference.py")
    spec = importlib.util.spec_from_file_location("python_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.PATH = path
    return module


# Each count by hand from the built-ins' shapes (models/src/zoo.cpp).
def gpt2_tiny():
    v, s, h, layers = 1024, 128, 128, 2
    # per block: c_attn 3h^2 + 3h, c_proj h^2 + h, c_fc 4h^2 + 4h, mlp_proj 4h^2 + h, two LayerNorms 4h
    return v * h + s * h + layers * (12 * h * h + 13 * h) + 2 * h  # tied head, ln_f


def bert_tiny():
    v, p, t, h, f, layers = 30522, 512, 2, 128, 512, 2
    embeddings = (v + p + t) * h + 2 * h
    layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h  # q, k, v, output; MLP; two LayerNorms
    return embeddings + layers * layer + h * h + h  # the pooler


def bilstm_tiny():
    inputs, h, classes = 64, 64, 33
    direction = lambda i: 4 * h * (i + h) + 2 * 4 * h  # weights and PyTorch's two biases
    return 2 * direction(inputs) + 2 * direction(2 * h) + 2 * h * classes + classes


@pytest.mark.parametrize("name,count", [("gpt2-tiny", gpt2_tiny()), ("bert-tiny", bert_tiny()), ("bilstm-tiny", bilstm_tiny())])
def test_the_same_parameters_as_dtsim(reference, cli, name, count):
    model = reference.MODELS[name]()
    assert sum(p.numel() for p in model.parameters()) == count
    assert cli("predict", "--model", name, "--cluster", "local-cpu", "--plan", "ddp")["model"]["parameters"] == count


@pytest.mark.parametrize("plan", ["ddp", "zero1"])
def test_trains_on_two_ranks(reference, plan):
    out = subprocess.run([sys.executable, reference.PATH, "--model", "gpt2-tiny", "--plan", plan, "--procs", "2", "--steps", "2",
                          "--warmup", "1"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["procs"] == 2 and r["plan"] == plan and r["steps"] == 2
    assert len(r["rank_median_s"]) == 2 and r["iteration_s"] > 0
    # HuggingFace's initialisation (std 0.02) leaves the logits near zero:
    # the first loss is about ln(vocabulary).
    assert r["loss_first"] == pytest.approx(math.log(1024), abs=0.05)


def test_refuses_a_plan_it_cannot_run(reference):
    out = subprocess.run([sys.executable, reference.PATH, "--model", "gpt2-tiny", "--plan", "ddp", "--procs", "1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "needs --procs 2 or more" in out.stderr
    # A model it does not have: argparse's one line, exit 2, naming the valid ones.
    out = subprocess.run([sys.executable, reference.PATH, "--model", "gpt-175b", "--plan", "ddp"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2
    assert "invalid choice: 'gpt-175b' (choose from 'bert-tiny', 'bilstm-tiny', 'gpt2-tiny')" in out.stderr
