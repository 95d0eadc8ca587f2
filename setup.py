"""Builds the extension kappa._kappa with CMake (the top-level project with
-DKAPPA_BUILD_PYTHON=ON and the developer targets off), then lets setuptools
package python/kappa. Metadata: pyproject.toml.

Environment: CMAKE_BUILD_PARALLEL_LEVEL (jobs; default: the cores, each
translation unit takes up to ~1.5 GB of compiler memory), KAPPA_CMAKE_ARGS
(extra arguments, e.g. "-DKAPPA_USE_OPENMP=OFF" or
"-DCMAKE_CXX_FLAGS=-march=native" for a build for this machine only),
KAPPA_BUILD_DIR (a CMake build tree to build in and reuse, instead of
setuptools' temporary one: repeated installs then recompile only what
changed).
"""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    text = open(os.path.join(ROOT, "include", "kappa", "version.hpp"), encoding="utf-8").read()
    parts = [re.search(rf"#define KAPPA_VERSION_{p} (\d+)", text).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if shutil.which("cmake") is None:
            raise RuntimeError("building kappa needs CMake 3.22 or newer (apt-get install cmake)")
        build_dir = os.environ.get("KAPPA_BUILD_DIR") or os.path.join(self.build_temp, "cmake")
        build_dir = os.path.abspath(build_dir)
        os.makedirs(build_dir, exist_ok=True)
        args = [
            "-S", ROOT, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG",
            "-DKAPPA_BUILD_PYTHON=ON",
            "-DKAPPA_BUILD_TESTS=OFF",
            "-DKAPPA_BUILD_BENCHMARKS=OFF",
            "-DKAPPA_BUILD_EXAMPLES=OFF",
            "-DKAPPA_BUILD_TOOLS=OFF",
            "-DKAPPA_INSTALL=OFF",
            "-DKAPPA_HEADER_CHECK=OFF",
            "-DKAPPA_USE_OPENMP=ON",
            f"-DPython_EXECUTABLE={sys.executable}",
        ]
        args += shlex.split(os.environ.get("KAPPA_CMAKE_ARGS", ""))
        subprocess.run(["cmake", *args], check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "--build", build_dir, "--target", "kappa_python", "-j", jobs],
                       check=True)
        built = glob.glob(os.path.join(build_dir, "python", "kappa", "_kappa*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one built module, found {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


setup(
    version=version(),
    packages=["kappa"],
    package_dir={"kappa": "python/kappa"},
    package_data={"kappa": ["py.typed", "_kappa.pyi"]},
    ext_modules=[CMakeExtension("kappa._kappa")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
