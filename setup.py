"""`pip install --no-build-isolation .`: the Python package strata (python/strata) with its
pybind11 module _strata, and the strata binary, built by CMake + Ninja.

The CMake build directory is $STRATA_BUILD_DIR, else build-pip/ (setuptools' own files go
under build-pip/setuptools, away from `make`'s build/). Pointing STRATA_BUILD_DIR at `make`'s
build directory reuses what it built. The binary is a data file installed to the scheme's
bin/ (/usr/local/bin for a system install, VENV/bin in a virtual environment).
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(os.environ.get("STRATA_BUILD_DIR") or os.path.join(ROOT, "build-pip"))
os.makedirs(BUILD, exist_ok=True)


class CMakeBuild(build_ext):
    """Configures (once) and builds the targets strata and _strata, then copies _strata where
    setuptools packages extension modules."""

    def build_extension(self, ext):
        if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", BUILD, "-G", "Ninja",
                                   "-DCMAKE_BUILD_TYPE=Release", "-DSTRATA_BENCH=OFF",
                                   f"-DPython3_EXECUTABLE={sys.executable}"])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.check_call(["cmake", "--build", BUILD, "-j", jobs, "--target", "strata", "_strata"])
        built = [f for f in os.listdir(os.path.join(BUILD, "python", "strata")) if f.startswith("_strata")
                 and f.endswith(".so")]
        if len(built) != 1:
            raise RuntimeError(f"expected one _strata*.so in {BUILD}/python/strata, found {built}")
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copyfile(os.path.join(BUILD, "python", "strata", built[0]), out)


setup(
    packages=["strata"],
    package_dir={"strata": "python/strata"},
    ext_modules=[Extension("strata._strata", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    data_files=[("bin", [os.path.relpath(os.path.join(BUILD, "strata"), ROOT)])],
    options={"build": {"build_base": os.path.join(BUILD, "setuptools")},
             "egg_info": {"egg_base": BUILD}},
)
