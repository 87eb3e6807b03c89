"""Build, load and call the CPU kernels of `cpu_gemv.cpp`: linear layers with bf16, int8 or int4 weights, float32 math.

The same library holds the fast path's fused step ops (`cpu_step.cpp`, called through `cpu_step.py`) and the codec's
fused Snake (`cpu_codec.cpp`, through `cpu_codec.py`): one build of every source in `SOURCES`, named by the hash of
them all.

Up to 8 rows of activations (decode steps) the weights stream once through a matrix-vector kernel at memory
speed; longer inputs (a prefill) are widened to float32 a block of rows at a time for torch's GEMM.

The kernels are compiled on the machine that runs them, once, with the C++ compiler and torch's own headers,
into the user cache (`…/s2studio/kernels/`, keyed by the source, torch's version and the vector width). That is
a few seconds on the first fast-path load. A bundle ships them prebuilt for AVX512 and AVX2
(`python -m s2studio.engine.weights.cpu_gemv DIR`, which also writes their hashes to `DIR/SHA256SUMS`). Without
either (no compiler: a Windows machine without build tools) or with `S2STUDIO_CPU_KERNELS=0`, `available()` is
False and the callers keep torch's kernels: slower, same results within float rounding.

Loading a library runs its code, and the cache is a folder anyone with the user's rights (or a careless mode) can
write. So nothing is loaded on trust: a cached build is used only when the folder and the file belong to the
user and neither is writable by group or others, and its bytes hash to what was recorded when it was built
(`….so.sha256`); a shipped build only when it hashes to the bundle's list. A build that fails a check is
refused with a log line and built again (in a foreign or unsafe folder: not at all; torch's kernels serve).
The hash is taken from the very file descriptor that is then loaded (`/proc/self/fd/N` on Linux), so the file
cannot be swapped between the check and the load.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from pathlib import Path

import torch
from torch import Tensor

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("cpu_gemv.cpp")
SOURCES = (SOURCE, Path(__file__).with_name("cpu_step.cpp"), Path(__file__).with_name("cpu_codec.cpp"))
"""Every source of the library: the linear layers, the small ops of a fast-path step (`cpu_step.cpp`) and the
codec's fused Snake (`cpu_codec.cpp`)."""
PREBUILT = Path(__file__).with_name("prebuilt")
"""Builds shipped with the package (packaging/build.sh puts them in the bundle): looked up before the cache."""
MANIFEST = "SHA256SUMS"
"""In a folder of prebuilt libraries: `<sha256>  <file name>` per line, as `sha256sum` writes it."""
DIGEST_SUFFIX = ".sha256"
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
    cmd += [*map(str, SOURCES), "-o", str(output), f"-L{torch_lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{torch_lib}"]
    return cmd


def library_name(capability: str | None = None) -> str:
    """The file name of the kernels for these sources, this torch and a CPU width (default: this CPU's)."""
    key = hashlib.sha256()
    for source in SOURCES:
        key.update(hashlib.sha256(source.read_bytes()).digest())
    key.update(f"{torch.__version__} {capability or torch.backends.cpu.get_cpu_capability()}".encode())
    return f"cpu_gemv-{key.hexdigest()[:16]}.so"


def library_path() -> Path:
    """Where this machine's build lives in the user cache (nothing is built here)."""
    return cache_dir() / library_name()


