"""The remote engine's wires to vllm-omni, sglang-omni and Fish's cloud, against request/response shapes recorded
from their own docs and code (tests/fixtures/wires/, each named with the commit or release read); Fish's cloud also
against a live stub on 127.0.0.1 that checks the key (taken from the system keyring) and the `model` header; the
vllm-omni wire also live against our own `serve`, which speaks its voice upload."""

from __future__ import annotations

import base64
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import keyring
import numpy as np
import ormsgpack
import pytest
import soundfile as sf
from serve_helpers import API_KEY
from engine_contract import collect
from keyring.backend import KeyringBackend

from s2studio.engine.api import (
    JobFailed, JobFinished, LineFinished, LineSpec, LoadRequest, Reference, SynthesisRequest,
)
from s2studio.engine.remote import RemoteEngine, RemoteSettings
from s2studio.engine.voice_registry import VoiceRegistry
from s2studio.engine.wire_fish import store_cloud_key
from s2studio.settings import Sampling
from s2studio.worker.servers import ServerTarget, probe_server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "wires"
LOAD = LoadRequest("load", Path("remote"))
PCM = (np.sin(np.arange(4410) / 7.0) * 8000).astype("<i2")
"""A tenth of a second of 16-bit audio: what each recorded server sends for a line."""


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def request(clip: Path, lines: int = 2) -> SynthesisRequest:
    codes = np.arange(30, dtype=np.int64).reshape(10, 3)
    return SynthesisRequest("job", tuple(LineSpec(f"l{i}", 0, f"Line number {i}.") for i in range(lines)),
                            (Reference(0, "Hello, I am Alice.", codes, clip),), Sampling(seed_mode="fixed", seed=7))


def connected(protocol: str, handler, url: str = "http://gpu-box:8091", **kw) -> RemoteEngine:  # noqa: ANN001
    engine = RemoteEngine(RemoteSettings(url, protocol=protocol, **kw), transport=httpx.MockTransport(handler),
                          registry=VoiceRegistry())
    assert isinstance(collect(engine.load(LOAD, threading.Event()))[-1], JobFinished)
    return engine


def takes(engine: RemoteEngine, req: SynthesisRequest) -> list:
    return collect(engine.generate(req, threading.Event()))


def models(model: str) -> httpx.Response:
    return httpx.Response(200, json={"object": "list", "data": [{"id": model, "object": "model"}]})


# ------------------------------------------------------------------ vllm-omni


def test_vllm_uploads_a_voice_once_then_names_it_and_streams_pcm(clips) -> None:
    shapes, seen = fixture("vllm-omni@078de2d14c2f.json"), []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        if req.url.path == "/v1/models":
            return models("fishaudio/s2-pro")
        if req.url.path == shapes["upload"]["path"]:
            assert req.headers["content-type"].startswith(shapes["upload"]["content_type"])
            body = req.read()
            for field in shapes["upload"]["fields"] + shapes["upload"]["files"]:
                assert f'name="{field}"'.encode() in body
            return httpx.Response(200, json=shapes["upload"]["response"])
        body = json.loads(req.read())
        assert set(body) <= set(shapes["speech"]["documented_keys"]) | set(shapes["speech"]["ignored_keys_we_send"])
        assert {k: body[k] for k in shapes["speech"]["streaming"]} == shapes["speech"]["streaming"]
        assert body["voice"].startswith("s2studio-") and "ref_audio" not in body
        return httpx.Response(200, stream=httpx.ByteStream(PCM.tobytes()), headers={"content-type": "audio/pcm"})

    engine = connected("vllm", handler)
    events = takes(engine, request(clips["alice"])) + takes(engine, request(clips["alice"]))
    finished = [e for e in events if isinstance(e, LineFinished)]
    assert len(finished) == 4 and engine.model_name == "fishaudio/s2-pro"
    np.testing.assert_array_equal(finished[0].audio, PCM.astype(np.float32) / 32768)
    assert [r.url.path for r in seen].count("/v1/audio/voices") == 1  # once per server, never per line
    assert finished[0].backend.kind == "vllm" and finished[0].backend.seed_reproduces is False


