"""What the server refuses and how: keys, sizes, a full queue, a client that hangs up, CORS, the loopback
rule. Queueing and cancelling run on the seam's `FakeEngine` (slow tones), so their timing is the test's."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import numpy as np
import ormsgpack
import pytest
import soundfile as sf
from serve_helpers import API_KEY, live_server

from s2studio.cli import main
from s2studio.engine.api import LoadRequest
from s2studio.engine.fake import FakeEngine
from s2studio.errors import UserError
from s2studio.serve.config import Limits, ServeConfig

AUTH = {"Authorization": f"Bearer {API_KEY}"}
SLOW_TEXT = " ".join(["A long sentence that keeps the fake engine busy for a while, frame after frame."] * 8)
"""About 170 frames in three lines: at 50 ms a frame, nine seconds of work."""


@pytest.fixture
def fake_server(library):
    engines: list[FakeEngine] = []

    def factory() -> FakeEngine:
        engines.append(FakeEngine(frame_latency_s=0.05, max_batch=1))  # one stream: the queue fills at once
        return engines[-1]

    limits = Limits(max_body_bytes=64 * 1024, queue_size=1, max_text_chars=1000)
    with live_server(LoadRequest("load", Path("fake")), library, factory, limits=limits,
                     cors_origins=("http://localhost:3000",)) as server:
        server.engines = engines
        yield server


def speech(url: str, text: str = SLOW_TEXT, **extra: object) -> httpx.Request:
    return httpx.Request("POST", url + "/v1/audio/speech", headers=AUTH,
                         json={"model": "s2-pro", "input": text, "voice": "Alice", "response_format": "pcm", **extra})


def wait_for(condition, timeout: float = 20.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_missing_or_wrong_key_is_401_in_each_apis_shape(fake_server) -> None:
    r = httpx.post(fake_server.url + "/v1/audio/speech", json={"input": "Hi.", "voice": "Alice"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert r.json()["error"] == {"message": "this server needs an API key; send `Authorization: Bearer KEY`",
                                 "type": "authentication_error", "param": None, "code": "invalid_api_key"}
    r = httpx.post(fake_server.url + "/v1/tts", json={"text": "Hi."}, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["message"].startswith("the API key is wrong")
    assert r.json()["statusCode"] == 401
    assert httpx.get(fake_server.url + "/v1/health", headers={"Authorization": "Basic " + API_KEY}).status_code == 401
    assert httpx.get(fake_server.url + "/v1/health", headers=AUTH).json() == {"status": "ok", "running": 0, "queued": 0,
                                                                             "max_batch": 1}


def test_a_body_over_the_limit_is_413_before_it_is_read(fake_server, clips) -> None:
    big = {"text": "Hi.", "references": [{"audio": b"\0" * 70_000, "text": "x"}]}
    r = httpx.post(fake_server.url + "/v1/tts", content=ormsgpack.packb(big),
                   headers={**AUTH, "Content-Type": "application/msgpack"})
    assert r.status_code == 413 and r.json()["message"] == ("the request body is larger than this server's limit of "
                                                            "64 kB; send shorter or fewer reference clips")

    def chunked():  # no Content-Length: the limit holds while the body streams in
        for _ in range(20):
            yield b"x" * 8192

    r = httpx.post(fake_server.url + "/v1/audio/speech", content=chunked(),
                   headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    r = httpx.post(fake_server.url + "/v1/audio/voices", content=chunked(),  # an upload is read the same way
                   headers={**AUTH, "Content-Type": "multipart/form-data; boundary=x"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"


def test_text_and_reference_limits_are_400_naming_the_limit(fake_server, clips, tmp_path) -> None:
    r = httpx.post(fake_server.url + "/v1/tts", json={"text": "x" * 1001}, headers=AUTH)
    assert r.status_code == 400 and r.json()["message"] == "text is 1001 characters; this server takes at most 1000"
    long_clip = tmp_path / "long.flac"
    sf.write(str(long_clip), np.zeros(61 * 8000, np.float32), 8000)  # silence: a few kB of FLAC
    body = {"text": "Hi.", "references": [{"audio": long_clip.read_bytes(), "text": "Long."}]}
    r = httpx.post(fake_server.url + "/v1/tts", content=ormsgpack.packb(body),
                   headers={**AUTH, "Content-Type": "application/msgpack"})
    assert r.status_code == 400 and r.json()["message"].startswith("reference 1 is 61 s long")
    body = {"text": "Hi.", "references": [{"audio": b"RIFF nonsense", "text": "Bad."}]}
    r = httpx.post(fake_server.url + "/v1/tts", content=ormsgpack.packb(body),
                   headers={**AUTH, "Content-Type": "application/msgpack"})
    assert r.status_code == 400 and "reference 1 is not audio" in r.json()["message"]
    r = httpx.post(fake_server.url + "/v1/tts", content=b"text=hi", headers={**AUTH, "Content-Type": "text/plain"})
    assert r.status_code == 415
    r = httpx.get(fake_server.url + "/v1/nothing", headers=AUTH)
    assert r.status_code == 404 and r.json()["message"] == "no route GET /v1/nothing on this server"


def test_a_full_queue_answers_503_with_retry_after(fake_server) -> None:
    runner = fake_server.state.runner
    with httpx.Client(timeout=30) as running, httpx.Client(timeout=30) as waiting, httpx.Client() as third:
        first = running.send(speech(fake_server.url), stream=True)
        second: list[httpx.Response] = []
        thread = threading.Thread(target=lambda: second.append(waiting.send(speech(fake_server.url, "Queued."))))
        thread.start()
        try:
            wait_for(lambda: runner.stats().queued == 1)
            r = third.send(speech(fake_server.url))
            assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
            assert r.json()["error"]["code"] == "queue_full"
            assert r.json()["error"]["message"].startswith("the server is busy (1 requests wait)")
            health = httpx.get(fake_server.url + "/v1/health", headers=AUTH).json()
            assert health == {"status": "ok", "running": 1, "queued": 1, "max_batch": 1}
        finally:
            first.close()
            thread.join(timeout=60)
    assert second and second[0].status_code == 200  # the one that waited got its turn


def test_a_client_that_disconnects_mid_stream_cancels_its_job(fake_server) -> None:
    runner = fake_server.state.runner
    with httpx.Client(timeout=30) as client:
        response = client.send(speech(fake_server.url), stream=True)
        job = response.headers["x-s2-job"]
        next(response.iter_raw())
        response.close()
    wait_for(lambda: dict(runner.stats().outcomes).get(job) is not None)
    assert dict(runner.stats().outcomes)[job] == "cancelled"
    record = next(r for r in fake_server.state.history if r.job_id == job)
    assert record.outcome == "cancelled"


def test_a_queued_request_whose_client_leaves_never_reaches_the_engine(fake_server) -> None:
    runner = fake_server.state.runner
    with httpx.Client(timeout=30) as client:
        first = client.send(speech(fake_server.url), stream=True)
        wait_for(lambda: bool(runner.stats().running))
        engine = fake_server.engines[0]
        calls = len(engine.calls)
        with httpx.Client(timeout=httpx.Timeout(30, read=0.5)) as impatient:
            with pytest.raises(httpx.ReadTimeout):
                impatient.send(speech(fake_server.url))  # waits in the queue, then gives up
        first.close()  # the running job ends; the next one in the queue is the one whose client left
    wait_for(lambda: len(runner.stats().outcomes) >= 3)
    outcomes = runner.stats().outcomes
    assert [o for _, o in outcomes[-2:]].count("cancelled") == 2, outcomes
    assert len(engine.calls) == calls  # the queued job was dropped before the engine saw it


def test_cors_is_off_unless_an_origin_is_given(fake_server, real_server) -> None:
    preflight = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}
    r = httpx.options(fake_server.url + "/v1/audio/speech", headers=preflight)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
    r = httpx.options(fake_server.url + "/v1/audio/speech", headers={**preflight, "Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in r.headers
    r = httpx.get(real_server.url + "/v1/health", headers={**AUTH, "Origin": "http://localhost:3000"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_any_address_but_loopback_needs_an_api_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(UserError, match="refusing to listen on 0.0.0.0 without an API key"):
        ServeConfig(host="0.0.0.0")
    with pytest.raises(UserError, match="refusing to listen on 192.168.1.5"):
        ServeConfig(host="192.168.1.5", api_key="")
    assert ServeConfig(host="::1").api_key is None and ServeConfig(host="localhost").host == "localhost"
    assert ServeConfig(host="0.0.0.0", api_key="long-enough-key").host == "0.0.0.0"
    assert main(["serve", "--model", str(tmp_path), "--host", "0.0.0.0"]) == 2
    assert "refusing to listen on 0.0.0.0 without an API key" in capsys.readouterr().err
