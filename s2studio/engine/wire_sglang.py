"""sglang-omni's S2 API: the remote engine's `sglang` wire (upstream's recommended fast path).

Shapes from sgl-project/sglang-omni at 2489a10eecb91bbd1bdbe8b511b0bdf23d341f3f (`sglang_omni/serve/protocol.py`,
`serve/openai_api.py`, `docs/basic_usage/tts_s2pro.md`): `POST /v1/audio/speech` with `references`, each
`{"text", "vq_codes"}` (or an `audio_path` the server itself reads: a path on that machine or a URL, which we
have not got), `seed`, `temperature`, `top_p`, `top_k`, `max_new_tokens`, and `stream: true`, answered with
Server-Sent Events: `data: {"object": "audio.speech.chunk", "audio": {"data": base64, "sample_rate"}, ...}` per
chunk, a last chunk with `audio: null` and a `finish_reason`, then `data: [DONE]`.

So a voice travels as its codes (the studio's codec gives the same codes as upstream's, design.md §4): nothing is
uploaded, the server's prefix cache keeps them, and the seed is honoured (it is in sglang-omni's request).
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator

import numpy as np

from s2studio.engine.api import LineSpec, SynthesisRequest
from s2studio.engine.remote_http import Link, PcmReader, RemoteError


class SseReader:
    """`data:` payloads of a Server-Sent Events stream, from bytes in pieces of any size."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> Iterator[str]:
        self._buffer += data
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            lines = [ln[5:].lstrip() for ln in event.replace(b"\r", b"").split(b"\n") if ln.startswith(b"data:")]
            if lines:
                yield b"\n".join(lines).decode("utf-8", "replace")


class SglangWire:
    kind = "sglang"
    seed_honoured = True

    def __init__(self, link: Link, model: str) -> None:
        self.link, self.model = link, model

    def body(self, request: SynthesisRequest, line: LineSpec, seed: int) -> dict[str, object]:
        s = request.sampling
        refs = [{"text": r.transcript, "vq_codes": np.asarray(r.codes).tolist()}
                for r in request.references if r.speaker == line.speaker]
        body: dict[str, object] = {"model": self.model, "input": line.text, "response_format": "pcm",
                                   "stream": True, "seed": seed, "temperature": s.temperature, "top_p": s.top_p,
                                   "top_k": s.top_k}
        if refs:
            body["references"] = refs
        if s.max_frames:
            body["max_new_tokens"] = s.max_frames
        return body

    def line_audio(self, request: SynthesisRequest, line: LineSpec, seed: int,
                   cancel: threading.Event) -> Iterator[np.ndarray]:
        stream = self.link.open("POST", "/v1/audio/speech", "rendering", json=self.body(request, line, seed))
        sse, pcm, done = SseReader(), None, False
        try:
            for data in stream.chunks(cancel):
                for payload in sse.feed(data):
                    if payload.strip() == "[DONE]":
                        done = True
                        break
                    try:
                        event = json.loads(payload)
                    except ValueError:
                        raise RemoteError(f"{self.link.where()} sent an event that is not JSON") from None
                    if "error" in event and not event.get("audio"):
                        raise RemoteError(f"rendering failed on {self.link.where()}: {event['error']}")
                    audio = event.get("audio")
                    if not audio or not audio.get("data"):
                        continue
                    if audio.get("format", "pcm") != "pcm":
                        raise RemoteError(f"{self.link.where()} sent {audio.get('format')} chunks; expected pcm")
                    rate = int(audio.get("sample_rate") or 44100)
                    if pcm is None or pcm.rate != rate:
                        pcm = PcmReader(rate)
                    samples = pcm.feed(base64.b64decode(audio["data"]))
                    if len(samples):
                        yield samples
                if done:
                    return
            if not cancel.is_set():
                raise RemoteError(f"{self.link.where()} ended the stream before [DONE]; check the server")
        finally:
            stream.close()
