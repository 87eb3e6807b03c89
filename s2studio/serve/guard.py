"""What the server does about clients before a route sees them: time limits, a connection cap, the `Host` check.

uvicorn's own mechanisms are used where they exist: `timeout_keep_alive` closes an idle connection after a
response, and h11's `max_incomplete_event_size` bounds the request line and headers (`server.uvicorn_config`).
uvicorn has no limit on a connection that never completes its headers (it waits for ever, key or no key), and
its `limit_concurrency` answers 503 only once a request's headers have arrived, so it cannot stop idle sockets
from using up the process's files. `GuardedH11Protocol`, uvicorn's h11 protocol with two additions, does both:
a connection must complete each request's headers within `header_timeout_s` of connecting or of its previous
response (or it gets 408 and is closed), and when more than `max_connections` are open the longest-idle one
with no request in flight is closed (or the new one, when all are busy). Each such client costs one log line.
A body's own timeout is in `bodies.read_body`, where the body is read.

`LoopbackHostMiddleware` (an ASGI middleware: the check needs the request's headers) is installed when the
server has no API key: it then listens on loopback only, and answers only requests addressed to a loopback
name, so a web page served from another name that resolves to 127.0.0.1 (DNS rebinding) cannot use it, and
only requests whose `Origin` (which browsers send and a web page cannot change) is absent or loopback too, so a
page elsewhere cannot post a form (a voice upload is multipart, which browsers send cross-site unasked).
"""

from __future__ import annotations

import json
import logging
import time
from urllib.parse import urlsplit
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from s2studio.serve.config import Limits, is_loopback_host_header
from s2studio.serve.errors import ApiError, error_response

log = logging.getLogger("s2studio.serve")


def guarded_protocol(limits: Limits) -> type[H11Protocol]:
    """uvicorn's h11 protocol class with `limits`' header timeout and connection cap."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


class GuardedH11Protocol(H11Protocol):
    limits: Limits = Limits()

    def connection_made(self, transport: Any) -> None:  # noqa: ANN401 - asyncio's transport
        super().connection_made(transport)
        self.last_active = time.monotonic()
        self.header_timer = None
        self.waited_cycle = None
        if len(self.connections) > self.limits.max_connections and not self._make_room():
            self._close(f"refused: {len(self.connections) - 1} connections are open and every one is busy")
            return
        self._expect_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        super().data_received(data)
        if self.cycle is not self.waited_cycle:  # a new request's headers are complete
            self._cancel_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._expect_headers()

    # ------------------------------------------------------------------ the header deadline

    def _expect_headers(self) -> None:
        """The next request's headers are due within `header_timeout_s` (the rest of a body that was answered
        before it was read, 401 or 413, counts against the same time)."""
        self._cancel_header_timer()
        self.waited_cycle = self.cycle
        self.header_timer = self.loop.call_later(self.limits.header_timeout_s, self._headers_late)

    def _cancel_header_timer(self) -> None:
        if getattr(self, "header_timer", None) is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _headers_late(self) -> None:
        self.header_timer = None
        if self.transport.is_closing() or self.cycle is not self.waited_cycle:
            return
        if self.conn.their_state is not h11.IDLE:  # still sending the body of a request that was answered
            self._close(f"still sending a body {self.limits.header_timeout_s:g} s after its answer")
            return
        message = (f"the request's headers did not arrive within {self.limits.header_timeout_s:g} s; "
                   "send the whole request at once")
        body = json.dumps({"statusCode": 408, "message": message, "error": "Request Timeout",
                           "code": "request_timeout"}).encode()
        self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                             b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        self._close(f"no complete request headers within {self.limits.header_timeout_s:g} s")

    # ------------------------------------------------------------------ the connection cap

    def _idle(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _make_room(self) -> bool:
        """Close the longest-idle other connection with no request in flight; False when there is none."""
        idle = [p for p in self.connections if p is not self and isinstance(p, GuardedH11Protocol) and p._idle()
                and not p.transport.is_closing()]
        if not idle:
            return False
        oldest = min(idle, key=lambda p: p.last_active)
        oldest._close(f"closed while idle: {len(self.connections)} connections were open, at most "
                      f"{self.limits.max_connections} are kept")
        return True

    def _close(self, why: str) -> None:
        client = "%s:%d" % self.client if self.client else "a client"
        log.warning("connection from %s %s", client, why)
        self._cancel_header_timer()
        self.connections.discard(self)
        self.transport.close()


class LoopbackHostMiddleware:
    """403 for any request whose `Host` or `Origin` is not a loopback name (the server then has no API key)."""

    def __init__(self, app: Any) -> None:  # noqa: ANN401 - ASGI
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:  # noqa: ANN401 - ASGI
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            host = headers.get(b"host", b"").decode("latin-1")
            origin = headers.get(b"origin")
            if not is_loopback_host_header(host):
                await self._refuse(scope, receive, send, "host", host, "requests addressed to")
                return
            if origin is not None and not is_loopback_host_header(urlsplit(origin.decode("latin-1")).netloc):
                await self._refuse(scope, receive, send, "origin", origin.decode("latin-1"), "web pages served from")
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(scope: dict, receive: Any, send: Any, what: str, value: str, whom: str) -> None:  # noqa: ANN401
        shown = value[:80] or "none"
        log.warning("refused a request for %s %r: without an API key this server answers only %s 127.0.0.1, "
                    "[::1] or localhost", what, shown, whom)
        error = ApiError(403, f"this server answers only {whom} 127.0.0.1, [::1] or localhost (this one's {what} "
                              f"was {shown!r}); give the server an API key to serve other names", f"forbidden_{what}")
        await error_response(scope["path"], error)(scope, receive, send)


class StreamBroken(Exception):
    """A response stream that must end without its last chunk (the client then sees a broken transfer, never a
    short file that looks whole); raised out of the app, logged in one line (`OneLineStreamErrors`)."""


class OneLineStreamErrors(logging.Filter):
    """uvicorn logs an exception that ends a response with its traceback; a `StreamBroken` is expected (a job
    that failed after its first audio) and is logged as its one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, StreamBroken):
            record.msg, record.args, record.exc_info, record.exc_text = "%s", (str(exc),), None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
