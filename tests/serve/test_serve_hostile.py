"""The real `s2studio serve` process given what a careless client, a web page or an attacker on this computer
sends: small files that decode to much, odd sample rates, other media types and host names, connections that
never finish, bodies that stall the event loop, fields out of range, broken voices and LoRAs. Every answer is
one clear 4xx (or a closed connection) in the API's own shape; the server stays up and answering; its log gets
one line per such client and no traceback."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import ormsgpack
import pytest
from safetensors.numpy import save as save_safetensors
from serve_process import ServeProcess, flac_of_unknown_length, wav_bytes

from s2studio.engine import remote_wire
from s2studio.engine.api import LineSpec, SynthesisRequest
from s2studio.settings import LIMITS, Sampling
from s2studio.state.voices import VoiceLibrary

KEY = "hostile-test-key-0123"
MSGPACK = {"Content-Type": "application/msgpack"}
ARGS = ("--no-fast", "--max-new-tokens", "4", "--header-timeout", "1", "--body-timeout", "1", "--max-connections", "16")
"""The exact mode (no kernels to build on a fresh cache), short generations, short timeouts, a small cap."""


def lora_bytes(n_in: int = 64, n_out: int = 192, rank: int = 8, nan: bool = False) -> bytes:
    """A LoRA of the tiny model's first wqkv (64 -> 192), or another model's shape, optionally with a NaN."""
    a = np.full((rank, n_in), 0.01, np.float32)
    if nan:
        a[0, 0] = np.nan
    return save_safetensors({"layers.0.attention.wqkv.lora_A": a,
                             "layers.0.attention.wqkv.lora_B": np.zeros((n_out, rank), np.float32)})


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A library with good voices and the damage an older library or a hand-edited folder may hold."""
    root = tmp_path_factory.mktemp("hostile-serve")
    lib = VoiceLibrary(root / "data" / "voices")
    clip = root / "clip.wav"
    clip.write_bytes(wav_bytes(1.5))
    lib.create("Alice", [(clip, "Hello, I am Alice.")])
    odd = lib.create("Odd", [(clip, "An odd rate.")])  # then its clip becomes what older versions let in
    (lib.root / odd.id / odd.clips[0].file).write_bytes(wav_bytes(1.5, rate=8009, fmt="FLAC"))
    gone = lib.create("Gone", [(clip, "A lost clip.")])
    (lib.root / gone.id / gone.clips[0].file).unlink()
    for name, data in (("Nan", lora_bytes(nan=True)), ("Other", lora_bytes(n_in=128, n_out=384))):
        voice = lib.create(name, [(clip, "A voice with a LoRA.")])
        good = root / f"{name}.safetensors"
        good.write_bytes(lora_bytes() if name == "Nan" else data)
        lib.set_lora(voice.id, good)
        (lib.root / voice.id / "lora.safetensors").write_bytes(data)  # damaged after it was attached
    (root / "tmp").mkdir()
    (root / "tmp" / "s2studio-serve-999999999-stale").mkdir()  # left by a killed server (no such process)
    return root


@pytest.fixture(scope="module")
def server(tiny_model: Path, data: Path):
    with ServeProcess(tiny_model, data / "data", data / "tmp", *ARGS) as proc:
        yield proc


@pytest.fixture(scope="module")
def keyed(tiny_model: Path, data: Path):
    with ServeProcess(tiny_model, data / "data", data / "tmp", *ARGS, "--host", "127.0.0.1", api_key=KEY) as proc:
        yield proc


def error_text(r: httpx.Response) -> str:
    body = r.json()
    return body["error"]["message"] if "error" in body and isinstance(body["error"], dict) else body["message"]


def tts(server: ServeProcess, body: dict, **headers: str) -> httpx.Response:
    return httpx.post(server.url + "/v1/tts", content=ormsgpack.packb(body), headers={**MSGPACK, **headers},
                      timeout=60)


