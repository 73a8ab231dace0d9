"""Builds the spore wheel from an existing CMake build folder (make python runs this; docs/PYTHON.md).

    SPORE_BUILD_DIR=build python3 -m build --wheel --no-isolation python/

The extension (_spore) is built by CMake in $SPORE_BUILD_DIR (default ../build) as the rest of spore is, with the
same compiler flags and ccache; this script builds that one target and packs $SPORE_BUILD_DIR/python/spore (the
extension next to copies of spore/*.py) into the wheel.
"""
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(os.environ.get("SPORE_BUILD_DIR", os.path.join(HERE, "..", "build")))


class CMakeBuild(build_ext):
    def run(self):
        if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
            raise RuntimeError(f"{BUILD} is not a configured CMake build folder: run `make build` first "
                               "(or set SPORE_BUILD_DIR)")
        subprocess.check_call(["cmake", "--build", BUILD, "--target", "_spore"])
        src = os.path.join(BUILD, "python", "spore")
        for ext in self.extensions:
            built = [f for f in os.listdir(src) if f.startswith("_spore") and f.endswith(".so")]
            if not built:
                raise RuntimeError(f"no _spore*.so in {src}")
            dst = self.get_ext_fullpath(ext.name)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(os.path.join(src, built[0]), dst)


def version():
    with open(os.path.join(HERE, "..", "CMakeLists.txt")) as f:
        for line in f:
            if line.startswith("project(spore VERSION"):
                return line.split("VERSION")[1].split()[0]
    return "0.0.0"


setup(
    name="spore",
    version=version(),
    description="spore: a deep-learning engine with a MindSpore-style API (Python front end)",
    packages=["spore"],
    package_dir={"spore": "spore"},
    package_data={"spore": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("spore._spore", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)
