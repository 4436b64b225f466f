"""pip's way in: builds the Python module dtsim (python/README.md).

    pip install --no-build-isolation .

runs a core-only CMake build of the extension (dtsim._core: the simulator,
never LibTorch or Qt) into build-python/, and packages it with python/dtsim/
and the shipped configs (configs/ as dtsim/configs, which the module finds
beside itself). Needs cmake, a C++20 compiler and the core's Debian packages
(scripts/setup), pybind11-dev and python3-dev; nothing from PyPI.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
# Where setuptools and the CMake tree work: build-python/ (not build/: that is
# scripts/build's CMake tree), or $DTSIM_PYTHON_BUILD_BASE.
BUILD = os.environ.get("DTSIM_PYTHON_BUILD_BASE") or os.path.join(ROOT, "build-python")
# A CMake tree already configured with DTSIM_BUILD_PYTHON (scripts/build's
# build/, say): the module is built there instead of configuring a core-only
# tree of its own (the install test uses it to package what ctest built).
EXISTING = os.environ.get("DTSIM_CMAKE_BUILD_DIR")


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(dtsim VERSION ([0-9.]+)", f.read()).group(1)


class CMakeBuild(build_ext):
    """Configures and builds the target dtsim_python, then copies _core*.so where setuptools wants it."""

    def build_extension(self, ext):
        tree = os.path.abspath(EXISTING) if EXISTING else os.path.join(BUILD, "cmake")
        if not EXISTING:
            configure = ["cmake", "-S", ROOT, "-B", tree, "-DCMAKE_BUILD_TYPE=Release", "-DDTSIM_CORE_ONLY=ON",
                         "-DDTSIM_BUILD_TESTS=OFF", "-DDTSIM_BUILD_BENCH=OFF", "-DDTSIM_BUILD_PYTHON=ON",
                         f"-DPython_EXECUTABLE={sys.executable}"]
            if shutil.which("ninja"):
                configure += ["-G", "Ninja"]
            subprocess.check_call(configure)
        elif not os.path.exists(os.path.join(tree, "CMakeCache.txt")):
            raise RuntimeError(f"DTSIM_CMAKE_BUILD_DIR={EXISTING}: not a configured CMake tree (no CMakeCache.txt)")
        jobs = os.environ.get("DTSIM_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", tree, "--target", "dtsim_python", "-j", jobs])
        built = glob.glob(os.path.join(tree, "python", "dtsim", "_core*.so"))
        if not built:
            raise RuntimeError("the CMake build made no dtsim/_core*.so: is pybind11-dev installed? (see its configure output)")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


class BuildPyWithConfigs(build_py):
    """The package plus dtsim/configs: clusters, plans, models and profiles."""

    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "dtsim", "configs")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(os.path.join(ROOT, "configs"), dest, ignore=shutil.ignore_patterns("*.log"))


os.makedirs(BUILD, exist_ok=True)
setup(
    name="dtsim",
    version=version(),
    description="Predict the time and memory of a distributed training plan",
    license="see the repository",
    python_requires=">=3.8",
    packages=["dtsim"],
    package_dir={"": "python"},
    ext_modules=[Extension("dtsim._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPyWithConfigs},
    extras_require={"frame": ["pandas"]},
    options={"build": {"build_base": os.path.relpath(BUILD, ROOT)},
             "egg_info": {"egg_base": os.path.relpath(BUILD, ROOT)}},
    zip_safe=False,
)
