"""A queued engine job seen from the HTTP event loop: its events arrive in an asyncio queue.

`JobStream.first_audio` waits (watching for the client to hang up) until the job's first `AudioChunk`, its end
or its failure, so a route can still answer an error with a proper status, and the first audio bytes leave
as soon as the engine decoded them. `events` then yields the rest. A client that disconnects, at any point,
cancels the job: while it waits in the queue it never reaches the engine; while it runs it stops between
frames.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import StreamingResponse

from s2studio.engine.api import AudioChunk, Event, JobFailed, JobFinished
from s2studio.serve.errors import ApiError
from s2studio.serve.runner import EngineRunner, QueueFull, Work

DISCONNECT_POLL_S = 0.25


class Disconnected(Exception):
    pass


def failure_status(error: str) -> int:
    """A failed job's HTTP status: the engine's own one-line errors are the request's fault (400) unless they
    say the server broke or ran out of memory."""
    return 500 if error.startswith(("internal error", "out of memory")) else 400


class JobStream:
    def __init__(self, runner: EngineRunner, work: Work) -> None:
        loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
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

    async def _next(self, request: Request | None, heartbeat_s: float | None = None) -> Event | None:
        """The next event; None after `heartbeat_s` without one (when given)."""
        waited = 0.0
        while True:
            try:
                event = await asyncio.wait_for(self._queue.get(), DISCONNECT_POLL_S)
            except asyncio.TimeoutError:
                if request is not None and await request.is_disconnected():
                    self.cancel()
                    raise Disconnected() from None
                waited += DISCONNECT_POLL_S
                if heartbeat_s is not None and waited >= heartbeat_s:
                    return None
                continue
            if isinstance(event, (JobFinished, JobFailed)):
                self.done = True
            if isinstance(event, AudioChunk):
                self.samples += len(event.samples)
            return event

    async def first_audio(self, request: Request) -> list[Event]:
        """The job's events up to its first audio (or its end); a failure before any audio is an ApiError."""
        events: list[Event] = []
        try:
            while True:
                event = await self._next(request)
                assert event is not None
                events.append(event)
                if isinstance(event, JobFailed):
                    raise ApiError(failure_status(event.error), event.error, "generation_failed")
                if isinstance(event, (AudioChunk, JobFinished)):
                    return events
        except asyncio.CancelledError:
            self.cancel()
            raise

    async def events(self, heartbeat_s: float | None = None) -> AsyncIterator[Event | None]:
        """The remaining events (None: `heartbeat_s` passed without one); leaving early cancels the job."""
        try:
            while not self.done:
                yield await self._next(None, heartbeat_s)
        finally:
            if not self.done:
                self.cancel()


class JobResponse(StreamingResponse):
    """A streamed body tied to its job: however the response ends (finished, client gone, send failed), a job
    that has not ended is cancelled at that moment, not when the garbage collector gets to the generator."""

    def __init__(self, stream: JobStream, content: AsyncIterator[bytes], **kwargs: object) -> None:
        super().__init__(content, **kwargs)  # type: ignore[arg-type]
        self.stream = stream

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - ASGI
        try:
            await super().__call__(scope, receive, send)
        finally:
            if not self.stream.done:
                self.stream.cancel()
