"""Fish's `POST /v1/tts`: the remote engine's `fish` wire (upstream's API server) and `fishcloud` (Fish Audio's
cloud, https://api.fish.audio).

Shapes from Fish's own SDK, fish-audio-sdk 1.3.0 (`fishaudio/resources/tts.py`, `resources/voices.py`,
`types/tts.py`): a MessagePack body (`text`, `format`, `references` or `reference_id`, `temperature`, `top_p`,
`chunk_length`, `normalize`, `latency`), the `model` header (s2-pro, …), `Authorization: Bearer KEY`; a cloud
voice is created once through the model API (`POST /model`, multipart: `title`, `type=tts`, `train_mode=fast`,
`visibility=private`, `texts`, one `voices` file per clip) and named by its `_id` as `reference_id`.

Upstream's server takes each line's references inline (its clips' audio and transcripts) and honours `seed`; the
cloud takes none of that: voices by `reference_id` only, `temperature` and `top_p` at most 1, no seed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import ormsgpack

from s2studio.engine.api import LineSpec, SynthesisRequest
from s2studio.engine.remote_http import Link, RemoteError, WavReader, to_engine_rate
from s2studio.engine.voice_registry import SpeakerVoice, VoiceRegistry, speaker_voice

CLOUD_URL = "https://api.fish.audio"
KEYRING_SERVICE = "s2studio: Fish Audio"


def cloud_key(account: str = "default") -> str:
    """The Fish Audio API key kept in the system keyring (Settings stores it there, never in a file)."""
    import keyring
    from keyring.errors import KeyringError

    try:
        return keyring.get_password(KEYRING_SERVICE, account) or ""
    except KeyringError:
        return ""


def store_cloud_key(key: str, account: str = "default") -> None:
    import keyring

    if key:
        keyring.set_password(KEYRING_SERVICE, account, key)
    else:
        try:
            keyring.delete_password(KEYRING_SERVICE, account)
        except keyring.errors.PasswordDeleteError:
            pass


class FishWire:
    def __init__(self, link: Link, registry: VoiceRegistry, model: str, cloud: bool) -> None:
        self.link, self.registry, self.model, self.cloud = link, registry, model, cloud
        self.kind = "fishcloud" if cloud else "fish"
        self.seed_honoured = not cloud
        self._voices: dict[tuple, SpeakerVoice | None] = {}
        self._lock = threading.Lock()

    def register(self, voice: SpeakerVoice) -> str:
        """Create a private cloud voice from the clip; its `_id` is the `reference_id`."""
        response = self.link.call("POST", "/model", data={
            "title": f"s2studio {voice.sha256[:12]}", "type": "tts", "train_mode": "fast", "visibility": "private",
            "texts": [voice.transcript], "enhance_audio_quality": "false"},
            files=[("voices", ("voice.wav", voice.wav, "audio/wav"))])
        self.link.check(response, "creating the voice")
        try:
            return str(response.json()["_id"])
        except (ValueError, KeyError, TypeError):
            raise RemoteError(f"{self.link.where()} created the voice but sent no id") from None

    def _voice(self, request: SynthesisRequest, speaker: int) -> SpeakerVoice | None:
        key = tuple((str(r.clip), r.transcript) for r in request.references if r.speaker == speaker)
        with self._lock:
            if key not in self._voices:
                self._voices[key] = speaker_voice(request, speaker)
            return self._voices[key]

    def body(self, request: SynthesisRequest, line: LineSpec, seed: int) -> dict[str, object]:
        s = request.sampling
        body: dict[str, object] = {"format": "wav", "temperature": s.temperature, "top_p": s.top_p,
                                   "chunk_length": 200, "normalize": False, "latency": "normal",
                                   "max_new_tokens": s.max_frames or 1024}
        if self.cloud:
            body["text"] = line.text
            body["temperature"], body["top_p"] = min(s.temperature, 1.0), min(s.top_p, 1.0)
            voice = self._voice(request, line.speaker)
            if voice is not None:
                body["reference_id"] = self.registry.name(self.link.base_url, voice, self.register)
            return body
        body.update(text=f"<|speaker:{line.speaker}|>{line.text}", streaming=True, seed=seed, chunk_length=1000,
                    references=[{"audio": _clip_bytes(r.clip), "text": f"<|speaker:{r.speaker}|>{r.transcript}"}
                                for r in request.references])
        return body

    def line_audio(self, request: SynthesisRequest, line: LineSpec, seed: int,
                   cancel: threading.Event) -> Iterator[np.ndarray]:
        stream = self.link.open("POST", "/v1/tts", "rendering", content=ormsgpack.packb(self.body(request, line, seed)),
                                headers={"Content-Type": "application/msgpack", "model": self.model})
        wav = WavReader()
        try:
            for data in stream.chunks(cancel):
                samples = to_engine_rate(wav.feed(data), wav.rate)
                if len(samples):
                    yield samples
        finally:
            stream.close()


def _clip_bytes(clip: Path | None) -> bytes:
    if clip is None:
        raise RemoteError("this server takes references as audio, and a voice's clip file is unknown; re-add the "
                          "voice's clips")
    try:
        return Path(clip).read_bytes()
    except OSError as exc:
        raise RemoteError(f"cannot read the reference clip {Path(clip).name}: {exc.strerror or exc}") from None
