"""Which set of golden files binds this machine: goldens are kept per CPU capability and torch build.

Float kernels differ between CPU instruction sets and torch builds (spec §11.1): the port and we agree bit for
bit on one machine, but a decode recorded on an AVX512 CPU is 1 LSB off in more samples on an AVX2 one. So
every golden set is a folder with a `manifest.json` that names the capability
(`torch.backends.cpu.get_cpu_capability()`: "AVX512", "AVX2", "DEFAULT", ...), the torch version and the
machine that made it:

    tests/golden/<kind>/               the first set of each kind (recorded on AVX512; other tests read it here)
    tests/golden/<kind>/<CAPABILITY>/  a set recorded on another capability, the folder named after it

`<kind>` is "lm", "codec" or "codec/full". Tests bind to `binding_set(kind)` and skip with `why_unbound(kind)`
when it is None; the tools write to `folder_to_write(kind)`, the set of the running capability, so a set
remade on its own capability replaces itself. Numpy and torch only: the tools import this module from the
reference venv.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import torch

GOLDEN = Path(__file__).resolve().parent / "golden"
class _Named(Protocol):
    name: str


Case = TypeVar("Case", bound=_Named)

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class GoldenSet:
    folder: Path
    manifest: dict

    @property
    def cpu_capability(self) -> str:
        return self.manifest["cpu_capability"]

    @property
    def torch(self) -> str:
        return self.manifest["torch"]

    def describe(self) -> str:
        return f"{self.cpu_capability} with torch {self.torch} ({self.folder.relative_to(GOLDEN.parent.parent)})"


def running_capability() -> str:
    return torch.backends.cpu.get_cpu_capability()


def _release(version: str) -> str:
    """torch's release without the local build tag: '2.14.1+cu130' -> '2.14.1' (the CPU kernels are the same)."""
    return version.split("+")[0]


def _read(folder: Path) -> GoldenSet | None:
    file = folder / MANIFEST
    if not file.is_file():
        return None
    return GoldenSet(folder, json.loads(file.read_text(encoding="utf-8")))


def recorded_sets(kind: str) -> list[GoldenSet]:
    """Every set of `kind`: the first one in `<kind>/`, then each `<kind>/<CAPABILITY>/` whose manifest names
    that capability (so `codec/full/`, a kind of its own, is not mistaken for a set of `codec`)."""
    base = GOLDEN / kind
    first = _read(base)
    out = [first] if first is not None else []
    for sub in sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else ():
        found = _read(sub)
        if found is not None and found.manifest.get("cpu_capability") == sub.name:
            out.append(found)
    return out


def binding_set(kind: str) -> GoldenSet | None:
    """The set recorded on this machine's capability with this torch release, or None."""
    here, release = running_capability(), _release(torch.__version__)
    for found in reversed(recorded_sets(kind)):  # a `<CAPABILITY>/` folder before the first set
        if found.cpu_capability == here and _release(found.torch) == release:
            return found
    return None


def why_unbound(kind: str) -> str:
    """One line for a skip: what this machine is, what was recorded, and how to record a set for it."""
    recorded = "; ".join(s.describe() for s in recorded_sets(kind)) or "none"
    tool = {"lm": "make_lm_goldens.py", "codec/full": "make_codec_goldens.py --full",
            "lora": "make_lora_goldens.py"}.get(kind, "make_codec_goldens.py")
    return (f"no {kind} goldens for a {running_capability()} CPU with torch {_release(torch.__version__)} "
            f"(float kernels differ between instruction sets and builds, spec §11.1); recorded: {recorded}; "
            f"make them here with tools/{tool}")


def folder_to_write(kind: str) -> Path:
    """Where a tool run on this machine writes: the folder of the set already recorded for this capability
    (whatever its torch), else a new `<kind>/<CAPABILITY>/`."""
    here = running_capability()
    for found in recorded_sets(kind):
        if found.cpu_capability == here:
            return found.folder
    return GOLDEN / kind / here


def machine() -> dict:
    """The facts a manifest records about the machine that made a set."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu or "unknown", "machine": platform.machine(), "cpu_capability": running_capability(),
            "torch": torch.__version__, "threads": torch.get_num_threads()}


def port_version() -> str:
    """The independent port a tool made its set with (installed in the tool's own venv, never ours)."""
    import importlib.metadata as md  # noqa: PLC0415 - only the goldens tools ask

    return f"mizuoto-fishspeech {md.version('mizuoto-fishspeech')} (mizuoto {md.version('mizuoto')})"


def write_manifest(out_dir: Path, made_by: str, reference: str, cases: list[str], seconds: float | None) -> None:
    """A set's `manifest.json`: who made it with what, on which machine, its cases and how long it took (kept
    from the earlier manifest when only some cases were remade)."""
    file = out_dir / MANIFEST
    earlier = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
    manifest = {
        "made_by": made_by, **machine(), "reference": reference, "cases": sorted(cases),
        "seconds_to_make": round(seconds, 1) if seconds is not None else earlier.get("seconds_to_make"),
    }
    file.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def cases_to_make(parser: argparse.ArgumentParser, cases: Sequence[Case],
                  argv: list[str] | None) -> tuple[list[Case], list[str] | None]:
    """A goldens tool's command line: `--only NAME ...` picks cases by name (an unknown name is an error), none
    means all. Returns the cases and the names asked for (None: all). The sets are made on one thread."""
    parser.add_argument("--only", nargs="*", help="case names to (re)make")
    only = parser.parse_args(argv).only
    unknown = set(only or ()) - {c.name for c in cases}
    if unknown:
        parser.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    torch.set_num_threads(1)
    return [c for c in cases if not only or c.name in only], only
