"""Work over every line of a book done in slices, between which the window keeps answering. QtCore only.

Opening a 10,000-line book asks for work on every line (their states, their takes to check): done at once it
would hold the window's thread for a second. `Slices` does a step per item until a pass has used `BUDGET_S` of
the thread's CPU time, then yields to the event loop (a zero timer) and goes on at the next pass. What the person
does meanwhile (a key, a click, an edit) is handled between two passes, in the order it came; work started again
(`start`) drops what was left of the last run; `finish` does the rest at once (before something reads the end
state, e.g. a save).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from PySide6.QtCore import QObject, QTimer

T = TypeVar("T")

BUDGET_S = 0.008
"""The thread's CPU time one pass may use (a step that starts within it runs to its end)."""


class Slices(QObject, Generic[T]):
    def __init__(self, step: Callable[[T], object], done: Callable[[], object] | None = None,
                 parent: QObject | None = None, budget_s: float | None = None) -> None:
        super().__init__(parent)
        self._step, self._done = step, done
        self.budget_s = budget_s
        """CPU seconds a pass may use; None: the module's `BUDGET_S`."""
        self._items: Iterator[T] | None = None
        self._timer = QTimer(self, singleShot=True, interval=0)
        self._timer.timeout.connect(self._pass)
        self.passes = 0
        """Passes run since the last `start` (what tests read)."""

    @property
    def busy(self) -> bool:
        return self._items is not None

    def start(self, items: Iterable[T], now: bool = True) -> None:
        """Step through `items` (dropping what was left of the last run); the first pass now or at the next
        turn of the event loop. `items` is read lazily: a generator sees the state of the pass it runs in."""
        self._items, self.passes = iter(items), 0
        self._timer.stop()
        if now:
            self._pass()
        else:
            self._timer.start()

    def stop(self) -> None:
        """Drop what is left (`done` is not called)."""
        self._items = None
        self._timer.stop()

    def finish(self) -> None:
        """Do what is left now."""
        if self._items is not None:
            self._timer.stop()
            self._run(None)

    def _pass(self) -> None:
        budget = BUDGET_S if self.budget_s is None else self.budget_s
        self._run(time.thread_time() + budget)

    def _run(self, until: float | None) -> None:
        items = self._items
        if items is None:
            return
        self.passes += 1
        for item in items:
            self._step(item)
            if self._items is not items:  # a step started the work again, or stopped it
                return
            if until is not None and time.thread_time() >= until:
                self._timer.start()
                return
        self._items = None
        if self._done is not None:
            self._done()
