"""Voices clients uploaded to this server (`POST /v1/audio/voices`, serve/routes_voices.py), kept across restarts.

Kept apart from the voice library on purpose: an upload never writes into the library of the person running the
server. `s2studio serve` keeps them in the data folder (`uploaded-voices/`), so a client that uploaded a voice once
can name it after the server restarts (vllm-omni's clients upload once and name it from then on). The folder holds
each clip under its content hash (`<sha256>.wav`) and one small JSON per voice, named by the hash of its name (a
client's name never becomes a path): transcript, consent note, clip. Both are written through `state.atomic`, the
clip first, so a crash leaves a voice whole or absent; one file per voice lets two servers share a data folder. At
start a voice whose clip is missing or altered, or that is beyond the limits, is left out (a line in the log), and
clips no voice names are removed.

The store is bounded (256 voices, 128 MB of clips): an upload that would pass a bound makes room by evicting the
voices used least recently (named by a request or uploaded; at start, the newest upload counts as the most recent),
one log line each, so a server that clients keep uploading to never refuses them for good. A voice a running
request is speaking with is never evicted (`take`, then `release`); an evicted voice named later is unknown, and the
404 says to upload it again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from s2studio.errors import UserError
from s2studio.serve.errors import ApiError
from s2studio.serve.references import InlineReference

log = logging.getLogger("s2studio.serve")

MAX_UPLOADS = 256
MAX_UPLOAD_BYTES = 128 * 1024 * 1024
"""All uploaded clips together: what the server's memory (and its folder) holds for clients, whatever their number."""


class VoicesInUse(ApiError):
    """No voice can be evicted for an upload: running requests speak with all of them. The route says when to
    retry (`Retry-After`: about when one of those requests ends), which only the engine's scheduler knows."""


_CLIP_NAME = re.compile(r"[0-9a-f]{64}\.(wav|flac|ogg|mp3|aiff|w64|caf)")


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

    @property
    def clip_name(self) -> str:
        return self.reference.sha256 + self.reference.suffix


_MIME = {".wav": "audio/wav", ".flac": "audio/flac", ".ogg": "audio/ogg", ".mp3": "audio/mpeg"}


def bad_name(name: str) -> str:
    """Why `name` cannot name an uploaded voice ("" when it can): empty, a path, or control characters."""
    if not name or name in (".", ".."):
        return "`name` must be a non-empty voice name"
    if any(c in name for c in "/\\") or any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "`name` must be a voice name without slashes or control characters"
    return ""


