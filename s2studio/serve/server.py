"""Running the app: `serve_forever` for the command line, `ThreadedServer` for tests and benchmarks.

Both build the same `ServerState` around a started `EngineRunner`, so a test's server is the command's.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import uvicorn

from s2studio.engine.api import Engine, LoadRequest
from s2studio.serve.app import ServerState, create_app
from s2studio.serve.config import ServeConfig
from s2studio.serve.runner import EngineRunner, default_engine
from s2studio.state.voices import VoiceLibrary


def start_state(config: ServeConfig, load: LoadRequest, library: VoiceLibrary,
                engine_factory: Callable[[], Engine] = default_engine, on_loading=None) -> ServerState:  # noqa: ANN001
    """Load the model on a new engine thread and return the state the app serves from."""
    runner = EngineRunner(engine_factory, config.limits.queue_size)
    runner.start(load, on_loading)
    return ServerState(config, runner, library)


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
