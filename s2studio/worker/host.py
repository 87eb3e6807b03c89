"""The engine thread (design.md §2): one long-lived QThread runs the scheduler's loop (engine/scheduler.py), which
owns the engine, and therefore torch.

`EngineHost` lives on the GUI thread: it starts the thread once, submits jobs to the scheduler (from any thread),
and cancels them by setting their `threading.Event` directly. `EngineWorker` is the thin adapter between the two:
each job's events go into its outbox. The scheduler runs many jobs at once (streams of one batch), each job's
events in order and under its `job_id`; the window drops events of jobs it no longer tracks.
QtCore only: no widgets, no torch here.

Events cross through an outbox, not one queued signal each: the worker appends to it and says so once; the host
takes them out on the GUI thread for at most `SLICE_S` at a time (or in the turns of the window's budget a pass,
`deliver_in_turns`), emitting one signal per event, and lets the window paint and take keys before it goes on. A
queued signal per event would let a fast engine (20 events a line, a line every few milliseconds) bury the window
under events it handles in one pass of the event loop. When `OUTBOX_LIMIT` events wait, the worker waits for room:
the engine runs no further ahead of the window than that. While the window holds the events (`hold`: more finished
takes wait in memory for their files than it may keep) they wait there, and the engine with them. A line's progress
that comes while its last one still waits replaces it there (only the latest says anything), and a line's audio that
follows its audio still waiting is joined to it (one chunk, taking no room): a window that lags is handed one event
for what it would otherwise take in many, and in a book's render the window's thread decides the pace.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, QThread, QTimer, Signal, Slot

from s2studio import priority
from s2studio.engine import api
from s2studio.engine.scheduler import Job, Scheduler, Work, synthesis
from s2studio.worker.devices import find_devices
from s2studio.worker.finished_take import FinishedTake, with_sound

EngineFactory = Callable[[], Any]
"""Builds the engine; called on the engine thread, so an import of torch happens there."""
SLICE_S = 0.015
"""Longest the host hands events to the window in one go before the event loop runs again."""
OUTBOX_LIMIT = 256
"""Events that may wait for the window before the engine waits for room."""

_SIGNAL_OF: dict[type, str] = {
    api.ModelLoading: "model_loading",
    api.ModelReady: "model_ready",
    api.JobStarted: "job_started",
    api.LineStarted: "line_started",
    api.Progress: "progress",
    api.AudioChunk: "audio_chunk",
    api.LineFinished: "line_finished",
    FinishedTake: "line_finished",
    api.DevicesFound: "devices_found",
    api.JobFinished: "job_finished",
    api.JobFailed: "job_failed",
}


def name_python_thread() -> None:
    """Runs first on the engine thread."""
    threading.current_thread().name = "engine"


class EngineSignals(QObject):
    """The engine's events as Qt signals, one per event type (`_SIGNAL_OF`); each carries the event dataclass,
    emitted on the GUI thread."""

    model_loading = Signal(object)
    """`api.ModelLoading`: progress of a load, 0..1."""
    model_ready = Signal(object)
    """`api.ModelReady`: the model is loaded; carries `ModelInfo`."""
    job_started = Signal(object)
    line_started = Signal(object)
    progress = Signal(object)
    audio_chunk = Signal(object)
    """`api.AudioChunk`: freshly allocated float32 samples the receiver owns."""
    line_finished = Signal(object)
    devices_found = Signal(object)
    """`api.DevicesFound`: the devices this computer has for the model (and why not the others)."""
    job_finished = Signal(object)
    """`api.JobFinished`: the job ended (possibly cancelled); always the last event of a job that did not fail."""
    job_failed = Signal(object)
    """`api.JobFailed`: one line for the user; the traceback went to the log."""


class _Latest:
    """A line's progress waiting in the outbox, replaced in place by a later one of the same line."""

    __slots__ = ("event",)

    def __init__(self, event: api.Progress) -> None:
        self.event = event


class _Joined:
    """A line's audio waiting in the outbox as chunks that follow one another, handed over as one chunk."""

    __slots__ = ("first", "parts", "end")

    def __init__(self, first: api.AudioChunk) -> None:
        self.first = first
        self.parts = [first.samples]
        self.end = first.start_sample + len(first.samples)

    @property
    def job_id(self) -> str:
        return self.first.job_id

    def follows(self, chunk: api.AudioChunk) -> bool:
        """`chunk` is the next audio of the same take of the same line."""
        return chunk.line_id == self.first.line_id and chunk.start_sample == self.end

    def add(self, chunk: api.AudioChunk) -> None:
        self.parts.append(chunk.samples)
        self.end += len(chunk.samples)

    def event(self) -> api.AudioChunk:
        if len(self.parts) == 1:
            return self.first
        return dataclasses.replace(self.first, samples=np.concatenate(self.parts))


