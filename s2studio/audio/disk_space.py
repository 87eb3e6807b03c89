"""Free disk space, checked before an export writes anything: a book's WAV stems can need tens of gigabytes,
and finding out at the last stem after an hour of work is the worst moment to learn it.

The space is counted per disk (files bound for two folders on one disk add up), at the nearest folder
that exists (a stems folder not made yet is on its parent's disk). A file being replaced still counts in
full: the new one is written beside it and renamed over it only when it is complete.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from s2studio.errors import UserError, printable

MARGIN = 0.02
"""Left free beyond the estimate, as a fraction of it: the file system's own bookkeeping (a tiny export on a
tiny disk is not refused for a fixed margin larger than itself)."""


def human_size(n: float) -> str:
    """Bytes as a person reads them: 850 MB, 12.3 GB."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{int(n)} bytes"


def _existing(folder: Path) -> Path:
    folder = Path(folder).expanduser().absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def shortfall(needs: Mapping[Path, int]) -> tuple[Path, int, int] | None:
    """(folder, bytes needed on its disk, bytes free there) for the first disk that lacks room for the files
    that `needs` plans (folder -> bytes), or None when every disk has room."""
    disks: dict[int, tuple[Path, int]] = {}
    for folder, size in needs.items():
        where = _existing(folder)
        try:
            device = os.stat(where).st_dev
        except OSError:
            continue  # a folder that cannot be read: writing it will say why
        first, total = disks.get(device, (where, 0))
        disks[device] = (first, total + size)
    for folder, need in disks.values():
        try:
            free = shutil.disk_usage(folder).free
        except OSError:
            continue
        need = round(need * (1 + MARGIN))
        if need > free:
            return folder, need, free
    return None


def check_free_space(needs: Mapping[Path, int], hint: str = "") -> None:
    """Raise a `UserError` saying how much is needed and how much is free when a disk lacks room."""
    short = shortfall(needs)
    if short is None:
        return
    folder, need, free = short
    raise UserError(f"Not enough free space: this export needs about {human_size(need)} on the disk of "
                    f"{printable(folder)}, and {human_size(free)} is free there; free some space or choose another "
                    f"folder{hint}. Nothing was written.")
