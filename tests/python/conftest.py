# Shared by the Python tests (registered in tests/CMakeLists.txt, which sets
# PYTHONPATH to the build tree's python/ and names the dtsim binary).
import json
import os
import subprocess

import pytest


@pytest.fixture(scope="session")
def cli():
    """Runs the built `dtsim ARGS... --json` and returns its parsed output."""
    binary = os.environ.get("DTSIM_BINARY")
    if not binary or not os.path.exists(binary):
        pytest.skip("DTSIM_BINARY (the built dtsim) is not set; run through ctest")

    def run(*args):
        out = subprocess.run([binary, *args, "--json"], check=True, capture_output=True, text=True)
        return json.loads(out.stdout)

    return run


@pytest.fixture(scope="session")
def source_dir():
    return os.environ.get("DTSIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
