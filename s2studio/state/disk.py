"""The file system calls the one writer (`state/atomic.py`) is built from, each with its platform differences
in one place: opening a file of ours (`OPEN_FLAGS`), the mode the user's umask gives a new file, a lock held
for as long as a temp file exists, fsyncing a folder, a rename that waits out a Windows file held open, a
cleanup that never raises, fsyncs side by side (`in_parallel`), and the one line (`WriteError`) every
`OSError` met while writing becomes ("No space left on device on …", "permission denied: …").

Nothing here writes a person's file by itself: only `state/atomic.py` does, through these.

On Windows a virus scanner, an indexer or a media player often holds a file open for a moment, and a rename
over it fails with a sharing violation (Windows errors 5, 32, 33): `replace` retries for up to
`REPLACE_PATIENCE_S`, then fails with one line that says the file is in use (the temp file is removed, the old
file stays). Windows has no `flock` (files are locked with `msvcrt.locking`; an open file cannot be deleted there
anyway), no folder descriptors to fsync (skipped) and no `fchmod` (modes do not apply).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from s2studio.errors import UserError, printable
from s2studio.threads import usable_cores

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt

log = logging.getLogger(__name__)
_T = TypeVar("_T")

IN_USE_WINERRORS = frozenset({5, 32, 33})
"""ERROR_ACCESS_DENIED, ERROR_SHARING_VIOLATION, ERROR_LOCK_VIOLATION: another program holds the file for now."""
REPLACE_PATIENCE_S = 5.0
"""How long a rename is retried while Windows says the file is in use."""
_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)  # Windows has neither flag (nor symlinks a writer could be fooled by)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation
OPEN_FLAGS = _NO_FOLLOW | CLOEXEC | _BINARY
"""For `os.open` of a file of ours: never through a link, not inherited by children, bytes as they are (each
flag where the platform has it)."""


class WriteError(UserError):
    """Writing `path` failed for a reason the person can fix (space, permissions, a read-only disk)."""

    def __init__(self, message: str, path: Path, code: int | None) -> None:
        super().__init__(message)
        self.path = path
        self.errno = code


def write_error(exc: BaseException, path: Path) -> WriteError:
    """One line for an error met while writing `path` (the target, never the temp file)."""
    code = getattr(exc, "errno", None)
    shown = printable(path)
    folder = printable(path if Path(path).is_dir() else Path(path).parent)
    if getattr(exc, "winerror", None) in IN_USE_WINERRORS:
        msg = (f"cannot write {shown}: another program has it open (a virus scanner, an indexer, a player); "
               "close it or wait a moment, then try again")
    elif code in (errno.ENOSPC, errno.EDQUOT):
        msg = f"No space left on device on {folder}; free some space or write somewhere else"
    elif code in (errno.EACCES, errno.EPERM):
        msg = f"permission denied: {shown}; choose a folder you can write to"
    elif code == errno.EROFS:
        msg = f"read-only file system: {shown}; choose a folder on a writable disk"
    elif code == errno.ENOENT:
        msg = f"cannot write {shown}: folder {folder} does not exist"
    elif code == errno.EISDIR:
        msg = f"cannot write {shown}: it is a folder; give a file name"
    elif code == errno.ENOTDIR:
        msg = f"cannot write {shown}: part of that path is a file, not a folder"
    elif code == errno.EFBIG:
        msg = f"cannot write {shown}: the file is too large for that disk"
    elif code == errno.ENAMETOOLONG:
        msg = f"cannot write {shown}: the file name is too long"
    else:
        msg = f"cannot write {shown}: {printable(getattr(exc, 'strerror', None) or exc)}"
    return WriteError(msg, Path(path), code)


# ----------------------------------------------------------------------------- modes and locks

_umask_lock = threading.Lock()


@functools.cache
def umask() -> int:
    """The process umask, read once: nothing in S2 Studio changes it after start (a test that sets one calls
    `umask.cache_clear()`), and a forked child inherits it with this value. Read without changing it where the
    system allows (Linux's /proc): setting it, even for an instant, would race another thread's new file."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _umask_lock:  # elsewhere: set and restore (the only portable way to read it)
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def new_file_mode() -> int:
    """What `open(…, "w")` would give a new file: 0o666 less the umask."""
    return 0o666 & ~umask()


def new_folder_mode() -> int:
    """What `mkdir` would give a new folder: 0o777 less the umask."""
    return 0o777 & ~umask()


def lock(fd: int, wait: bool = True) -> None:
    """Lock the open file `fd` for this process (OSError when another holds it and `wait` is False)."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    else:  # the first byte, from the start (msvcrt locks ranges from the current position)
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)


def try_lock(fd: int) -> bool:
    try:
        lock(fd, wait=False)
    except OSError:
        return False
    return True


def set_mode(fd: int) -> None:
    if hasattr(os, "fchmod"):  # not on Windows before Python 3.13, where modes do not apply
        os.fchmod(fd, new_file_mode())


def fsync_dir(folder: Path) -> None:
    """Make the names in `folder` (a rename, a new file) durable; nothing where folders cannot be opened (Windows:
    its renames are durable once the call returns)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(src: Path, dst: Path, folder: bool = False) -> None:
    """`os.replace(src, dst)` (`os.rename` for a `folder`: never over an existing one), retried for up to
    `REPLACE_PATIENCE_S` while Windows says another program holds one of them; then the last error is raised."""
    move = os.rename if folder else os.replace
    deadline = time.monotonic() + REPLACE_PATIENCE_S
    pause = 0.01
    while True:
        try:
            move(src, dst)
            return
        except PermissionError as exc:
            if getattr(exc, "winerror", None) not in IN_USE_WINERRORS or time.monotonic() >= deadline:
                raise
            log.info("%s is in use (Windows error %s); trying again", dst, exc.winerror)
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


def remove_quietly(path: Path) -> None:
    """Remove a file, a symlink or a folder (never following a link); never raises: cleanup must not hide
    the error that made it necessary."""
    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
    except OSError as exc:
        log.warning("could not remove %s: %s", path, exc)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


SYNC_THREADS = 16
"""fsyncs run side by side: a file system commits concurrent ones together (a set of 100 files is about ten
times faster to make durable than one file after the other)."""


CPU_THREADS = max(1, usable_cores() - 1)
"""Work that keeps a core busy (encoding audio) runs on one thread fewer than the cores, so that the window's thread
keeps one: sixteen encoders at once, each as entitled to a core as the window's thread, kept it waiting for one
while a book's takes were written."""

_pools: dict[bool, ThreadPoolExecutor] = {}
_pool_lock = threading.Lock()


def _forget_pools() -> None:  # a forked child has none of its parent's threads
    _pools.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def in_parallel(fn: Callable[[_T], object], items: Iterable[_T], cpu: bool = False) -> None:
    """`fn(item)` for every item, on a pool of threads when there are several: `SYNC_THREADS` for calls that
    wait on the disk, `CPU_THREADS` for C code that lets go of the GIL and keeps a core busy (`cpu`; on this
    thread where that is one); the first exception is raised once all are done."""
    items = list(items)
    threads = CPU_THREADS if cpu else SYNC_THREADS
    if len(items) <= 1 or threads <= 1:
        for item in items:
            fn(item)
        return
    with _pool_lock:
        pool = _pools.get(cpu)
        if pool is None:
            pool = _pools[cpu] = ThreadPoolExecutor(threads, thread_name_prefix="s2studio-cpu" if cpu else "s2studio-sync")
    futures = [pool.submit(fn, item) for item in items]
    errors = [f.exception() for f in futures]
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first

