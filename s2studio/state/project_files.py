"""Project folders on disk: `save_project`, `read_project` / `load_project`, and recovery of a save that
a crash interrupted (design.md §7).

A `.s2proj` folder holds `project.json` (the document below) and `takes/<take id>.flac` + `.npy` per
take; one saved with its voices also `voices/<voice id>.s2voice` per voice of the cast (checked like any
imported voice when used, `state/project_voices.py`). A project may come from someone else, so opening one trusts nothing in it:

- the whole document is validated against `DOCUMENT` before anything is built, and the first problem is
  one `UserError` naming the field (`…/project.json: lines.l3fa….takes[2].seed must be an integer,
  got "abc"`); nothing is half-applied;
- take ids must match `TAKE_ID` (letters, digits, `-`, `_`): they name files, so they can never be a
  path, and take files and the `takes` folder are read only when they are plain files and folders, never
  through a link: a crafted project reads and writes nothing outside its folder;
- a take whose audio or codes cannot be read is reported (`ProjectFile.problems`, or an error from the
  strict `load_project`), never silently dropped; `.npy` files are read without unpickling.

To add a field (an optional one, so that old files still open): one line in `TAKE` or `DOCUMENT` with a
default, and a field of the same name on `Take` or `Project`; reading and writing follow by name.

A save builds `<name>.s2proj.tmp` (every file and folder fsynced, `project.json` last), then renames the
old folder to `.old`, the new one into place, and removes `.old`. At every instant one complete project
is on disk, and `recover` (run by every open) finishes or undoes a save that a crash interrupted. An
autosave carries the path of the project it belongs to (`autosave_of`) inside its own document, so a
SIGKILL can never separate the two.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from s2studio.audio import SAMPLE_RATE
from s2studio.errors import UserError, printable
from s2studio.state.atomic import (
    OPEN_FLAGS,
    WriteError,
    fsync_dir,
    remove_quietly,
    replace,
    write_durable,
    write_error,
)
from s2studio.state.clips import soundfile_reason
from s2studio.state.codes import NUM_CODEBOOKS, read_codes_file
from s2studio.state.project import (FORMAT_VERSION, SETTINGS, SUFFIX, GenerationSettings,
                                    LineTakes, Project, Take)
from s2studio.state.schema import (Boolean, Field, Integer, ListOf, MapOf, Number, Record, SchemaError, Text,
                                   Timestamp, child)
from s2studio.state.staleness import TAKE_SETTINGS

log = logging.getLogger(__name__)

TAKE_ID = re.compile(r"^(?!(?:con|prn|aux|nul|com[1-9]|lpt[1-9])$)[0-9a-z][0-9a-z_-]{0,63}$")
"""What the studio and the engines make (hex uuids); a take id names two files, so nothing else (nor a name that
is a device on Windows: `takes/con.flac` would be the console there)."""
VOICE_REF = re.compile(r"^(v[0-9a-f]{12})?$")
VOICE_ID = re.compile(r"^v[0-9a-f]{12}$")
VOICES_FOLDER = "voices"
"""Inside a project saved with its voices: one `<voice id>.s2voice` per voice of the cast."""
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024
MAX_TAKE_SECONDS = 3600.0

TAKE = Record({
    "take_id": Field(Text(pattern=TAKE_ID, what="a take id (lower-case letters, digits, - and _)")),
    "text": Field(Text(), ""),
    "seed": Field(Integer(-(2**63), 2**64 - 1), 0),
    "fingerprint": Field(Text(max_chars=4096), ""),
    "speaker": Field(Text(max_chars=200), None),
    "voice": Field(Text(max_chars=200), None),
    "settings": Field(TAKE_SETTINGS, None),
    "created": Field(Timestamp(), None),
})
"""One row of a line's takes. A field here that `Take` also has is copied both ways by name."""
LINE = Record({
    "picked": Field(Integer(lo=-1), -1),
    "takes": Field(ListOf(TAKE), list),
})
DOCUMENT = Record({
    "format": Field(Integer(lo=0), FORMAT_VERSION),
    "title": Field(Text(max_chars=10_000), ""),
    "script": Field(Text(), ""),
    "cast": Field(MapOf(Text(pattern=VOICE_REF, what='a voice id (v and 12 hex digits) or ""')), dict),
    "settings": Field(SETTINGS, GenerationSettings),
    "gap_s": Field(Number(0.0, 5.0), 0.4),
    "lines": Field(MapOf(LINE), dict),
    "line_ids": Field(ListOf(Text(max_chars=200)), None),
    "autosave_of": Field(Text(max_chars=4096), None),
    "voice_names": Field(MapOf(Text(max_chars=200), key=Text(pattern=VOICE_ID, what="a voice id")), dict),
    "with_voices": Field(Boolean(), False),
    "speaker_colors": Field(MapOf(Integer(0, 10_000)), dict),
})
"""project.json. A field here that `Project` also has is copied both ways by name; `lines` is built
from the take files, `format` and `autosave_of` are the file's own."""


