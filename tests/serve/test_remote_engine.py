"""The remote engine: the engine contract against a live `s2studio serve` on loopback, its Fish and OpenAI
protocols against the same server's Fish and OpenAI routes, and every way a connection can fail."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from serve_helpers import API_KEY
from engine_contract import check_engine, collect

from s2studio.engine.api import (
    AudioChunk, JobFailed, JobFinished, LineFinished, LineSpec, LoadRequest, Reference, SynthesisRequest,
)
from s2studio.engine.remote import RemoteEngine, RemoteSettings
from s2studio.serve.server import free_port
from s2studio.settings import Sampling

LOAD = LoadRequest("load-1", Path("remote"))


def connected(url: str, **settings: object) -> RemoteEngine:
    engine = RemoteEngine(RemoteSettings(url, **settings))  # type: ignore[arg-type]
    events = collect(engine.load(LOAD, threading.Event()))
    assert isinstance(events[-1], JobFinished), events[-1]
    return engine


def test_remote_engine_passes_the_contract_against_a_live_server(real_server, tmp_path: Path) -> None:
    clip, junk = tmp_path / "clip.wav", tmp_path / "junk.wav"
    from tones import tone

    tone(clip, 1.0, 200.0, 24000)
    junk.write_bytes(b"not audio" * 50)
    engine = RemoteEngine(RemoteSettings(real_server.url, API_KEY))
    check_engine(engine, LOAD, clip, junk)
    assert engine.protocol == "s2studio"
    assert engine.info is not None and engine.info.codec_fingerprint == real_server.state.info.codec_fingerprint
    assert engine.info.name == f"tiny on 127.0.0.1:{real_server.state.config.port}"


def test_a_remote_take_equals_the_local_engines_take(real_server) -> None:
    engine = connected(real_server.url, api_key=API_KEY)
    codes = np.random.default_rng(1).integers(0, 32, size=(10, 6))  # codes the tiny codec could make
    request = SynthesisRequest("same", (LineSpec("a", 0, "Same words."), LineSpec("b", 1, "Other words.")),
                               (Reference(0, "Ref one.", codes), Reference(1, "Ref two.", codes[:, :4])),
                               Sampling(max_frames=10, seed_mode="fixed", seed=3))
    remote = [ev for ev in collect(engine.generate(request, threading.Event())) if isinstance(ev, LineFinished)]
    local_engine = real_server.state.runner.engine
    local = [ev for ev in collect(local_engine.generate(request, threading.Event())) if isinstance(ev, LineFinished)]
    assert len(remote) == len(local) == 2
    for r, l in zip(remote, local):
        np.testing.assert_array_equal(r.codes, l.codes)
        np.testing.assert_array_equal(r.audio, l.audio)
        assert (r.seed, r.fingerprint) == (l.seed, l.fingerprint)


@pytest.mark.parametrize("protocol", ["fish", "openai"])
def test_fish_and_openai_protocols_stream_audio_of_each_line(real_server, clips, protocol: str) -> None:
    engine = connected(real_server.url, api_key=API_KEY, protocol=protocol, voices=("Alice", "Bob"))
    assert engine.protocol == protocol
    codes = np.zeros((10, 1), np.int64)
    request = SynthesisRequest("p", (LineSpec("a", 0, "First line."), LineSpec("b", 1, "Second line.")),
                               (Reference(0, "Hello, I am Alice.", codes, clips["alice"]),
                                Reference(1, "And I am Bob.", codes, clips["bob"])),
                               Sampling(max_frames=8, seed_mode="fixed", seed=2))
    events = collect(engine.generate(request, threading.Event()))
    assert isinstance(events[-1], JobFinished) and not events[-1].cancelled, events[-1]
    takes = [ev for ev in events if isinstance(ev, LineFinished)]
    assert [t.line_id for t in takes] == ["a", "b"] and [t.seed for t in takes] == [2, 3]
    for take in takes:
        chunks = [ev for ev in events if isinstance(ev, AudioChunk) and ev.line_id == take.line_id]
        assert len(chunks) >= 2, "audio arrives while the line is generated, not at its end"
        np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks]), take.audio)
        assert take.codes.shape == (10, 0)  # such servers return audio only
        assert 0 < len(take.audio) <= 12 * 2048  # openai has no frame limit: the server caps at 12


def test_wrong_key_and_unreachable_server_fail_in_one_line(real_server) -> None:
    events = collect(RemoteEngine(RemoteSettings(real_server.url, "not-the-key")).load(LOAD, threading.Event()))
    assert isinstance(events[-1], JobFailed) and "refused the API key" in events[-1].error
    port = free_port()
    events = collect(RemoteEngine(RemoteSettings(f"http://127.0.0.1:{port}")).load(LOAD, threading.Event()))
    assert isinstance(events[-1], JobFailed) and events[-1].error.startswith(
        f"cannot reach the server at http://127.0.0.1:{port}") and "\n" not in events[-1].error
    with pytest.raises(ValueError, match="not a server address"):
        RemoteEngine(RemoteSettings("gpu-box:8000"))


class RawServer:
    """A loopback HTTP/1.1 server that answers /v1/health, then breaks the /v1/tts response as `tts` says."""

    def __init__(self, tts: Callable[[socket.socket], None]) -> None:
        self.tts = tts
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    more = conn.recv(65536)
                    if not more:
                        return
                    data += more
                head, _, data = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(data) < length:
                    data += conn.recv(65536)
                data = data[length:]
                if b" /v1/health " in head.split(b"\r\n")[0]:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n"
                                 b'{"status":"ok"}')
                    continue
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: audio/wav\r\nTransfer-Encoding: chunked\r\n\r\n")
                self.tts(conn)
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _request() -> SynthesisRequest:
    return SynthesisRequest("r", (LineSpec("a", 0, "A line."),),
                            sampling=Sampling(max_frames=8, seed_mode="fixed", seed=1))


def test_a_connection_that_breaks_mid_stream_is_a_failed_job() -> None:
    from s2studio.audio.stream_encode import wav_header

    server = RawServer(lambda conn: conn.sendall(_chunk(wav_header(None) + b"\x00\x01" * 2048)))
    try:
        engine = connected(server.url, protocol="fish")
        events = collect(engine.generate(_request(), threading.Event()))
        assert isinstance(events[-1], JobFailed), events[-1]
        assert "connection to the server at" in events[-1].error and "broke" in events[-1].error
        assert any(isinstance(ev, AudioChunk) for ev in events)  # what came before the break was played
    finally:
        server.close()


def test_a_server_that_goes_quiet_is_a_failed_job_not_a_hang() -> None:
    from s2studio.audio.stream_encode import wav_header

    hold = threading.Event()

    def quiet(conn: socket.socket) -> None:
        conn.sendall(_chunk(wav_header(None)))
        hold.wait(10)

    server = RawServer(quiet)
    try:
        engine = connected(server.url, protocol="fish", quiet_s=1.0)
        events = collect(engine.generate(_request(), threading.Event()))
        assert isinstance(events[-1], JobFailed) and "sent nothing for 1 s" in events[-1].error
    finally:
        hold.set()
        server.close()


def test_cancel_closes_the_stream_and_the_server_cancels_the_job(real_server) -> None:
    engine = connected(real_server.url, api_key=API_KEY)
    cancel = threading.Event()
    lines = tuple(LineSpec(f"l{i}", 0, f"Line number {i}.") for i in range(6))
    events = collect(engine.generate(SynthesisRequest("c", lines,
                                                      sampling=Sampling(max_frames=12, seed_mode="fixed", seed=1)),
                                     cancel), cancel_after_first_chunk=cancel)
    assert isinstance(events[-1], JobFinished) and events[-1].cancelled
    runner = real_server.state.runner
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and runner.stats().running:
        time.sleep(0.05)
    last = runner.stats().outcomes[-1]
    assert last[1] == "cancelled", runner.stats()
