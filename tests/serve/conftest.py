"""Live servers on 127.0.0.1 for the serve tests: the tiny demo model behind the real engine, or the seam's
`FakeEngine` with injected slowness for queueing and cancelling; a voice library with two voices."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_helpers import live_server
from tones import tone

from s2studio.engine.api import LoadRequest
from s2studio.serve.config import Limits
from s2studio.serve.server import ThreadedServer
from s2studio.state.voices import VoiceLibrary


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
