"""This computer in a render plan: its scenes run as jobs of the engine thread's scheduler, beside whatever else
runs there (a voice preview, another scene), so they share the batch: as many of them at once as the engine has
batch slots (`max_batch`, from the memory planner or the setting). The fleet's thread that planned a scene only
waits for the scene's events; it never runs the model itself. Torch-free."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from s2studio.engine.api import Event, JobFailed, JobFinished, SynthesisRequest
from s2studio.engine.scheduler import Job, synthesis

Submit = Callable[[Job], Any]
"""`Scheduler.submit` of the scheduler that runs the fleet's own job."""


class ScheduledEngine:
    """`generate` as a fleet's thread calls it, for a request that runs as a job of the scheduler (`submit`)."""

    def __init__(self, engine: Any, submit: Submit) -> None:
        self.engine, self._submit = engine, submit
        self._lock = threading.Lock()
        self.running = 0
        """Jobs submitted that have not ended: while there are any, the fleet's step is the engine's."""

    @property
    def slots(self) -> int:
        """The engine's batch slots: how many scenes it takes at once."""
        return max(1, int(getattr(self.engine, "max_batch", 1) or 1))

    def step(self) -> None:
        step = getattr(self.engine, "step", None)
        if step is not None:
            step()

    def generate(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Event]:
        """The request's events, from the scheduler's thread to the calling one; closing the iterator early
        cancels the job (its stream leaves the batch at the next frame)."""
        events: queue.Queue[Event] = queue.Queue()

        def sink(event: Event) -> None:
            if isinstance(event, JobFinished | JobFailed):
                with self._lock:
                    self.running -= 1
            events.put(event)

        with self._lock:
            self.running += 1
        self._submit(Job(request.job_id, lambda _engine, _job, stop: synthesis(self.engine, request, stop), sink,
                         cancel, counted=False))
        ended = False
        try:
            while not ended:
                event = events.get()
                ended = isinstance(event, JobFinished | JobFailed)
                yield event
        finally:
            if not ended:
                cancel.set()