def test_vllm_without_the_upload_route_sends_ref_audio_and_ref_text(clips) -> None:
    shapes, bodies = fixture("vllm-omni@078de2d14c2f.json"), []

    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/v1/models":
            return models("fishaudio/s2-pro")
        if req.url.path == "/v1/audio/voices":
            return httpx.Response(404, json={"detail": "Not Found"})
        bodies.append(json.loads(req.read()))
        return httpx.Response(200, stream=httpx.ByteStream(PCM.tobytes()))

    events = takes(connected("vllm", handler), request(clips["alice"]))
    assert sum(isinstance(e, LineFinished) for e in events) == 2
    body = bodies[-1]
    assert body["voice"] == shapes["speech"]["fish_s2_voice_with_ref_audio"]
    assert body["ref_text"] == "Hello, I am Alice." and body["ref_audio"].startswith("data:audio/wav;base64,")
    samples, rate = sf.read(io.BytesIO(base64.b64decode(body["ref_audio"].split(",", 1)[1])))
    assert rate == 44100 and len(samples) > 0


def test_vllm_error_is_one_line_with_the_servers_message(clips) -> None:
    error = fixture("vllm-omni@078de2d14c2f.json")["error"]

    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/v1/models":
            return models("fishaudio/s2-pro")
        if req.url.path == "/v1/audio/voices":
            return httpx.Response(200, json={"success": True})
        return httpx.Response(error["status"], json=error["response"])

    failed = takes(connected("vllm", handler), request(clips["alice"]))[-1]
    assert isinstance(failed, JobFailed) and failed.error.endswith("Input text cannot be empty")


def test_vllm_wire_live_against_our_serve(real_server, clips) -> None:
    engine = RemoteEngine(RemoteSettings(real_server.url, API_KEY, protocol="vllm"), registry=VoiceRegistry())
    assert isinstance(collect(engine.load(LOAD, threading.Event()))[-1], JobFinished)
    before = len(real_server.state.uploads.list())
    for _ in range(2):
        events = takes(engine, request(clips["alice"]))
        assert [type(e).__name__ for e in events if isinstance(e, LineFinished | JobFailed)] == ["LineFinished"] * 2
        assert all(len(e.audio) > 0 for e in events if isinstance(e, LineFinished))
    assert len(real_server.state.uploads.list()) == before + 1 and engine.registry.registered == 1


def test_a_server_that_forgot_a_voice_gets_it_once_more(real_server, clips) -> None:
    """A vllm-omni server keeps uploads in memory: after its restart the remembered name is unknown there."""
    engine = RemoteEngine(RemoteSettings(real_server.url, API_KEY, protocol="vllm"), registry=VoiceRegistry())
    assert isinstance(collect(engine.load(LOAD, threading.Event()))[-1], JobFinished)
    assert isinstance(takes(engine, request(clips["bob"], lines=1))[-1], JobFinished)
    (name,) = engine.registry._names.values()
    assert real_server.state.uploads.remove(name)  # what a restart of a server that keeps no uploads does
    events = takes(engine, request(clips["bob"], lines=2))
    assert isinstance(events[-1], JobFinished) and sum(isinstance(e, LineFinished) for e in events) == 2
    assert engine.registry.registered == 2 and real_server.state.uploads.get(name) is not None
    real_server.state.uploads.remove(name)


def test_a_server_too_full_to_keep_a_voice_gets_it_inline(real_server, clips, monkeypatch) -> None:
    from s2studio.serve.uploads import UploadedVoices

    monkeypatch.setattr(real_server.state, "uploads", UploadedVoices(capacity=0))  # holds no more voices
    sent: list[str] = []
    real = httpx.HTTPTransport()

    def noting(req: httpx.Request) -> httpx.Response:
        sent.append(req.url.path if req.url.path != "/v1/audio/speech" else
                    "inline" if b'"ref_audio"' in req.read() else "named")
        return real.handle_request(req)

    engine = RemoteEngine(RemoteSettings(real_server.url, API_KEY, protocol="vllm"),
                          transport=httpx.MockTransport(noting), registry=VoiceRegistry())
    assert isinstance(collect(engine.load(LOAD, threading.Event()))[-1], JobFinished)
    events = takes(engine, request(clips["alice"], lines=2))
    assert isinstance(events[-1], JobFinished), events[-1]
    assert sent[-3:] == ["/v1/audio/voices", "inline", "inline"]  # asked once, then the clip travels with each line


# ------------------------------------------------------------------ sglang-omni


