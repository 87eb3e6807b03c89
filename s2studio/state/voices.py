"""The voice library: cloned voices as folders of FLAC clips, transcripts and cached codes.

Layout (design.md §7), one folder per voice under `paths.voices_dir()`:

    <voice-id>/voice.json          {"version", "id", "name", "notes", "consent", "created", "clips": [...]}
    <voice-id>/clip1.flac …        the reference clips (1–4), as recorded, losslessly
    <voice-id>/codes.safetensors   each clip's codec codes (10, N) int64, tensor name = clip id,
                                   metadata[clip id] = "<clip sha256>:<codec fingerprint>"
    <voice-id>/lora.safetensors    optional: the LoRA the voice was fine-tuned with (voice.json "lora" lists it),
                                   merged into the model for the voice's lines

Codes are computed lazily (`VoiceLibrary.codes`, `voice_codes.py`) by whatever encoder the engine provides, and
recomputed only when a clip's bytes or the codec change. `Clip`, `Voice` and voice.json live in
`voice_format.py`. Every write is atomic: a new voice is built
in a hidden temp folder and renamed into place, files are replaced by rename, so a crash or a
refused import leaves the library as it was. A `.s2voice` file is a zip of one voice folder (`voice_file.py`).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import secrets
import shutil
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import soundfile as sf

from s2studio.errors import UserError, printable
from s2studio.state.atomic import publish_folder, staged_folder, write_bytes_atomic, write_durable, write_text_atomic
from s2studio.state.disk import WriteError, write_error
from s2studio.state.leftovers import clean_stale
from s2studio.state.clips import ClipAudio, check_clip, read_clip
from s2studio.state.lora_file import LORA_FILE, lora_bytes_problem
from s2studio.state.voice_archive import MAX_CLIPS, VOICE_FILE, check_entries, verify_import, verify_lora
from s2studio.state.voice_codes import Encoder, uncached_clips, voice_codes
from s2studio.state.voice_file import pack_voice
from s2studio.state.voice_format import (VOICE_ID, Clip, Voice, VoiceLora, clean_name, clean_text, sha256_of,
                                         voice_from_json, voice_json)

__all__ = ["MAX_CLIPS", "Clip", "ClipAudio", "Voice", "VoiceLibrary", "VoiceLora", "check_clip"]

log = logging.getLogger(__name__)


class VoiceLibrary:
    """All voices under `root` (normally `paths.voices_dir()`)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._cleaned = False

    # ------------------------------------------------------------------ reading

    def folder(self, voice_id: str) -> Path:
        if not VOICE_ID.match(voice_id):
            raise UserError(f"no voice with id {voice_id!r}; `s2studio voice list` shows the ids")
        return self.root / voice_id

    def clip_path(self, voice: Voice, clip: Clip) -> Path:
        return self.folder(voice.id) / clip.file

    def lora_path(self, voice: Voice) -> Path | None:
        """The voice's LoRA file, or None when it has none."""
        return self.folder(voice.id) / LORA_FILE if voice.lora is not None else None

    def lora_paths(self, voices: Iterable[Voice]) -> dict[str, Path]:
        """Voice id -> LoRA file of those `voices` that carry one (`plan.compile_lines(lora_paths=...)`)."""
        return {v.id: path for v in voices if (path := self.lora_path(v)) is not None}

    def list(self) -> list[Voice]:
        """Every readable voice, by name; damaged folders are logged and skipped."""
        return self.scan()[0]

    def scan(self) -> tuple[list[Voice], list[tuple[Path, str]]]:
        """Every readable voice by name, and each damaged voice folder with what is wrong with it (logged too):
        a listing can then say why a library that has folders shows no voices."""
        voices: list[Voice] = []
        damaged: list[tuple[Path, str]] = []
        if not self.root.is_dir():
            return voices, damaged
        for entry in sorted(self.root.iterdir()):
            if not VOICE_ID.match(entry.name) or not (entry / VOICE_FILE).is_file():
                continue
            try:
                voices.append(self._load(entry))
            except UserError as exc:
                log.warning("skipping voice %s: %s", entry, exc)
                damaged.append((entry, str(exc)))
        return sorted(voices, key=lambda v: (v.name.casefold(), v.id)), damaged

    def get(self, voice_id: str) -> Voice:
        folder = self.folder(voice_id)
        if not (folder / VOICE_FILE).is_file():
            raise UserError(f"no voice with id {voice_id!r}; `s2studio voice list` shows the ids")
        return self._load(folder)

    def find(self, name: str) -> Voice | None:
        """The voice called `name` (case-insensitive), or None."""
        key = " ".join(name.split()).casefold()
        return next((v for v in self.list() if v.name.casefold() == key), None)

    def resolve(self, id_or_name: str) -> Voice:
        """A voice by id or by name, for the command line and the cast."""
        if VOICE_ID.match(id_or_name) and (self.root / id_or_name / VOICE_FILE).is_file():
            return self.get(id_or_name)
        voice = self.find(id_or_name)
        if voice is None:
            raise UserError(f"no voice called {id_or_name!r}; `s2studio voice list` shows the voices")
        return voice

    def _load(self, folder: Path) -> Voice:
        try:
            raw = json.loads((folder / VOICE_FILE).read_text("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UserError(f"cannot read {folder / VOICE_FILE}: {exc}") from None
        return voice_from_json(raw, str(folder))

    # ------------------------------------------------------------------ writing

    def _library_error(self, exc: BaseException) -> UserError:
        """A write failure inside the library, named by the library's folder (never a temp folder)."""
        code = getattr(exc, "errno", None)
        if code is None:
            return UserError(f"cannot write to the voice library {printable(self.root)}: {printable(exc)}")
        return UserError(f"cannot write to the voice library: {write_error(OSError(code, os.strerror(code)), self.root)}")

    def clean_leftovers(self) -> list[Path]:
        """Remove what killed runs left: staging folders (`.new-*`, up to hundreds of MB each) and voices
        being deleted (`.trash-*`), when older than this process and not locked by a live one."""
        return clean_stale(self.root, lambda name: name.startswith((".new-", ".trash-")))

    @contextmanager
    def _staged(self, failure: Callable[[BaseException], str],
                errors: tuple[type[BaseException], ...] = ()) -> Iterator[Path]:
        """A new hidden, locked folder to build a voice in (`state.atomic.staged_folder`): any failure
        removes it, a write failure is a `UserError` naming the library, and `errors` become a UserError
        saying `failure(exc)`, so a half-written voice never stays in the library."""
        if not self._cleaned:
            self._cleaned = True
            self.clean_leftovers()
        try:
            with staged_folder(self.root, ".new-") as tmp:
                yield tmp
        except WriteError as exc:
            raise self._library_error(exc) from None
        except errors as exc:
            raise UserError(failure(exc)) from None
        except OSError as exc:
            raise self._library_error(exc) from None

    def _commit_folder(self, tmp: Path, voice_id: str) -> None:
        try:
            publish_folder(tmp, self.root / voice_id)
        except WriteError as exc:
            raise self._library_error(exc) from None

    def _fresh_id(self) -> str:
        while True:
            voice_id = "v" + secrets.token_hex(6)
            if not (self.root / voice_id).exists():
                return voice_id

    def _unique_name(self, name: str) -> str:
        taken = {v.name.casefold() for v in self.list()}
        candidate, n = name, 2
        while candidate.casefold() in taken:
            candidate, n = f"{name} ({n})", n + 1
        return candidate

    def create(self, name: str, clips: Sequence[tuple[Path | ClipAudio, str]], notes: str = "",
               consent: str = "") -> Voice:
        """A new voice from 1–4 (audio file or prepared audio, transcript) pairs; clips are stored as FLAC."""
        name = clean_name(name)
        if self.find(name) is not None:
            raise UserError(f"a voice called {name!r} exists; pick another name or remove that voice")
        if not 1 <= len(clips) <= MAX_CLIPS:
            raise UserError(f"a voice needs 1–{MAX_CLIPS} clips, got {len(clips)}")
        notes, consent = clean_text(notes, "the notes", multiline=True), clean_text(consent, "the consent note")
        audio = [(read_clip(source), _transcript(source, transcript)) for source, transcript in clips]
        with self._staged(lambda exc: "") as tmp:
            stored = [_write_clip(tmp, i, a, transcript) for i, (a, transcript) in enumerate(audio, start=1)]
            voice = Voice(self._fresh_id(), name, notes, consent, tuple(stored),
                          datetime.now(timezone.utc).isoformat(timespec="seconds"))
            write_durable(tmp / VOICE_FILE, voice_json(voice).encode("utf-8"))
            self._commit_folder(tmp, voice.id)
        return voice

    def add_clip(self, voice_id: str, path: Path | ClipAudio, transcript: str) -> Voice:
        """Another reference clip for an existing voice (at most MAX_CLIPS). The other clips' cached
        codes stay valid (the cache is keyed by clip id and bytes), so only the new clip gets encoded."""
        voice = self.get(voice_id)
        if len(voice.clips) >= MAX_CLIPS:
            raise UserError(f"voice {voice.name!r} has {MAX_CLIPS} clips already; remove one before adding another")
        transcript = _transcript(path, transcript)
        audio = read_clip(path)
        folder = self.folder(voice_id)
        used = {c.file for c in voice.clips}
        number = next(n for n in range(1, 10) if f"clip{n}.flac" not in used)
        try:
            clip = _write_clip(folder, number, audio, transcript, atomic=True)
        except WriteError as exc:
            raise self._library_error(exc) from None
        try:
            return self._save(replace(voice, clips=voice.clips + (clip,)))
        except UserError:
            (folder / clip.file).unlink(missing_ok=True)
            raise

    def remove_clip(self, voice_id: str, clip_id: str) -> Voice:
        """Drop one clip (a voice keeps at least one); voice.json first, so a crash leaves a stray file,
        never a voice that lists a missing clip."""
        voice = self.get(voice_id)
        clip = next((c for c in voice.clips if c.id == clip_id), None)
        if clip is None:
            raise UserError(f"voice {voice.name!r} has no clip {clip_id!r}")
        if len(voice.clips) == 1:
            raise UserError(f"{clip_id} is the only clip of voice {voice.name!r}; a voice needs at least one")
        voice = self._save(replace(voice, clips=tuple(c for c in voice.clips if c.id != clip_id)))
        (self.folder(voice_id) / clip.file).unlink(missing_ok=True)
        return voice

    def _save(self, voice: Voice) -> Voice:
        try:
            write_text_atomic(self.folder(voice.id) / VOICE_FILE, voice_json(voice))
        except WriteError as exc:
            raise self._library_error(exc) from None
        return voice

    def rename(self, voice_id: str, name: str) -> Voice:
        voice = self.get(voice_id)
        name = clean_name(name)
        other = self.find(name)
        if other is not None and other.id != voice_id:
            raise UserError(f"a voice called {name!r} exists; pick another name")
        return self._save(replace(voice, name=name))

    def set_notes(self, voice_id: str, notes: str | None = None, consent: str | None = None) -> Voice:
        voice = self.get(voice_id)
        return self._save(replace(voice, notes=voice.notes if notes is None else clean_text(notes, "the notes", True),
                                  consent=voice.consent if consent is None else clean_text(consent, "the consent")))

    def set_lora(self, voice_id: str, source: Path, note: str = "") -> Voice:
        """Give the voice the LoRA in `source` (a copy; any LoRA it had is replaced). The bytes are checked
        (`state.lora_file`) before they are written; the file first, then voice.json, each by rename."""
        voice = self.get(voice_id)
        note = clean_text(note, "the LoRA note")
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            raise UserError(f"cannot read LoRA {printable(source)}: {exc.strerror or exc}") from None
        problem = lora_bytes_problem(data)
        if problem:
            raise UserError(f"{printable(source)} is not a usable LoRA: {problem}; pick the lora.safetensors "
                            "that `s2studio train` wrote")
        lora = VoiceLora(hashlib.sha256(data).hexdigest(), len(data),
                         datetime.now(timezone.utc).isoformat(timespec="seconds"), note)
        try:
            write_bytes_atomic(self.folder(voice_id) / LORA_FILE, data)
        except WriteError as exc:
            raise self._library_error(exc) from None
        return self._save(replace(voice, lora=lora))

    def remove_lora(self, voice_id: str) -> Voice:
        """The voice without its LoRA: voice.json first, so a crash leaves a stray file, never a listed one missing."""
        voice = self.get(voice_id)
        if voice.lora is None:
            return voice
        voice = self._save(replace(voice, lora=None))
        (self.folder(voice_id) / LORA_FILE).unlink(missing_ok=True)
        return voice

    def delete(self, voice_id: str) -> None:
        """Move the folder aside in one rename, then remove it."""
        self.get(voice_id)  # raises for unknown ids
        folder = self.folder(voice_id)
        trash = self.root / f".trash-{voice_id}-{secrets.token_hex(3)}"
        try:
            folder.rename(trash)
        except OSError as exc:
            raise UserError(f"cannot remove voice {voice_id}: {exc.strerror or exc}") from None
        shutil.rmtree(trash, ignore_errors=True)

    # ------------------------------------------------------------------ codes

    def codes(self, voice: Voice, encoder: Encoder, fingerprint: str) -> list[np.ndarray]:
        """Each clip's (10, N) int64 codes, from the cache or encoded (`voice_codes.voice_codes`)."""
        return voice_codes(self.folder(voice.id), voice, encoder, fingerprint, self._save)

    def uncached_clips(self, voice: Voice, fingerprint: str) -> list[Clip]:
        """The clips `codes` would have to encode for this codec (read-only: what an encode job does)."""
        return uncached_clips(self.folder(voice.id), voice, fingerprint)

    # ------------------------------------------------------------------ exchange

    def archive(self, voice_id: str, compress: bool = True) -> bytes:
        """The voice as the bytes of a `.s2voice` zip (`voice_archive.pack_voice`)."""
        return pack_voice(self.folder(voice_id), self.get(voice_id), compress)

    def export(self, voice_id: str, dest: Path) -> Path:
        """Write the voice as one `.s2voice` zip (`archive`)."""
        dest = Path(dest)
        if dest.suffix != ".s2voice":
            dest = dest.with_name(dest.name + ".s2voice")
        return write_bytes_atomic(dest, self.archive(voice_id))

    def import_voice(self, path: Path) -> Voice:
        """Add the voice in a `.s2voice` zip; refuses anything that is not exactly a voice folder."""
        path = Path(path)
        try:
            z = zipfile.ZipFile(path)
        except FileNotFoundError:
            raise UserError(f"{path} does not exist") from None
        except (zipfile.BadZipFile, OSError) as exc:
            raise UserError(f"{path} is not a .s2voice file ({exc})") from None
        with z:
            infos = z.infolist()
            check_entries(path, infos)
            try:
                raw = json.loads(z.read(VOICE_FILE).decode("utf-8"))
            except KeyError:
                raise UserError(f"{path} has no voice.json; it is not a .s2voice file") from None
            except (UnicodeDecodeError, json.JSONDecodeError, zipfile.BadZipFile, OSError) as exc:
                raise UserError(f"{path}: voice.json is damaged ({exc})") from None
            voice = voice_from_json(raw, str(path))
            present = {i.filename for i in infos}
            for clip in voice.clips:
                if clip.file not in present:
                    raise UserError(f"{path} lacks {clip.file}; the voice file is damaged")
            with self._staged(lambda exc: f"cannot import {printable(path)}: {printable(exc)}; the voice file "
                              "is damaged", (zipfile.BadZipFile, EOFError, zlib.error)) as tmp:
                for info in infos:
                    if info.filename != VOICE_FILE:
                        write_durable(tmp / info.filename, z.read(info))
                clips = verify_import(path, tmp, voice.clips)
                verify_lora(path, tmp, voice.lora)
                voice = replace(voice, clips=clips, name=self._unique_name(voice.name),
                                id=voice.id if VOICE_ID.match(voice.id) and not (self.root / voice.id).exists()
                                else self._fresh_id())
                write_durable(tmp / VOICE_FILE, voice_json(voice).encode("utf-8"))
                self._commit_folder(tmp, voice.id)
        return voice


def _write_clip(folder: Path, number: int, audio: tuple[np.ndarray, int, str], transcript: str,
                atomic: bool = False) -> Clip:
    """Store one clip as `clip<number>.flac` (16-bit sources stay 16-bit, the rest 24-bit)."""
    data, sr, subtype = audio
    file = f"clip{number}.flac"
    flac_subtype = "PCM_16" if subtype in ("PCM_16", "PCM_S8", "PCM_U8") else "PCM_24"

    buf = io.BytesIO()
    sf.write(buf, data, sr, format="FLAC", subtype=flac_subtype)
    (write_bytes_atomic if atomic else write_durable)(folder / file, buf.getvalue())
    return Clip(f"c{number}", file, transcript, sha256_of(folder / file), round(data.shape[0] / sr, 3), sr)


def _transcript(source: Path | ClipAudio, transcript: str) -> str:
    text = clean_text(transcript, "the transcript")
    if not text:
        name = source.name if isinstance(source, ClipAudio) else source
        raise UserError(f"clip {printable(name)} has no transcript; type exactly what is said in it")
    return text
