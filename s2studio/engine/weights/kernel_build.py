"""How the CPU kernels are compiled: at install time (`setup.py`), never by the studio, the CLI or the server.

Every `.cpp` of this folder becomes one Python extension module per CPU width (`kernels.py` says which exist and
how one is chosen at run time), compiled by setuptools with torch's own extension support
(`torch.utils.cpp_extension`): the kernels are torch C++ code (ATen tensors, `TORCH_LIBRARY` ops and classes), and
that support knows torch's headers, libraries, C++ ABI flag and each platform's compiler (g++/clang, MSVC) the
way torch's own build does, with no second build system (CMake) to keep in step with torch. `cpu_module.cpp`
is the module around the library: it records the width, the digest of the sources and the torch it was built for.

Widths: on x86-64 AVX512, AVX2 and the base instruction set (the source's `#if`s pick the code; torch's choice
for the CPU picks the module); on arm64 the base set, which includes NEON (the compiler vectorises the portable
loops with it). OpenMP (torch's `at::parallel_for` inside the step ops) is on where the compiler has it: g++ and
MSVC; Apple's clang has none, so there those loops run on the calling thread (the linears' own helper threads do
not use OpenMP).

`python -m s2studio.engine.weights.kernel_build` builds the modules in place in a source checkout (what
`scripts/setup` and the test session do when the sources changed since the last build; `--check` only says;
after a change of the flags here, `--force`).
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

from s2studio.engine.weights import kernels

FOLDER = Path(__file__).parent
PACKAGE = "s2studio.engine.weights"

GCC_WIDTH_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mf16c"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c"],
    "BASE": [],
}
MSVC_WIDTH_FLAGS = {  # MSVC defines no __FMA__/__F16C__: /arch:AVX2 implies both, the source asks for the macros
    "AVX512": ["/arch:AVX512", "/D__FMA__", "/D__F16C__"],
    "AVX2": ["/arch:AVX2", "/D__FMA__", "/D__F16C__"],
    "BASE": [],
}


def widths() -> tuple[str, ...]:
    """The widths this machine's build makes: all three on x86-64, the base one elsewhere."""
    machine = platform.machine().lower()
    return kernels.WIDTHS if machine in ("x86_64", "amd64", "i686", "x86") else ("BASE",)


def compile_flags(width: str, msvc: bool) -> list[str]:
    marks = [f"S2_KERNEL_WIDTH={width}", f"S2_SOURCES_DIGEST={kernels.sources_digest()}",
             f"S2_TORCH={kernels.torch_tag()}"]
    if msvc:
        return ["/O2", "/std:c++20", "/openmp", *MSVC_WIDTH_FLAGS[width], *(f"/D{m}" for m in marks)]
    flags = ["-O3", "-g0", "-std=c++20", *GCC_WIDTH_FLAGS[width], *(f"-D{m}" for m in marks)]
    return flags if sys.platform == "darwin" else [*flags, "-fopenmp"]


def extensions(root: Path | None = None) -> list:
    """The extension modules for setuptools, sources relative to `root` (setup.py's folder) when given."""
    from torch.utils.cpp_extension import CppExtension

    msvc = sys.platform == "win32"
    files = [str(p.relative_to(root)) if root else str(p) for p in kernels.sources()]
    link = [] if msvc or sys.platform == "darwin" else ["-fopenmp"]
    return [CppExtension(f"{PACKAGE}.{kernels.module_name(w)}", files,
                         extra_compile_args={"cxx": compile_flags(w, msvc)}, extra_link_args=link)
            for w in widths()]


def build_command():  # noqa: ANN201 - setuptools' build_ext, as torch extends it
    from torch.utils.cpp_extension import BuildExtension

    return BuildExtension


def stale() -> list[str]:
    """The widths whose module beside this file is missing or was built from other sources or another torch."""
    digest, tag = kernels.sources_digest(), kernels.torch_tag()
    out = []
    for width in widths():
        built = sorted(FOLDER.glob(f"{kernels.module_name(width)}.*"))
        marks = built[0].read_bytes() if built else b""
        if not built or digest.encode() not in marks or tag.encode() not in marks:
            out.append(width)
    return out


def build_in_place(only: list[str] | None = None) -> list[Path]:
    """Compile the modules of `only` (default: every width) into a temporary folder, then move each beside this
    file in one rename: a crash or a second build never leaves half a module where Python imports it."""
    from setuptools import Distribution

    wanted = set(only or widths())
    modules = [e for e in extensions() if e.name.rsplit("._cpu_", 1)[1].upper() in wanted]
    done = []
    with tempfile.TemporaryDirectory(prefix="s2studio-kernels-") as tmp:
        dist = Distribution({"name": "s2studio-kernels", "ext_modules": modules,
                             "cmdclass": {"build_ext": build_command()}})
        command = dist.get_command_obj("build_ext")
        command.build_lib, command.build_temp = str(Path(tmp) / "lib"), str(Path(tmp) / "temp")
        dist.run_command("build_ext")
        for built in (Path(tmp) / "lib" / PACKAGE.replace(".", "/")).iterdir():
            target = FOLDER / built.name
            staged = target.with_name(f".{built.name}.{os.getpid()}.tmp")
            shutil.copyfile(built, staged)
            os.chmod(staged, 0o755)
            os.replace(staged, target)
            done.append(target)
    return done


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Build the CPU kernels in place (a source checkout).")
    parser.add_argument("--check", action="store_true", help="only say which widths need a build (exit 1 if any)")
    parser.add_argument("--force", action="store_true", help="build every width even when up to date")
    args = parser.parse_args(argv)
    todo = list(widths()) if args.force else stale()
    if args.check or not todo:
        print("CPU kernels: " + (f"to build: {', '.join(todo)}" if todo else "up to date"))
        return 1 if todo and args.check else 0
    print(f"CPU kernels: building {', '.join(todo)} (about 2 minutes of processor time for the three: a minute or "
          "two on an idle machine, longer on a busy one)", flush=True)
    for path in build_in_place(todo):
        print(f"built {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