def test_sglang_sends_codes_as_vq_codes_and_reads_sse_chunks(clips) -> None:
    shapes, bodies = fixture("sglang-omni@2489a10eecb9.json"), []
    chunk = shapes["sse"]["chunk"]
    chunk["audio"]["data"] = base64.b64encode(PCM.tobytes()).decode()
    stream = "".join(f"data: {json.dumps(e)}\n\n" for e in (chunk, chunk, shapes["sse"]["final"]))
    stream += f"data: {shapes['sse']['done']}\n\n"

    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/v1/models":
            return models("fishaudio/s2-pro")
        body = json.loads(req.read())
        bodies.append(body)
        assert set(body) <= set(shapes["speech"]["documented_keys"])
        assert all(set(r) <= set(shapes["speech"]["reference_keys"]) for r in body["references"])
        return httpx.Response(200, stream=httpx.ByteStream(stream.encode()), headers={"content-type": "text/event-stream"})

    req = request(clips["alice"])
    events = takes(connected("sglang", handler), req)
    finished = [e for e in events if isinstance(e, LineFinished)]
    assert len(finished) == 2 and len(finished[0].audio) == 2 * len(PCM)
    assert bodies[0]["references"] == [{"text": "Hello, I am Alice.", "vq_codes": req.references[0].codes.tolist()}]
    assert [b["seed"] for b in bodies] == [7, 8] and bodies[0]["stream"] is True
    assert finished[0].backend.seed_reproduces is True


def test_sglang_error_and_a_stream_without_done_fail_in_one_line(clips) -> None:
    error = fixture("sglang-omni@2489a10eecb9.json")["error"]
    answers = iter([httpx.Response(error["status"], json=error["response"]),
                    httpx.Response(200, stream=httpx.ByteStream(b"data: {\"audio\": null}\n\n"))])

    def handler(req: httpx.Request) -> httpx.Response:
        return models("s2") if req.url.path == "/v1/models" else next(answers)

    engine = connected("sglang", handler)
    assert takes(engine, request(clips["alice"]))[-1].error.endswith("reference audio could not be read")
    assert "ended the stream before [DONE]" in takes(engine, request(clips["alice"]))[-1].error


# ------------------------------------------------------------------ Fish's cloud


