"""Python's garbage collection in the studio: on the window's thread only, and never a long walk.

Where: the automatic collector runs on whichever thread allocates when a generation's count passes its threshold
(the engine's, the project writer's, a worker's), and the cycles it frees can hold the window's Qt objects, which
Qt destroys safely only on their own thread. In the window's process it is off, and a timer of the window's thread
makes the same decisions from the same counts (`WindowCollections`); the full collections other layers ask for
(`garbage.collect`) run there too. Elsewhere (the command line, the server, tests) Python collects as it always
does.

How long: a collection walks every object of the generations it collects while every thread waits (the GIL), and
the process holds a great many that live to its end (torch's alone take a full collection tens of ms). So what
survives a full collection is frozen (`gc.freeze`) and never walked again: a full collection walks only what came
since the last one, and one runs as soon as the old generation would hold `OLD_MOST` objects (a save's or a
render's new objects, a hundred thousand at a time, are walked in parts of about that many). A project read runs
no collection while it reads and is frozen as soon as it is read; what was made to show it, and the document a
save wrote, are frozen too (`keep`). A project and its takes hold no reference cycle: a frozen one is freed by its
reference counts when another replaces it. Cycles that were frozen while alive stay until the process ends: a
project switch leaves none of a project's (the tests look for its takes), so nothing thaws what is frozen (the
whole of it is one long walk). QtCore only."""

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


OLD_MOST = 20_000
"""The most objects the old generation holds before a full collection walks and freezes them (about 10 ms here):
looked at when a collection of generation 1 is due, which would move the younger ones up."""


@dataclass
class _Counts:
    """The automatic collector's counters as they would stand had it run: it collects generation 0 each time its
    count passes the first threshold, the oldest generation that is due instead (1 once 0 was collected more often
    than the second, 2 once 1 was more often than the third). A look of the window's thread may find the first
    threshold passed many times over (the engine's and the writer's objects of a few tens of ms): it counts each of
    those collections. Python 3.11 also puts a full collection off until a quarter as many objects as survived the
    last one moved up since: with the survivors frozen that is never long, and `OLD_MOST` bounds the walk."""
    zeros: int = 0
    """collections of generation 0 since the last of generation 1"""
    ones: int = 0
    """collections of generation 1 since the last full collection"""


_counts = _Counts()
_paused = 0
_paused_lock = threading.Lock()


def _collected(phase: str, info: dict[str, Any]) -> None:
    global _counts  # noqa: PLW0603
    if phase == "stop" and info.get("generation") == 2:
        _counts = _Counts()
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
        elif not _paused:
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
    turns it off); a full one instead of one of generation 1 that would leave `OLD_MOST` objects in the old."""
    young = gc.get_count()[0]
    first, second, third = gc.get_threshold()
    if first == 0 or young <= first:
        return
    oldest = 0
    for _ in range(young // first):
        if _counts.ones > third:
            gc.collect(2)  # (`_collected` starts the counts over)
            return
        if _counts.zeros > second:
            _counts.zeros, _counts.ones, oldest = 0, _counts.ones + 1, 1
        else:
            _counts.zeros += 1
    if oldest == 1 and young + len(gc.get_objects(generation=1)) + len(gc.get_objects(generation=2)) >= OLD_MOST:
        oldest = 2  # one walk of them all, and frozen, rather than one now and the same again at the next full one
    gc.collect(oldest)


_window: WindowCollections | None = None


def collect_on_window_thread() -> WindowCollections:
    """The studio's window process, on the window's thread once its application exists: every collection from
    now on runs on this thread, survivors of full ones frozen (`install`). Once per process."""
    global _window  # noqa: PLW0603
    install()
    if _window is None:
        _window = WindowCollections(QCoreApplication.instance())
    return _window


def _pause(by: int) -> None:
    global _paused  # noqa: PLW0603
    with _paused_lock:
        _paused += by


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No collection that the counts make due runs while this lasts, process-wide (a full one asked for still
    does): around a project's document being read or written on the writer's thread. A book's document is a few
    hundred thousand new objects that live until it is read or written, without cycles; each collection of the
    window's thread meanwhile would walk them again while the writer waits, and the window with it. After:
    automatic collection on again only where it was on."""
    enabled = gc.isenabled()
    gc.disable()
    _pause(1)
    try:
        yield
    finally:
        _pause(-1)
        if enabled:
            gc.enable()


@contextlib.contextmanager
def reading() -> Iterator[None]:
    """Around reading a project, on the thread that reads it. Before: one full collection of what is not frozen
    (in the window's process on the window's thread; the read waits for it). During: no collection runs,
    process-wide: the read makes few cycles, and each full collection its new objects would cause walks them
    again while every thread waits. After: collections run again (automatic collection only where it was on) and
    the project read is frozen at once (no collection walks it). What cycles another thread left meanwhile are
    frozen with it."""
    garbage.collect()
    try:
        with paused():
            yield
    finally:
        gc.freeze()


def keep() -> None:
    """What was just made lives on (the window built, a project shown, a render's takes, the document as written,
    which the next save compares with): frozen now, so that no full collection walks it."""
    gc.freeze()
