"""Work on project folders off the GUI thread, one job at a time, in the order asked (design.md §2). QtCore only.

A job is two functions: `prepare`, run on the GUI thread when the job starts (it takes the snapshot the job
works from: the project as it is then, not as it was when the job was asked for), which returns the `work`
to run on the writer thread (`Background`). Jobs of one folder never overlap, so a writer never sees a folder
another job is changing. A job of a kind already waiting can join it (`coalesce`): a burst of changes makes
one autosave."""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from s2studio.errors import Cancelled, UserError
from s2studio.ui.control import heap
from s2studio.ui.control.background import Background

logger = logging.getLogger(__name__)

Work = Callable[[Background], object]


@dataclass
class Job:
    ticket: int
    kind: str
    prepare: Callable[[], Work | None]
    """GUI thread, when the job starts: the work to do (None: nothing to do any more)."""
    done: Callable[[object, str], object] | None
    """GUI thread, when it ends: (result, error message or "") -> what `finished` reports as the result."""


class WriteQueue(QObject):
    finished = Signal(int, object, str)
    """(ticket, result, error message or "") of a job that ended."""
    progress = Signal(float, str)
    """Of the running job."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._task = Background("project-writer", self, keep_thread=True)
        self._task.done.connect(self._done)
        self._task.progress.connect(self.progress)
        self._waiting: deque[Job] = deque()
        self._running: Job | None = None
        self._tickets = itertools.count(1)

    @property
    def busy(self) -> bool:
        return self._running is not None or bool(self._waiting)

    def submit(self, kind: str, prepare: Callable[[], Work | None], done: Callable[[object, str], object] | None = None,
               coalesce: bool = False) -> int:
        """Queue a job; returns its ticket (that of the waiting job of this `kind` it joined, with `coalesce`)."""
        if coalesce:
            for job in self._waiting:
                if job.kind == kind:
                    return job.ticket
        job = Job(next(self._tickets), kind, prepare, done)
        self._waiting.append(job)
        self._next()
        return job.ticket

    def cancel(self) -> None:
        """Ask the running job to stop (a long copy checks between takes)."""
        self._task.cancel.set()

    def drain(self) -> None:
        """Finish everything now, on this thread (the studio is closing): the running job's thread is waited
        for, and the waiting jobs run here."""
        self._task.wait()
        while self._waiting:
            job = self._start_next()
            if job is None:
                continue
            work = job[1]
            result, error = None, ""
            try:
                result = work(self._task)
            except Cancelled:
                error = "Cancelled."
            except UserError as exc:
                error = str(exc)
            except Exception as exc:  # noqa: BLE001 - reported, never a crash of the studio
                logger.exception("project job %s failed", job[0].kind)
                error = f"{type(exc).__name__}: {exc}"
            self._end(job[0], result, error)

    def _next(self) -> None:
        while self._running is None and self._waiting and not self._task.running:
            started = self._start_next()
            if started is not None:
                self._task.start(started[1])

    def _start_next(self) -> tuple[Job, Work] | None:
        """The next job, prepared (None when it had nothing to do, or could not start: it has ended then)."""
        job = self._waiting.popleft()
        self._running = job
        try:
            work = job.prepare()
        except Exception:  # noqa: BLE001 - a job that cannot even start ends as failed
            logger.exception("project job %s could not start", job.kind)
            self._end(job, None, "The project could not be written (details in the log).")
            return None
        if work is None:
            self._end(job, None, "")
            return None
        return job, work

    def _done(self, result: object, error: str) -> None:
        job = self._running
        if job is not None:
            self._end(job, result, error)
        self._next()

    def _end(self, job: Job, result: object, error: str) -> None:
        self._running = None
        heap.keep()  # the document as written (a save's, an autosave's) lives until the next: no collection walks it
        try:
            if job.done is not None:
                result = job.done(result, error)
        finally:
            self.finished.emit(job.ticket, result, error)
