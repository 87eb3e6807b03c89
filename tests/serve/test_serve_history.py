"""Same request, same audio, whatever the server answered before: the report's A, A, B, A through the real
`openai` client against a live `s2studio serve --fast --precision bf16` on the tiny demo model (the second A used
to reuse all but the last column of the first A's cached prompt and come out different)."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from serve_helpers import API_KEY, live_server

from s2studio.engine.api import LoadRequest
from s2studio.serve.config import Limits
from s2studio.serve.server import ThreadedServer


@pytest.fixture(scope="module")
def fast_server(tiny_model, library) -> Iterator[ThreadedServer]:
    load = LoadRequest("load", tiny_model, device="cpu", precision="bf16", speed="fast", threads=1)
    with live_server(load, library, limits=Limits(max_new_tokens=40, queue_size=4)) as server:
        yield server


def test_a_repeated_request_gives_the_same_audio_whatever_came_before(fast_server) -> None:
    client = openai.OpenAI(base_url=fast_server.url + "/v1", api_key=API_KEY)

    def speech(text: str) -> bytes:
        return client.audio.speech.create(model="s2-pro", voice="Alice", input=text, response_format="pcm",
                                          extra_body={"seed": 7}).read()

    a, b = "Could you pass me the salt?", "The garden stays open until dusk."
    first, second, other, fourth = speech(a), speech(a), speech(b), speech(a)
    assert len(first) > 0 and first != other
    assert second == first
    assert fourth == first
