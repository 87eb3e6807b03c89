"""A project's document: the schema of project.json, reading it with its journal applied, and recovery of a
folder save that a crash interrupted (the folder layout: `state/project_files.py`).

A project may come from someone else, so the whole document, journal applied, is validated against
`DOCUMENT` before anything is built, and the first problem is one `UserError` naming the field
(`…/project.json: lines.l3fa….takes[2].seed must be an integer, got "abc"`); nothing is half-applied.
project.json and the journal are read only when they are plain files, never through a link.

To add a field (an optional one, so that old files still open): one line in `TAKE` or `DOCUMENT` with a
default, and a field of the same name on `Take` or `Project` (a document field also in
`project_journal.PLAIN_FIELDS` and `project_journal.capture`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from s2studio.errors import UserError, printable
from s2studio.state import json_steps
from s2studio.state.disk import fsync_dir, remove_quietly, replace
from s2studio.state.project import FORMAT_VERSION, SETTINGS, SUFFIX, FileSizes, GenerationSettings, Project
from s2studio.state.project_journal import JOURNAL, PLAIN_FIELDS, DocState, apply, capture, line_entry, read_journal
from s2studio.state.schema import (Boolean, Choice, Converted, Field, Integer, ListOf, MapOf, Number, Place, Record,
                                   SchemaError, Text, Timestamp, child, place_text)
from s2studio.state.staleness import TAKE_SETTINGS
from s2studio.state.take_check import VERDICTS, TakeCheck
from s2studio.state.take_files import MAX_TAKE_SECONDS, TAKE_ID
from s2studio.units import LINE_GAP_S, SAMPLE_RATE

log = logging.getLogger(__name__)

VOICE_REF = re.compile(r"^(v[0-9a-f]{12})?$")
VOICE_ID = re.compile(r"^v[0-9a-f]{12}$")
VOICES_FOLDER = "voices"
"""Inside a project saved with its voices: one `<voice id>.s2voice` per voice of the cast."""
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024

CHECK = Converted(Record({
    "key": Field(Text(max_chars=64)),
    "checks": Field(ListOf(Record({
        "name": Field(Text(max_chars=40)),
        "verdict": Field(Choice(VERDICTS)),
        "score": Field(Number(0.0, 1.0)),
        "value": Field(Number(), None),
        "reason": Field(Text(max_chars=2000), ""),
    })), list),
}), TakeCheck.from_json, TakeCheck.to_json)
"""What a take's checks found (`state.take_check`)."""
SIZES = Converted(Record({
    "samples": Field(Integer(0, int(MAX_TAKE_SECONDS * SAMPLE_RATE))),
    "audio": Field(Integer(lo=1)),
    "codes": Field(Integer(lo=1)),
}), lambda d: FileSizes(**d), dataclasses.asdict)
"""What a take's files hold (`project.FileSizes`); missing in rows written before it was stored."""

TAKE = Record({
    "take_id": Field(Text(pattern=TAKE_ID, what="a take id (lower-case letters, digits, - and _)")),
    "text": Field(Text(), ""),
    "seed": Field(Integer(-(2**63), 2**64 - 1), 0),
    "fingerprint": Field(Text(max_chars=4096), ""),
    "speaker": Field(Text(max_chars=200), None),
    "voice": Field(Text(max_chars=200), None),
    "settings": Field(TAKE_SETTINGS, None),
    "created": Field(Timestamp(), None),
    "check": Field(CHECK, None),
    "sizes": Field(SIZES, None),
})
"""One row of a line's takes. A field here that `Take` also has is copied both ways by name."""
LINE = Record({
    "picked": Field(Integer(lo=-1), -1),
    "takes": Field(ListOf(TAKE), list),
})
DOCUMENT = Record({
    "format": Field(Integer(lo=0), FORMAT_VERSION),
    "generation": Field(Integer(lo=0), 0),
    "title": Field(Text(max_chars=10_000), ""),
    "script": Field(Text(), ""),
    "cast": Field(MapOf(Text(pattern=VOICE_REF, what='a voice id (v and 12 hex digits) or ""')), dict),
    "settings": Field(SETTINGS, GenerationSettings),
    "gap_s": Field(Number(0.0, 5.0), LINE_GAP_S),
    "lines": Field(MapOf(LINE), dict),
    "line_ids": Field(ListOf(Text(max_chars=200)), None),
    "autosave_of": Field(Text(max_chars=4096), None),
    "voice_names": Field(MapOf(Text(max_chars=200), key=Text(pattern=VOICE_ID, what="a voice id")), dict),
    "with_voices": Field(Boolean(), False),
    "speaker_colors": Field(MapOf(Integer(0, 10_000)), dict),
})
"""project.json (with the journal applied). A field here that `Project` also has is copied both ways by name;
`lines` is built from the take files; `format`, `generation` and `autosave_of` are the file's own."""
if set(DOCUMENT.fields) != {"format", "generation", "script", "line_ids", "lines", *PLAIN_FIELDS}:
    raise RuntimeError("project_journal.PLAIN_FIELDS must name every other field of DOCUMENT")


