"""torch's shared libraries loaded with the interpreter released, on the engine thread, before `import torch`.

`import torch` loads about a gigabyte of shared libraries (libtorch_cpu, and libtorch_cuda in a CUDA build)
from inside the import of `torch._C`, holding Python's global lock while the dynamic linker maps and relocates
them: a second or more in which the studio's window, on another thread, cannot run a line of Python, so it
stops drawing and answering. `preload` maps the same libraries first through the C library's `dlopen`, called
through ctypes, which releases the lock for the call; the import then finds them loaded. Same libraries, same
order and flags as torch's own import (its global dependencies first, with RTLD_GLOBAL, then the rest as
dependencies of `torch._C` would be, local), so nothing about how torch resolves its symbols changes.

Linux only (elsewhere torch loads its libraries its own way, and this does nothing); any failure leaves the
whole job to the import, as before. `bench/gui_stall.py` measures the window's longest pause with and without.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

LIBRARIES = (("libtorch_global_deps.so", True), ("libtorch_cpu.so", False), ("libtorch_cuda.so", False),
             ("libtorch.so", False))
"""(file in torch/lib, loaded global): torch's order."""


def torch_lib_folder() -> Path | None:
    """torch/lib of the installed torch, found without importing it."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "lib"
    return folder if folder.is_dir() else None


def preload() -> float:
    """Map torch's big libraries with the interpreter released; returns the seconds it took (0 when nothing was
    done: not Linux, torch imported already, or nothing found)."""
    if not sys.platform.startswith("linux") or "torch" in sys.modules:
        return 0.0
    folder = torch_lib_folder()
    if folder is None:
        return 0.0
    try:
        libc = ctypes.CDLL(None)
        dlopen = libc.dlopen
    except (OSError, AttributeError):
        return 0.0
    dlopen.restype = ctypes.c_void_p
    dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
    started = time.perf_counter()
    for name, is_global in LIBRARIES:
        path = folder / name
        if not path.is_file():
            continue
        flags = os.RTLD_NOW | (os.RTLD_GLOBAL if is_global else os.RTLD_LOCAL)
        if not dlopen(os.fsencode(path), flags):  # a function called through ctypes.CDLL runs without the lock
            log.info("preloading %s did not work; the import of torch loads it", name)
            break
    return time.perf_counter() - started
