"""Live servers on 127.0.0.1 for the serve tests: the tiny demo model behind the real engine, or the seam's
`FakeEngine` with injected slowness for queueing and cancelling; a voice library with two voices."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from s2studio.engine.api import LoadRequest
from s2studio.serve.config import Limits, ServeConfig
from s2studio.serve.server import ThreadedServer, free_port, start_state
from s2studio.state.voices import VoiceLibrary

API_KEY = "test-key-0123456789"


def tone(path: Path, seconds: float, freq: float, rate: int = 22050) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    sf.write(str(path), (0.3 * np.sin(2 * np.pi * freq * t) * np.exp(-t)).astype(np.float32), rate)
    return path


@contextmanager
def live_server(load: LoadRequest, library: VoiceLibrary, engine_factory: Callable | None = None,
                **config: object) -> Iterator[ThreadedServer]:
    config.setdefault("api_key", API_KEY)
    cfg = ServeConfig(port=free_port(), **config)  # type: ignore[arg-type]
    kwargs = {} if engine_factory is None else {"engine_factory": engine_factory}
    server = ThreadedServer(start_state(cfg, load, library, **kwargs))
    with server:
        try:
            yield server
        finally:
            server.state.runner.stop()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from s2studio.demo_model import write_demo_model

    return write_demo_model(tmp_path_factory.mktemp("serve-model") / "tiny", seed=5)


@pytest.fixture(scope="session")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("serve-clips")
    return {"alice": tone(folder / "alice.wav", 1.2, 220.0), "bob": tone(folder / "bob.flac", 0.9, 330.0)}


@pytest.fixture(scope="session")
def library(tmp_path_factory: pytest.TempPathFactory, clips: dict[str, Path]) -> VoiceLibrary:
    lib = VoiceLibrary(tmp_path_factory.mktemp("serve-voices"))
    lib.create("Alice", [(clips["alice"], "Hello, I am Alice.")])
    lib.create("Bob", [(clips["bob"], "And I am Bob.")])
    return lib


FAST_LIMITS = Limits(max_new_tokens=12, queue_size=4)
"""Every request of the real-model tests stops after 12 frames: the random model rarely ends a line itself."""


@pytest.fixture(scope="session")
def real_server(tiny_model: Path, library: VoiceLibrary) -> Iterator[ThreadedServer]:
    load = LoadRequest("load", tiny_model, device="cpu", precision="fp32", threads=1)
    with live_server(load, library, limits=FAST_LIMITS) as server:
        yield server