def upload(server: ServeProcess, name: str, audio: bytes | None = None, **headers: str) -> httpx.Response:
    return httpx.post(server.url + "/v1/audio/voices", data={"name": name, "consent": "mine", "ref_text": "Hello."},
                      files={"audio_sample": ("a.wav", audio or wav_bytes(1.0), "audio/wav")}, headers=headers,
                      timeout=60)


def speech(server: ServeProcess, voice: str, **extra: object) -> httpx.Response:
    return httpx.post(server.url + "/v1/audio/speech", json={"input": "Hi there.", "voice": voice,
                                                             "response_format": "wav", **extra}, timeout=120)


# ----------------------------------------------------------------------------- 1: memory from a tiny file


@pytest.mark.parametrize("rate", [8009, 44101, 22051, 11111, 47999])
def test_references_at_odd_rates_are_refused_in_one_line(server, rate: int) -> None:
    r = tts(server, {"text": "Hi.", "references": [{"audio": wav_bytes(1.0), "text": "Fine."},
                                                   {"audio": wav_bytes(1.0, rate=rate), "text": "Odd."}]})
    assert r.status_code == 400 and r.json()["code"] == "invalid_reference"
    assert r.json()["message"] == (f"reference 2 has an unusual sample rate of {rate} Hz, which does not convert to "
                                   "44.1 kHz exactly; convert the clip to 44.1 or 48 kHz")


@pytest.mark.parametrize("make,message", [
    (lambda: wav_bytes(0.05, rate=655350, channels=8, fmt="FLAC", hz=0),
     "reference 1 has a sample rate of 655.35 kHz, above the 192 kHz this program reads"),
    (lambda: wav_bytes(20.0, rate=48000, channels=8, fmt="FLAC", hz=0),
     "reference 1 holds 7.7 million samples (8 channels at 48 kHz), more than the 2.9 million"),
    (lambda: wav_bytes(4.0, rate=192000, channels=8, subtype="PCM_16", hz=0),  # a WAV: 12 MB, 6 million samples
     "reference 1 holds 6.1 million samples (8 channels at 192 kHz), more than the 2.9 million"),
    (lambda: wav_bytes(1.0, rate=44100, channels=12, hz=0), "reference 1 has 12 channels; at most 8 are read"),
    (lambda: flac_of_unknown_length(1200.0, rate=8000, channels=1),
     "reference 1 is longer than 30 s; use a clip of at most 30 s"),
    (lambda: wav_bytes(1200.0, rate=8000, fmt="FLAC", hz=0), "reference 1 is 1200 s long; use a clip of at most 30 s"),
], ids=["655kHz-8ch-flac", "8ch-flac", "192kHz-8ch-wav", "12ch-wav", "flac-without-length", "20min-flac"])
def test_decompression_bombs_are_refused_from_the_header_or_at_the_limit(server, make, message: str) -> None:
    audio = make()
    assert len(audio) < 13_000_000
    r = tts(server, {"text": "Hi.", "references": [{"audio": audio, "text": "Bomb."}]})
    assert r.status_code == 400 and r.json()["message"].startswith(message), r.json()


def test_ref_audio_and_uploads_are_refused_as_references_are(server) -> None:
    """The other ways a clip enters: a `ref_audio` data URL on /v1/audio/speech and a voice upload."""
    for audio, message in ((wav_bytes(1.0, rate=11111), "reference 1 has an unusual sample rate of 11111 Hz"),
                           (wav_bytes(0.05, rate=655350, channels=8, fmt="FLAC", hz=0),
                            "reference 1 has a sample rate of 655.35 kHz, above the 192 kHz this program reads"),
                           (flac_of_unknown_length(1200.0, rate=8000, channels=1),
                            "reference 1 is longer than 30 s; use a clip of at most 30 s")):
        url = "data:audio/wav;base64," + base64.b64encode(audio).decode()
        r = speech(server, "x", ref_audio=url, ref_text="A clip.")
        assert r.status_code == 400 and error_text(r).startswith(message), error_text(r)
        r = upload(server, "Bomb", audio=audio)
        assert r.status_code == 400 and error_text(r).startswith(message), error_text(r)
    assert "Bomb" not in httpx.get(server.url + "/v1/audio/voices").json()["voices"]
    r = httpx.post(server.url + "/v1/audio/voices", files={"audio_sample": ("a.wav", wav_bytes(1.0))},
                   data={"name": "Long", "consent": "x" * 900_000, "ref_text": "Hello."})
    assert r.status_code == 400 and error_text(r) == "consent is 900000 characters; this server takes at most 4096"


