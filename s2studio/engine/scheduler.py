"""The engine's one loop (design.md §2): every job of the studio, the voice preview, the command line and the
server runs here, on the engine thread, behind one never-raise guard (`guarded`).

A job is a generator of events (`Work`) that may also yield `api.WAIT`: "my stream needs the engine's next
frame". One turn of the loop:

    take the jobs submitted since (from any thread: `submit`, `cancel`), in order;
    start queued jobs while fewer than the engine's `max_batch` run (a load waits until none runs, and nothing
        starts behind it until it has ended); a job cancelled while queued ends without starting;
    resume every running job until it waits or ends, handing its events to its sink;
    if any of them waits: the engine's `step` (one prefill piece, and one frame for every running stream).

So a request's stream is admitted when its job is resumed, joins the running batch at a frame boundary, and leaves
when its line ends, reaches its frame limit or is cancelled (the job drops it at once; the others go on). A job
that never waits (a load, an encode, the exact loop, a server across the network) runs to its end when resumed.
Every job's sink sees exactly one terminal event (`JobFinished` or `JobFailed`), last, whatever the job does.

`run_alone` is the same for one job on the calling thread: what `Engine.generate` of a batching engine is, so that
a caller that iterates a job sees its events only. Torch-free: the fake engine, the worker and the server use it.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from s2studio.engine.api import WAIT, Event, JobFailed, JobFinished, Step
from s2studio.errors import Cancelled, UserError

log = logging.getLogger(__name__)

Work = Callable[[Any, str, threading.Event], Iterator[Step]]
"""(engine, job id, cancel) -> the job's events, and `WAIT` wherever its stream waits for a step; on the engine
thread."""
Sink = Callable[[Event], None]
Outcome = Literal["finished", "cancelled", "failed"]


def failure(job_id: str, exc: BaseException) -> JobFailed:
    """The one line a person reads for an exception of a job (the details go to the log)."""
    if isinstance(exc, UserError):
        return JobFailed(job_id, str(exc))
    if isinstance(exc, ModuleNotFoundError):
        log.error("engine unavailable:\n%s", traceback.format_exc())
        return JobFailed(job_id, f"the speech engine is not available ({exc.name} is missing); start with "
                                 "S2STUDIO_ENGINE=fake to try the studio")
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":  # torch's, without importing it
        log.error("job %s ran out of memory:\n%s", job_id, traceback.format_exc())
        return JobFailed(job_id, "out of memory: choose a smaller precision or device, or close other programs")
    log.error("job %s failed:\n%s", job_id, "".join(traceback.format_exception(exc)))
    return JobFailed(job_id, f"internal error ({type(exc).__name__}: {exc}); details are in the log")


def guarded(job_id: str, steps: Callable[[], Iterator[Step]]) -> Iterator[Step]:
    """`steps()`, with any exception turned into the job's `JobFailed` (the one guard: the engine thread survives
    every job). Closing the result closes the job (its `finally` blocks release what it holds)."""
    try:
        yield from steps()
    except Cancelled:  # stopped before its stream began (e.g. while its voices were encoded): not a failure
        yield JobFinished(job_id, cancelled=True)
    except Exception as exc:  # noqa: BLE001 - a job's failure is an event, never the loop's end
        yield failure(job_id, exc)


def run_alone(engine: Any, job_id: str, steps: Callable[[], Iterator[Step]]) -> Iterator[Event]:
    """One job on the calling thread: its events, the engine stepped wherever it waits."""
    job = guarded(job_id, steps)
    try:
        for item in job:
            if item is not WAIT:
                yield item  # type: ignore[misc]
                continue
            try:
                engine.step()
            except Exception as exc:  # noqa: BLE001 - as in the loop: this job fails, the thread lives
                yield failure(job_id, exc)
                return
    finally:
        job.close()


class QueueFull(Exception):
    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"the server is busy; try again in {retry_after_s} s")
        self.retry_after_s = retry_after_s


@dataclass(eq=False)
class Job:
    job_id: str
    work: Work
    sink: Sink
    cancel: threading.Event = field(default_factory=threading.Event)
    exclusive: bool = False
    """Runs alone (a load replaces the model under every stream): it starts once nothing runs, and nothing starts
    behind it until it has ended."""
    counted: bool = True
    """Whether it takes a place in the bounded queue while it waits (the server's start-up load does not)."""
    outcome: Outcome | None = None
    steps: Iterator[Step] | None = field(default=None, repr=False)
    started: float = 0.0


@dataclass(frozen=True)
class SchedulerStats:
    queued: int
    """Jobs submitted that have not started."""
    running: tuple[str, ...]
    """The started jobs' ids, oldest first (each runs one stream, or waits for one)."""
    max_batch: int
    """Streams the engine runs at once (0 before the engine exists)."""
    outcomes: tuple[tuple[str, Outcome], ...]
    """The newest ended jobs' ids and how they ended, oldest first."""


class Scheduler:
    """The loop (module docstring) over one engine, built by `engine_factory` on the loop's thread at the first job.
    `submit`, `cancel`, `stats` and `stop` may be called from any thread; `run` and `run_until_idle` run the loop
    on the calling thread (the engine thread). `queue_size`: how many counted jobs may wait (None: no bound)."""

    def __init__(self, engine_factory: Callable[[], Any], queue_size: int | None = None) -> None:
        self._factory = engine_factory
        self._queue_size = queue_size
        self.engine: Any = None
        self._lock = threading.Condition()
        self._queue: collections.deque[Job] = collections.deque()
        self._running: list[Job] = []
        self._stopping = False
        self._outcomes: collections.deque[tuple[str, Outcome]] = collections.deque(maxlen=1000)
        self._durations: collections.deque[float] = collections.deque(maxlen=20)

    # ------------------------------------------------------------------ any thread

    def submit(self, job: Job) -> Job:
        """Queue `job` behind the others; QueueFull when `queue_size` counted jobs already wait."""
        with self._lock:
            if job.counted and self._queue_size is not None:
                if sum(1 for j in self._queue if j.counted) >= self._queue_size:
                    raise QueueFull(self.retry_after_s())
            self._queue.append(job)
            self._lock.notify_all()
        return job

    def cancel(self, job_id: str | None = None) -> None:
        """Cancel one job (queued or running), or every job. Its stream leaves the batch at the next frame."""
        with self._lock:
            for job in (*self._queue, *self._running):
                if job_id is None or job.job_id == job_id:
                    job.cancel.set()
            self._lock.notify_all()

    def stop(self) -> None:
        """Cancel everything; `run` returns once the running jobs have ended."""
        with self._lock:
            self._stopping = True
        self.cancel()

    @property
    def max_batch(self) -> int:
        return max(1, int(getattr(self.engine, "max_batch", 1) or 1)) if self.engine is not None else 1

    def stats(self) -> SchedulerStats:
        with self._lock:
            return SchedulerStats(len(self._queue), tuple(j.job_id for j in self._running),
                                  self.max_batch if self.engine is not None else 0, tuple(self._outcomes))

    def retry_after_s(self) -> int:
        """Seconds until one of the running jobs ends (a place in the queue frees, a voice it held is let go):
        about a job's time over the streams that run at once."""
        with self._lock:
            average = sum(self._durations) / len(self._durations) if self._durations else 5.0
            return max(1, math.ceil(average / self.max_batch))

    # ------------------------------------------------------------------ the engine thread

    def run(self) -> None:
        """The loop, until `stop` (waits for work while there is none)."""
        while self._turn(block=True):
            pass

    def run_until_idle(self) -> None:
        """The loop until no job is queued or running (the command line's: it submits, then runs)."""
        while self._turn(block=False):
            pass

    def _turn(self, block: bool) -> bool:
        """One turn (module docstring); False when there is nothing left to do (and `block` is off, or stopping)."""
        dropped: list[Job] = []
        with self._lock:
            while block and not self._queue and not self._running and not self._stopping:
                self._lock.wait()
            if not self._queue and not self._running:
                return False
            while self._queue:
                job = self._queue[0]
                if job.cancel.is_set():
                    dropped.append(self._queue.popleft())
                    continue
                if self._running and (job.exclusive or self._running[0].exclusive
                                      or len(self._running) >= self.max_batch):
                    break
                self._running.append(self._queue.popleft())
                job.started = time.perf_counter()
                if job.exclusive:
                    break
            running = list(self._running)
        for job in dropped:
            self._end(job, JobFinished(job.job_id, cancelled=True))
        waiting = [job for job in running if self._advance(job)]
        if waiting:
            try:
                self.engine.step()
            except Exception as exc:  # noqa: BLE001 - the step of every waiting stream failed: their jobs end
                for job in waiting:
                    self._end(job, failure(job.job_id, exc))
        return True

    def _advance(self, job: Job) -> bool:
        """Resume `job` until it waits (True) or ends (False)."""
        if job.steps is None:
            job.steps = guarded(job.job_id, lambda: self._work(job))
        for item in job.steps:
            if item is WAIT:
                return True
            if isinstance(item, (JobFinished, JobFailed)):
                self._end(job, item)
                return False
            self._deliver(job, item)  # type: ignore[arg-type]
        self._end(job, JobFinished(job.job_id, cancelled=job.cancel.is_set()))
        return False

    def _work(self, job: Job) -> Iterator[Step]:
        if self.engine is None:
            self.engine = self._factory()
            attach = getattr(self.engine, "attach_scheduler", None)
            if attach is not None:  # an engine whose jobs run others beside them (a render plan's local scenes)
                attach(self.submit)
        return job.work(self.engine, job.job_id, job.cancel)

    def _end(self, job: Job, event: JobFinished | JobFailed) -> None:
        """The job's terminal event, once; its generator is closed and it leaves the running jobs."""
        if job.steps is not None:
            steps, job.steps = job.steps, iter(())
            steps.close()
        if job in self._running:
            with self._lock:
                self._running.remove(job)
        if job.outcome is not None:
            return
        job.outcome = ("failed" if isinstance(event, JobFailed)
                       else "cancelled" if event.cancelled else "finished")
        if job.outcome == "finished" and job.counted and job.started:
            self._durations.append(time.perf_counter() - job.started)
        with self._lock:
            self._outcomes.append((job.job_id, job.outcome))
        self._deliver(job, event)

    @staticmethod
    def _deliver(job: Job, event: Event) -> None:
        try:
            job.sink(event)
        except Exception:  # noqa: BLE001 - a sink that fails (a closed event loop) must not stop the engine thread
            log.exception("delivering an event of job %s failed", job.job_id)
            job.cancel.set()


def synthesis(engine: Any, request: Any, cancel: threading.Event) -> Iterator[Step]:
    """A synthesis job on `engine` as the loop runs it: its `stream` (a stream of the batch) where it batches, else
    its `generate` (a whole job, one at a time: a remote server, a test's stub)."""
    stream = getattr(engine, "stream", None)
    return stream(request, cancel) if stream is not None else engine.generate(request, cancel)
