"""What the serve tests share besides fixtures: the API key the live servers want and the context manager that
starts one. A module with its own name, so `pytest tests/serve tests/hostile` imports it whatever the order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from s2studio.engine.api import LoadRequest
from s2studio.serve.config import ServeConfig
from s2studio.serve.server import ThreadedServer, free_port, start_state
from s2studio.state.voices import VoiceLibrary

API_KEY = "test-key-0123456789"


@contextmanager
def live_server(load: LoadRequest, library: VoiceLibrary, engine_factory: Callable | None = None,
                **config: object) -> Iterator[ThreadedServer]:
    """A `ThreadedServer` on a free port of 127.0.0.1 (key `API_KEY` unless given), stopped on the way out."""
    config.setdefault("api_key", API_KEY)
    cfg = ServeConfig(port=free_port(), **config)  # type: ignore[arg-type]
    kwargs = {} if engine_factory is None else {"engine_factory": engine_factory}
    server = ThreadedServer(start_state(cfg, load, library, **kwargs))
    with server:
        try:
            yield server
        finally:
            server.state.runner.stop()
