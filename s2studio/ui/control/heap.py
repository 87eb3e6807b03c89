"""Python's garbage collection in the studio: on the window's thread only, and kept from walking a book's objects
again and again.

Where: the automatic collector runs on whichever thread allocates when a generation's count passes its threshold
(the engine's, the project writer's, a worker's), and the cycles it frees can hold the window's Qt objects, which
Qt destroys safely only on their own thread. In the window's process it is off, and a timer of the window's thread
makes the same decisions from the same counts (`WindowCollections`); the full collections other layers ask for
(`garbage.collect`) run there too. Elsewhere (the command line, the server, tests) Python collects as it always
does.

How much: a full collection walks every object the collector tracks, and every thread waits for it (the GIL):
with a book open that is hundreds of thousands of objects, every time enough new objects have piled up (while
typing, rendering, saving). Objects that survived a full collection are frozen (`gc.freeze`), so later full
collections walk only what came after them. While another project is read they are unfrozen (`reading`): one
collection then frees what the projects before left in cycles, none runs while the project is read, and the
project read is frozen as soon as it is read. Objects no cycle holds (a project) are freed by their reference
counts either way. QtCore only."""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QTimer

from s2studio import garbage

logger = logging.getLogger(__name__)

TICK_MS = 25
"""How often the window's thread looks whether a collection is due: when none is, a look reads the collector's
counts and nothing else, so the window's busiest moments (a book's render) pay next to nothing for it."""

WAIT_S = 2.0
"""How long another thread's `garbage.collect` waits for the window's thread to run it. The window's thread may
itself be waiting for that thread (closing the studio waits for the project writer and the engine): after this
the asking thread goes on, and the collection runs at the window's next look."""


@dataclass
class _Counts:
    """The automatic collector's counters as they would stand had it run, and its sizes, which Python does not
    show, estimated from the collections run here. It collects generation 0 each time its count passes the first
    threshold, the oldest generation that is due instead: 1 once 0 was collected more often than the second, 2
    once 1 was more often than the third and what moved into 2 since the last full collection is at least a
    quarter of what survived that one. A look of the window's thread may find the first threshold passed many
    times over (the engine's and the writer's objects of a few tens of ms): it counts each of those collections,
    so that the older generations are collected as often, for as many new objects, as they would have been."""
    zeros: int = 0
    """collections of generation 0 since the last of generation 1"""
    ones: int = 0
    """collections of generation 1 since the last full collection"""
    middle: int = 0
    """objects in generation 1"""
    pending: int = 0
    """objects moved into generation 2 since the last full collection"""
    long_lived: int = 0
    """objects that survived the last full collection"""


_counts = _Counts()
_reads = 0
_reads_lock = threading.Lock()


def _collected(phase: str, info: dict[str, Any]) -> None:
    global _counts  # noqa: PLW0603
    if phase == "stop" and info.get("generation") == 2:
        if _window is not None:  # (counting what is frozen walks all of it: the survivors are counted before)
            _counts = _Counts(long_lived=len(gc.get_objects(generation=2)))
        gc.freeze()


def install() -> None:
    """Freeze what survives each full collection (once per process)."""
    if _collected not in gc.callbacks:
        gc.callbacks.append(_collected)


class WindowCollections(QObject):
    """The collector run by the window's thread: automatic collection off, a timer that collects what the
    automatic collector would have (generation 0 once its count passes its threshold, 1 and 2 by the same rules,
    from `gc.get_count` against `gc.get_threshold`), so that memory is freed while the window runs, and the
    collections other threads ask for (`garbage.collect`), which they wait for. While a project is read
    (`reading`) it runs none that the counts make due."""

    def __init__(self, parent: QObject | None) -> None:
        super().__init__(parent)
        self._thread = threading.get_ident()
        self._was_enabled = gc.isenabled()
        self._asked = self._done = 0
        self._finished = threading.Condition()
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self.tick)
        gc.disable()
        garbage.route(self.collect)
        self._timer.start()

    def collect(self) -> None:
        """A full collection: at once on the window's thread; from another, at the window's next look, waited
        for (up to `WAIT_S`)."""
        if threading.get_ident() == self._thread:
            gc.collect()
            return
        with self._finished:
            self._asked += 1
            ticket = self._asked
            if not self._finished.wait_for(lambda: self._done >= ticket, WAIT_S):
                logger.info("the window's thread was busy: the collection asked for runs when it is free")

    def tick(self) -> None:
        """The timer's look: the full collection asked for, else the one the counts make due, else nothing."""
        if self._done < self._asked:
            ticket = self._asked
            gc.collect()
            with self._finished:
                self._done = ticket
                self._finished.notify_all()
        elif not _reads:
            _collect_due()

    def stop(self) -> None:
        """Python's collector back as it was (tests; the window's process keeps this one to its end)."""
        global _window  # noqa: PLW0603
        self._timer.stop()
        garbage.route(None)
        if self._was_enabled:
            gc.enable()
        with self._finished:
            self._done = self._asked
            self._finished.notify_all()
        _window = None
        self.deleteLater()


def _collect_due() -> None:
    """The collection the automatic collector would have run by now, if any (`_Counts`; 0 as the first threshold
    turns it off)."""
    young = gc.get_count()[0]
    first, second, third = gc.get_threshold()
    if first == 0 or young <= first:
        return
    oldest = 0
    for _ in range(young // first):
        if _counts.ones > third and 4 * _counts.pending >= _counts.long_lived:
            gc.collect(2)  # (`_collected` starts the counts over)
            return
        if _counts.zeros > second:
            _counts.zeros, _counts.ones, oldest = 0, _counts.ones + 1, 1
        else:
            _counts.zeros += 1
    if oldest == 1:
        _counts.pending += young + _counts.middle - gc.collect(1)
        _counts.middle = 0
    else:
        _counts.middle += young - gc.collect(0)


_window: WindowCollections | None = None


def collect_on_window_thread() -> WindowCollections:
    """The studio's window process, on the window's thread once its application exists: every collection from
    now on runs on this thread, survivors of full ones frozen (`install`). Once per process."""
    global _window  # noqa: PLW0603
    install()
    if _window is None:
        _window = WindowCollections(QCoreApplication.instance())
    return _window


def _pause(reads: int) -> None:
    global _reads  # noqa: PLW0603
    with _reads_lock:
        _reads += reads


@contextlib.contextmanager
def reading() -> Iterator[None]:
    """Around reading a project, on the thread that reads it. Before: what was frozen is collectable again and one
    full collection frees the cycles the projects before left (a project itself, acyclic, is freed by its
    reference counts once another replaces it); in the window's process it runs on the window's thread and the
    read waits for it. During: no collection runs, process-wide: each full collection the read's new objects
    would cause walks everything again while every thread waits, and the read makes few cycles. After:
    collections run again (automatic collection only where it was on) and the project read is frozen at once (no
    collection walks it; a full collection of it on the window's thread, once it is shown, held that thread for a
    long pass with a book open). What cycles the read or another thread left meanwhile are frozen with it and
    freed by the next read's collection."""
    gc.unfreeze()
    garbage.collect()
    enabled = gc.isenabled()
    gc.disable()
    _pause(1)
    try:
        yield
    finally:
        _pause(-1)
        if enabled:
            gc.enable()
        gc.freeze()


def keep() -> None:
    """What was made to show a project just read (its timeline, its lines' ids) is kept as long as it is open:
    frozen now, so that the next full collection (a save's, on the window's thread) does not walk it."""
    gc.freeze()
