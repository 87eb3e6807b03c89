"""Python's full garbage collection, kept from walking a book's objects again and again.

A full collection walks every object the collector tracks, and every thread waits for it (the GIL), the window's
included: with a 10,000-line book open that is ~220,000 objects and ~200 ms of CPU, every time enough new objects
have piled up (while typing, rendering, saving). Objects that survived a full collection are frozen (`gc.freeze`),
so later full collections walk only what came after them. When another project is opened they are unfrozen
(`release`): the next full collection may free the project before (its cycles), then freezes what is left.
Objects no cycle holds are freed by their reference counts either way. QtCore only."""

from __future__ import annotations

import gc
from typing import Any


def _collected(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


def install() -> None:
    """Freeze what survives each full collection (once per process)."""
    if _collected not in gc.callbacks:
        gc.callbacks.append(_collected)


def release() -> None:
    """What was frozen may be garbage now (another project is open): collectable again."""
    gc.unfreeze()
