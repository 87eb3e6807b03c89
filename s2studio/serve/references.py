"""Reference clips sent inline with a request: checked on arrival, encoded once, cached by content hash.

A clip is read on arrival by the one audio reader (`state.clips.read_audio_from`, under `state.audio_limits`
and the server's own length limit) and every problem is a 400 naming it as the client counts ("reference 2"),
so the engine thread only ever sees clips it can encode. A Fish client sends the same clip with every request;
encoding it each time would cost more than a short sentence. Codes are cached under (sha256 of the bytes, codec
fingerprint) in memory (least recently used first out). Encoding goes through the engine's own `encode` on the
engine thread, which reads a file: the bytes are written to a private temporary folder that is removed at once,
never into a folder a person chose; its name carries the server's process id, so the folders a killed server
left behind are removed when the next one starts (`remove_stale_folders`).
"""

from __future__ import annotations

import collections
import hashlib
import io
import logging
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from s2studio.engine.api import Engine, Reference
from s2studio.engine.plan import engine_encoder
from s2studio.errors import UserError
from s2studio.serve.errors import ApiError
from s2studio.state.clips import read_audio_from

log = logging.getLogger("s2studio.serve")
FOLDER_PREFIX = "s2studio-serve-"


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


def check_reference(index: int, audio: bytes, text: str, max_seconds: float,
                    speaker: int | None = None) -> InlineReference:
    """Refuse what the codec cannot use, naming the reference (1-based, as a person counts)."""
    what = f"reference {index + 1}"
    if not audio:
        raise ApiError(400, f"{what} has no audio; send the clip's bytes in `audio`", "invalid_reference")
    if not text.strip():
        raise ApiError(400, f"{what} has no transcript; send exactly what is said in it as `text`",
                       "invalid_reference")
    try:
        info = sf.info(io.BytesIO(audio))
        read_audio_from(io.BytesIO(audio), what, max_seconds, voice_clip=False)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError):
        raise ApiError(400, f"{what} is not audio this server can read; send WAV, FLAC, OGG or MP3 bytes",
                       "invalid_reference") from None
    except UserError as exc:
        raise ApiError(400, str(exc), "invalid_reference") from None
    return InlineReference(index if speaker is None else speaker, audio, text.strip(),
                           hashlib.sha256(audio).hexdigest(), _SUFFIX.get(info.format, ".wav"))


def remove_stale_folders(root: Path | None = None) -> int:
    """Remove the temporary folders of servers that are no longer running (killed mid-encode); how many."""
    root = Path(root or tempfile.gettempdir())
    removed = 0
    for folder in root.glob(FOLDER_PREFIX + "*"):
        match = re.match(re.escape(FOLDER_PREFIX) + r"(\d+)-", folder.name)
        try:
            if not match or folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
            os.kill(int(match.group(1)), 0)
            continue  # that server still runs
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
        except (OSError, ValueError):
            continue
    if removed:
        log.info("removed %d temporary folder(s) left by servers that were stopped", removed)
    return removed


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
                with tempfile.TemporaryDirectory(prefix=f"{FOLDER_PREFIX}{os.getpid()}-") as folder:
                    path = Path(folder) / f"reference{ref.suffix}"
                    path.write_bytes(ref.audio)
                    codes = engine_encoder(engine, cancel)(path)
                self.put(ref.sha256, fingerprint, codes)
                self.encoded += 1
            out.append(Reference(ref.speaker, ref.text, codes))
        return tuple(out)
