"""Assembling and running the app: `create_app` (the routes, the key, CORS), `serve_forever` for the command line,
`ThreadedServer` for tests and benchmarks.

Both build the same `ServerState` around a started `EngineRunner`, so a test's server is the command's.
"""

from __future__ import annotations

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
from s2studio.serve import routes_fish, routes_native, routes_openai, routes_voices
from s2studio.serve.app import ApiKeyMiddleware, ServerState, log
from s2studio.serve.errors import ApiError, error_response
from s2studio.serve.config import ServeConfig
from s2studio.serve.runner import EngineRunner, default_engine
from s2studio.state.voices import VoiceLibrary


def start_state(config: ServeConfig, load: LoadRequest, library: VoiceLibrary,
                engine_factory: Callable[[], Engine] = default_engine, on_loading=None) -> ServerState:  # noqa: ANN001
    """Load the model on a new engine thread and return the state the app serves from."""
    runner = EngineRunner(engine_factory, config.limits.queue_size)
    runner.start(load, on_loading)
    return ServerState(config, runner, library)


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
        return error_response(request.url.path, exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = (f"no route {request.method} {request.url.path} on this server" if exc.status_code in (404, 405)
                   else str(exc.detail))
        return error_response(request.url.path, ApiError(exc.status_code, message, "not_found"))

    if state.config.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=state.config.api_key)
    if state.config.cors_origins:  # added last, so it wraps the key check and answers preflights itself
        app.add_middleware(CORSMiddleware, allow_origins=list(state.config.cors_origins),
                           allow_methods=["GET", "POST"], allow_headers=["Authorization", "Content-Type", "model"],
                           expose_headers=["X-S2-Job", "X-Audio-Sample-Rate", "X-Audio-Channels",
                                           "X-Audio-Encoding"])
    return app


def uvicorn_config(state: ServerState, log_level: str = "warning") -> uvicorn.Config:
    return uvicorn.Config(create_app(state), host=state.config.host, port=state.config.port, log_level=log_level,
                          timeout_graceful_shutdown=5, server_header=False, lifespan="off")


def serve_forever(state: ServerState, log_level: str = "info") -> None:
    try:
        uvicorn.Server(uvicorn_config(state, log_level)).run()
    finally:
        state.runner.stop()


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


__all__ = ["ThreadedServer", "free_port", "serve_forever", "start_state"]