def test_library_voices_with_clips_they_cannot_use_name_the_voice(server) -> None:
    r = speech(server, "Odd")
    assert r.status_code == 400
    assert error_text(r) == ("voice 'Odd', clip 1: clip1.flac has an unusual sample rate of 8009 Hz, which does not "
                             "convert to 44.1 kHz exactly; convert the clip to 44.1 or 48 kHz")
    r = speech(server, "Gone")
    assert r.status_code == 400
    assert error_text(r) == ("voice 'Gone' is damaged: its clip 1 (clip1.flac) is missing; remove the voice and add "
                             "it again")
    assert speech(server, "Alice").status_code == 200  # and the server renders on


def test_lines_per_request_are_bounded(server) -> None:
    r = httpx.post(server.url + "/v1/audio/speech", json={"input": "Hi\n" * 1001, "voice": "Alice"})
    assert r.status_code == 400 and error_text(r) == "input: 1001 lines; this server takes at most 1000 in one request"
    request = SynthesisRequest("x", tuple(LineSpec(f"l{i}", 0, "") for i in range(2000)))
    r = httpx.post(server.url + "/v1/s2studio/generate", content=remote_wire.request_to_wire(request), headers=MSGPACK)
    assert r.status_code == 400 and r.json()["message"] == "lines: 2000 items; this server takes at most 1000"
    request = SynthesisRequest("x", (LineSpec("a", 0, "Hi."), LineSpec("b", 0, "  "), LineSpec("c", 0, "Yes.")))
    r = httpx.post(server.url + "/v1/s2studio/generate", content=remote_wire.request_to_wire(request), headers=MSGPACK)
    assert r.status_code == 400 and r.json()["message"] == "lines: line 2 has no text; leave out empty lines"


# ----------------------------------------------------------------------------- 2: any web page


def test_without_a_key_only_loopback_host_names_are_answered(server) -> None:
    for host in ("evil.example", "evil.example:8000", "192.168.1.7", "localhost.evil.example"):
        for method, path in (("GET", "/v1/voices"), ("POST", "/v1/audio/speech")):
            r = httpx.request(method, server.url + path, headers={"Host": host}, json={"input": "x", "voice": "Alice"})
            assert r.status_code == 403, (host, path)
            assert "answers only requests addressed to 127.0.0.1, [::1] or localhost" in error_text(r)
    for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}", f"[::1]:{server.port}", "LOCALHOST"):
        assert httpx.get(server.url + "/v1/voices", headers={"Host": host}).status_code == 200, host


def test_each_route_takes_only_its_own_media_type(server) -> None:
    speech_body = json.dumps({"input": "Hi.", "voice": "Alice"})
    for path, body in (("/v1/audio/speech", speech_body), ("/v1/tts", json.dumps({"text": "Hi."})),
                       ("/v1/s2studio/generate", "x"), ("/v1/vqgan/encode", "x")):
        for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
            headers = {} if kind is None else {"Content-Type": kind}
            r = httpx.post(server.url + path, content=body, headers=headers)
            assert r.status_code == 415, (path, kind)
            assert error_text(r).startswith("cannot read a "), error_text(r)
    for kind in ("text/plain", "application/json", "application/x-www-form-urlencoded", None):
        headers = {} if kind is None else {"Content-Type": kind}
        r = httpx.post(server.url + "/v1/audio/voices", content="x", headers=headers)
        assert r.status_code == 415 and "send multipart/form-data" in error_text(r), (kind, r.text)
    assert speech(server, "Alice").status_code == 200  # with its own type it works