def build(output: Path, capability: str | None = None) -> str:
    """Compile into `output` atomically (a crash or a second process never leaves half a library there), readable
    and writable by the user only; returns the build's sha256, also written to `output` + `.sha256`."""
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        raise RuntimeError("no C++ compiler (c++) on PATH")
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent) as tmp:
        partial = Path(tmp) / output.name
        done = subprocess.run(compile_command(partial, capability), capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(f"the compiler failed: {done.stderr.strip()[-2000:]}")
        os.chmod(partial, 0o700)
        digest = hashlib.sha256(partial.read_bytes()).hexdigest()
        recorded = Path(tmp) / (output.name + DIGEST_SUFFIX)
        recorded.write_text(digest + "\n", encoding="ascii")
        os.chmod(recorded, 0o600)
        os.replace(recorded, output.with_name(output.name + DIGEST_SUFFIX))
        os.replace(partial, output)
    return digest


# ----------------------------------------------------------------------------- trust


def _uid() -> int | None:
    """The user's id, or None where the platform has none (Windows: no owner check there)."""
    return os.getuid() if hasattr(os, "getuid") else None


def ownership_problem(st: os.stat_result, what: str) -> str | None:
    """Why a file or folder with status `st` is not the user's alone, or None."""
    uid = _uid()
    if uid is not None and st.st_uid != uid:
        return f"{what} belongs to another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'}"
    return None


def folder_problem(folder: Path) -> str | None:
    """Why the cache folder cannot hold trusted builds, or None (a loose mode on the user's own folder is
    tightened to 0700 instead: the user's umask may be 002)."""
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"{folder} is not a plain folder"
    problem = ownership_problem(st, str(folder))
    uid = _uid()
    if problem is not None and (uid is None or st.st_uid == uid):
        log.warning("CPU kernels: %s; making it private (0700)", problem)
        os.chmod(folder, 0o700)
        problem = ownership_problem(os.lstat(folder), str(folder))
    return problem


def entry_problem(path: Path) -> str | None:
    """Why the cached build `path` cannot be loaded, or None: it and its recorded hash must be plain files of the
    user's that only the user can write, and its bytes must hash to the record."""
    recorded = path.with_name(path.name + DIGEST_SUFFIX)
    for file in (path, recorded):
        try:
            st = os.lstat(file)
        except FileNotFoundError:
            return f"{file.name} is missing"
        if not stat.S_ISREG(st.st_mode):
            return f"{file.name} is not a plain file"
        problem = ownership_problem(st, file.name)
        if problem is not None:
            return problem
    want = recorded.read_text(encoding="ascii", errors="replace").strip()
    if hashlib.sha256(path.read_bytes()).hexdigest() != want:
        return f"{path.name} does not hash to the value recorded when it was built"
    return None


def shipped_digest(folder: Path, name: str) -> str | None:
    """The hash the bundle's `SHA256SUMS` lists for `name`, or None."""
    try:
        lines = (folder / MANIFEST).read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        digest, _, file = line.strip().partition("  ")
        if file == name:
            return digest.lower()
    return None


def load_verified(path: Path, digest: str) -> None:
    """Load the library at `path` if its bytes hash to `digest`; the hash is taken from the descriptor that is
    loaded (on Linux), so the file checked is the file run. RuntimeError otherwise."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        with os.fdopen(os.dup(fd), "rb") as f:
            got = hashlib.sha256(f.read()).hexdigest()
        if got != digest:
            raise RuntimeError(f"{path.name} hashes to {got[:12]}…, not the expected {digest[:12]}…")
        by_fd = Path(f"/proc/self/fd/{fd}")
        torch.ops.load_library(str(by_fd if by_fd.exists() else path))
    finally:
        os.close(fd)


def _cached() -> tuple[Path, str] | None:
    """This machine's build in the user cache, checked, or built now; None where the cache cannot be trusted."""
    path = library_path()
    folder = path.parent
    if not folder.exists():
        folder.mkdir(parents=True)
        os.chmod(folder, 0o700)
    problem = folder_problem(folder)
    if problem is not None:
        log.warning("CPU kernels not loaded: %s; torch's kernels serve the fast path", problem)
        return None
    if path.exists() or path.with_name(path.name + DIGEST_SUFFIX).exists():
        problem = entry_problem(path)
        if problem is None:
            return path, path.with_name(path.name + DIGEST_SUFFIX).read_text(encoding="ascii").strip()
        log.warning("CPU kernels: refusing the cached build (%s); building them again", problem)
        for stale in (path, path.with_name(path.name + DIGEST_SUFFIX)):
            stale.unlink(missing_ok=True)
    log.info("building the CPU kernels into %s (once)", path)
    digest = build(path)
    for stale in folder.glob("cpu_gemv-*.so*"):  # an older source's or torch's (~120 KB each)
        if stale.name not in (path.name, path.name + DIGEST_SUFFIX):
            stale.unlink(missing_ok=True)
    return path, digest


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
    if hasattr(torch.ops.s2studio_cpu, "attend"):  # loaded by an earlier call in this process
        return True
    try:
        shipped = PREBUILT / library_name()
        if shipped.is_file():
            digest = shipped_digest(PREBUILT, shipped.name)
            if digest is not None:
                try:
                    load_verified(shipped, digest)
                    return True
                except RuntimeError as exc:
                    log.warning("CPU kernels: refusing the shipped build (%s); using the user cache", exc)
            else:
                log.warning("CPU kernels: %s is not in the bundle's %s; using the user cache", shipped.name, MANIFEST)
        cached = _cached()
        if cached is None:
            return False
        load_verified(*cached)
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


def linear_int4(x: Tensor, nibbles: Tensor, scales_and_zeros: Tensor, group: int) -> Tensor:
    """`F.linear(x.float(), w)` in x's dtype for int4 codes `nibbles` (out, in/2) in the kernel's block layout
    (`weights/int4.py`) with w = (q - 8)·scale + zero per `group` inputs; `scales_and_zeros` (out, in/group, 2)
    bfloat16 or its int16 bits."""
    return torch.ops.s2studio_cpu.linear_int4(x, nibbles, scales_and_zeros, group)


def main(argv: list[str] | None = None) -> int:
    """`python -m s2studio.engine.weights.cpu_gemv DIR`: build the kernels for every CPU width into DIR and list
    their hashes in DIR/SHA256SUMS (packaging: the bundle loads a prebuilt library only if it is listed there)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("dir", type=Path)
    parser.add_argument("--widths", nargs="*", default=list(ARCH_FLAGS), help="of: " + ", ".join(ARCH_FLAGS))
    args = parser.parse_args(argv)
    listed = {name: digest for name in (p.name for p in args.dir.glob("cpu_gemv-*.so"))
              if (digest := shipped_digest(args.dir, name)) is not None}
    for capability in args.widths:
        output = args.dir / library_name(capability)
        listed[output.name] = build(output, capability)
        output.with_name(output.name + DIGEST_SUFFIX).unlink()  # the bundle's list replaces the cache's record
        print(f"{capability}: {output}")
    (args.dir / MANIFEST).write_text("".join(f"{d}  {n}\n" for n, d in sorted(listed.items())), encoding="ascii")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