@dataclass(frozen=True)
class ProjectFile:
    project: Project
    problems: tuple[str, ...] = ()
    """Takes that could not be read and were left out: show them, they are never silent."""
    autosave_of: Path | None = None
    """For an autosave: the project file it was made from (None for an unsaved project)."""
    packed_voices: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    """Voice id -> its `.s2voice` inside the project (a project saved with its voices): plain files only."""


def project_path(path: Path) -> Path:
    path = Path(path)
    return path if path.suffix == SUFFIX else path.with_name(path.name + SUFFIX)


def _siblings(path: Path) -> tuple[Path, Path]:
    return path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")


# ----------------------------------------------------------------------------- recovery


def _complete(folder: Path) -> bool:
    """A folder that a save finished writing: project.json (written last) is a plain file holding JSON."""
    try:
        if not stat.S_ISDIR(folder.lstat().st_mode):
            return False
        meta = folder / "project.json"
        if not stat.S_ISREG(meta.lstat().st_mode) or meta.stat().st_size > MAX_DOCUMENT_BYTES:
            return False
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
    tmp, old = _siblings(path)
    done = None
    try:
        if os.path.lexists(tmp):
            if _complete(tmp):
                if os.path.lexists(path):
                    remove_quietly(old)
                    os.rename(path, old)
                os.rename(tmp, path)
                fsync_dir(path.parent)
                done = f"finished the interrupted save of {path}"
            else:
                remove_quietly(tmp)
        if not os.path.lexists(path) and _complete(old):
            os.rename(old, path)
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
    tmp, old = _siblings(path)
    return any(_complete(p) for p in (path, tmp, old))


# ----------------------------------------------------------------------------- saving


def _flac_bytes(audio: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.asarray(audio, np.float32), SAMPLE_RATE, format="FLAC", subtype="PCM_24")
    return buf.getvalue()


def _npy_bytes(codes: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(codes, np.int64), allow_pickle=False)
    return buf.getvalue()


def _reuse(old: Path, new: Path, take_id: str) -> bool:
    """Takes never change once made, so a save links the files of the previous save instead of encoding
    them again: autosave after every rendered line stays proportional to the new audio. Only plain files
    are linked (never a symlink a crafted folder put there)."""
    names = (f"{take_id}.flac", f"{take_id}.npy")
    try:
        if not all(stat.S_ISREG((old / n).lstat().st_mode) for n in names):
            return False
        for n in names:
            os.link(old / n, new / n, follow_symlinks=False)
    except OSError:
        for n in names:
            remove_quietly(new / n)
        return False
    return True


def _row(take: Take) -> dict[str, Any]:
    return TAKE.dump({name: getattr(take, name) for name in TAKE.fields if hasattr(take, name)})


def document(project: Project, autosave_of: Path | None = None) -> dict[str, Any]:
    """project.json's content (take files not included)."""
    lines = {line_id: {"picked": entry.picked, "takes": [_row(t) for t in entry.takes]}
             for line_id, entry in project.lines.items()}
    values: dict[str, Any] = {name: getattr(project, name) for name in DOCUMENT.fields if hasattr(project, name)}
    values.update(format=FORMAT_VERSION, lines=lines,
                  autosave_of=None if autosave_of is None else str(autosave_of))
    return DOCUMENT.dump(values)


def _json_bytes(doc: dict[str, Any]) -> bytes:
    # a path that is not UTF-8 (surrogate escapes) is kept as a \udcXX escape, which reads back the same
    return json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False).encode("utf-8", "backslashreplace")


def _check_ids(project: Project) -> None:
    seen: set[str] = set()
    for entry in project.lines.values():
        for take in entry.takes:
            if not TAKE_ID.match(take.take_id) or take.take_id in seen:
                raise ValueError(f"take id {take.take_id!r} is not a fresh take id")
            seen.add(take.take_id)