def test_without_a_key_a_web_page_elsewhere_cannot_even_post_a_form(server) -> None:
    """A page may post multipart forms cross-site without asking first; its browser names it in `Origin`."""
    for origin in ("http://evil.example", "https://evil.example:8443", "null", "http://localhost.evil.example"):
        r = upload(server, "Page", Origin=origin)
        assert r.status_code == 403, (origin, r.text)
        assert "answers only web pages served from 127.0.0.1, [::1] or localhost" in error_text(r)
    assert "Page" not in httpx.get(server.url + "/v1/audio/voices").json()["voices"]
    assert upload(server, "Page", Origin=f"http://localhost:{server.port}").status_code == 200
    assert httpx.delete(server.url + "/v1/audio/voices/Page").status_code == 200


# ----------------------------------------------------------------------------- 3: connections without time limits


def receive_all(sock: socket.socket, timeout: float = 30) -> bytes:
    sock.settimeout(timeout)
    chunks = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def slow_clients(server: ServeProcess, auth: bytes = b"") -> dict[str, bytes]:
    """What an idle client, one with half its headers and one with half its body each get back."""
    sent = {"idle": b"", "half headers": b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nX-Wait: ",
            "half body": b"POST /v1/tts HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" + auth +
                         b"Content-Length: 1000\r\n\r\n{\"text\": \"hel",
            "half upload": b"POST /v1/audio/voices HTTP/1.1\r\nHost: localhost\r\n" + auth +
                           b"Content-Type: multipart/form-data; boundary=x\r\nContent-Length: 1000\r\n\r\n--x\r\n"}
    sockets = {}
    for name, data in sent.items():
        sockets[name] = socket.create_connection(("127.0.0.1", server.port))
        sockets[name].sendall(data)
    got = {name: receive_all(sock) for name, sock in sockets.items()}
    for sock in sockets.values():
        sock.close()
    return got


@pytest.mark.parametrize("with_key", [False, True])
def test_idle_half_sent_and_stalled_requests_get_408_and_are_closed(server, keyed, with_key: bool) -> None:
    proc = keyed if with_key else server
    got = slow_clients(proc, f"Authorization: Bearer {KEY}\r\n".encode() if with_key else b"")
    for name in ("idle", "half headers"):
        assert got[name].startswith(b"HTTP/1.1 408 Request Timeout\r\n"), (name, got[name])
        assert b"the request's headers did not arrive within 1 s" in got[name]
    for name in ("half body", "half upload"):
        assert got[name].startswith(b"HTTP/1.1 408 Request Timeout\r\n"), (name, got[name])
        assert b"the request body stopped arriving for 1 s" in got[name]
    proc.wait_for_log("no complete request headers within 1 s")
    proc.wait_for_log("the body stalled for 1 s; answered 408")


def test_a_kept_alive_connection_left_idle_after_its_answer_is_closed(server) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n")  # HTTP/1.1: kept alive unless closed
    started = time.monotonic()
    got = receive_all(sock)  # returns when the server closes the connection
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and b'{"status":"ok",' in got, got
    assert time.monotonic() - started < 10  # the next request's header deadline (1 s here) closed it
    sock.close()


