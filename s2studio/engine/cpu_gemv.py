"""Build, load and call the CPU kernels of `cpu_gemv.cpp`: linear layers with bf16 or int8 weights, float32 math.

Up to 8 rows of activations (decode steps) the weights stream once through a matrix-vector kernel at memory
speed; longer inputs (a prefill) are widened to float32 a block of rows at a time for torch's GEMM.

The kernels are compiled on the machine that runs them, once, with the C++ compiler and torch's own headers,
into the user cache (`…/s2studio/kernels/`, keyed by the source, torch's version and the vector width). That is
a few seconds on the first fast-path load. A bundle ships them prebuilt for AVX512 and AVX2
(`python -m s2studio.engine.cpu_gemv DIR`). Without either (no compiler: a Windows machine without build tools)
or with `S2STUDIO_CPU_KERNELS=0`, `available()` is False and the callers keep torch's kernels: slower, same
results within float rounding.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch
from torch import Tensor

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("cpu_gemv.cpp")
PREBUILT = Path(__file__).with_name("prebuilt")
"""Builds shipped with the package (packaging/build.sh puts them in the bundle): looked up before the cache."""
ENV_SWITCH = "S2STUDIO_CPU_KERNELS"

ARCH_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mf16c"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c"],
}
"""By torch's own choice of vector width for this CPU (`torch.backends.cpu.get_cpu_capability()`)."""

_lock = threading.Lock()
_available: bool | None = None


def cache_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("s2studio", appauthor=False)) / "kernels"


def compile_command(output: Path, capability: str | None = None) -> list[str]:
    capability = capability or torch.backends.cpu.get_cpu_capability()
    root = Path(torch.__file__).parent
    torch_lib = root / "lib"
    cmd = [os.environ.get("CXX", "c++"), "-O3", "-std=c++20", "-shared", "-fPIC", "-fopenmp",
           f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}", *ARCH_FLAGS.get(capability, [])]
    cmd += [f"-I{root / 'include'}"]
    cmd += [str(SOURCE), "-o", str(output), f"-L{torch_lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{torch_lib}"]
    return cmd


def library_name(capability: str | None = None) -> str:
    """The file name of the kernels for this source, this torch and a CPU width (default: this CPU's)."""
    key = hashlib.sha256(SOURCE.read_bytes())
    key.update(f"{torch.__version__} {capability or torch.backends.cpu.get_cpu_capability()}".encode())
    return f"cpu_gemv-{key.hexdigest()[:16]}.so"


def library_path() -> Path:
    """Where this machine's build lives in the user cache (nothing is built here)."""
    return cache_dir() / library_name()


def build(output: Path, capability: str | None = None) -> None:
    """Compile into `output` atomically: a crash or a second process never leaves half a library there."""
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        raise RuntimeError("no C++ compiler (c++) on PATH")
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent) as tmp:
        partial = Path(tmp) / output.name
        done = subprocess.run(compile_command(partial, capability), capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(f"the compiler failed: {done.stderr.strip()[-2000:]}")
        os.replace(partial, output)


def available() -> bool:
    """True when the kernels are loaded in this process (building them first if needed); never raises."""
    global _available
    if _available is None:
        with _lock:
            if _available is None:
                _available = _load()
    return _available


def _load() -> bool:
    if os.environ.get(ENV_SWITCH, "1") == "0":
        log.info("CPU kernels off (%s=0): torch's kernels serve the fast path", ENV_SWITCH)
        return False
    if hasattr(torch.ops.s2studio_cpu, "linear_bf16"):  # loaded by an earlier call in this process
        return True
    try:
        path = PREBUILT / library_name()
        if not path.is_file():
            path = library_path()
        if not path.is_file():
            log.info("building the CPU kernels into %s (once)", path)
            build(path)
            for stale in path.parent.glob("cpu_gemv-*.so"):  # an older source's or torch's (~120 KB each)
                if stale != path:
                    stale.unlink(missing_ok=True)
        torch.ops.load_library(str(path))
    except Exception as exc:  # a missing compiler must not stop the model from loading
        log.warning("CPU kernels unavailable, torch's kernels serve the fast path (slower): %s", exc)
        return False
    return True


def linear_bf16(x: Tensor, weight: Tensor) -> Tensor:
    """`F.linear(x.float(), weight.float())` in x's dtype, for a bf16 `weight` (out, in) or its int16 bits."""
    return torch.ops.s2studio_cpu.linear_bf16(x, weight)


def linear_int8(x: Tensor, weight: Tensor, scale: Tensor) -> Tensor:
    """`F.linear(x.float(), weight.float()) * scale` in x's dtype, for int8 rows `weight` (out, in)."""
    return torch.ops.s2studio_cpu.linear_int8(x, weight, scale)


def main(argv: list[str] | None = None) -> int:
    """`python -m s2studio.engine.cpu_gemv DIR`: build the kernels for every CPU width into DIR (packaging)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("dir", type=Path)
    parser.add_argument("--widths", nargs="*", default=list(ARCH_FLAGS), help="of: " + ", ".join(ARCH_FLAGS))
    args = parser.parse_args(argv)
    for capability in args.widths:
        output = args.dir / library_name(capability)
        build(output, capability)
        print(f"{capability}: {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