class MemoryKeyring(KeyringBackend):
    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.items.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.items[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.items.pop((service, username), None)


@pytest.fixture
def cloud_stub():
    """Fish's cloud on 127.0.0.1: checks the key and the model header, creates voices, answers WAV."""
    shapes = fixture("fish-audio-sdk@1.3.0.json")
    calls: list[tuple[str, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # noqa: ANN002
            pass

        def _reply(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - the key's credit (docs.fish.audio: Wallet, Get API Credit)
            if self.headers["Authorization"] != "Bearer cloud-key-123":
                return self._reply(401, json.dumps({"status": 401, "message": "Invalid API key"}).encode())
            assert self.path == "/wallet/self/api-credit"
            calls.append(("credit", {}))
            return self._reply(200, json.dumps({"credit": "12.50", "has_free_credit": False}).encode())

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers["Authorization"] != "Bearer cloud-key-123":
                return self._reply(401, json.dumps({"status": 401, "message": "Invalid API key"}).encode())
            if self.path == shapes["create_voice"]["path"]:
                assert self.headers["Content-Type"].startswith(shapes["create_voice"]["content_type"])
                for field in shapes["create_voice"]["fields"] + shapes["create_voice"]["files"]:
                    assert f'name="{field}"'.encode() in body
                calls.append(("model", {}))
                return self._reply(200, json.dumps(shapes["create_voice"]["response"]).encode())
            assert self.path == "/v1/tts" and self.headers["model"] == shapes["headers"]["model"]
            assert self.headers["Content-Type"] == shapes["tts"]["content_type"]
            sent = ormsgpack.unpackb(body)
            assert set(sent) <= set(shapes["tts"]["documented_keys"])
            for key, (low, high) in shapes["tts"]["ranges"].items():
                assert low <= sent[key] <= high, key
            calls.append(("tts", sent))
            wav = io.BytesIO()
            sf.write(wav, PCM, 44100, subtype="PCM_16", format="WAV")
            self._reply(200, wav.getvalue(), "audio/wav")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    previous = keyring.get_keyring()
    keyring.set_keyring(MemoryKeyring())
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", calls
    finally:
        keyring.set_keyring(previous)
        server.shutdown()


def test_fish_cloud_creates_the_voice_once_and_names_it_by_reference_id(cloud_stub, clips) -> None:
    url, calls = cloud_stub
    store_cloud_key("cloud-key-123")
    engine = RemoteEngine(RemoteSettings(url, protocol="fishcloud"), registry=VoiceRegistry())
    assert isinstance(collect(engine.load(LOAD, threading.Event()))[-1], JobFinished)
    req = request(clips["alice"])
    req = SynthesisRequest(req.job_id, req.lines, req.references, Sampling(temperature=1.5, seed_mode="fixed", seed=7))
    events = takes(engine, req)
    finished = [e for e in events if isinstance(e, LineFinished)]
    assert len(finished) == 2 and len(finished[0].audio) == len(PCM)
    assert [kind for kind, _ in calls] == ["credit", "model", "tts", "tts"]
    assert {sent["reference_id"] for _, sent in calls[2:]} == {"802e3bc2b27e49c2995d23ef70e6ac89"}
    assert finished[0].backend.kind == "fishcloud" and not finished[0].backend.seed_reproduces


def test_fish_cloud_with_a_wrong_key_fails_in_one_line_and_test_checks_the_key(cloud_stub, clips) -> None:
    url, calls = cloud_stub
    store_cloud_key("wrong-key")
    engine = RemoteEngine(RemoteSettings(url, protocol="fishcloud"), registry=VoiceRegistry())
    failed = collect(engine.load(LOAD, threading.Event()))[-1]  # at once, before any voice or line is sent
    assert isinstance(failed, JobFailed) and "refused the API key (Invalid API key)" in failed.error
    target = ServerTarget(url, kind="fishcloud")  # Settings ▸ Render on ▸ Test
    assert probe_server(target).startswith("Not connected: ") and "refused the API key" in probe_server(target)
    store_cloud_key("cloud-key-123")
    tested = probe_server(target)
    assert tested.startswith("Connected: s2-pro on 127.0.0.1:") and "fishcloud protocol" in tested
    assert calls == [("credit", {})]  # the key checked, nothing created or spoken


def test_the_registry_remembers_each_voice_across_sessions_and_survives_a_bad_file(clips, tmp_path) -> None:
    uploads = []

    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/v1/models":
            return models("fishaudio/s2-pro")
        if req.url.path == "/v1/audio/voices":
            uploads.append(req)
            return httpx.Response(200, json={"success": True})
        return httpx.Response(200, stream=httpx.ByteStream(PCM.tobytes()))

    path = tmp_path / "voice-registry.json"
    for _ in range(2):  # two sessions: the second finds the voice remembered
        engine = RemoteEngine(RemoteSettings("http://gpu-box:8091", protocol="vllm"),
                              transport=httpx.MockTransport(handler), registry=VoiceRegistry(path))
        collect(engine.load(LOAD, threading.Event()))
        assert isinstance(takes(engine, request(clips["alice"]))[-1], JobFinished)
    assert len(uploads) == 1 and "http://gpu-box:8091" in path.read_text()
    path.write_text("{not json")
    assert VoiceRegistry(path).registered == 0 and VoiceRegistry(path)._names == {}


def test_a_voice_uploaded_once_outlives_a_restart_of_the_server_and_of_the_studio(tiny_model, clips, tmp_path,
                                                                                   monkeypatch) -> None:
    """Session 1 uploads Alice to a real `s2studio serve`; both restart; session 2 names her without sending her
    again (the studio's registry and the server's uploads are both on disk), and its lines render."""
    from serve_process import ServeProcess

    from s2studio.engine.remote import remembered_voices

    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "studio"))
    registry_path = remembered_voices().path
    assert registry_path == tmp_path / "studio" / "voice-registry.json"
    uploads: list[str] = []
    real = httpx.HTTPTransport()

    def counting(req: httpx.Request) -> httpx.Response:
        if req.method == "POST" and req.url.path == "/v1/audio/voices":
            uploads.append(req.url.host)
        return real.handle_request(req)

    port = None
    for _ in range(2):
        with ServeProcess(tiny_model, tmp_path / "server", tmp_path / "tmp", "--no-fast", "--max-new-tokens", "2",
                          port=port) as server:
            port = server.port
            engine = RemoteEngine(RemoteSettings(server.url, protocol="vllm"),
                                  transport=httpx.MockTransport(counting), registry=VoiceRegistry(registry_path))
            assert isinstance(collect(engine.load(LOAD, threading.Event()))[-1], JobFinished)
            events = takes(engine, request(clips["alice"]))
            engine.close()
        assert isinstance(events[-1], JobFinished), events[-1]
        assert sum(isinstance(e, LineFinished) for e in events) == 2
    assert uploads == ["127.0.0.1"]  # once, in the first session
    assert "1 uploaded by clients" in server.log  # the second server found it in its data folder
    kept = sorted(p.suffix for p in (tmp_path / "server" / "uploaded-voices").iterdir())
    assert kept == [".json", ".wav"]
