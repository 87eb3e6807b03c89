"""Continuous batching in `s2studio serve`, with the real `openai` client against a live server on the tiny model's
fast path: concurrent requests run as streams of one batch, a request that joins while another runs and one whose
client hangs up leave the others' audio exactly what each gives alone, and `/v1/health` says the batch."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from serve_helpers import API_KEY, live_server

from s2studio.engine.api import LoadRequest
from s2studio.serve.config import Limits
from s2studio.state.voices import VoiceLibrary

AUTH = {"Authorization": f"Bearer {API_KEY}"}
LONG = " ".join(f"Sentence number {i} goes on for a while, so that it takes a good many frames." for i in range(8))


@pytest.fixture(scope="module")
def batch_server(tiny_model: Path, library: VoiceLibrary) -> Iterator:
    load = LoadRequest("load", tiny_model, device="cpu", precision="fp32", speed="fast", threads=1, max_batch=3)
    with live_server(load, library, limits=Limits(max_new_tokens=40, queue_size=4)) as server:
        yield server


def speak(client: openai.OpenAI, text: str, seed: int, first: threading.Event | None = None,
          hang_up: bool = False) -> bytes:
    with client.audio.speech.with_streaming_response.create(model="s2-pro", input=text, voice="Alice",
                                                            response_format="pcm",
                                                            extra_body={"seed": seed}) as response:
        pieces = response.iter_bytes()
        audio = next(pieces)
        if first is not None:
            first.set()
        if hang_up:
            return audio
        return audio + b"".join(pieces)


def test_concurrent_requests_run_batched_and_each_sounds_as_alone(batch_server) -> None:
    runner = batch_server.state.runner
    health = httpx.get(batch_server.url + "/v1/health", headers=AUTH).json()
    assert health == {"status": "ok", "running": 0, "queued": 0, "max_batch": 3}
    client = openai.OpenAI(base_url=batch_server.url + "/v1", api_key=API_KEY, max_retries=0)
    alone_long, alone_short = speak(client, LONG, 5), speak(client, "A short one joins.", 6)

    together: dict[str, bytes] = {}
    started, seen_running = threading.Event(), []
    long_thread = threading.Thread(target=lambda: together.update(long=speak(client, LONG, 5, started)))
    long_thread.start()
    assert started.wait(60)
    before = len(runner.stats().outcomes)
    joined = threading.Event()
    short_thread = threading.Thread(target=lambda: together.update(short=speak(client, "A short one joins.", 6,
                                                                               joined)))
    short_thread.start()
    assert joined.wait(60)
    seen_running.append(len(runner.stats().running))
    speak(client, "This client hangs up.", 7, hang_up=True)  # leaves the batch at the next frame
    short_thread.join(60)
    long_thread.join(120)
    assert seen_running[0] >= 2, "the second request did not run beside the first"
    assert len(runner.stats().outcomes[before:]) >= 2 and "cancelled" in dict(runner.stats().outcomes[before:]).values()
    assert together["long"] == alone_long  # the same samples, whoever ran beside it and whoever left
    assert together["short"] == alone_short
    assert runner.stats().running == ()
