"""Unlucky disks for a real `s2studio` process: full, read-only, not permitted.

"full" and "read-only" are a small tmpfs mounted over the output folder in a private mount namespace
(`unshare --mount` as root, `unshare --user --map-root-user --mount` otherwise), filled up or remounted
read-only before the commands run; `cli_runner.py` runs them one after another in one process (torch
imported once) and lists what each left there, inside the namespace, where the tmpfs still exists. "denied" is a folder without write permission, with the capabilities that would
override it dropped when the tests run as root. Where none of this is possible, the tests skip.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

KINDS = ("full", "readonly", "denied")
MESSAGES = {"full": "No space left on device on ", "readonly": "read-only file system: ",
            "denied": "permission denied: "}
CHECKED_FIRST = "Not enough free space: this export needs about "
"""What an export says on a disk that is already full: it checks the space before writing anything."""
FILL = "fill"
"""The file that fills the tmpfs: not the command's."""

_SCRIPT = r"""
set -e
target=$1; kind=$2; shift 2
mount -t tmpfs -o size=256k,mode=0777 tmpfs "$target"
for d in $PREPARE; do mkdir -p "$target/$d"; done
if [ "$kind" = full ]; then dd if=/dev/zero of="$target/fill" bs=4k 2>/dev/null || true; fi
if [ "$kind" = readonly ]; then mount -o remount,ro "$target"; fi
exec "$@"
"""


def _namespace() -> list[str]:
    if os.geteuid() == 0:
        return ["unshare", "--mount", "--propagation", "private"]
    return ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]


@functools.cache
def namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.run([*_namespace(), "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$0" && touch "$0/x"', d],
                              capture_output=True)
    return proc.returncode == 0


@functools.cache
def denial_works() -> bool:
    if os.geteuid() != 0:
        return True
    return shutil.which("setpriv") is not None and subprocess.run(
        ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "true"], capture_output=True).returncode == 0


def require(kind: str) -> None:
    if kind == "denied" and not denial_works():
        pytest.skip("cannot drop the capabilities that override permissions here")
    if kind != "denied" and not namespaces_work():
        pytest.skip("no private mount namespace here (unshare --mount is not permitted)")


@dataclass(frozen=True)
class Result:
    args: list[str]
    code: int
    stderr: str
    left: list[str]
    """What the command left in the unlucky folder (relative paths; the filler and `prepare` left out)."""


RUNNER = Path(__file__).with_name("cli_runner.py")


def run_cli(kind: str, folder: Path, commands: list[list[str]], env: dict[str, str],
            prepare: tuple[str, ...] = ()) -> list[Result]:
    """Each of `commands` (`s2studio` arguments) run in one child process with `folder` made unlucky
    (`prepare`: subfolders made before)."""
    require(kind)
    folder.mkdir(parents=True, exist_ok=True)
    results = folder.parent / f"{folder.name}.results.json"
    runner = [sys.executable, str(RUNNER), str(results), str(folder), FILL, *prepare]
    for args in commands:
        runner += ["--", *args]
    if kind == "denied":
        for d in prepare:
            (folder / d).mkdir(parents=True, exist_ok=True)
        dirs = [folder, *[folder / d for d in prepare]]
        for p in dirs:
            p.chmod(0o555)
        prefix = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
        try:
            proc = subprocess.run([*prefix, *runner], env=env, capture_output=True, text=True, timeout=900)
        finally:
            for p in dirs:
                p.chmod(0o755)
    else:
        proc = subprocess.run([*_namespace(), "sh", "-c", _SCRIPT, "sh", str(folder), kind, *runner],
                              env={**env, "PREPARE": " ".join(prepare)}, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and results.exists(), proc.stderr[-3000:]
    return [Result(**r) for r in json.loads(results.read_text(encoding="utf-8"))]
