"""Loading the CPU kernels, built when the package is built: which width this CPU gets, and why torch's run instead.

Every `.cpp` of this folder is compiled when S2 Studio is installed (`kernel_build.py`, run by `setup.py`; a
bundle carries the result), once per CPU width, into Python extension modules beside this file: `_cpu_avx512`,
`_cpu_avx2` and `_cpu_base` on x86-64, `_cpu_base` alone elsewhere (arm64: NEON is part of the base
instruction set there). Importing one loads its library, whose `TORCH_LIBRARY` blocks register the ops
`torch.ops.s2studio_cpu.*`; one per process. At run time the width torch chose for this CPU
(`torch.backends.cpu.get_cpu_capability()`) picks the module, and a narrower one serves if that one is missing.
Nothing here runs a compiler.

When no module loads (not built, built from other sources or for another torch, a file others could have
replaced, `S2STUDIO_CPU_KERNELS=0`), the callers keep torch's kernels: slower, the same results within float
rounding. `kernel_path()` says which path runs and why, for the log, the command line and the status bar.

A module is code that runs when loaded, so one that anyone but the user (or the administrator who installed it)
could have written is refused: the file must be a plain file, and neither it nor its folder writable by group or
others or owned by another user. Where the sources lie beside it (a source checkout, an editable install), the
module must have been built from exactly them (`SOURCES`, the digest of every `.cpp`) and for this torch
(`TORCH`): a stale build is refused rather than called with arguments it does not know.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)

FOLDER = Path(__file__).parent
WIDTHS = ("AVX512", "AVX2", "BASE")
"""The widths the kernels are built for, widest first. AVX512 and AVX2 are torch's names for them (its
`get_cpu_capability()`); BASE is the rest: x86-64 without AVX2, arm64 (NEON), any other architecture."""
ENV_SWITCH = "S2STUDIO_CPU_KERNELS"


def module_name(width: str) -> str:
    return f"_cpu_{width.lower()}"


def widths_for(capability: str) -> tuple[str, ...]:
    """The modules to try for torch's `capability`, best first: that width and every narrower one."""
    return WIDTHS[WIDTHS.index(capability):] if capability in WIDTHS else ("BASE",)


def sources() -> list[Path]:
    """Every C++ source of the kernels (whatever `.cpp` files this folder holds), in a fixed order."""
    return sorted(FOLDER.glob("*.cpp"))


def sources_digest() -> str | None:
    """sha256 over the sources, as `kernel_build` compiles into each module; None where the sources are not
    shipped (a bundle)."""
    files = sources()
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def torch_tag(version: str | None = None) -> str:
    """torch's version as the build records it (a C identifier's characters only)."""
    return re.sub(r"[^0-9A-Za-z]", "_", version or torch.__version__)


@dataclass(frozen=True)
class KernelPath:
    """Which kernels serve the CPU fast path: `width` of the C++ kernels, or None when torch's do, with `reason`."""

    width: str | None
    reason: str = ""

    @property
    def native(self) -> bool:
        return self.width is not None

    def describe(self) -> str:
        return f"C++ kernels ({self.width})" if self.native else "torch's kernels (slower)"


_lock = threading.Lock()
_path: KernelPath | None = None


def kernel_path() -> KernelPath:
    """Load the kernels once per process (never raises) and say which path runs."""
    global _path
    if _path is None:
        with _lock:
            if _path is None:
                try:
                    _path = _load()
                except Exception as exc:  # noqa: BLE001 - a file that vanished, a module that raised: torch's serve
                    _path = KernelPath(None, f"the C++ kernels could not be loaded ({exc})")
                if _path.native:
                    log.info("CPU kernels: %s", _path.describe())
                else:
                    log.warning("CPU kernels: %s; %s", _path.reason, _path.describe())
    return _path


def available() -> bool:
    """True when the C++ kernels are loaded in this process (loading them on the first call)."""
    return kernel_path().native


def file_problem(path: Path) -> str | None:
    """Why the module file `path` cannot be trusted to load, or None."""
    for what, st in ((path.name, os.lstat(path)), (f"the folder {path.parent}", os.stat(path.parent))):
        if what == path.name and not stat.S_ISREG(st.st_mode):
            return f"{path.name} is not a plain file"
        if os.name == "nt":  # modes and owners do not apply there
            continue
        if hasattr(os, "getuid") and st.st_uid not in (os.getuid(), 0):
            return f"{what} belongs to another user (uid {st.st_uid})"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{what} is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'}"
    return None


def _load() -> KernelPath:
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return KernelPath(None, f"off ({ENV_SWITCH}=0)")
    capability = torch.backends.cpu.get_cpu_capability()
    problems, missing = [], []
    for width in widths_for(capability):
        name = f"{__package__}.{module_name(width)}"
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            missing.append(module_name(width))
            continue
        problem = file_problem(Path(spec.origin))
        if problem is not None:
            problems.append(f"refusing {Path(spec.origin).name}: {problem}")
            continue
        try:
            module = importlib.import_module(name)
        except ImportError as exc:  # another torch's symbols, another platform's file
            problems.append(f"{Path(spec.origin).name} does not load: {exc}")
            continue
        want = sources_digest()
        if want is not None and getattr(module, "SOURCES", None) != want:
            return KernelPath(None, f"{module_name(width)} was built from other sources than these; rebuild it "
                                    "(scripts/setup, or pip install again)")
        if getattr(module, "TORCH", None) != torch_tag():
            return KernelPath(None, f"{module_name(width)} was built for another torch than {torch.__version__}; "
                                    "rebuild it (scripts/setup, or pip install again)")
        if width != widths_for(capability)[0]:
            log.warning("CPU kernels: %s; the narrower %s ones serve", "; ".join(problems + missing), width)
        return KernelPath(width)
    if missing:
        log.info("CPU kernels: no module %s beside %s", " or ".join(missing), FOLDER)
        problems.append("the C++ kernels are not built in this installation")
    return KernelPath(None, "; ".join(problems) + "; reinstall S2 Studio, or run scripts/setup in a checkout")
