"""The engine thread (design.md §2): one long-lived QThread owns the engine, and therefore torch.

`EngineWorker` lives on that thread and iterates the engine's generators. `EngineHost` lives on the GUI
thread: it starts the thread once, hands jobs over through a queued signal, and cancels them by setting a
`threading.Event` directly (a queued "cancel" slot would never run while the worker is inside a generator).
QtCore only: no widgets, no torch here.

Events cross through an outbox, not one queued signal each: the worker appends to it and says so once; the
host takes them out on the GUI thread for at most `SLICE_S` at a time, emitting one signal per event, and
lets the window paint and take keys before it goes on. A queued signal per event would let a fast engine
(20 events a line, a line every few milliseconds) bury the window under events it handles in one pass of
the event loop. When `OUTBOX_LIMIT` events wait, the worker waits for room: the engine runs no further
ahead of the window than that.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from PySide6.QtCore import QObject, Qt, QThread, QTimer, Signal, Slot

from s2studio.engine import api
from s2studio.errors import UserError
from s2studio.worker.devices import find_devices

logger = logging.getLogger(__name__)

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
    api.ClipEncoded: "clip_encoded",
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
    clip_encoded = Signal(object)
    devices_found = Signal(object)
    """`api.DevicesFound`: the devices this computer has for the model (and why not the others)."""
    job_finished = Signal(object)
    """`api.JobFinished`: the job ended (possibly cancelled); always the last event of a job that did not fail."""
    job_failed = Signal(object)
    """`api.JobFailed`: one line for the user; the traceback went to the log."""


class EngineWorker(QObject):
    """Adapts an `Engine` to the outbox the host empties (module docstring)."""

    events_waiting = Signal()
    """Events were put in `outbox` while the host was not already told (queued to the GUI thread)."""

    def __init__(self, factory: EngineFactory) -> None:
        super().__init__()
        self._factory = factory
        self._engine: Any = None
        self.outbox: deque[api.Event] = deque()
        self.room = threading.Condition()
        """Guards `outbox` and `told`; notified when the host takes events out."""
        self.told = False
        """An `events_waiting` is on its way, or the host is still emptying the outbox."""

    def _get_engine(self) -> Any:
        if self._engine is None:
            self._engine = self._factory()
        return self._engine

    @Slot(str, object, object)
    def run_job(self, kind: str, request: Any, cancel: threading.Event) -> None:
        """Run one job to its end. Never raises: any exception becomes `JobFailed`."""
        job_id = request.job_id
        finished = False

        def emit(event: api.Event) -> None:
            self.put(event, cancel)

        try:
            engine = self._get_engine()
            events: Iterator[api.Event] = (find_devices(engine, request, cancel) if kind == "devices"
                                           else getattr(engine, kind)(request, cancel))
            for event in events:
                if isinstance(event, (api.JobFinished, api.JobFailed)):
                    finished = True
                emit(event)
            if not finished:  # an engine that forgets its last event must not leave the GUI busy
                emit(api.JobFinished(job_id, cancelled=cancel.is_set()))
        except UserError as exc:
            emit(api.JobFailed(job_id, str(exc)))
        except ModuleNotFoundError as exc:
            logger.error("engine unavailable:\n%s", traceback.format_exc())
            emit(api.JobFailed(job_id, f"The speech engine is not available ({exc.name} is missing); "
                                       "start with S2STUDIO_ENGINE=fake to try the studio."))
        except MemoryError:
            emit(api.JobFailed(job_id, "Out of memory: close other programs or choose a smaller precision."))
        except Exception as exc:  # noqa: BLE001 - the worker must survive every bug
            logger.error("job %s failed:\n%s", job_id, traceback.format_exc())
            emit(api.JobFailed(job_id, f"Unexpected error: {type(exc).__name__}: {exc} (details in the log)"))

    def put(self, event: api.Event, cancel: threading.Event) -> None:
        """Into the outbox, waiting for room while `OUTBOX_LIMIT` events wait (not once cancelled: a
        cancelled job's last events never wait for a window that may be closing)."""
        with self.room:
            while len(self.outbox) >= OUTBOX_LIMIT and not cancel.is_set():
                self.room.wait(0.05)
            self.outbox.append(event)
            tell, self.told = not self.told, True
        if tell:
            self.events_waiting.emit()


class EngineHost(EngineSignals):
    """Owns the engine thread. Re-emits the worker's signals (queued, so slots run on the GUI thread)."""

    _submit = Signal(str, object, object)
    """Private: hands a job to the worker on the engine thread."""

    def __init__(self, factory: EngineFactory, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thread = QThread()
        self._thread.setObjectName("engine")
        # Python names a thread it did not start "Dummy-N": the log (and a traceback) says "engine" instead
        self._thread.started.connect(name_python_thread, Qt.ConnectionType.DirectConnection)
        self.worker = EngineWorker(factory)
        self.worker.moveToThread(self._thread)
        self._submit.connect(self.worker.run_job)
        self.worker.events_waiting.connect(self._deliver)
        self.job_finished.connect(self._forget)
        self.job_failed.connect(self._forget)
        self._cancels: dict[str, threading.Event] = {}
        self._counter = 0
        self._thread.start()

    def new_job_id(self, prefix: str = "job") -> str:
        self._counter += 1
        return f"{prefix}-{self._counter}"

    @property
    def busy(self) -> bool:
        """True while any job is queued or running."""
        return bool(self._cancels)

    def load(self, request: api.LoadRequest) -> str:
        return self._start("load", request)

    def encode(self, request: api.EncodeRequest) -> str:
        return self._start("encode", request)

    def generate(self, request: api.SynthesisRequest) -> str:
        return self._start("generate", request)

    def find_devices(self) -> str:
        """Ask the engine thread which devices this computer has (answered by `devices_found`)."""
        return self._start("devices", api.DevicesRequest(self.new_job_id("devices")))

    def cancel(self, job_id: str | None = None) -> None:
        """Cancel one job, or every queued and running job. Safe to call at any time."""
        for jid, event in list(self._cancels.items()):
            if job_id is None or jid == job_id:
                event.set()

    def shutdown(self) -> None:
        """Cancel everything and stop the thread (the only place the GUI thread waits)."""
        self.cancel()
        self._thread.quit()
        self._thread.wait()

    def _start(self, kind: str, request: Any) -> str:
        cancel = threading.Event()
        self._cancels[request.job_id] = cancel
        self._submit.emit(kind, request, cancel)
        return request.job_id

    @Slot()
    def _deliver(self) -> None:
        """Emit the waiting events for up to `SLICE_S`, then let the event loop run before the rest."""
        worker, deadline = self.worker, time.perf_counter() + SLICE_S
        while True:
            with worker.room:
                if not worker.outbox:
                    worker.told = False
                    return
                event = worker.outbox.popleft()
                worker.room.notify()
            getattr(self, _SIGNAL_OF[type(event)]).emit(event)
            if time.perf_counter() > deadline:
                QTimer.singleShot(0, self._deliver)
                return

    @Slot(object)
    def _forget(self, event: api.JobFinished | api.JobFailed) -> None:
        self._cancels.pop(event.job_id, None)