def test_a_wrong_key_with_a_pending_body_is_answered_and_closed(keyed) -> None:
    sock = socket.create_connection(("127.0.0.1", keyed.port))
    sock.sendall(b"POST /v1/tts HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 b"Authorization: Bearer wrong\r\nContent-Length: 100000\r\n\r\n{\"te")
    answer = receive_all(sock, timeout=10)  # the connection ends: the body is not waited for
    assert answer.startswith(b"HTTP/1.1 401 ")


def test_a_client_that_hangs_up_mid_body_costs_one_log_line(server) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/tts HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100000\r\n\r\n{\"text\": \"hel")
    time.sleep(0.2)
    sock.close()
    server.wait_for_log("the client hung up before sending its whole request")
    assert "Traceback" not in server.log


@pytest.mark.parametrize("with_key", [False, True])
def test_many_idle_connections_never_stop_the_server_answering(server, keyed, with_key: bool) -> None:
    proc = keyed if with_key else server
    headers = {"Authorization": f"Bearer {KEY}"} if with_key else {}
    before = proc.open_files()
    idle = [socket.create_connection(("127.0.0.1", proc.port)) for _ in range(300)]  # the cap is 16
    try:
        started = time.monotonic()
        r = httpx.get(proc.url + "/v1/health", headers=headers, timeout=30)
        assert r.status_code == 200 and r.json()["status"] == "ok"
        assert time.monotonic() - started < 5  # the newest closes the longest-idle, not waits for a timeout
        assert proc.open_files() <= before + 16 + 2
    finally:
        for sock in idle:
            sock.close()
    proc.wait_for_log("closed while idle: 17 connections were open, at most 16 are kept")


# ----------------------------------------------------------------------------- 4: the event loop blocked by a body


def test_a_million_empty_items_are_counted_not_validated_and_the_loop_stays_free(server) -> None:
    """Measured in the server's CPU time, which a busy machine does not stretch: validating the million references
    alone costs seconds of it (holding the interpreter, so the health checks would wait for it); counting them,
    a tenth of a second."""
    bodies = [ormsgpack.packb({"text": "Hi.", "references": [{}] * 1_000_000}),
              ormsgpack.packb({"text": "Hi.", "cast": {f"n{i}": "Alice" for i in range(100_000)}}),
              ormsgpack.packb({"audios": [b""] * 500_000})]
    assert all(len(b) < 1_300_000 for b in bodies)
    answers: list[httpx.Response] = []

    def send(body: bytes, path: str) -> None:
        answers.append(httpx.post(server.url + path, content=body, headers=MSGPACK, timeout=60))

    threads = [threading.Thread(target=send, args=(body, path)) for body, path in
               zip(bodies * 2, ["/v1/tts", "/v1/tts", "/v1/vqgan/encode"] * 2)]
    used_before = server.cpu_seconds()
    for t in threads:
        t.start()
    waits = []  # the server's CPU time while each health check waited for its answer
    for _ in range(10):
        started = server.cpu_seconds()
        assert httpx.get(server.url + "/v1/health", timeout=60).status_code == 200
        waits.append(server.cpu_seconds() - started)
    for t in threads:
        t.join(timeout=60)
    used = server.cpu_seconds() - used_before
    assert max(waits) < 1.0, waits
    assert used < 2.0, used  # the six bodies and ten checks, all of it
    assert sorted(r.status_code for r in answers) == [400] * 6
    messages = {error_text(r) for r in answers}
    assert messages == {"references: 1000000 items; this server takes at most 8",
                        "cast: 100000 items; this server takes at most 1000",
                        "audios: 500000 items; this server takes at most 8"}


# ----------------------------------------------------------------------------- 5: unchecked fields


@pytest.mark.parametrize("path,body,message", [
    ("/v1/tts", {"text": "Hi.", "seed": 2**64}, "seed: Input should be less than or equal to 2147483647"),
    ("/v1/tts", {"text": "Hi.", "seed": -1}, "seed: Input should be greater than or equal to 0"),
    ("/v1/tts", {"text": "Hi.", "top_k": 2**70}, "top_k: Input should be less than or equal to 4096"),
    ("/v1/tts", {"text": "Hi.", "references": 5}, "references: Input should be a valid list"),
    ("/v1/tts", {"text": "Hi.", "temperature": "NaN"}, "temperature: Input should be a finite number"),
    ("/v1/tts", {"text": "Hi.", "max_new_tokens": 10**30}, "max_new_tokens: Input should be less than or equal to"),
    ("/v1/audio/speech", {"input": "Hi.", "voice": "Alice", "seed": 2**40},
     "seed: Input should be less than or equal to 2147483647"),
    ("/v1/audio/speech", {"input": "Hi.", "voice": "Alice", "temperature": LIMITS["temperature"].hi + 0.05},
     f"temperature: Input should be less than or equal to {LIMITS['temperature'].hi}"),
    ("/v1/tts", {"text": "Hi.", "top_p": LIMITS["top_p"].lo / 2},
     f"top_p: Input should be greater than or equal to {LIMITS['top_p'].lo}"),
    ("/v1/audio/speech", {"input": "Hi.", "voice": ["Alice"]}, "voice.str: Input should be a valid string"),
    ("/v1/audio/speech", {"input": "Hi.", "voice": "A" * 1_000_000},
     "voice: a name of 1000000 characters; names have at most 200"),
])
def test_fields_out_of_range_are_400_naming_the_field(server, path: str, body: dict, message: str) -> None:
    r = httpx.post(server.url + path, json=body, timeout=60)
    assert r.status_code == 400 and error_text(r).startswith(message), error_text(r)


def test_generate_requests_of_the_wrong_shape_are_400(server) -> None:
    good = ormsgpack.unpackb(remote_wire.request_to_wire(SynthesisRequest("x", (LineSpec("a", 0, "Hi."),))))
    for change, message in (({"sampling": [1, 2]}, "the request lacks or misspells a field (AttributeError"),
                            ({"sampling": {"seed": 2**63}}, "seed must be between 0 and 2147483647"),
                            ({"sampling": {"top_k": -5}}, "top-k must be between 1 and 4096, got -5"),
                            ({"references": 5}, "the request lacks or misspells a field"),
                            ({"lines": [["a", "zero", "Hi."]]}, "a field of the request has a value of the wrong kind"),
                            ({"context": [{"speaker": 0, "text": "x", "codes": {"shape": [10, 10**9],
                                                                                 "data": b""}}]},
                             "bad codes record")):
        r = httpx.post(server.url + "/v1/s2studio/generate", content=ormsgpack.packb({**good, **change}),
                       headers=MSGPACK)
        assert r.status_code == 400 and message in error_text(r), (change, error_text(r))


def test_bodies_nested_too_deep_are_400(server) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    r = httpx.post(server.url + "/v1/tts", content='{"text": "Hi.", "cast": ' + deep + "}",
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["message"] == "the body is nested too deeply to read"
    r = httpx.post(server.url + "/v1/audio/speech", content='{"input": "x", "voice": ' + "[" * 20 + "]" * 20 + "}",
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and error_text(r) == "the body is nested more than 16 levels deep"


def test_a_base_seed_at_the_top_of_the_range_wraps_per_line(server) -> None:
    request = SynthesisRequest("x", (LineSpec("a", 0, "One."), LineSpec("b", 0, "Two."), LineSpec("c", 0, "Three.")),
                               sampling=Sampling(max_frames=2, seed_mode="fixed", seed=2**31 - 1))
    r = httpx.post(server.url + "/v1/s2studio/generate", content=remote_wire.request_to_wire(request),
                   headers=MSGPACK, timeout=120)
    records = list(remote_wire.RecordReader().feed(r.content))
    assert r.status_code == 200 and records[-1]["type"] == "finished", records[-1]
    assert [rec["seed"] for rec in records if rec["type"] == "line_finished"] == [2**31 - 1, 0, 1]


# ----------------------------------------------------------------------------- 7: broken LoRAs


def test_a_broken_lora_is_named_by_its_voice_never_by_a_server_path(server, data: Path) -> None:
    r = speech(server, "Nan")
    assert r.status_code == 400
    assert error_text(r) == ("the LoRA of voice 'Nan': layers.0.attention.wqkv holds NaN or infinite values; train it "
                             "again from an earlier checkpoint")
    r = speech(server, "Other")
    assert r.status_code == 400
    assert error_text(r) == ("the LoRA of voice 'Other' was trained for another model's shape: "
                             "layers.0.attention.wqkv is (192, 64) in the model tiny but (384, 128) in the LoRA; "
                             "use a LoRA trained on this model")


# ----------------------------------------------------------------------------- 8: smaller things


def test_unknown_names_are_echoed_short(server) -> None:
    r = speech(server, "N" * 150)
    assert r.status_code == 404 and len(error_text(r)) < 300
    assert error_text(r).startswith("no voice called 'NNNNN") and "…'" in error_text(r)
    r = tts(server, {"text": "Hi.", "reference_id": "x" * 5000})
    assert r.status_code == 400 and r.json()["message"] == ("reference_id: a name of 5000 characters; names have at "
                                                            "most 200")


def test_references_are_named_as_the_client_counts_them(server) -> None:
    nan = wav_bytes(1.0, subtype="FLOAT")
    nan = nan[:-8] + np.array([np.nan, np.nan], "<f4").tobytes()
    for refs, message in (
        ([{"audio": wav_bytes(1.0), "text": "ok"}, {"audio": b"RIFF nonsense", "text": "x"}],
         "reference 2 is not audio this server can read; send WAV, FLAC, OGG or MP3 bytes"),
        ([{"audio": nan, "text": "x"}], "reference 1 contains invalid samples (NaN or infinity); re-export it"),
        ([{"audio": wav_bytes(31.0, rate=8000), "text": "x"}], "reference 1 is 31 s long; use a clip of at most 30 s"),
    ):
        r = tts(server, {"text": "Hi.", "references": refs})
        assert r.status_code == 400 and r.json() == {"statusCode": 400, "message": message + (
            " (cut it shorter)" if "long" in message else ""), "error": "Bad Request", "code": "invalid_reference"}
        assert "reference.wav" not in r.text


def test_a_port_in_use_is_said_before_the_model_loads(server, tiny_model: Path, data: Path) -> None:
    started = time.monotonic()
    other = ServeProcess(tiny_model, data / "data", data / "tmp2", port=server.port)
    assert other.proc.wait(timeout=60) == 2
    other.stop()
    assert other.lines == [f"s2studio serve: error: port {server.port} on 127.0.0.1 is in use (another server?); "
                           "stop it or pick another --port"]
    assert time.monotonic() - started < 30


def test_folders_a_killed_server_left_are_removed_at_start(server, data: Path) -> None:
    assert not (data / "tmp" / "s2studio-serve-999999999-stale").exists()


def test_serve_says_which_mode_it_serves_in_and_defaults_to_fast(server) -> None:
    from s2studio.cli import build_parser

    line = next(line for line in server.lines if line.startswith("serving "))
    assert line.startswith("serving tiny in the exact mode (cpu, float32) at http://127.0.0.1:"), line
    assert "Traceback" not in server.log
    assert build_parser().parse_args(["serve", "--model", "m"]).fast is True  # as the studio renders


def test_the_key_comes_from_the_environment_and_a_key_on_the_command_line_warns(tmp_path, monkeypatch, capsys):
    from s2studio.cli import main

    monkeypatch.setenv("S2STUDIO_API_KEY", "short")
    assert main(["serve", "--model", str(tmp_path), "--host", "0.0.0.0"]) == 2
    assert capsys.readouterr().err.strip() == ("s2studio serve: error: the API key is too short; use at least 8 "
                                               "characters (e.g. `openssl rand -hex 16`)")
    monkeypatch.delenv("S2STUDIO_API_KEY")
    assert main(["serve", "--model", str(tmp_path), "--host", "0.0.0.0", "--api-key", "abc"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "warning: --api-key is visible to every user of this computer (`ps`); set S2STUDIO_API_KEY instead",
        "s2studio serve: error: the API key is too short; use at least 8 characters (e.g. `openssl rand -hex 16`)"]