_Item = api.Event | _Latest | _Joined


def _job_of(item: _Item) -> str:
    return item.event.job_id if isinstance(item, _Latest) else item.job_id


class EngineWorker(QObject):
    """The thin adapter from the scheduler's jobs to the window: each job's events go into the outbox the host
    empties (module docstring). The scheduler's loop runs on the engine thread (`EngineThread`)."""

    events_waiting = Signal()
    """Events were put in `outbox` while the host was not already told (queued to the GUI thread)."""

    def __init__(self, factory: EngineFactory) -> None:
        super().__init__()
        self.scheduler = Scheduler(factory)
        self.outbox: deque[_Item] = deque()
        self._progress: dict[str, _Latest] = {}
        """Per job, its progress waiting in the outbox (until the host takes it)."""
        self._joined: dict[str, _Joined] = {}
        """Per job, its audio waiting in the outbox after the job's last other event (not progress): where the
        job's next chunk joins when it follows that audio."""
        self.room = threading.Condition()
        """Guards `outbox` and `told`; notified when the host takes events out."""
        self.told = False
        """An `events_waiting` is on its way, or the host is still emptying the outbox."""

    def submit(self, job_id: str, work: Work, cancel: threading.Event, exclusive: bool = False) -> None:
        """Queue a job on the scheduler; its events come back through the outbox (from the engine thread)."""
        self.scheduler.submit(Job(job_id, work, lambda event: self.put(event, cancel), cancel, exclusive))

    def put(self, event: api.Event, cancel: threading.Event) -> None:
        """Into the outbox, waiting for room while `OUTBOX_LIMIT` events wait (not once cancelled: a
        cancelled job's last events never wait for a window that may be closing). A finished line's take sound is
        made here, off the window's thread (`finished_take`)."""
        if type(event) is api.LineFinished:
            event = with_sound(event)
        with self.room:
            progress, chunk = isinstance(event, api.Progress), type(event) is api.AudioChunk
            if progress and (waiting := self._progress.get(event.job_id)) and waiting.event.line_id == event.line_id:
                waiting.event = event
                return
            if chunk and (joined := self._joined.get(event.job_id)) is not None and joined.follows(event):
                joined.add(event)
                return
            while len(self.outbox) >= OUTBOX_LIMIT and not cancel.is_set():
                self.room.wait(0.05)
            if progress:
                latest = self._progress[event.job_id] = _Latest(event)
                self.outbox.append(latest)
            elif chunk:
                joined = self._joined[event.job_id] = _Joined(event)
                self.outbox.append(joined)
            else:  # the job's later audio never joins what came before this
                self._joined.pop(event.job_id, None)
                self.outbox.append(event)
            tell, self.told = not self.told or cancel.is_set(), True  # a cancelled job's events pass a hold
        if tell:
            self.events_waiting.emit()

    def take(self, held: Callable[[str], bool] | None = None) -> api.Event | None:
        """The next event for the window (None when none waits: then the next `put` tells the host again).
        `held(job_id)`: that job's events stay in the outbox, and the next of another job is taken (each job's
        events still in order). The caller holds `room`."""
        if not self.outbox:
            self.told = False
            return None
        at = 0 if held is None else next((i for i, item in enumerate(self.outbox) if not held(_job_of(item))), -1)
        if at < 0:
            return None
        item = self.outbox[at]
        del self.outbox[at]
        self.room.notify()
        if isinstance(item, _Latest):
            if self._progress.get(item.event.job_id) is item:
                del self._progress[item.event.job_id]
            return item.event
        if isinstance(item, _Joined):
            if self._joined.get(item.job_id) is item:
                del self._joined[item.job_id]
            return item.event()
        return item


class EngineThread(QThread):
    """The engine thread: the scheduler's loop, until `stop`."""

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__()
        self.setObjectName("engine")
        self.scheduler = scheduler

    def run(self) -> None:  # noqa: D102 - QThread's
        name_python_thread()
        priority.background()  # (the engine's own threads, started from this one, too)
        self.scheduler.run()


