"""OpenAI's `POST /v1/audio/speech` with vllm-omni's S2 extensions: the remote engine's `vllm` and `openai` wires.

Shapes from vllm-project/vllm-omni `docs/serving/speech_api.md` at 078de2d14c2fcc670c1e0dd492e1b84a69c69d15
(its request model is a plain pydantic model: fields it does not know are dropped, so `seed`, `temperature` and
`top_p`, which `s2studio serve` reads, are harmless there but not honoured):

- a library voice is uploaded once per server (`POST /v1/audio/voices`, multipart `audio_sample`, `name`,
  `consent`, `ref_text`) and named by `voice` afterwards; a server without the upload route (404/405) gets the
  voice inline instead, as `ref_audio` (a base64 WAV data URL) + `ref_text`, and so does a voice the server
  refuses to keep (it holds as many as it takes: 400, 413 or 507), so that a full server still renders;
- audio streams as raw PCM (`response_format: "pcm"`, `stream_format: "audio"`): 16-bit mono at the model's
  44.1 kHz (or the rate a server states in `X-Audio-Sample-Rate`);
- `openai` is the same request for servers with their own named voices (`RemoteSettings.voices`).
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Iterator

import numpy as np

from s2studio.engine.api import LineSpec, SynthesisRequest
from s2studio.engine.remote_http import Link, PcmReader, RemoteError
from s2studio.engine.voice_registry import SpeakerVoice, VoiceRegistry, speaker_voice

log = logging.getLogger(__name__)

CONSENT = "s2studio: the voice's owner recorded consent in the studio's voice library"


class OpenAISpeechWire:
    def __init__(self, link: Link, registry: VoiceRegistry, model: str, voices: tuple[str, ...] = (),
                 upload: bool = True) -> None:
        self.link, self.registry, self.model, self.voices = link, registry, model, voices
        self.kind = "vllm" if upload else "openai"
        self.seed_honoured = False
        self._upload = upload
        self._inline = False
        """Set when the server turned out to have no upload route: voices travel inline from then on."""
        self._refused: set[str] = set()
        """Clip hashes of voices the server would not keep: they travel inline."""
        self._voices: dict[tuple, SpeakerVoice | None] = {}
        self._lock = threading.Lock()

    def _voice(self, request: SynthesisRequest, speaker: int) -> SpeakerVoice | None:
        key = tuple((r.speaker, str(r.clip), r.transcript) for r in request.references if r.speaker == speaker)
        with self._lock:
            if key not in self._voices:
                self._voices[key] = speaker_voice(request, speaker)
            return self._voices[key]

    def register(self, voice: SpeakerVoice) -> str:
        """Upload the voice; its name on the server comes from its clip hash."""
        name = f"s2studio-{voice.sha256[:20]}"
        response = self.link.call("POST", "/v1/audio/voices",
                                  files={"audio_sample": ("voice.wav", voice.wav, "audio/wav")},
                                  data={"name": name, "consent": CONSENT, "ref_text": voice.transcript})
        if response.status_code in (404, 405):
            raise _NoUpload()
        if response.status_code in (400, 413, 507):
            log.warning("%s did not keep a voice (%s); it travels with each line instead", self.link.where(),
                        response.text[:200])
            raise _NotKept()
        self.link.check(response, "uploading a voice")
        return name

    def body(self, request: SynthesisRequest, line: LineSpec, seed: int) -> dict[str, object]:
        s = request.sampling
        body: dict[str, object] = {"model": self.model, "input": line.text, "response_format": "pcm",
                                   "stream_format": "audio", "seed": seed, "temperature": s.temperature,
                                   "top_p": s.top_p}
        if s.max_frames:
            body["max_new_tokens"] = s.max_frames
        voice = self._voice(request, line.speaker) if self._upload else None
        if voice is None:
            named = self.voices or ("default",)
            body["voice"] = named[line.speaker] if line.speaker < len(named) else named[0]
            return body
        if not self._inline and voice.sha256 not in self._refused:
            try:
                body["voice"] = self.registry.name(self.link.base_url, voice, self.register)
                return body
            except _NoUpload:
                self._inline = True
            except _NotKept:
                self._refused.add(voice.sha256)
        body["voice"] = "default"  # what vllm-omni's docs say S2 takes beside ref_audio
        body["ref_audio"] = "data:audio/wav;base64," + base64.b64encode(voice.wav).decode("ascii")
        body["ref_text"] = voice.transcript
        return body

    def line_audio(self, request: SynthesisRequest, line: LineSpec, seed: int,
                   cancel: threading.Event) -> Iterator[np.ndarray]:
        body = self.body(request, line, seed)
        try:
            stream = self.link.open("POST", "/v1/audio/speech", "rendering", json=body)
        except RemoteError as exc:
            voice = self._voice(request, line.speaker) if self._upload else None
            if voice is None or "voice" not in str(exc).lower() or "ref_audio" in body:
                raise
            self.registry.forget(self.link.base_url, voice)  # the server forgot it (restarted): upload again
            stream = self.link.open("POST", "/v1/audio/speech", "rendering", json=self.body(request, line, seed))
        try:
            rate = int(stream.response.headers.get("x-audio-sample-rate", 0)) or 44100
            pcm = PcmReader(rate)
            for data in stream.chunks(cancel):
                samples = pcm.feed(data)
                if len(samples):
                    yield samples
        finally:
            stream.close()


class _NoUpload(Exception):
    """The server has no voice upload route."""


class _NotKept(Exception):
    """The server refused to keep this voice (it is full, or the clip is beyond its limits)."""
