"""A queued engine job seen from the HTTP event loop: its events arrive in an asyncio queue.

`JobStream.first_audio` waits (watching for the client to hang up) until the job's first `AudioChunk`, its end
or its failure, so a route can still answer an error with a proper status, and the first audio bytes leave
as soon as the engine decoded them. `events` then yields the rest. A client that disconnects, at any point,
cancels the job: while it waits in the queue it never reaches the engine; while it runs it stops between
frames.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import StreamingResponse

from s2studio.engine.api import AudioChunk, Event, JobFailed, JobFinished
from s2studio.serve.errors import ApiError
from s2studio.serve.runner import EngineRunner, QueueFull, Work

log = logging.getLogger(__name__)


class Disconnected(Exception):
    pass


HUNG_UP = object()
"""Put in a stream's queue when its client hangs up."""


OUT_OF_MEMORY = ("out of memory", "Cannot allocate memory", "can't allocate memory", "MemoryError")


def failure_status(error: str) -> int:
    """A failed job's HTTP status: the engine's own one-line errors are the request's fault (400) unless they
    say the server broke (500) or ran out of memory (503: another time, or a smaller request, may fit)."""
    if any(words in error for words in OUT_OF_MEMORY):
        return 503
    return 500 if error.startswith("internal error") else 400


def job_error(error: str) -> ApiError:
    """The answer to a job that failed before its first audio."""
    status = failure_status(error)
    if status == 503:
        return ApiError(503, "the server ran out of memory for this request; send shorter text or fewer or shorter "
                        "references, or try again later", "out_of_memory", headers={"Retry-After": "10"})
    return ApiError(status, error, "generation_failed")


class JobStream:
    def __init__(self, runner: EngineRunner, work: Work) -> None:
        loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Event | object] = asyncio.Queue()
        self.done = False
        self.samples = 0

        def sink(event: Event) -> None:
            loop.call_soon_threadsafe(self._queue.put_nowait, event)

        try:
            self.job = runner.submit(work, sink)
        except QueueFull as exc:
            raise ApiError(503, f"the server is busy ({runner.stats().queued} requests wait); retry in "
                           f"{exc.retry_after_s} s", "queue_full", headers={"Retry-After": str(exc.retry_after_s)})

    @property
    def job_id(self) -> str:
        return self.job.job_id

    def cancel(self) -> None:
        self.job.cancel.set()

    async def _next(self, heartbeat_s: float | None = None) -> Event | None:
        """The next event; None after `heartbeat_s` without one (when given). Raises Disconnected once the
        client has hung up (`_watch`)."""
        try:
            event = await asyncio.wait_for(self._queue.get(), heartbeat_s)
        except asyncio.TimeoutError:
            return None
        if event is HUNG_UP:
            raise Disconnected()
        if isinstance(event, (JobFinished, JobFailed)):
            self.done = True
        if isinstance(event, AudioChunk):
            self.samples += len(event.samples)
        return event

    async def _watch(self, request: Request) -> None:
        """Cancels the job the moment the client hangs up, and wakes `_next`. The body is read by then, so the
        server's next message is the disconnect: awaited, not polled, so that a queued job whose client left is
        cancelled before the job ahead of it can end and hand it to the engine (polling every 0.25 s let it
        through on a busy machine)."""
        try:
            while (await request.receive())["type"] != "http.disconnect":
                pass
        except Exception:  # noqa: BLE001 - a server that cannot say: the job runs on, as it would have
            log.debug("cannot watch job %s for a disconnect", self.job_id, exc_info=True)
            return
        self.cancel()
        self._queue.put_nowait(HUNG_UP)

    async def first_audio(self, request: Request) -> list[Event]:
        """The job's events up to its first audio (or its end); a failure before any audio is an ApiError."""
        events: list[Event] = []
        watcher = asyncio.ensure_future(self._watch(request))
        try:
            while True:
                event = await self._next()
                assert event is not None
                events.append(event)
                if isinstance(event, JobFailed):
                    raise job_error(event.error)
                if isinstance(event, (AudioChunk, JobFinished)):
                    return events
        except asyncio.CancelledError:
            self.cancel()
            raise
        finally:
            watcher.cancel()

    async def events(self, heartbeat_s: float | None = None) -> AsyncIterator[Event | None]:
        """The remaining events (None: `heartbeat_s` passed without one); leaving early cancels the job."""
        try:
            while not self.done:
                yield await self._next(heartbeat_s)
        except Disconnected:  # the client left just as its first audio came: the job is cancelled already
            return
        finally:
            if not self.done:
                self.cancel()


class JobResponse(StreamingResponse):
    """A streamed body tied to its job: however the response ends (finished, client gone, send failed), a job
    that has not ended is cancelled at that moment, not when the garbage collector gets to the generator."""

    def __init__(self, stream: JobStream, content: AsyncIterator[bytes], ended: Callable[[], None] = lambda: None,
                 **kwargs: object) -> None:
        super().__init__(content, **kwargs)  # type: ignore[arg-type]
        self.stream = stream
        self.ended = ended
        """Called once the response has ended, however it ended (an uploaded voice it spoke with is let go)."""

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - ASGI
        try:
            await super().__call__(scope, receive, send)
        finally:
            if not self.stream.done:
                self.stream.cancel()
            self.ended()