class EngineHost(EngineSignals):
    """Owns the engine thread. Re-emits the worker's signals (queued, so slots run on the GUI thread)."""

    def __init__(self, factory: EngineFactory, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.worker = EngineWorker(factory)
        self._thread = EngineThread(self.worker.scheduler)
        self.worker.events_waiting.connect(self._deliver)
        self.job_finished.connect(self._forget)
        self.job_failed.connect(self._forget)
        self._cancels: dict[str, threading.Event] = {}
        self._counter = 0
        self.held = False
        """The events wait in the outbox (`hold`)."""
        self._ask: Callable[[Callable[[float], object], bool], None] | None = None
        self._thread.start()

    def new_job_id(self, prefix: str = "job") -> str:
        self._counter += 1
        return f"{prefix}-{self._counter}"

    @property
    def busy(self) -> bool:
        """True while any job is queued or running."""
        return bool(self._cancels)

    def load(self, request: api.LoadRequest) -> str:
        """Load a model: it waits for the running jobs to end, and the jobs after it wait for it."""
        return self.submit(request.job_id, lambda engine, _job, cancel: engine.load(request, cancel), exclusive=True)

    def generate(self, request: api.SynthesisRequest) -> str:
        return self.submit(request.job_id, lambda engine, _job, cancel: synthesis(engine, request, cancel))

    def find_devices(self) -> str:
        """Ask the engine thread which devices this computer has (answered by `devices_found`)."""
        request = api.DevicesRequest(self.new_job_id("devices"))
        return self.submit(request.job_id, lambda engine, _job, cancel: find_devices(engine, request, cancel))

    def submit(self, job_id: str, work: Work, exclusive: bool = False) -> str:
        """Run `work(engine, job_id, cancel)` on the engine thread (the scheduler's one loop): its events come back
        as this host's signals. `exclusive`: it runs alone (a load)."""
        cancel = threading.Event()
        self._cancels[job_id] = cancel
        self.worker.submit(job_id, work, cancel, exclusive)
        return job_id

    def cancel(self, job_id: str | None = None) -> None:
        """Cancel one job, or every queued and running job. Safe to call at any time."""
        for jid, event in list(self._cancels.items()):
            if job_id is None or jid == job_id:
                event.set()
        self.worker.scheduler.cancel(job_id)
        if self.held:  # its events waiting in the outbox go out now (`hold`)
            QTimer.singleShot(0, self._deliver)

    def shutdown(self) -> None:
        """Cancel everything and stop the thread (the only place the GUI thread waits)."""
        self.cancel()
        self.worker.scheduler.stop()
        self._thread.wait()

    @Slot(bool)
    def hold(self, held: bool) -> None:
        """Keep the engine's events in the outbox (the engine waits once `OUTBOX_LIMIT` wait there), or hand
        them on again. A job cancelled meanwhile is not held: it ends at once on the engine thread (its events never
        wait for room) and its events, takes finished before the cancel among them, are handed over, so that a
        Stop shows at once; the other jobs' events go on waiting."""
        self.held = held
        if not held:
            QTimer.singleShot(0, self._deliver)

    def deliver_in_turns(self, ask: Callable[[Callable[[float], object], bool], None]) -> None:
        """Hand the events over in the turns `ask` gives: `ask(turn, first)` calls `turn(until)` at a later pass of
        the event loop, to emit events until the thread's CPU time (`time.thread_time`) reaches `until` (the window's
        pass budget, `ui.control.slices`, which its other work in slices shares: the work the events cause and the
        rest of a pass then add up to one budget, not one each); `first` (events came into an empty outbox): before
        the other work waiting, so that a line's start is seen at once; the rest of a burst takes its turn."""
        self._ask = ask

    @Slot()
    def _deliver(self) -> None:
        """Emit the waiting events for up to `SLICE_S` (or in the next turn), then let the event loop run before
        the rest."""
        if self._ask is not None and not self._thread.isFinished():  # (a host shut down: its last events at once)
            self._ask(self._turn, True)
        else:
            self._hand_over(time.perf_counter, time.perf_counter() + SLICE_S)

    def _turn(self, until: float) -> None:
        self._hand_over(time.thread_time, min(until, time.thread_time() + SLICE_S))

    def _hand_over(self, clock: Callable[[], float], deadline: float) -> None:
        worker = self.worker
        while True:
            with worker.room:
                event = worker.take(self._waits if self.held else None)
            if event is None:
                return
            getattr(self, _SIGNAL_OF[type(event)]).emit(event)
            if clock() > deadline:
                if self._ask is not None:
                    self._ask(self._turn, False)
                else:
                    QTimer.singleShot(0, self._deliver)
                return

    def _waits(self, job_id: str) -> bool:
        """While the events are held: those of a job not cancelled wait."""
        cancel = self._cancels.get(job_id)
        return cancel is None or not cancel.is_set()

    @Slot(object)
    def _forget(self, event: api.JobFinished | api.JobFailed) -> None:
        self._cancels.pop(event.job_id, None)
