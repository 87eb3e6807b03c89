"""The server's engine thread: the scheduler's one loop (engine/scheduler.py) on a thread of its own, with a bounded
queue (design.md §2 and §10).

Every engine call of the server happens on that thread, as every engine call of the studio happens on its engine
QThread: the model is loaded there at start, and each HTTP request becomes a job whose work (encode its
references, compile, generate) runs there when its turn comes. Concurrent requests run batched: up to the engine's
`max_batch` jobs at once, each a stream of one batch that joins at a frame boundary and leaves when its line ends;
the others wait in the queue (`queue_size` of them; one more is `QueueFull`: 503 with Retry-After). Events go to the
job's `sink`, called on the engine thread; the HTTP side bridges them into its event loop. A job cancelled while it
waits never reaches the engine; a running one leaves the batch at the next frame (a client that hangs up).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterator

from s2studio.engine.api import Engine, Event, JobFailed, JobFinished, LoadRequest, ModelInfo, ModelReady
from s2studio.engine.scheduler import Job, QueueFull, Scheduler, SchedulerStats, Sink, Work
from s2studio.errors import UserError

log = logging.getLogger(__name__)

__all__ = ["EngineRunner", "Job", "QueueFull", "SchedulerStats", "Sink", "Work", "default_engine"]


def default_engine() -> Engine:
    """The real engine: the one place the server names it (its module may move; only this import follows)."""
    from s2studio.engine.s2 import S2Engine

    return S2Engine()


class EngineRunner:
    """Owns the scheduler and its thread. `submit` is called from any thread (the HTTP event loop)."""

    def __init__(self, engine_factory: Callable[[], Engine] = default_engine, queue_size: int = 16) -> None:
        self.scheduler = Scheduler(engine_factory, queue_size)
        self._ids = itertools.count(1)
        self._thread = threading.Thread(target=self.scheduler.run, name="engine", daemon=True)
        self.info: ModelInfo | None = None

    @property
    def engine(self) -> Engine | None:
        return self.scheduler.engine

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
        self.scheduler.submit(Job(load.job_id, work, sink, exclusive=True, counted=False))
        done.wait()
        info = next((r for r in result if isinstance(r, ModelInfo)), None)
        if info is None:
            errors = [r for r in result if isinstance(r, str)]
            raise UserError(errors[0] if errors else f"the model in {load.model_dir} did not load")
        self.info = info
        return info

    def stop(self) -> None:
        """Cancel what runs and waits, and end the thread."""
        self.scheduler.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def submit(self, work: Work, sink: Sink, prefix: str = "srv") -> Job:
        """Queue a job behind the others; raises QueueFull when `queue_size` jobs already wait."""
        return self.scheduler.submit(Job(f"{prefix}-{next(self._ids)}", work, sink))

    def stats(self) -> SchedulerStats:
        return self.scheduler.stats()