def save_project(project: Project, path: Path, autosave_of: Path | None = None,
                 voices: Mapping[str, bytes] | None = None) -> Path:
    """Write `project` to the folder `path` (suffix `.s2proj` added when missing), recoverably (module
    docstring); returns the folder. `autosave_of`: for an autosave, the project file it belongs to.
    `voices`: voice id -> its `.s2voice` bytes, packed into `voices/` (a project saved with its voices)."""
    path = project_path(path)
    tmp, old = _siblings(path)
    _check_ids(project)
    for voice_id in voices or {}:
        if not VOICE_ID.match(voice_id):
            raise ValueError(f"{voice_id!r} is not a voice id")
    recover(path)
    if os.path.lexists(path) and not _complete(path):
        raise UserError(f"Cannot save the project to {printable(path)}: it exists and is not an S2 Studio "
                        "project; choose another name.")
    data = _json_bytes(document(project, autosave_of))  # fails (ValueError) before anything is written
    remove_quietly(tmp)
    try:
        os.mkdir(tmp)
        os.mkdir(tmp / "takes")
        for entry in project.lines.values():
            for take in entry.takes:
                if not _reuse(path / "takes", tmp / "takes", take.take_id):
                    write_durable(tmp / "takes" / f"{take.take_id}.flac", _flac_bytes(take.audio))
                    write_durable(tmp / "takes" / f"{take.take_id}.npy", _npy_bytes(take.codes))
        fsync_dir(tmp / "takes")
        if voices:
            os.mkdir(tmp / VOICES_FOLDER)
            for voice_id, packed in voices.items():
                write_durable(tmp / VOICES_FOLDER / f"{voice_id}.s2voice", packed)
            fsync_dir(tmp / VOICES_FOLDER)
        write_durable(tmp / "project.json", data)
        fsync_dir(tmp)
        if os.path.lexists(path):
            remove_quietly(old)
            replace(path, old, folder=True)  # retried while Windows says a file inside is in use
        replace(tmp, path, folder=True)
        fsync_dir(path.parent)
    except (OSError, WriteError) as exc:
        remove_quietly(tmp)
        if not os.path.lexists(path):
            recover(path)  # the old project back from .old
        code = exc.errno
        reason = write_error(OSError(code, os.strerror(code)) if code else exc, path)
        raise UserError(f"Cannot save the project: {reason}") from None
    remove_quietly(old)
    return path


# ----------------------------------------------------------------------------- opening


def _damaged(meta: Path, what: str) -> UserError:
    return UserError(f"{printable(meta)}: {what}; the project file is damaged (open a backup or fix it)")


def _read_document(path: Path) -> dict[str, Any]:
    meta = path / "project.json"
    try:
        st = meta.lstat()
    except FileNotFoundError:
        raise UserError(f"{printable(path)} is not an S2 Studio project (project.json is missing).") from None
    except OSError as exc:
        raise UserError(f"Cannot open {printable(meta)}: {printable(exc.strerror or exc)}.") from None
    if not stat.S_ISREG(st.st_mode):
        raise _damaged(meta, "project.json is not a plain file")
    if st.st_size > MAX_DOCUMENT_BYTES:
        raise _damaged(meta, f"project.json is {st.st_size >> 20} MB")
    try:
        raw = json.loads(meta.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise UserError(f"Cannot read {printable(meta)}: {printable(exc.strerror or exc)}.") from None
    except UnicodeDecodeError:
        raise _damaged(meta, "it is not UTF-8 text") from None
    except (ValueError, RecursionError) as exc:
        raise _damaged(meta, f"it is not JSON ({printable(exc, 80)})") from None
    if not isinstance(raw, dict):
        raise _damaged(meta, f"the document must be a JSON object, got {'a list' if isinstance(raw, list) else 'a ' + type(raw).__name__}")
    version = raw.get("format", FORMAT_VERSION)
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise UserError(f"{printable(path)} was saved by a newer S2 Studio; update the studio to open it.")
    try:
        doc = DOCUMENT.parse(raw, "")
        _check_document(doc)
    except SchemaError as exc:
        raise _damaged(meta, str(exc)) from None
    return doc


def _check_document(doc: dict[str, Any]) -> None:
    seen: dict[str, str] = {}
    for line_id, entry in doc["lines"].items():
        where = child("lines", line_id)
        if not -1 <= entry["picked"] < max(len(entry["takes"]), 1):
            raise SchemaError(child(where, "picked"), f"must be between -1 and {len(entry['takes']) - 1}, "
                              f"got {entry['picked']}")
        for i, row in enumerate(entry["takes"]):
            at = child(child(child(where, "takes"), i), "take_id")
            if row["take_id"] in seen:
                raise SchemaError(at, f"repeats take id \"{row['take_id']}\" of {seen[row['take_id']]}")
            seen[row["take_id"]] = at


def _plain_file(path: Path) -> int:
    """An fd of `path` when it is a plain file, never through a link."""
    if path.is_symlink():
        raise ValueError(f"{path.name} is a link; a project's take files must be plain files inside it")
    fd = os.open(path, os.O_RDONLY | OPEN_FLAGS)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path.name} is not a plain file")
    return fd


