"""The leftovers of killed runs: a process killed while writing (no cleanup runs on SIGKILL) leaves its hidden
temp files and staged folders behind. `clean_stale` removes those that are older than this process and that no
live process holds locked (the one writer, `state/atomic.py`, keeps each locked for as long as it exists)."""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from s2studio.state.disk import OPEN_FLAGS, remove_quietly, try_lock

log = logging.getLogger(__name__)

PROCESS_STARTED = time.time()
"""Files older than this were not made by this process: a leftover is only removed when it is older."""
TEMP_SUFFIX = ".tmp"


def is_stale(path: Path) -> bool:
    """A temp file or folder nobody is writing: older than this process and not locked by a live one."""
    try:
        st = path.lstat()
        if st.st_mtime >= PROCESS_STARTED or stat.S_ISLNK(st.st_mode):
            return False
        fd = os.open(path, os.O_RDONLY | OPEN_FLAGS)
    except OSError:  # (on Windows also a folder: it cannot be opened there, so it is never taken for stale)
        return False
    try:
        return try_lock(fd)
    finally:
        os.close(fd)  # releases the probe's lock


def clean_stale(folder: Path, is_leftover: Callable[[str], bool]) -> list[Path]:
    """Remove the stale entries of `folder` whose name `is_leftover` (see `is_stale`); returns them."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if is_leftover(name) and is_stale(folder / name):
            remove_quietly(folder / name)
            log.info("removed the leftover %s of an interrupted run", folder / name)
            removed.append(folder / name)
    return removed


def is_temp_of(target_name: str) -> Callable[[str], bool]:
    """Matches the temp files the writer (`state/atomic.py`, and its earlier versions: `.<name>.<pid>.tmp`) made
    for `target_name`."""
    prefix = f".{target_name}."
    return lambda name: name.startswith(prefix) and name.endswith(TEMP_SUFFIX) and len(name) > len(prefix) + 4
