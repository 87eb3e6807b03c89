"""Load torch's native libraries without freezing the window (issue 14: the window froze up to 618 ms during a load).

The engine thread imports torch the first time a model loads. `import torch` opens libtorch_cpu, libtorch_cuda and
the rest (hundreds of MB, thousands of static initialisers) from inside the import system, which holds Python's
GIL all the while: the GUI thread, which needs the GIL to run any slot or repaint, stands still for that long
(measured: 450-600 ms on a busy 2-core machine, `bench/gui_stall.py`). A foreign call through ctypes releases
the GIL, so `preload_torch` calls the C library's `dlopen` on the same files first, on the engine thread; the
import then finds them loaded. Torch itself is not imported here (this module stays torch-free, like the rest of
the worker layer). Anything unexpected (another platform, a torch without these files) is skipped: the import
then simply does the work as before.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

LIBRARIES = ("libtorch_global_deps.so", "libc10.so", "libtorch_cpu.so", "libc10_cuda.so", "libtorch_cuda.so",
             "libtorch.so", "libtorch_python.so")
"""In dependency order, as torch's own import opens them (Linux names; a missing one is skipped)."""


def torch_library_folder() -> Path | None:
    """torch/lib of the installed torch, found without importing it."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "lib"
    return folder if folder.is_dir() else None


def preload_torch() -> list[str]:
    """dlopen torch's libraries with the GIL released; returns the names loaded (none when not on Linux, when
    torch is not installed or already imported)."""
    if not sys.platform.startswith("linux") or "torch" in sys.modules:
        return []
    folder = torch_library_folder()
    if folder is None:
        return []
    try:
        libc = ctypes.CDLL(None)
        dlopen = libc.dlopen
    except (OSError, AttributeError):
        return []
    dlopen.restype = ctypes.c_void_p
    dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
    loaded = []
    for name in LIBRARIES:
        path = folder / name
        # torch opens its global-deps library RTLD_GLOBAL and the others as dependencies of torch._C (local)
        scope = os.RTLD_GLOBAL if name == "libtorch_global_deps.so" else os.RTLD_LOCAL
        if path.is_file() and dlopen(os.fsencode(path), os.RTLD_NOW | scope):
            loaded.append(name)
        elif path.is_file():
            logger.info("could not preload %s; torch's import will load it", path)
    return loaded
