"""Python's full garbage collection, kept from walking a book's objects again and again.

A full collection walks every object the collector tracks, and every thread waits for it (the GIL), the window's
included: with a book open that is hundreds of thousands of objects, every time enough new objects have piled up
(while typing, rendering, saving). Objects that survived a full collection are frozen (`gc.freeze`), so later full
collections walk only what came after them. While another project is read they are unfrozen (`reading`, on the
thread that reads it): one collection there frees what the projects before left in cycles, none runs while the
project is read, and the project read is frozen as soon as it is read. Objects no cycle holds (a project) are freed
by their reference counts either way. QtCore only."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any


def _collected(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


def install() -> None:
    """Freeze what survives each full collection (once per process)."""
    if _collected not in gc.callbacks:
        gc.callbacks.append(_collected)


@contextlib.contextmanager
def reading() -> Iterator[None]:
    """Around reading a project, on the thread that reads it. Before: what was frozen is collectable again and one
    full collection frees the cycles the projects before left (a project itself, acyclic, is freed by its
    reference counts once another replaces it). During: no collection runs, process-wide: each full collection
    the read's new objects would cause walks everything again while every thread waits, and the read makes few
    cycles. After: collections run again and the project read is frozen at once (no collection walks it; a full
    collection of it on the window's thread, once it is shown, held that thread for a long pass with a book
    open). What cycles the read or another thread left meanwhile are frozen with it and freed by the next read's
    collection."""
    gc.unfreeze()
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.freeze()


def keep() -> None:
    """What was made to show a project just read (its timeline, its lines' ids) is kept as long as it is open:
    frozen now, so that the next full collection (a save's, on the window's thread) does not walk it."""
    gc.freeze()
