"""The writer of one project folder: it remembers what the folder's document holds, so each save writes only
what changed since (design.md §7; the layout is `state/project_files.py`).

- A take's files are written once, into the folder the take lives in, when it arrives (`write_takes`), and
  never again; a save into another folder links them there (a copy where the disk cannot link).
- A save of a folder this writer knows appends one journal line (`state/project_journal.py`); it writes the
  document whole (a compaction: project.json replaced by rename, a new journal) when the folder is new to it,
  of format 1, changed by someone else since, with take rows that do not say what their files hold (saved
  before rows did: `Take.sizes`), or when the journal has grown as large as the document. A
  compaction also removes the files of takes the document no longer names (deleted takes are kept in memory
  for Undo: `Take.hold`).
- A new folder is built as `<name>.s2proj.tmp` and renamed into place whole.

Any failure leaves the folder as it was before the save, or with extra take files (removed by a later
compaction); the writer then forgets what the folder holds, so its next save writes the document whole.

An autosave folder names a `fallback`: the project it belongs to, whose takes its document may name without
holding them (the takes of an opened project are not copied into the autosave).

Not thread-safe: one writer thread at a time (the studio's project store runs them one after another).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from s2studio.errors import Cancelled, UserError, printable
from s2studio.state.atomic import append_durable, replace_durable, write_bytes_atomic
from s2studio.state.disk import WriteError, fsync_dir, remove_quietly, replace, write_error
from s2studio.state.project import FORMAT_VERSION, LineTakes, Project, Take
from s2studio.state.project_document import (TAKE, VOICE_ID, VOICES_FOLDER, ProjectFile, complete, dump_field,
                                             packed_voices, read_document, recover, siblings, whole_document)
from s2studio.state.project_journal import (JOURNAL, PLAIN_FIELDS, DocState, capture, changed_between, changes,
                                            encode, header)
from s2studio.state.take_audio import TakeSound
from s2studio.state.take_files import (TAKE_ID, TAKES, make_folder, open_take, plain_folder, share_takes, take_files,
                                       write_takes)

log = logging.getLogger(__name__)

COMPACT_BYTES = 1 << 20
"""A journal is compacted once it is larger than this and than the document."""
Progress = Callable[[float, str], None]


class ProjectFolder:
    def __init__(self, path: Path, fallback: Path | None = None) -> None:
        self.path = Path(path)
        self.fallback = fallback
        self.base: DocState | None = None
        """What the folder's document holds, as this writer last wrote or read it (None: unknown)."""
        self.format = 0
        self.generation = 0
        self.journal_at = 0
        """Bytes of the journal's good lines: where the next line goes."""
        self.records = 0
        self.document_bytes = 0
        self.damage = ""
        """Why part of the journal could not be read (it is set aside by the next compaction)."""
        self.stale_rows = 0
        """Take rows of the document that do not say what their files hold (`Take.sizes`): the next save writes
        the document whole, so that the next open reads no take's headers."""
        self._stamp: tuple[Any, ...] | None = None

    # -- opening -----------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, autosave: bool = False,
             progress: Progress | None = None) -> tuple[ProjectFolder, ProjectFile]:
        """The folder's project (`read_project`'s rules) and a writer that knows what its document holds.
        `autosave`: the folder is the studio's own autosave, whose takes may be in the folder of the project
        it names (`autosave_of`); any other folder's takes are read from inside it only."""
        recover(path)
        doc = read_document(path)
        values = doc.values
        origin = Path(values["autosave_of"]) if values["autosave_of"] else None
        fallback = origin if autosave else None
        takes_from = [path] + ([fallback] if fallback is not None else [])
        folder = cls(path, fallback)
        lines, problems, folder.stale_rows = _read_takes(takes_from, values["lines"], progress)
        project = Project(**{k: values[k] for k in _PROJECT_FIELDS}, lines=lines)
        folder.format, folder.generation = doc.format, doc.generation
        folder.journal_at, folder.records = doc.journal_bytes, doc.journal_records
        folder.document_bytes, folder.damage = doc.document_bytes, doc.journal_damage
        folder.base = capture(project, origin).keyed()
        folder._stamp = folder._stat()
        if doc.journal_damage:
            problems.append(f"the changes saved after {doc.journal_records} saves since the last full save could "
                            f"not be read ({doc.journal_damage}) and were left out; the journal is kept beside "
                            "the project at its next save")
        return folder, ProjectFile(project, tuple(problems), origin, packed_voices(path))

    # -- writing -----------------------------------------------------------------------------------

    def write_takes(self, takes: Sequence[Take]) -> None:
        """Write the files of these new takes into this (existing) folder, once; each take reads from its
        files from then on. A failure (`WriteError`) leaves the takes not written yet in memory."""
        for take, files, peaks, decoded in write_takes([t for t in takes if t.files is None], self.path):
            take.attach(files, peaks, decoded)

    def save(self, state: DocState, voices: Mapping[str, bytes] | None = None, progress: Progress | None = None,
             cancel: Any = None) -> None:
        """Make the folder hold `state` (module docstring). `voices`: the packed voices it holds from now on
        (voice id -> `.s2voice` bytes; {} for none; None leaves them as they are). `progress(fraction, text)`
        is told while takes are copied; `cancel` (a `threading.Event`) stops a copy with `Cancelled`.
        Raises `UserError` with one line (nothing lost: the folder holds the save before)."""
        path = self.path
        tmp, _ = siblings(path)
        if self.base is None:
            recover(path)
        new = not os.path.lexists(path)
        if not new and self.base is None and not complete(path):
            raise UserError(f"Cannot save the project to {printable(path)}: it exists and is not an S2 Studio "
                            "project; choose another name.")
        for voice_id in voices or {}:
            if not VOICE_ID.match(voice_id):
                raise ValueError(f"{voice_id!r} is not a voice id")
        compact = new or self.base is None or self.format != FORMAT_VERSION or self._moved() or self.damage \
            or self.stale_rows or not self.journal_at or self.journal_at > max(COMPACT_BYTES, self.document_bytes)
        state = state.keyed(self.base)
        changed = None if compact else changed_between(self.base, state)
        takes = state.takes() if changed is None else [t for line_id in changed if line_id in state.lines
                                                         for t in state.takes_of(line_id)]
        _check_ids(takes)
        target = tmp if new else path
        placed: list[tuple[Take, Any]] = []
        try:
            if new:
                remove_quietly(tmp)
                os.mkdir(tmp)
            placed = self._place_takes(takes, target, progress, cancel)
            if voices is not None:
                _write_voices(target, voices)
            if compact:
                self._compact(target, state, collect=not new)
            else:
                record = changes(self.base, state, dump_field, TAKE.dump)
                if record:
                    self._append(record)
            if new:
                fsync_dir(tmp)
                replace(tmp, path, folder=True)
                fsync_dir(path.parent)
        except (OSError, WriteError, Cancelled) as exc:
            self.base = None
            if new:
                remove_quietly(tmp)
            if isinstance(exc, Cancelled):
                raise
            code = getattr(exc, "errno", None)
            reason = write_error(OSError(code, os.strerror(code)) if code else exc, path)
            raise UserError(f"Cannot save the project: {reason}") from None
        self.base = state
        self._stamp = self._stat()
        for take, files in placed:  # in their final place now: read from there
            if isinstance(files, tuple):
                take.attach(*files)
            else:
                take.rebind(files)

    # -- internals ---------------------------------------------------------------------------------

    def _place_takes(self, takes: Sequence[Take], target: Path, progress: Progress | None,
                     cancel: Any) -> list[tuple[Take, Any]]:
        """Give `target` the files of each of `takes` it lacks (every take of a document written whole; those of
        the lines changed since the last save for an append: the others' files are where that save put them);
        returns each take with what it should read from once the save is through (new files to attach, or
        files to read instead of its current)."""
        here = {self.path, self.fallback}
        missing = [t for t in takes if t.files is None or t.files.folder not in here or
                   (t.files.flat and t.files.folder == self.path)]  # format 1: into the new layout
        placed: list[tuple[Take, Any]] = [
            (take, (take_files(self.path, take.take_id), peaks, decoded))
            for take, _, peaks, decoded in write_takes([t for t in missing if t.files is None], target)]
        shared = [t for t in missing if t.files is not None]

        def told(done: int, copying: bool) -> None:
            if progress is not None:
                progress(done / len(shared), f"{'Copying' if copying else 'Linking'} takes: {done:,} of {len(shared):,}")

        share_takes(shared, target, told, cancel)
        if self.fallback is None:  # the project's own folder: its takes read from there
            placed += [(take, take_files(self.path, take.take_id)) for take in shared]
        return placed

    def _compact(self, target: Path, state: DocState, collect: bool) -> None:
        generation = self.generation + 1
        data = _JsonPieces(whole_document(state, generation))
        journal = target / JOURNAL
        if self.damage and os.path.lexists(journal):  # kept for the person, never overwritten
            aside = target / f"journal-damaged-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
            replace(journal, aside)
            log.warning("kept the damaged journal of %s as %s", target, aside.name)
        replace_durable(target / "project.json", data)
        first = header(generation)
        replace_durable(journal, first)
        self.format, self.generation, self.document_bytes = FORMAT_VERSION, generation, data.bytes
        self.journal_at, self.records, self.damage, self.stale_rows = len(first), 0, "", 0
        if collect:
            _collect(target, {t.take_id for t in state.takes()})

    def _append(self, record: dict[str, Any]) -> None:
        record = {"n": self.records + 1, **record}
        self.journal_at = append_durable(self.path / JOURNAL, encode(record), self.journal_at)
        self.records += 1

    def _stat(self) -> tuple[Any, ...] | None:
        try:
            doc = os.lstat(self.path / "project.json")
            journal = os.lstat(self.path / JOURNAL)
        except OSError:
            return None
        return doc.st_ino, doc.st_size, doc.st_mtime_ns, journal.st_size

    def _moved(self) -> bool:
        """Someone else wrote the folder since this writer did (then its document is written whole)."""
        now = self._stat()
        return now is None or now != self._stamp


