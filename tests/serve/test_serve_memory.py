"""The memory bound of a server: no request of under 1 MB and no clip of under 10 MB raises its resident memory
by more than 300 MB. The real `serve` process runs the worst cases known (bombs, odd rates, a million list
items, deep nesting, the longest references and the longest library clip it takes; audio by each way it enters:
Fish references, `ref_audio`, uploads, library clips) under `prlimit --as`, its
address space capped 1 GB above what it held after warming up (so that a blow-up fails at once instead of
taking the machine: the codec's buffers reserve more address space than they touch), and its resident peak
(VmHWM, reset before each case) is read after each. The warm-up encodes one clip of the longest length first:
the first long encode of a process also sets up what every later one reuses (about 20 MB that stay)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import httpx
import ormsgpack
import pytest
from serve_process import ServeProcess, flac_of_unknown_length, wav_bytes

from s2studio.engine import remote_wire
from s2studio.engine.api import LineSpec, SynthesisRequest
from s2studio.state.voices import VoiceLibrary

BOUND_KB = 300 * 1024
ADDRESS_SPACE_KB = 1024 * 1024
MSGPACK = {"Content-Type": "application/msgpack"}
JSON = {"Content-Type": "application/json"}


def fish(*refs: bytes) -> bytes:
    return ormsgpack.packb({"text": "Hi.", "references": [{"audio": a, "text": "A clip."} for a in refs]})


def upload(audio: bytes) -> tuple[bytes, dict[str, str]]:
    request = httpx.Request("POST", "http://x", data={"name": "Up", "consent": "mine", "ref_text": "A clip."},
                            files={"audio_sample": ("a.flac", audio)})
    return request.read(), {"Content-Type": request.headers["Content-Type"]}


def ref_audio(audio: bytes) -> bytes:
    return json.dumps({"input": "Hi.", "voice": "x", "ref_audio": "data:audio/flac;base64," +
                       base64.b64encode(audio).decode(), "ref_text": "A clip."}).encode()


BOMB = wav_bytes(0.5, rate=655350, channels=8, fmt="FLAC", hz=0)
WIDE = wav_bytes(20.0, rate=48000, channels=8, fmt="FLAC", hz=0)
WORST: list[tuple[str, str, bytes, dict[str, str], int]] = [
    # (what, path, body, headers, status)
    ("8009 Hz", "/v1/tts", fish(wav_bytes(1.0, rate=8009)), MSGPACK, 400),
    ("44101 Hz", "/v1/tts", fish(wav_bytes(1.0, rate=44101)), MSGPACK, 400),
    ("655 kHz x 8 FLAC", "/v1/tts", fish(BOMB), MSGPACK, 400),
    ("48 kHz x 8 FLAC, 20 s", "/v1/tts", fish(WIDE), MSGPACK, 400),
    ("FLAC without a length", "/v1/tts", fish(flac_of_unknown_length(1200.0, rate=8000, channels=1)), MSGPACK, 400),
    ("two 30 s references", "/v1/tts", fish(*[wav_bytes(30.0, rate=8000, fmt="FLAC", hz=180.0 + i)
                                             for i in range(2)]), MSGPACK, 200),
    ("a million references", "/v1/tts", ormsgpack.packb({"text": "Hi.", "references": [{}] * 1_000_000}), MSGPACK,
     400),
    ("500,000 clips", "/v1/vqgan/encode", ormsgpack.packb({"audios": [b""] * 500_000}), MSGPACK, 400),
    ("nested 100,000 deep", "/v1/tts", b'{"text": "x", "cast": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", JSON, 400),
    ("250,000 numbers", "/v1/audio/speech", b'{"input": "x", "voice": "Long", "x": [' + b"0," * 250_000 + b"0]}",
     JSON, 400),
    ("2000 empty lines", "/v1/s2studio/generate", remote_wire.request_to_wire(
        SynthesisRequest("x", tuple(LineSpec(f"l{i}", 0, "") for i in range(2000)))), MSGPACK, 400),
    ("an upload at 655 kHz x 8", "/v1/audio/voices", *upload(BOMB), 400),
    ("an upload at 48 kHz x 8, 20 s", "/v1/audio/voices", *upload(WIDE), 400),
    ("ref_audio at 48 kHz x 8, 20 s", "/v1/audio/speech", ref_audio(WIDE), JSON, 400),
    ("an upload of 30 s", "/v1/audio/voices", *upload(wav_bytes(30.0, rate=48000, fmt="FLAC")), 200),
    ("a 30 s library clip", "/v1/audio/speech", b'{"input": "Hi.", "voice": "Long", "response_format": "pcm"}', JSON,
     200),
]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("memory-serve")
    lib = VoiceLibrary(root / "data" / "voices")
    for name, hz in (("Long", 220.0), ("Warm", 180.0)):
        long = root / f"{name}.wav"
        long.write_bytes(wav_bytes(30.0, rate=16000, hz=hz))  # 0.96 MB: the longest clip a voice may have
        lib.create(name, [(long, "A long clip.")])
    short = root / "short.wav"
    short.write_bytes(wav_bytes(2.0))
    lib.create("Short", [(short, "A short clip.")])
    return root


def test_no_small_request_or_clip_raises_the_servers_memory_by_300_mb(tiny_model: Path, data: Path) -> None:
    assert all(len(body) < 1_100_000 for what, _, body, _, _ in WORST if what != "two 30 s references")
    assert len(WORST[5][2]) < 10_000_000  # clips of under 10 MB
    with ServeProcess(tiny_model, data / "data", data / "tmp", "--no-fast", "--max-new-tokens", "2",
                      env={"MALLOC_ARENA_MAX": "2"}) as server:
        with httpx.Client(base_url=server.url, timeout=600) as client:
            # warm up: the engine's first encode and generation, the worker threads, the codes cache's first entry
            assert client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "Warm"}).status_code == 200
            for _, path, body, headers, status in WORST[:3]:
                assert client.post(path, content=body, headers=headers).status_code == status
            held = server.status("VmSize")
            subprocess.run(["prlimit", f"--pid={server.pid}", f"--as={(held + ADDRESS_SPACE_KB) * 1024}"], check=True)
            rises = {}
            for what, path, body, headers, status in WORST:
                rss = server.status("VmRSS")
                Path(f"/proc/{server.pid}/clear_refs").write_text("5")  # VmHWM from here
                r = client.post(path, content=body, headers=headers)
                rises[what] = (server.status("VmHWM") - rss) // 1024
                assert r.status_code == status, (what, r.status_code, r.text[:300])
            assert client.get("/v1/health").status_code == 200
        print("peak resident rise per case (MB):", rises)
        assert max(rises.values()) <= BOUND_KB // 1024, rises
        assert "Traceback" not in server.log and "out of memory" not in server.log
