"""One engine, one thread, one bounded FIFO queue of jobs (design.md §2 and §10).

Every engine call of the server happens on the runner's thread, as every engine call of the studio happens
on its engine QThread: the model is loaded there at start, and each HTTP request becomes a `Job` whose work
(encode its references, then generate) runs there when its turn comes. Events go to the job's `sink`, called
on the engine thread; the HTTP side bridges them into its event loop. A job cancelled while it waits never
reaches the engine; a running one stops between frames (the engine checks `cancel`).
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from s2studio.engine.api import Engine, Event, JobFailed, JobFinished, LoadRequest, ModelInfo, ModelReady
from s2studio.errors import UserError

log = logging.getLogger(__name__)

Work = Callable[[Engine, str, threading.Event], Iterator[Event]]
"""(engine, job id, cancel) -> the job's events; runs on the engine thread."""
Sink = Callable[[Event], None]
Outcome = Literal["finished", "cancelled", "failed"]


def default_engine() -> Engine:
    """The real engine: the one place the server names it (its module may move; only this import follows)."""
    from s2studio.engine.s2 import S2Engine

    return S2Engine()


class QueueFull(Exception):
    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"the server is busy; try again in {retry_after_s} s")
        self.retry_after_s = retry_after_s


@dataclass
class Job:
    work: Work
    sink: Sink
    job_id: str = ""
    cancel: threading.Event = field(default_factory=threading.Event)
    outcome: Outcome | None = None
    counted: bool = True
    """Whether it takes a place in the bounded queue while it waits (the start-up load does not)."""


@dataclass(frozen=True)
class RunnerStats:
    queued: int
    running: str | None
    outcomes: tuple[tuple[str, Outcome], ...]
    """The newest jobs' ids and how they ended, oldest first (tests read what a disconnect did)."""


class EngineRunner:
    """Owns the engine and its thread. `submit` is called from any thread (the HTTP event loop)."""

    def __init__(self, engine_factory: Callable[[], Engine] = default_engine, queue_size: int = 16) -> None:
        self._factory = engine_factory
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._size = queue_size
        self._waiting = 0
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._running: Job | None = None
        self._outcomes: collections.deque[tuple[str, Outcome]] = collections.deque(maxlen=1000)
        self._durations: collections.deque[float] = collections.deque(maxlen=20)
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self.engine: Engine | None = None
        self.info: ModelInfo | None = None

    # ------------------------------------------------------------------ life cycle

    def start(self, load: LoadRequest, on_loading: Callable[[Event], None] | None = None) -> ModelInfo:
        """Build the engine and load the model on the engine thread; blocks until it is ready."""
        done = threading.Event()
        result: list[ModelInfo | str] = []

        def work(engine: Engine, job_id: str, cancel: threading.Event) -> Iterator[Event]:
            for ev in engine.load(load, cancel):
                if isinstance(ev, ModelReady):
                    result.append(ev.info)
                yield ev

        def sink(ev: Event) -> None:
            if on_loading is not None:
                on_loading(ev)
            if isinstance(ev, JobFailed):
                result.append(ev.error)
            if isinstance(ev, (JobFinished, JobFailed)):
                done.set()

        self._thread.start()
        self._queue.put(Job(work, sink, job_id=load.job_id, counted=False))
        done.wait()
        info = next((r for r in result if isinstance(r, ModelInfo)), None)
        if info is None:
            errors = [r for r in result if isinstance(r, str)]
            raise UserError(errors[0] if errors else f"the model in {load.model_dir} did not load")
        self.info = info
        return info

    def stop(self) -> None:
        """Cancel what runs and waits, and end the thread."""
        with self._lock:
            if self._running is not None:
                self._running.cancel.set()
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    # ------------------------------------------------------------------ jobs

    def submit(self, work: Work, sink: Sink, prefix: str = "srv") -> Job:
        """Queue a job behind the others; raises QueueFull when `queue_size` jobs already wait."""
        with self._lock:
            if self._waiting >= self._size:
                raise QueueFull(self._retry_after())
            self._waiting += 1
            job = Job(work, sink, job_id=f"{prefix}-{next(self._ids)}")
        self._queue.put(job)
        return job

    def _retry_after(self) -> int:
        """Seconds until a place frees: about one job's time (the running one ends, the first waiting starts)."""
        average = sum(self._durations) / len(self._durations) if self._durations else 5.0
        return max(1, math.ceil(average))

    def stats(self) -> RunnerStats:
        with self._lock:
            running = self._running.job_id if self._running is not None else None
            return RunnerStats(self._waiting, running, tuple(self._outcomes))

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            with self._lock:
                self._running = job
                if job.counted:
                    self._waiting -= 1
            started = time.perf_counter()
            try:
                self._run(job)
            finally:
                with self._lock:
                    self._running = None
                    if job.counted and job.outcome == "finished":
                        self._durations.append(time.perf_counter() - started)
                    self._outcomes.append((job.job_id, job.outcome or "failed"))

    def _run(self, job: Job) -> None:
        """Run one job; its sink sees exactly one terminal event, last, whatever the engine does."""
        def end(event: Event) -> None:
            job.outcome = ("failed" if isinstance(event, JobFailed)
                           else "cancelled" if isinstance(event, JobFinished) and event.cancelled else "finished")
            self._deliver(job, event)

        if job.cancel.is_set():
            end(JobFinished(job.job_id, cancelled=True))
            return
        try:
            if self.engine is None:
                self.engine = self._factory()
            for event in job.work(self.engine, job.job_id, job.cancel):
                if isinstance(event, (JobFinished, JobFailed)):
                    end(event)
                    return
                self._deliver(job, event)
            end(JobFinished(job.job_id, cancelled=job.cancel.is_set()))
        except UserError as exc:
            end(JobFailed(job.job_id, str(exc)))
        except Exception as exc:  # noqa: BLE001 - the engine thread outlives every bug
            log.exception("job %s failed", job.job_id)
            end(JobFailed(job.job_id, f"internal error ({type(exc).__name__}: {exc}); details are in the log"))

    @staticmethod
    def _deliver(job: Job, event: Event) -> None:
        try:
            job.sink(event)
        except Exception:  # noqa: BLE001 - a sink that fails (a closed loop) must not stop the engine thread
            log.exception("delivering an event of job %s failed", job.job_id)
            job.cancel.set()
