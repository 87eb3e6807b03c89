"""A speaker's voice as the audio-only servers take it, and where each server already holds it.

Servers that are not `s2studio serve` take one clip + transcript per voice (vllm-omni's upload, Fish's cloud
model API) or the voice's codes (sglang-omni's `vq_codes`). `speaker_voice` makes that one clip from a request's
references for a speaker: its clips joined at the engine's rate, their transcripts joined, hashed (clip hash).
`VoiceRegistry` remembers, per (server, clip hash), the name or id the voice got there, so a library voice is
registered once per server and never re-sent per line; a server that forgot it (restarted) gets it again once.
With a `path` (the studio's and the command line's: `voice-registry.json` in the data folder) it is remembered
across sessions, so Fish's cloud does not get a new copy of a voice at every start; an unreadable file is
ignored (the voices are registered again). Torch-free.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from s2studio.engine.api import SAMPLE_RATE, Reference, SynthesisRequest
from s2studio.engine.remote_http import RemoteError, to_engine_rate
from s2studio.errors import UserError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpeakerVoice:
    speaker: int
    wav: bytes
    """One PCM16 mono WAV at the engine's rate: the speaker's clips, in order, joined."""
    transcript: str
    sha256: str
    """Of the WAV and the transcript: the voice's identity on every server."""
    codes: tuple[np.ndarray, ...]
    """The clips' (10, N) codes, for servers that take codes."""


def speaker_voice(request: SynthesisRequest, speaker: int) -> SpeakerVoice | None:
    """The voice of `speaker` in `request` (None when the request has no references for it)."""
    refs = [r for r in request.references if r.speaker == speaker]
    if not refs:
        return None
    from s2studio.audio.io import read_audio, wav_bytes

    pieces = []
    for ref in refs:
        pieces.append(_clip_samples(ref, read_audio))
    wav = wav_bytes(np.concatenate(pieces), SAMPLE_RATE)
    transcript = " ".join(r.transcript.strip() for r in refs)
    sha = hashlib.sha256(wav + b"\0" + transcript.encode()).hexdigest()
    return SpeakerVoice(speaker, wav, transcript, sha, tuple(r.codes for r in refs))


def _clip_samples(ref: Reference, read_audio) -> np.ndarray:  # noqa: ANN001 - audio.io.read_audio
    if ref.clip is None:
        raise RemoteError("this server takes references as audio, and a voice's clip file is unknown; re-add the "
                          "voice's clips")
    try:
        samples, rate = read_audio(Path(ref.clip))
    except (OSError, ValueError) as exc:
        raise RemoteError(f"cannot read the reference clip {Path(ref.clip).name} ({exc})") from None
    return to_engine_rate(samples.astype(np.float32), rate)


class VoiceRegistry:
    """(server address, clip hash) -> the voice's name or id on that server. Thread-safe; shared by every
    engine of a render so that two slots on one server register a voice once."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._names: dict[tuple[str, str], str] = self._read(path) if path is not None else {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()
        self.registered = 0
        """How many registrations went over the network (bench/farm_speed.py reports it)."""
        self.seconds = 0.0
        """Wall seconds those registrations took."""

    def name(self, server: str, voice: SpeakerVoice, register) -> str:  # noqa: ANN001 - Callable[[SpeakerVoice], str]
        """The voice's name on `server`, calling `register(voice)` (once, whoever asks first) if it has none."""
        key = (server, voice.sha256)
        with self._lock:
            if key in self._names:
                return self._names[key]
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            with self._lock:
                if key in self._names:
                    return self._names[key]
            import time

            started = time.perf_counter()
            name = register(voice)
            with self._lock:
                self._names[key] = name
                self.registered += 1
                self.seconds += time.perf_counter() - started
                self._save()
            return name

    @staticmethod
    def _read(path: Path) -> dict[tuple[str, str], str]:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return {(str(e["server"]), str(e["clip"])): str(e["name"]) for e in raw["voices"]}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the voice registry %s (%s); voices are registered again", path, exc)
            return {}

    def _save(self) -> None:
        if self.path is None:
            return
        from s2studio.state.atomic import write_text_atomic

        entries = [{"server": server, "clip": clip, "name": name} for (server, clip), name in self._names.items()]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # a first run: the data folder may not exist yet
            write_text_atomic(self.path, json.dumps({"voices": entries}, indent=1))
        except (OSError, UserError) as exc:  # remembering is a saving, not a need: the render goes on
            log.warning("could not remember the registered voices in %s: %s", self.path, exc)

    def forget(self, server: str, voice: SpeakerVoice) -> None:
        """The server no longer knows the voice (it restarted): the next `name` registers it again."""
        with self._lock:
            self._names.pop((server, voice.sha256), None)
            self._save()
