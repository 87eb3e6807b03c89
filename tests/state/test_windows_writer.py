"""The one writer under Windows' rules, simulated here: renames that meet a sharing violation (a virus scanner or an
indexer holding the file) are retried for a bounded time, then fail with one line and leave the old file whole;
no folder fsync, no fchmod, no flock; and no module imports anything POSIX-only."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from s2studio.state import atomic, disk


def sharing_violation(winerror: int) -> PermissionError:
    """What Python raises on Windows when another program holds the file (errno EACCES, the Windows code beside)."""
    exc = PermissionError(errno.EACCES, "The process cannot access the file because it is being used by another "
                                        "process")
    exc.winerror = winerror  # type: ignore[attr-defined]
    return exc


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("winerror", [5, 32, 33])
def test_a_rename_held_up_for_a_moment_is_retried(tmp_path, monkeypatch, winerror):
    target = tmp_path / "take.wav"
    target.write_bytes(b"old")
    real, calls = os.replace, []

    def held_twice(src, dst):
        calls.append(dst)
        if len(calls) <= 2:
            raise sharing_violation(winerror)
        real(src, dst)

    monkeypatch.setattr(os, "replace", held_twice)
    atomic.write_bytes_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert len(calls) == 3
    assert leftovers(tmp_path) == []


def test_a_file_held_for_good_fails_in_bounded_time_with_one_line_and_the_old_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "mix.wav"
    target.write_bytes(b"the old mix")
    calls = []

    def always_held(src, dst):
        calls.append(dst)
        raise sharing_violation(32)

    monkeypatch.setattr(os, "replace", always_held)
    monkeypatch.setattr(disk, "REPLACE_PATIENCE_S", 0.3)
    started = time.monotonic()
    with pytest.raises(disk.WriteError) as caught:
        atomic.write_bytes_atomic(target, b"the new mix")
    assert time.monotonic() - started < 3.0
    assert len(calls) > 2  # it did retry
    message = str(caught.value)
    assert "\n" not in message and "mix.wav" in message and "another program has it open" in message
    assert target.read_bytes() == b"the old mix"
    assert leftovers(tmp_path) == []  # no half file, no temp file


def test_a_permission_error_that_is_not_a_sharing_violation_is_not_retried(tmp_path, monkeypatch):
    calls = []

    def denied(src, dst):
        calls.append(dst)
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "replace", denied)
    with pytest.raises(disk.WriteError, match="permission denied"):
        atomic.write_bytes_atomic(tmp_path / "a.txt", b"x")
    assert len(calls) == 1
    assert leftovers(tmp_path) == []


def test_a_staged_folder_is_published_once_the_file_inside_is_let_go(tmp_path, monkeypatch):
    real, calls = os.rename, []

    def held_once(src, dst):
        calls.append(dst)
        if len(calls) == 1:
            raise sharing_violation(5)
        real(src, dst)

    with atomic.staged_folder(tmp_path, ".voice-") as folder:
        atomic.write_durable(folder / "voice.json", b"{}")
        monkeypatch.setattr(os, "rename", held_once)
        atomic.publish_folder(folder, tmp_path / "Alice")
    assert (tmp_path / "Alice" / "voice.json").read_bytes() == b"{}"
    assert len(calls) == 2


def test_without_folder_descriptors_nothing_opens_a_folder(tmp_path, monkeypatch):
    """Windows cannot open a folder: the writer skips the folder fsync and the folder lock there."""
    monkeypatch.delattr(os, "O_DIRECTORY")
    real_open = os.open

    def files_only(path, flags, *args):
        assert not Path(path).is_dir(), f"opened the folder {path}"
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", files_only)
    disk.fsync_dir(tmp_path)
    atomic.write_text_atomic(tmp_path / "a.txt", "a")
    with atomic.staged_folder(tmp_path, ".voice-") as folder:
        atomic.write_durable(folder / "clip.flac", b"flac")
        atomic.publish_folder(folder, tmp_path / "Bob")
    assert (tmp_path / "a.txt").read_text() == "a"
    assert (tmp_path / "Bob" / "clip.flac").read_bytes() == b"flac"


WINDOWS_LIKE = r"""
import fcntl as real_fcntl, importlib, os, pkgutil, sys, types
from pathlib import Path
import ctypes.util, getpass, subprocess  # the standard library's own choice of platform, made before the fakes

# what Windows' Python lacks: these modules, these os functions and flags
for name in ("fcntl", "resource", "pwd", "grp", "termios"):
    sys.modules[name] = None
for name in ("fchmod", "getuid", "geteuid", "sched_getaffinity", "getloadavg", "sysconf", "O_DIRECTORY",
             "O_NOFOLLOW", "O_CLOEXEC", "fork", "setsid", "killpg"):
    if hasattr(os, name):
        delattr(os, name)
# and what it has instead: msvcrt's byte-range locks (here over fcntl's, saved above)
msvcrt = types.ModuleType("msvcrt")
msvcrt.LK_NBLCK = 2
def locking(fd, mode, nbytes):
    real_fcntl.lockf(fd, real_fcntl.LOCK_EX | real_fcntl.LOCK_NB, nbytes, 0, os.SEEK_CUR)
msvcrt.locking = locking
sys.modules["msvcrt"] = msvcrt

import s2studio
failed = []
for info in pkgutil.walk_packages(s2studio.__path__, "s2studio."):
    if info.name.endswith("__main__") or "._cpu_" in info.name:  # runs the command line; the kernels, one a process
        continue
    try:
        importlib.import_module(info.name)
    except ImportError as exc:
        if exc.name not in ("fastapi", "uvicorn", "faster_whisper", "huggingface_hub"):  # optional extras
            failed.append(f"{info.name}: {exc!r}")
    except Exception as exc:
        failed.append(f"{info.name}: {exc!r}")
assert not failed, "\n".join(failed)

from s2studio.state import atomic, disk
from s2studio.threads import free_cores
from s2studio.engine.s2.memory import available_ram
assert disk.fcntl is None and free_cores() >= 1
available_ram(Path("/nonexistent"))
folder = Path(sys.argv[1])
with atomic.OutputSet() as out:
    out.add_text(folder / "a.srt", "1")
    out.add_text(folder / "b.vtt", "2")
with atomic.staged_folder(folder, ".voice-") as staged:
    atomic.write_durable(staged / "voice.json", b"{}")
    atomic.publish_folder(staged, folder / "Alice")
assert sorted(p.name for p in folder.iterdir()) == ["Alice", "a.srt", "b.vtt"], list(folder.iterdir())
print("windows-like: ok")
"""


def test_no_module_needs_a_posix_only_call_and_the_writer_works_without_them(tmp_path):
    done = subprocess.run([sys.executable, "-c", WINDOWS_LIKE, str(tmp_path)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0, done.stderr[-4000:]
    assert "windows-like: ok" in done.stdout
