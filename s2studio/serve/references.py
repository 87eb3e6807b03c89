"""Reference clips sent inline with a request: checked on arrival, encoded once, cached by content hash.

A Fish client sends the same clip with every request; encoding it each time would cost more than a short
sentence. Codes are cached under (sha256 of the bytes, codec fingerprint) in memory (least recently used
first out). Encoding goes through the engine's own `encode` on the engine thread, which reads a file: the
bytes are written to a private temporary file that is removed at once, never into a folder a person chose.
"""

from __future__ import annotations

import collections
import hashlib
import io
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from s2studio.engine.api import Engine, Reference
from s2studio.engine.plan import engine_encoder
from s2studio.serve.errors import ApiError


@dataclass(frozen=True)
class InlineReference:
    """One checked clip of a request: its bytes, transcript, speaker index and content hash."""

    speaker: int
    audio: bytes
    text: str
    sha256: str
    suffix: str
    """A file suffix soundfile recognises for these bytes (".wav", ".flac", ...)."""


_SUFFIX = {"WAV": ".wav", "FLAC": ".flac", "OGG": ".ogg", "MP3": ".mp3", "AIFF": ".aiff", "W64": ".w64",
           "RF64": ".wav", "WAVEX": ".wav", "CAF": ".caf"}


def check_reference(index: int, audio: bytes, text: str, max_seconds: float, speaker: int | None = None) -> InlineReference:
    """Refuse what the codec cannot use, naming the reference (1-based, as a person counts)."""
    what = f"reference {index + 1}"
    if not audio:
        raise ApiError(400, f"{what} has no audio; send the clip's bytes in `audio`", "invalid_reference")
    if not text.strip():
        raise ApiError(400, f"{what} has no transcript; send exactly what is said in it as `text`",
                       "invalid_reference")
    try:
        info = sf.info(io.BytesIO(audio))
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError):
        raise ApiError(400, f"{what} is not audio this server can read; send WAV, FLAC, OGG or MP3 bytes",
                       "invalid_reference") from None
    seconds = info.frames / info.samplerate if info.samplerate else 0.0
    if info.frames <= 0:
        raise ApiError(400, f"{what} holds no samples; send a clip of a few seconds", "invalid_reference")
    if seconds > max_seconds:
        raise ApiError(400, f"{what} is {seconds:.0f} s long; this server takes clips of at most "
                       f"{max_seconds:g} s (10-30 s is best)", "reference_too_long")
    return InlineReference(index if speaker is None else speaker, audio, text.strip(),
                           hashlib.sha256(audio).hexdigest(), _SUFFIX.get(info.format, ".wav"))


class CodesCache:
    """(sha256, codec fingerprint) -> (10, N) codes, at most `capacity` clips (about 100 KB each)."""

    def __init__(self, capacity: int = 256) -> None:
        self._capacity = capacity
        self._items: collections.OrderedDict[tuple[str, str], np.ndarray] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.encoded = 0
        """How many clips were encoded (not found in the cache); tests read it."""

    def get(self, sha: str, fingerprint: str) -> np.ndarray | None:
        with self._lock:
            codes = self._items.get((sha, fingerprint))
            if codes is not None:
                self._items.move_to_end((sha, fingerprint))
            return codes

    def put(self, sha: str, fingerprint: str, codes: np.ndarray) -> None:
        with self._lock:
            self._items[(sha, fingerprint)] = codes
            self._items.move_to_end((sha, fingerprint))
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)

    def references(self, engine: Engine, refs: list[InlineReference], fingerprint: str,
                   cancel: threading.Event) -> tuple[Reference, ...]:
        """The engine's references for `refs`, encoding (on the calling engine thread) what is not cached."""
        out = []
        for ref in refs:
            codes = self.get(ref.sha256, fingerprint)
            if codes is None:
                with tempfile.TemporaryDirectory(prefix="s2studio-serve-") as folder:
                    path = Path(folder) / f"reference{ref.suffix}"
                    path.write_bytes(ref.audio)
                    codes = engine_encoder(engine, cancel)(path)
                self.put(ref.sha256, fingerprint, codes)
                self.encoded += 1
            out.append(Reference(ref.speaker, ref.text, codes))
        return tuple(out)
