"""What pyproject.toml cannot declare: the CPU kernels, compiled into extension modules when the package is built.

`s2studio/engine/weights/kernel_build.py` says how and why (setuptools with torch's own C++ extension support);
this file only hands its modules to setuptools. A plain `pip install .` builds them in an isolated environment
with the torch of `[build-system]`; `scripts/setup` installs that torch first and builds without isolation.
"""

import sys
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from s2studio.engine.weights import kernel_build  # noqa: E402 - from this checkout, not an installed copy

setup(ext_modules=kernel_build.extensions(ROOT), cmdclass={"build_ext": kernel_build.build_command()})
