"""Assembling and running the app: `create_app` (the routes, the key or the loopback `Host` check, CORS, the
error handlers), `uvicorn_config` (the connection limits, `serve.guard`), `serve_forever` for the command line,
`ThreadedServer` for tests and benchmarks.

Both build the same `ServerState` around a started `EngineRunner`, so a test's server is the command's. Whatever
goes wrong in a route reaches the client as one message in its API's shape: an `ApiError` with its status, a
`UserError` as 400, anything else as a 500 that says the details are in the log (where the traceback goes),
never a traceback, starlette's plain "Internal Server Error" or one of the server's own paths.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from collections.abc import Callable

import uvicorn
from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response

from s2studio import __version__
from s2studio.engine.api import Engine, LoadRequest
from s2studio.errors import UserError, printable
from s2studio.native_memory import map_large_buffers
from s2studio.serve import routes_fish, routes_native, routes_openai, routes_voices
from s2studio.serve.app import ApiKeyMiddleware, ServerState, log
from s2studio.serve.bodies import ClientGone
from s2studio.serve.config import ServeConfig
from s2studio.serve.errors import ApiError, error_response
from s2studio.serve.guard import LoopbackHostMiddleware, OneLineStreamErrors, guarded_protocol
from s2studio.serve.jobs import job_error
from s2studio.serve.runner import EngineRunner, default_engine
from s2studio.serve.uploads import UploadedVoices
from s2studio.state.voices import VoiceLibrary


def start_state(config: ServeConfig, load: LoadRequest, library: VoiceLibrary,
                engine_factory: Callable[[], Engine] = default_engine, on_loading=None,  # noqa: ANN001
                uploads: UploadedVoices | None = None) -> ServerState:
    """Load the model on a new engine thread and return the state the app serves from (`uploads`: where clients'
    uploaded voices are kept; in memory when None)."""
    runner = EngineRunner(engine_factory, config.limits.queue_size)
    runner.start(load, on_loading)
    return ServerState(config, runner, library, uploads=uploads or UploadedVoices(), model_dir=load.model_dir)


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="S2 Studio", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.s2 = state
    app.include_router(routes_voices.router)
    app.include_router(routes_openai.router)
    app.include_router(routes_fish.router)
    app.include_router(routes_native.router)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        if exc.status >= 500:
            log.warning("%s %s: %s", request.method, request.url.path, exc.message)
        return error_response(request.url.path, exc, state.redact)

    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError) -> Response:
        return error_response(request.url.path, ApiError(400, str(exc), "invalid_request"), state.redact)

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        client = "%s:%d" % request.client if request.client else "a client"
        log.warning("%s %s from %s: the client hung up before sending its whole request", request.method,
                    request.url.path, client)
        return Response(status_code=499)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = (f"no route {request.method} {printable(request.url.path, 80)} on this server"
                   if exc.status_code in (404, 405) else str(exc.detail))
        return error_response(request.url.path, ApiError(exc.status_code, message, "not_found"), state.redact)

    @app.exception_handler(Exception)
    async def bug(request: Request, exc: Exception) -> Response:  # the traceback goes to the log, re-raised
        if isinstance(exc, MemoryError):
            return error_response(request.url.path, job_error("out of memory"))
        return error_response(request.url.path, ApiError(500, f"internal error ({type(exc).__name__}); the "
                                                          "details are in the server's log", "internal_error"))

    if state.config.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=state.config.api_key)
    else:  # loopback only: and only requests addressed to it (no DNS rebinding)
        app.add_middleware(LoopbackHostMiddleware)
    if state.config.cors_origins:  # added last, so it wraps the key check and answers preflights itself
        app.add_middleware(CORSMiddleware, allow_origins=list(state.config.cors_origins),
                           allow_methods=["GET", "POST"], allow_headers=["Authorization", "Content-Type", "model"],
                           expose_headers=["X-S2-Job", "X-Audio-Sample-Rate", "X-Audio-Channels",
                                           "X-Audio-Encoding"])
    return app


def uvicorn_config(state: ServerState, log_level: str = "warning") -> uvicorn.Config:
    """uvicorn's options for `state`: its keep-alive timeout and header size limit are uvicorn's and h11's own;
    the header deadline and the connection cap are `serve.guard`'s protocol (uvicorn has neither: its
    `limit_concurrency` answers 503 only after a request's headers, so it is not used)."""
    limits = state.config.limits
    errors = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, OneLineStreamErrors) for f in errors.filters):
        errors.addFilter(OneLineStreamErrors())
    return uvicorn.Config(create_app(state), host=state.config.host, port=state.config.port, log_level=log_level,
                          timeout_graceful_shutdown=5, server_header=False, lifespan="off",
                          http=guarded_protocol(limits), timeout_keep_alive=limits.keep_alive_s,
                          h11_max_incomplete_event_size=limits.max_header_bytes)


def serve_forever(state: ServerState, log_level: str = "info", sock: socket.socket | None = None) -> None:
    """Serve until stopped (Ctrl+C), on `sock` when given (bound before the model loaded: `bind`)."""
    try:
        uvicorn.Server(uvicorn_config(state, log_level)).run(sockets=[sock] if sock is not None else None)
    finally:
        state.runner.stop()


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or a UserError saying the port is taken (checked before the model loads)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UserError(f"port {port} on {host} is in use (another server?); stop it or pick another --port") \
                from None
        raise UserError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); check --host and --port") from None
    sock.set_inheritable(True)
    return sock


MMAP_THRESHOLD = 4 * 2**20
"""Buffers of at least this many bytes get their own mapping from glibc (`native_memory.map_large_buffers`)."""


def return_large_buffers() -> bool:
    """Have glibc give every buffer of 4 MB or more back to the system when it is freed, so a request's audio
    and the codec's activations leave the server's resident memory when the request ends and repeated requests
    never build a higher peak out of retained heap. False where this is not glibc (nothing changes)."""
    return map_large_buffers(MMAP_THRESHOLD)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ThreadedServer:
    """A live server on loopback in a thread of this process (tests read its state directly)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.server = uvicorn.Server(uvicorn_config(state))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.state.config.host}:{self.state.config.port}"

    def __enter__(self) -> "ThreadedServer":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def close(self) -> None:
        self.__exit__()
        self.state.runner.stop()


__all__ = ["ThreadedServer", "bind", "free_port", "return_large_buffers", "serve_forever", "start_state"]