@dataclass(frozen=True)
class ProjectFile:
    project: Project
    problems: tuple[str, ...] = ()
    """Takes that could not be read and were left out, and changes of a damaged journal that were: shown,
    never silent."""
    autosave_of: Path | None = None
    """For an autosave: the project file it was made from (None for an unsaved project)."""
    packed_voices: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    """Voice id -> its `.s2voice` inside the project (a project saved with its voices): plain files only."""


@dataclass(frozen=True)
class Document:
    """project.json with its journal applied, validated, and what the writer needs to go on from it."""

    values: dict[str, Any]
    format: int
    generation: int
    journal_bytes: int
    """Where the journal's good lines end (0: no journal of this generation)."""
    journal_records: int
    journal_damage: str
    document_bytes: int


def project_path(path: Path) -> Path:
    path = Path(path)
    return path if path.suffix == SUFFIX else path.with_name(path.name + SUFFIX)


def siblings(path: Path) -> tuple[Path, Path]:
    return path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")


# ----------------------------------------------------------------------------- recovery


def complete(folder: Path, thorough: bool = False) -> bool:
    """A folder that a save finished writing: project.json (written last) is a plain file holding a JSON object.
    Today's saves replace project.json whole (by rename), so its first byte says enough, and a book's document
    is not parsed to fill a menu; `thorough` parses it all (a folder an older studio was building)."""
    try:
        if not stat.S_ISDIR(folder.lstat().st_mode):
            return False
        meta = folder / "project.json"
        if not stat.S_ISREG(meta.lstat().st_mode) or meta.stat().st_size > MAX_DOCUMENT_BYTES:
            return False
        if not thorough:
            with meta.open("rb") as f:
                return f.read(64).lstrip().startswith(b"{")
        return isinstance(json.loads(meta.read_bytes()), dict)
    except (OSError, ValueError, RecursionError):
        return False


def recover(path: Path) -> str | None:
    """Finish or undo a save of `path` that a crash interrupted; returns what was done (None: nothing).

    A complete `.tmp` is the newest save: it is put in place (the old project moved aside first). An
    incomplete one is removed. With no project left at `path`, a complete `.old` (the save before) comes
    back. A `.old` beside a project is removed. Failures (a read-only disk) are logged, never raised:
    opening what is there is still worth trying."""
    path = Path(path)
    tmp, old = siblings(path)
    done = None
    try:
        if os.path.lexists(tmp):
            if complete(tmp, thorough=True):
                if os.path.lexists(path):
                    remove_quietly(old)
                    replace(path, old, folder=True)
                replace(tmp, path, folder=True)
                fsync_dir(path.parent)
                done = f"finished the interrupted save of {path}"
            else:
                remove_quietly(tmp)
        if not os.path.lexists(path) and complete(old, thorough=True):
            replace(old, path, folder=True)
            fsync_dir(path.parent)
            done = f"restored {path} from the save before an interrupted one"
        elif os.path.lexists(old) and os.path.lexists(path):
            remove_quietly(old)
    except OSError as exc:
        log.warning("cannot recover the interrupted save of %s: %s", path, exc)
    if done:
        log.warning("%s", done)
    return done


def exists(path: Path) -> bool:
    """A project is at `path`, or can be recovered there."""
    path = Path(path)
    tmp, old = siblings(path)
    return complete(path) or any(os.path.lexists(p) and complete(p, thorough=True) for p in (tmp, old))


# ----------------------------------------------------------------------------- reading the document


def damaged(meta: Path, what: str) -> UserError:
    return UserError(f"{printable(meta)}: {what}; the project file is damaged (open a backup or fix it)")