class UploadedVoices:
    """Name (case-insensitive) -> uploaded clip; thread-safe; at most `capacity` voices of `max_bytes` in all;
    kept in `folder` when one is given (in memory only otherwise: the tests' servers)."""

    def __init__(self, capacity: int = MAX_UPLOADS, max_bytes: int = MAX_UPLOAD_BYTES,
                 folder: Path | None = None) -> None:
        self._voices: OrderedDict[str, UploadedVoice] = OrderedDict()  # least recently used first
        self._in_use: Counter[str] = Counter()  # keys of the voices running requests speak with
        self._lock = threading.Lock()
        self._capacity = capacity
        self._max_bytes = max_bytes
        self.folder = folder
        if folder is not None:
            self._read(folder)

    def put(self, voice: UploadedVoice) -> None:
        """Keep `voice` (replacing one of its name), evicting the least recently used voices that no running
        request speaks with when it would pass the bounds; refused (nothing evicted) when even that is not room."""
        key = voice.name.lower()
        with self._lock:
            evicted = self._room_for(key, len(voice.reference.audio))
            self._store(voice, self._voices.get(key))
            self._voices[key] = voice
            self._voices.move_to_end(key)
            for gone in evicted:
                try:
                    self._drop(gone.name.lower())
                except ApiError:  # logged; the new voice is kept, the old one goes at the next start
                    continue
                log.warning("evicted the uploaded voice %r (used least recently) to make room for %r; this server "
                            "keeps at most %d uploaded voices, %d MB in all", gone.name, voice.name, self._capacity,
                            self._max_bytes // 2**20)

    def _room_for(self, key: str, size: int) -> list[UploadedVoice]:
        """The voices to evict, least recently used first, so that a voice of `size` bytes kept as `key` fits."""
        count = sum(1 for k in self._voices if k != key) + 1
        held = sum(len(v.reference.audio) for k, v in self._voices.items() if k != key) + size
        evicted: list[UploadedVoice] = []
        for k, v in self._voices.items():
            if count <= self._capacity and held <= self._max_bytes:
                break
            if k != key and not self._in_use[k]:
                evicted.append(v)
                count, held = count - 1, held - len(v.reference.audio)
        if size > self._max_bytes:
            raise ApiError(400, f"this server holds at most {self._max_bytes // 2**20} MB of uploaded voices; "
                           "upload a shorter clip", "too_many_voices", "audio_sample")
        if count > self._capacity or held > self._max_bytes:
            if self._capacity == 0:
                raise ApiError(400, "this server keeps no uploaded voices; send the clip with each request "
                               "(ref_audio and ref_text)", "too_many_voices", "name")
            raise VoicesInUse(503, "this server's uploaded voices are all in use by running requests; try again "
                              "when they end", "too_many_voices", "name")
        return evicted

    def take(self, name: str) -> UploadedVoice | None:
        """The voice called `name`, now the most recently used and never evicted until `release(voice)()`."""
        with self._lock:
            key = name.strip().lower()
            voice = self._voices.get(key)
            if voice is not None:
                self._voices.move_to_end(key)
                self._in_use[key] += 1
            return voice

    def release(self, voice: UploadedVoice) -> Callable[[], None]:
        """A function that lets `voice` go (one `take` each) the first time it is called, for a request to call
        wherever it ends."""
        called = threading.Event()

        def let_go() -> None:
            if called.is_set():
                return
            called.set()
            with self._lock:
                key = voice.name.lower()
                self._in_use[key] -= 1
                if self._in_use[key] <= 0:
                    del self._in_use[key]

        return let_go

    def get(self, name: str) -> UploadedVoice | None:
        with self._lock:
            return self._voices.get(name.strip().lower())

    def remove(self, name: str) -> bool:
        with self._lock:
            key = name.strip().lower()
            if key not in self._voices:
                return False
            self._drop(key)
            return True

    def list(self) -> list[UploadedVoice]:
        with self._lock:
            return sorted(self._voices.values(), key=lambda v: v.created_at)

    def _drop(self, key: str) -> None:
        """Forget the voice kept as `key`: its entry first, then its clip unless another voice names it."""
        if self.folder is not None:
            try:
                (self.folder / _entry_name(key)).unlink(missing_ok=True)
            except OSError as exc:
                log.warning("could not delete an uploaded voice in %s: %s", self.folder, exc)
                raise ApiError(507, "this server could not delete the voice (its disk is not writable); tell "
                               "the server's owner", "not_stored") from None
        self._tidy(self._voices.pop(key))

    # ------------------------------------------------------------------------------------------- the folder

    def _store(self, voice: UploadedVoice, replaced: UploadedVoice | None) -> None:
        """Write the voice's clip (unless it is there already), then its entry; then tidy the clip it replaced."""
        if self.folder is None:
            return
        from s2studio.state.atomic import replace_durable, write_bytes_atomic

        entry = {"name": voice.name, "clip": voice.clip_name, "ref_text": voice.reference.text,
                 "consent": voice.consent, "created_at": voice.created_at, "description": voice.description}
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if not (self.folder / voice.clip_name).is_file():
                write_bytes_atomic(self.folder / voice.clip_name, voice.reference.audio)
            replace_durable(self.folder / _entry_name(voice.name.lower()), json.dumps(entry).encode("utf-8"))
        except (OSError, UserError) as exc:
            log.warning("could not keep an uploaded voice in %s: %s", self.folder, exc)
            raise ApiError(507, "this server could not store the voice (its disk is full or not writable); "
                           "try again later or tell the server's owner", "not_stored") from None
        if replaced is not None and replaced.clip_name != voice.clip_name:
            self._tidy(replaced)

    def _tidy(self, gone: UploadedVoice) -> None:
        """Remove the clip of a voice no longer kept, unless a voice (of any server sharing the folder) names it."""
        if self.folder is not None and gone.clip_name not in _named_clips(self.folder):
            from s2studio.state.disk import remove_quietly

            remove_quietly(self.folder / gone.clip_name)

    def _read(self, folder: Path) -> None:
        found = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            voice, why = _voice_of(path, folder)
            if voice is None:
                log.warning("left out the uploaded voice %s: %s", path, why)
            else:
                found.append(voice)
        held, kept = 0, []
        for voice in sorted(found, key=lambda v: v.created_at, reverse=True):  # the newest are kept
            if len(kept) >= self._capacity or held + len(voice.reference.audio) > self._max_bytes:
                log.warning("left out the uploaded voice %r: beyond this server's limits on uploaded voices",
                            voice.name)
                continue
            kept.append(voice)
            held += len(voice.reference.audio)
        for voice in reversed(kept):  # oldest first: the first to be evicted
            self._voices[voice.name.lower()] = voice
        from s2studio.state.disk import remove_quietly
        from s2studio.state.leftovers import is_stale

        try:
            named = _named_clips(folder)
            for path in folder.iterdir() if folder.is_dir() else ():
                if _CLIP_NAME.fullmatch(path.name) and path.name not in named and is_stale(path):
                    remove_quietly(path)  # a clip whose entry was never written (a crash) or was deleted
        except OSError as exc:  # tidying is a saving, not a need
            log.warning("could not tidy the uploaded voices in %s: %s", folder, exc)


def _entry_name(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32] + ".json"


def _entry(path: Path) -> dict:
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict):
        raise TypeError("not a JSON object")
    return raw


def _named_clips(folder: Path) -> set[str]:
    named = set()
    for path in folder.glob("*.json"):
        try:
            named.add(str(_entry(path)["clip"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return named


def _voice_of(path: Path, folder: Path) -> tuple[UploadedVoice | None, str]:
    """The voice an entry file describes, or None and why not."""
    try:
        entry = _entry(path)
        name, clip, text, consent = (str(entry[k]) for k in ("name", "clip", "ref_text", "consent"))
        created, description = int(entry["created_at"]), str(entry.get("description", ""))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"unreadable ({exc})"
    if bad_name(name) or path.name != _entry_name(name.lower()) or not _CLIP_NAME.fullmatch(clip):
        return None, "its name or its clip's file name is not one this server writes"
    try:
        audio = (folder / clip).read_bytes()
    except OSError as exc:
        return None, f"{name!r}: its clip cannot be read ({exc.strerror or exc})"
    sha = hashlib.sha256(audio).hexdigest()
    if sha != clip[:64]:
        return None, f"{name!r}: its clip was altered"
    reference = InlineReference(0, audio, text, sha, clip[64:])
    return UploadedVoice(name, reference, consent, created, description), ""
