"""The studio's own routes: `GET /v1/s2studio/info` and `POST /v1/s2studio/generate`.

`engine/remote.py` renders a studio project through these: the request is the engine's `SynthesisRequest`
(references as codes this server's codec made, context turns, line mode), the answer the job's events as
`engine/remote_wire.py` frames them, so a take rendered here is the take the local engine would make. The
stream starts at once, carries a `wait` record every few seconds while the job waits or nothing else is sent
(so a client can tell a long queue from a dead connection), and ends with a
`finished` or `failed` record; a client that disconnects cancels the job.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from s2studio import __version__
from s2studio.engine import remote_wire
from s2studio.engine.api import Engine, JobFailed, JobFinished, Step, SynthesisRequest
from s2studio.engine.scheduler import synthesis as run_synthesis
from s2studio.serve.app import JobRecord, state_of
from s2studio.serve.bodies import MSGPACK, check_shape, decode, media_type, read_body
from s2studio.serve.errors import ApiError
from s2studio.serve.jobs import JobResponse, JobStream
from s2studio.serve.parsing import check_lines, check_name

router = APIRouter()
HEARTBEAT_S = 5.0
"""A `wait` record after this long without an event, so a client can tell a dead connection from a queue."""


@router.get("/v1/s2studio/info")
async def info(request: Request) -> Response:
    state = state_of(request)
    limits = state.config.limits
    return JSONResponse({"server": "s2studio", "version": __version__, "model": remote_wire.info_to_json(state.info),
                         "limits": {"max_text_chars": limits.max_text_chars, "max_new_tokens": limits.max_new_tokens,
                                    "max_reference_seconds": limits.max_reference_seconds,
                                    "max_lines": limits.max_lines, "queue_size": limits.queue_size},
                         "queue": {"waiting": state.runner.stats().queued}})


@router.post("/v1/s2studio/generate")
async def generate(request: Request) -> Response:
    state = state_of(request)
    limits = state.config.limits
    kind = media_type(request, (*MSGPACK, remote_wire.CONTENT_TYPE))
    data = await read_body(request)

    def parse() -> SynthesisRequest:
        raw = decode(data, kind)
        check_shape(raw, limits, counts={"lines": limits.max_lines, "references": limits.max_coded_references,
                                         "context": limits.max_coded_references})
        try:
            return remote_wire.request_from_record(raw, "pending")
        except ValueError as exc:
            raise ApiError(400, f"not a generate request: {exc}", "invalid_body") from None

    synthesis = await run_in_threadpool(parse)
    check_lines(synthesis.lines, limits, "lines")
    for line in synthesis.lines:
        check_name(line.line_id, "lines", limits)
    if sum(len(ln.text) for ln in synthesis.lines) > limits.max_text_chars * 4:
        raise ApiError(400, f"the lines hold more than {limits.max_text_chars * 4} characters; render fewer at once",
                       "text_too_long")
    if synthesis.sampling.max_frames > limits.max_new_tokens:  # as for the other routes: at most the limit
        synthesis = replace(synthesis, sampling=replace(synthesis.sampling, max_frames=limits.max_new_tokens))

    def work(engine: Engine, job_id: str, cancel: threading.Event) -> Iterator[Step]:
        yield from run_synthesis(engine, replace(synthesis, job_id=job_id), cancel)

    stream = JobStream(state.runner, work)
    samples = [0]

    async def body() -> AsyncIterator[bytes]:
        outcome = "cancelled"
        try:
            async for event in stream.events(heartbeat_s=HEARTBEAT_S):
                if event is None:  # queued, or a slow step: tell the client the connection lives
                    yield remote_wire.frame({"type": "wait", "queued": state.runner.stats().queued})
                    continue
                record = remote_wire.event_to_record(event)
                if record is None:
                    continue
                if record["type"] == "audio":
                    samples[0] += len(event.samples)  # type: ignore[union-attr]
                if isinstance(event, JobFinished):
                    outcome = "cancelled" if event.cancelled else "finished"
                elif isinstance(event, JobFailed):
                    outcome = "failed"
                    record["error"] = state.redact(event.error)
                yield remote_wire.frame(record)
        finally:
            state.history.append(JobRecord(stream.job_id, "native", samples[0], outcome))

    return JobResponse(stream, body(), media_type=remote_wire.CONTENT_TYPE, headers={"X-S2-Job": stream.job_id})