def _plain_bytes(path: Path, limit: int) -> bytes | None:
    """The bytes of the plain file `path` (None when there is none); never through a link."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise damaged(path, f"{path.name} is not a plain file")
    if st.st_size > limit:
        raise damaged(path, f"{path.name} is {st.st_size >> 20} MB")
    return path.read_bytes()


def read_document(path: Path) -> Document:
    meta = path / "project.json"
    try:
        data = _plain_bytes(meta, MAX_DOCUMENT_BYTES)
    except OSError as exc:
        raise UserError(f"Cannot open {printable(meta)}: {printable(exc.strerror or exc)}.") from None
    if data is None:
        raise UserError(f"{printable(path)} is not an S2 Studio project (project.json is missing).")
    try:
        raw = json_steps.loads(data.decode("utf-8"))  # (a book's: tens of ms in one call otherwise)
    except UnicodeDecodeError:
        raise damaged(meta, "it is not UTF-8 text") from None
    except (ValueError, RecursionError) as exc:
        raise damaged(meta, f"it is not JSON ({printable(exc, 80)})") from None
    if not isinstance(raw, dict):
        raise damaged(meta, f"the document must be a JSON object, got {'a list' if isinstance(raw, list) else 'a ' + type(raw).__name__}")
    version = raw.get("format", FORMAT_VERSION)
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise UserError(f"{printable(path)} was saved by a newer S2 Studio; update the studio to open it.")
    generation = raw.get("generation", 0)
    journal_bytes, records, damage = 0, 0, ""
    if isinstance(version, int) and version >= 2 and isinstance(generation, int):
        journal_bytes, records, damage = _replay(path / JOURNAL, raw, generation)
    try:
        doc = parse_document(raw)
    except SchemaError as exc:
        if journal_bytes:  # the journal's changes or project.json itself: the one to blame is named
            try:
                parse_document(json.loads(data.decode("utf-8")))
            except SchemaError:
                pass
            else:
                raise damaged(path / JOURNAL, str(exc)) from None
        raise damaged(meta, str(exc)) from None
    return Document(doc, doc["format"], doc["generation"], journal_bytes, records, damage, len(data))


def parse_document(raw: Any) -> dict[str, Any]:
    doc = DOCUMENT.parse(raw, "")
    _check_document(doc)
    return doc


def _replay(journal: Path, raw: dict[str, Any], generation: int) -> tuple[int, int, str]:
    """Apply the journal of `generation` to `raw`; (bytes of its good lines, their records, why later ones
    were left out)."""
    try:
        data = _plain_bytes(journal, MAX_DOCUMENT_BYTES)
    except OSError as exc:
        return 0, 0, f"the journal cannot be read ({printable(exc.strerror or exc, 80)})"
    if data is None:
        return 0, 0, ""
    read = read_journal(data)
    if read.generation != generation:  # a journal the last compaction made obsolete (or no header at all)
        return 0, 0, read.damage if read.generation is None and data else ""
    for i, record in enumerate(read.records):
        apply(raw, record, f"{printable(journal)} line {i + 2}")
    return read.good_bytes, len(read.records), read.damage


def _check_document(doc: dict[str, Any]) -> None:
    seen: dict[str, tuple[str, int]] = {}

    def at(line_id: str, i: int) -> Place:
        return child(child(child(child("lines", line_id), "takes"), i), "take_id")

    for line_id, entry in doc["lines"].items():
        if not -1 <= entry["picked"] < max(len(entry["takes"]), 1):
            raise SchemaError(child(child("lines", line_id), "picked"), f"must be between -1 and "
                              f"{len(entry['takes']) - 1}, got {entry['picked']}")
        for i, row in enumerate(entry["takes"]):
            first = seen.setdefault(row["take_id"], (line_id, i))
            if first[1] != i or first[0] != line_id:
                raise SchemaError(at(line_id, i), f"repeats take id \"{row['take_id']}\" of "
                                  f"{place_text(at(*first))}")


def packed_voices(path: Path) -> dict[str, Path]:
    """The `.s2voice` files of `voices/`, named by voice id, never through a link."""
    folder = path / VOICES_FOLDER
    try:
        if not stat.S_ISDIR(folder.lstat().st_mode):
            return {}
        names = sorted(os.listdir(folder))
    except OSError:
        return {}
    found = {}
    for name in names:
        voice_id, _, suffix = name.partition(".")
        try:
            plain = stat.S_ISREG((folder / name).lstat().st_mode)
        except OSError:
            continue
        if suffix == "s2voice" and VOICE_ID.match(voice_id) and plain:
            found[voice_id] = folder / name
    return found


def dump_field(name: str, value: Any) -> Any:
    """A document field's JSON form."""
    return None if value is None else DOCUMENT.fields[name].kind.dump(value)


def whole_document(state: DocState, generation: int) -> dict[str, Any]:
    """project.json's content for `state` (take files not included)."""
    state = state.keyed()
    values: dict[str, Any] = dict(state.fields)
    values.update(format=FORMAT_VERSION, generation=generation, script=state.script,
                  line_ids=None if state.line_ids is None else list(state.line_ids),
                  lines={k: line_entry(v, dict) for k, v in state.lines.items()})
    return DOCUMENT.dump(values)


def document(project: Project, autosave_of: Path | None = None) -> dict[str, Any]:
    """project.json's content for `project` as it is now."""
    return whole_document(capture(project, autosave_of), 0)
