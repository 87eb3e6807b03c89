"""Compile the CPU kernels for arm64 (Linux's cross compiler standing in for a Mac's), without linking, and count the
NEON vector instructions the compiler made: what can be checked of the arm64 build on an x86-64 machine.

Needs `aarch64-linux-gnu-g++` (Debian: g++-aarch64-linux-gnu); run from the checkout:
    .venv/bin/python packaging/cross_check_arm64.py
Linking and running need an arm64 torch and an arm64 machine; Apple's clang differs in having no OpenMP (the
build leaves it out there: kernel_build.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from torch.utils.cpp_extension import include_paths

from s2studio.engine.weights import kernel_build, kernels

NEON = re.compile(r"\s(fmla|fmul|fadd|fmax|sdot|smlal2?|smull2?|sxtl2?|shll2?|scvtf|fcvtl2?)\s+v\d+\.(4s|8h|16b|2d)")


def main() -> int:
    flags = [*kernel_build.compile_flags("BASE", msvc=False), "-DTORCH_EXTENSION_NAME=_cpu_base",
             "-D_GLIBCXX_USE_CXX11_ABI=1", *(f"-I{p}" for p in include_paths()),
             f"-I{sysconfig.get_paths()['include']}"]
    with tempfile.TemporaryDirectory() as tmp:
        for source in kernels.sources():
            obj = Path(tmp) / f"{source.stem}.o"
            done = subprocess.run(["aarch64-linux-gnu-g++", "-c", "-fPIC", *flags, str(source), "-o", str(obj)],
                                  capture_output=True, text=True)
            if done.returncode:
                print(f"{source.name}: does not compile for arm64\n{done.stderr[-3000:]}")
                return 1
            listing = subprocess.run(["aarch64-linux-gnu-objdump", "-d", str(obj)], capture_output=True,
                                     text=True, check=True).stdout
            print(f"{source.name}: compiles for arm64; {len(NEON.findall(listing))} NEON vector arithmetic "
                  f"instructions of {listing.count(chr(10))} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