_PROJECT_FIELDS = ("script", "line_ids", *PLAIN_FIELDS[:-1])


def _read_takes(folders: list[Path], rows: dict[str, Any], progress: Progress | None
                ) -> tuple[dict[str, LineTakes], list[str], int]:
    """Every line's takes, each checked (`open_take`) and reading from its files; the problems of those left out;
    how many rows do not say what their take's files hold (saved before rows did, or the files differ)."""
    problems: list[str] = []
    stale = 0
    kept: dict[str, LineTakes] = {}
    plain = {os.path.join(folder, TAKES): plain_folder(folder / TAKES) for folder in folders}
    usable = [folder for folder in folders if plain[os.path.join(folder, TAKES)]]
    total = sum(len(e["takes"]) for e in rows.values()) or 1
    done = 0
    for line_id, entry in rows.items():
        takes: list[Take] = []
        picked = None
        for i, row in enumerate(entry["takes"]):
            done += 1
            if progress is not None and done % 500 == 0:
                progress(done / total, f"Reading takes: {done:,} of {total:,}")
            try:
                if not usable:
                    raise ValueError("the takes folder is missing or not a plain folder")
                files, sizes = open_take(usable, row["take_id"], plain, row["sizes"])
            except (OSError, ValueError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                problems.append(f"take {row['take_id']} (\"{printable(row['text'], 40)}\") left out: "
                                f"{printable(reason, 160)}")
                continue
            if i == entry["picked"]:
                picked = len(takes)
            if sizes is not row["sizes"]:  # not as its row says: found from the headers
                stale += 1
                row = {**row, "sizes": sizes}
            peaks = None if files.flat else files.stem + ".peaks.npy"
            sound = TakeSound.from_file(files.stem + ".flac", sizes.samples, peaks)
            takes.append(Take(**row, line_id=line_id, sound=sound, files=files))  # a row holds `TAKE`'s fields
        if takes:
            kept[line_id] = LineTakes(takes, picked if picked is not None else len(takes) - 1)
    return kept, problems, stale


def _collect(folder: Path, keep: set[str]) -> None:
    """Remove the files of takes not in `keep` (the project's takes) from `folder`'s takes; never raises."""
    root = folder / TAKES
    if not plain_folder(root):
        return
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        sub = root / name
        if plain_folder(sub):
            try:
                inner = os.listdir(sub)
            except OSError:
                continue
            for file in inner:
                if not file.startswith(".") and file.partition(".")[0] not in keep:
                    remove_quietly(sub / file)
        elif not name.startswith("."):  # format 1's flat files: every take is in its folder now
            remove_quietly(sub)


def _write_voices(folder: Path, voices: Mapping[str, bytes]) -> None:
    target = folder / VOICES_FOLDER
    if not voices:
        if os.path.lexists(target):
            remove_quietly(target)
        return
    make_folder(target)
    have = packed_voices(folder)
    for voice_id, packed in voices.items():
        path = target / f"{voice_id}.s2voice"
        if voice_id in have and path.stat().st_size == len(packed) and path.read_bytes() == packed:
            continue
        write_bytes_atomic(path, packed)
    for voice_id, path in have.items():
        if voice_id not in voices:
            remove_quietly(path)


def _check_ids(takes: Sequence[Take]) -> None:
    seen: set[str] = set()
    for take in takes:
        if not TAKE_ID.match(take.take_id) or take.take_id in seen:
            raise ValueError(f"take id {take.take_id!r} is not a fresh take id")
        seen.add(take.take_id)


class _JsonPieces:
    """A document's JSON as bytes in pieces of `PIECE_CHUNKS` of the encoder's chunks, and how many bytes it
    came to once written. A book's document is a million chunks: joined whole, the join alone held the
    interpreter 30-60 ms, and the window's thread with it."""

    PIECE_CHUNKS = 4096

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.bytes = 0

    def __iter__(self) -> Iterator[bytes]:
        encoder = json.JSONEncoder(indent=1, ensure_ascii=False, allow_nan=False)
        chunks = encoder.iterencode(self.doc)
        while batch := list(itertools.islice(chunks, self.PIECE_CHUNKS)):
            # a path that is not UTF-8 (surrogate escapes) is kept as a \udcXX escape, which reads back the same
            piece = "".join(batch).encode("utf-8", "backslashreplace")
            self.bytes += len(piece)
            yield piece

