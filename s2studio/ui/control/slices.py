"""Work over every line of a book done in slices, between which the window keeps answering. QtCore only.

Opening a 10,000-line book asks for work on every line (their states, their takes to check): done at once it
would hold the window's thread for a second. `Slices` does a step per item until a pass has used `BUDGET_S` of
the thread's CPU time, then yields to the event loop (a zero timer) and goes on at the next pass. What the person
does meanwhile (a key, a click, an edit) is handled between two passes, in the order it came; work started again
(`start`) drops what was left of the last run; `finish` does the rest at once (before something reads the end
state, e.g. a save).

All the window's work in slices (these, the script's highlighting, the cast's rows) takes its turns from one
`PassBudget`: one zero timer, one budget a pass shared by every job waiting, so that three jobs at work at once
(a pasted book's highlighting, its cast and its line states) hold a pass no longer than one would; a job the
budget did not reach goes first at the next pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

import shiboken6
from PySide6.QtCore import QObject, QTimer

T = TypeVar("T")

BUDGET_S = 0.008
"""The thread's CPU time one pass may use, all jobs together (a step that starts within it runs to its end)."""

Job = Callable[[float], object]
"""A turn of work: do steps until the thread's CPU time (`time.thread_time`) reaches the given deadline, and
`PassBudget.ask` again while work is left."""


class PassBudget(QObject):
    """The turns of every job in slices on one thread: a job asks for a turn; at the next pass of the event
    loop the jobs waiting run one after another until the pass's `BUDGET_S` is spent (the first always runs)."""

    def __init__(self) -> None:
        super().__init__()
        self._waiting: list[Job] = []
        self._timer = QTimer(self, singleShot=True, interval=0)
        self._timer.timeout.connect(self._pass)

    def ask(self, job: Job, first: bool = False) -> None:
        """A turn for `job` at the next pass (once, however often asked); `first`: before the jobs waiting (what
        answers someone: the first events of a burst from the engine)."""
        if first and job in self._waiting:
            self._waiting.remove(job)
        if job not in self._waiting:
            if first:
                self._waiting.insert(0, job)
            else:
                self._waiting.append(job)
        self._timer.start()

    def drop(self, job: Job) -> None:
        if job in self._waiting:
            self._waiting.remove(job)

    def _pass(self) -> None:
        waiting, self._waiting = self._waiting, []
        until = time.thread_time() + BUDGET_S
        done = 0
        try:
            for job in waiting:
                if done and time.thread_time() >= until:  # the budget is spent: the rest go first at the next pass
                    break
                done += 1
                owner = getattr(job, "__self__", None)
                if not isinstance(owner, QObject) or shiboken6.isValid(owner):  # not a job of a window since closed
                    job(until)
        finally:  # (should a job raise, the jobs after it still get their turns)
            self._waiting[:0] = [j for j in waiting[done:] if j not in self._waiting]
            if self._waiting:
                self._timer.start()


_budgets: dict[int, PassBudget] = {}


def pass_budget() -> PassBudget:
    """The calling thread's `PassBudget` (the window's thread has one; made when first asked for)."""
    key = threading.get_ident()
    if key not in _budgets:
        _budgets[key] = PassBudget()
    return _budgets[key]


class Slices(QObject, Generic[T]):
    def __init__(self, step: Callable[[T], object], done: Callable[[], object] | None = None,
                 parent: QObject | None = None, budget_s: float | None = None) -> None:
        super().__init__(parent)
        self._step, self._done = step, done
        self.budget_s = budget_s
        """CPU seconds a pass may use on this work at most (within the pass's `BUDGET_S`); None: no less."""
        self._items: Iterator[T] | None = None
        self._budget = pass_budget()
        self.passes = 0
        """Passes run since the last `start` (what tests read)."""

    @property
    def busy(self) -> bool:
        return self._items is not None

    def start(self, items: Iterable[T], now: bool = True) -> None:
        """Step through `items` (dropping what was left of the last run); the first pass now or at the next
        turn of the event loop. `items` is read lazily: a generator sees the state of the pass it runs in."""
        self._items, self.passes = iter(items), 0
        self._budget.drop(self._turn)
        if now:
            self._turn(time.thread_time() + BUDGET_S)
        else:
            self._budget.ask(self._turn)

    def stop(self) -> None:
        """Drop what is left (`done` is not called)."""
        self._items = None
        self._budget.drop(self._turn)

    def finish(self) -> None:
        """Do what is left now."""
        if self._items is not None:
            self._budget.drop(self._turn)
            self._run(None)

    def _turn(self, until: float) -> None:
        """A turn from the pass's budget (no later than this job's own `budget_s`, when it has one)."""
        if self.budget_s is not None:
            until = min(until, time.thread_time() + self.budget_s)
        self._run(until)

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
                self._budget.ask(self._turn)
                return
        self._items = None
        if self._done is not None:
            self._done()
