"""Request bodies: read within the limits of time and size, decoded and validated off the event loop.

Every route that takes a body reads it here, so the limits hold everywhere: its media type must be one the
route speaks (415 otherwise: a browser sends `text/plain` and form bodies to any address without asking
first), its size (413, before it is read whole), each piece of it within `body_timeout_s` of the previous one
(408), and a client that hangs up while sending it costs one log line. Decoding (JSON or MessagePack) and
validation run in a worker thread, not on the event loop, so one large body never stalls the others, and the
decoded structure is measured first (nesting depth, items per list or map, the route's own counts such as
references or lines) so that a million empty items are refused before a model validates any of them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import TypeVar

import ormsgpack
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from s2studio.serve.config import Limits
from s2studio.serve.errors import ApiError

log = logging.getLogger("s2studio.serve")

JSON = "application/json"
MSGPACK = ("application/msgpack", "application/x-msgpack")
M = TypeVar("M", bound=BaseModel)


class ClientGone(Exception):
    """The client hung up before its request's body was whole: nobody is left to answer."""


def limits_of(request: Request) -> Limits:
    return request.app.state.s2.config.limits


def media_type(request: Request, accepted: tuple[str, ...]) -> str:
    """The request's media type when the route takes it; 415 naming what it takes otherwise."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in accepted:
        raise ApiError(415, f"cannot read a {kind or 'body without a Content-Type'}; send {' or '.join(accepted)}",
                       "unsupported_media_type")
    return kind


def _size(limit: int) -> str:
    return f"{limit / 2**20:g} MB" if limit >= 2**20 else f"{limit / 1024:g} kB"


async def read_body(request: Request) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed the limit (before it is all read), with 408
    when a piece of it is late; `ClientGone` when the client hangs up first."""
    limits = limits_of(request)
    too_big = ApiError(413, f"the request body is larger than this server's limit of {_size(limits.max_body_bytes)}; "
                       "send shorter or fewer reference clips", "body_too_large")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise too_big
    chunks, size = [], 0
    while True:
        try:
            message = await asyncio.wait_for(request.receive(), limits.body_timeout_s)
        except asyncio.TimeoutError:
            client = "%s:%d" % request.client if request.client else "a client"
            log.warning("%s %s from %s: the body stalled for %g s; answered 408", request.method, request.url.path,
                        client, limits.body_timeout_s)
            raise ApiError(408, f"the request body stopped arriving for {limits.body_timeout_s:g} s; send it "
                           "whole", "request_timeout", headers={"Connection": "close"}) from None
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limits.max_body_bytes:
            raise too_big
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def decode(data: bytes, kind: str) -> object:
    """A JSON or MessagePack document; 400 naming what is wrong with it."""
    try:
        if kind == JSON:
            return json.loads(data)
        return ormsgpack.unpackb(data)
    except RecursionError:
        raise ApiError(400, "the body is nested too deeply to read", "invalid_body") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"the body is not JSON ({exc})", "invalid_json") from None
    except ormsgpack.MsgpackDecodeError as exc:
        raise ApiError(400, f"the body is not MessagePack ({exc})", "invalid_body") from None


def check_shape(raw: object, limits: Limits, counts: Mapping[str, int] = {}) -> None:
    """Refuse a body nested deeper than `max_depth`, with a list or map of more than `max_items` items, or
    whose top-level `counts` fields (name -> most items) hold more; walked without recursion."""
    if not isinstance(raw, dict):
        raise ApiError(400, "the body must be an object (a JSON or MessagePack map)", "invalid_body")
    for name, most in counts.items():
        value = raw.get(name)
        if isinstance(value, (list, dict)) and len(value) > most:
            raise ApiError(400, f"{name}: {len(value)} items; this server takes at most {most}", f"too_many_{name}",
                           name)
    stack: list[tuple[object, int]] = [(raw, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (list, dict)):
            if depth > limits.max_depth:
                raise ApiError(400, f"the body is nested more than {limits.max_depth} levels deep", "invalid_body")
            if len(value) > limits.max_items:
                raise ApiError(400, f"the body holds a list of {len(value)} items; this server takes at most "
                               f"{limits.max_items}", "invalid_body")
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))


def validate(model: type[M], raw: object) -> M:
    """`raw` as `model`: one message naming the first field that is wrong, never a traceback."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ApiError(400, f"{where}: {first['msg']}", "invalid_field", where.split(".")[0]) from None


async def parse_body(request: Request, model: type[M], accepted: tuple[str, ...],
                     counts: Mapping[str, int] = {}, prepare: Callable[[dict, str], None] | None = None) -> M:
    """The body as `model`: media type, size and time checked on the loop, then decoded, measured
    (`check_shape`), prepared (`prepare(raw, kind)`, e.g. base64 audio in JSON) and validated in a worker thread."""
    kind = media_type(request, accepted)
    data = await read_body(request)
    limits = limits_of(request)

    def work() -> M:
        raw = decode(data, kind)
        check_shape(raw, limits, counts)
        assert isinstance(raw, dict)
        if prepare is not None:
            prepare(raw, kind)
        return validate(model, raw)

    return await run_in_threadpool(work)