def _read_take(folder: Path, take_id: str) -> tuple[np.ndarray, np.ndarray]:
    """(audio, codes) of one take; ValueError/OSError with a short reason when unreadable."""
    audio_path, codes_path = folder / f"{take_id}.flac", folder / f"{take_id}.npy"
    with os.fdopen(_plain_file(audio_path), "rb") as f:
        try:
            info = sf.info(f)
            if info.samplerate != SAMPLE_RATE or info.channels != 1 or info.frames > MAX_TAKE_SECONDS * SAMPLE_RATE:
                raise ValueError(f"{audio_path.name} is {info.channels}-channel {info.samplerate} Hz audio of "
                                 f"{info.frames} samples; a take is mono {SAMPLE_RATE} Hz")
            f.seek(0)
            audio, _ = sf.read(f, dtype="float32", always_2d=False)
        except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
            raise ValueError(f"{audio_path.name} is not readable audio ({printable(soundfile_reason(exc), 80)})") from None
    if not np.isfinite(audio).all():
        raise ValueError(f"{audio_path.name} holds invalid samples")
    os.close(_plain_file(codes_path))  # a plain file, not a link
    try:
        codes = read_codes_file(codes_path, "codes")
    except UserError as exc:
        raise ValueError(str(exc)) from None
    if codes.ndim != 2 or codes.shape[0] != NUM_CODEBOOKS or not np.issubdtype(codes.dtype, np.integer) \
            or (codes.size and codes.min() < 0):
        raise ValueError(f"{codes_path.name} holds {codes.dtype} {codes.shape}, not ({NUM_CODEBOOKS}, frames) codes")
    return audio, codes.astype(np.int64)


def _takes_folder(path: Path) -> Path | None:
    folder = path / "takes"
    try:
        return folder if stat.S_ISDIR(folder.lstat().st_mode) else None
    except OSError:
        return None


def read_project(path: Path) -> ProjectFile:
    """Open the `.s2proj` folder `path`: the validated project, the takes that could not be read, and
    (for an autosave) the project it belongs to. Raises one `UserError` for a document that is not valid."""
    path = Path(path)
    recover(path)
    doc = _read_document(path)
    takes_dir = _takes_folder(path)
    problems: list[str] = []
    kept: dict[str, LineTakes] = {}
    for line_id, entry in doc["lines"].items():
        takes: list[Take] = []
        picked = None
        for i, row in enumerate(entry["takes"]):
            try:
                if takes_dir is None:
                    raise ValueError("the takes folder is missing or not a plain folder")
                audio, codes = _read_take(takes_dir, row["take_id"])
            except (OSError, ValueError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                problems.append(f"take {row['take_id']} (\"{printable(row['text'], 40)}\") left out: "
                                f"{printable(reason, 160)}")
                continue
            if i == entry["picked"]:
                picked = len(takes)
            fields = {name: row[name] for name in TAKE.fields if name in _TAKE_FIELDS}
            takes.append(Take(**fields, line_id=line_id, audio=audio, codes=codes))
        if takes:
            kept[line_id] = LineTakes(takes, picked if picked is not None else len(takes) - 1)
    values = {name: doc[name] for name in DOCUMENT.fields if name in _PROJECT_FIELDS and name != "lines"}
    project = Project(**values, lines=kept)
    origin = doc["autosave_of"]
    return ProjectFile(project, tuple(problems), Path(origin) if origin else None, _packed_voices(path))


def _packed_voices(path: Path) -> dict[str, Path]:
    """The `.s2voice` files of `voices/`, named by voice id, never through a link (`read_project`'s rule)."""
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


_TAKE_FIELDS = {f.name for f in dataclasses.fields(Take)}
_PROJECT_FIELDS = {f.name for f in dataclasses.fields(Project)}


def load_project(path: Path) -> Project:
    """`read_project`, strict: a take that cannot be read is an error too (nothing is left out)."""
    opened = read_project(path)
    if opened.problems:
        more = f" (and {len(opened.problems) - 1} more)" if len(opened.problems) > 1 else ""
        raise UserError(f"{printable(path)}: {opened.problems[0]}{more}")
    return opened.project
