"""Voices clients uploaded to this server (`POST /v1/audio/voices`, serve/routes_voices.py), in memory.

Kept apart from the voice library on purpose: an upload never writes into the library of the person running the
server, and lives as long as the server does (a client that finds a name gone uploads it again)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from s2studio.serve.errors import ApiError
from s2studio.serve.references import InlineReference

MAX_UPLOADS = 256
MAX_UPLOAD_BYTES = 128 * 1024 * 1024
"""All uploaded clips together: what the server's memory holds for clients, whatever their number."""


@dataclass(frozen=True)
class UploadedVoice:
    name: str
    reference: InlineReference
    consent: str
    created_at: int
    description: str = ""

    def describe(self) -> dict[str, object]:
        entry: dict[str, object] = {"name": self.name, "consent": self.consent, "created_at": self.created_at,
                                    "file_size": len(self.reference.audio), "mime_type": _MIME.get(
                                        self.reference.suffix, "application/octet-stream"),
                                    "ref_text": self.reference.text}
        if self.description:
            entry["speaker_description"] = self.description
        return entry


_MIME = {".wav": "audio/wav", ".flac": "audio/flac", ".ogg": "audio/ogg", ".mp3": "audio/mpeg"}


class UploadedVoices:
    """Name (case-insensitive) -> uploaded clip; thread-safe; at most `capacity` voices of `max_bytes` in all."""

    def __init__(self, capacity: int = MAX_UPLOADS, max_bytes: int = MAX_UPLOAD_BYTES) -> None:
        self._voices: dict[str, UploadedVoice] = {}
        self._lock = threading.Lock()
        self._capacity = capacity
        self._max_bytes = max_bytes

    def put(self, voice: UploadedVoice) -> None:
        with self._lock:
            if voice.name.lower() not in self._voices and len(self._voices) >= self._capacity:
                raise ApiError(400, f"this server holds at most {self._capacity} uploaded voices; delete one "
                               "first (DELETE /v1/audio/voices/NAME)", "too_many_voices", "name")
            replaced = self._voices.get(voice.name.lower())
            held = sum(len(v.reference.audio) for v in self._voices.values()) - (
                len(replaced.reference.audio) if replaced else 0)
            if held + len(voice.reference.audio) > self._max_bytes:
                raise ApiError(400, f"this server holds at most {self._max_bytes // 2**20} MB of uploaded voices; "
                               "delete one first (DELETE /v1/audio/voices/NAME) or upload a shorter clip",
                               "too_many_voices", "audio_sample")
            self._voices[voice.name.lower()] = voice

    def get(self, name: str) -> UploadedVoice | None:
        with self._lock:
            return self._voices.get(name.strip().lower())

    def remove(self, name: str) -> bool:
        with self._lock:
            return self._voices.pop(name.strip().lower(), None) is not None

    def list(self) -> list[UploadedVoice]:
        with self._lock:
            return sorted(self._voices.values(), key=lambda v: v.created_at)
