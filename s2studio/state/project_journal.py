"""A project's document as changes: what a save writes is what changed since the save before (design.md §7).

The document lives in two files of the project folder: `project.json`, the whole document as of its last
*compaction*, and `journal.jsonl`, one line per save since, each holding only what that save changed (the
fields that changed, the edited stretch of the script and of its line ids, the lines whose takes changed).
Opening reads the first and applies the second in order. A save appends one line and fsyncs it: O(what
changed), whatever the size of the book. When the journal has grown as large as the document, the next save
writes the document whole again (temp file, fsync, rename) and starts a new journal.

Why a journal and not SQLite (which the standard library also has): the project stays a folder of plain files
a person can read, diff, back up and copy, with nothing that must travel beside a database file (SQLite's
`-journal`/`-wal` files); every byte goes through the project's one writer (`state/atomic.py`) and every value
read back through the one validator (`state/schema.py`) that project.json already has, so a project from
someone else is checked field by field, not trusted to a third file format; and the only write patterns are
"append and fsync" and "temp file and rename", whose crash behaviour is simple to state and to test:

- each line carries its CRC-32 and sequence number, and ends with a newline: a line without its newline is
  the torn tail of a save a crash interrupted (never reported as saved) and is ignored, and the next save
  cuts it off before appending (`atomic.append_durable`); a complete line that does not check out is damage,
  reported, and the journal is set aside whole at the next compaction;
- the journal names the `generation` of the project.json it follows. A compaction writes project.json with
  the next generation before it starts the new journal, so a crash between the two leaves a journal of the
  old generation, which is then ignored: its changes are in the new project.json already.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from s2studio.errors import UserError, printable
from s2studio.state.project import LineEdits, Project, Take

JOURNAL = "journal.jsonl"
JOURNAL_VERSION = 1

TakeKey = tuple[Take, Any, Any, Any, Any, Any]
"""A take as a document row shows it: the take, and the fields of its row set after it is made (each followed
by `Project.touch`): the four that bringing an older take up to date fills in (fingerprint, speaker, voice,
settings) and what its checks found (set when they finish)."""
LineKey = tuple[int, tuple[TakeKey, ...]]
"""A line of `Project.lines` as the document shows it: (picked, its takes)."""
PLAIN_FIELDS = ("title", "cast", "settings", "gap_s", "voice_names", "with_voices", "speaker_colors", "autosave_of")
"""The document's fields a save writes whole when they change (small ones): every field of `Project` but the
script, its line ids and the takes, and the file's `autosave_of`."""


@dataclass(frozen=True)
class DocState:
    """The document of one project at one moment, cheap to capture (`capture`) and to compare: takes never
    change, so a line is compared by the identity of its takes. As captured, a line is (picked, its takes);
    `keyed()` (on the writer's thread) adds what each take's row shows (`LineKey`)."""

    fields: Mapping[str, Any]
    script: str
    line_ids: tuple[str, ...] | None
    lines: Mapping[str, tuple[int, tuple[Any, ...]]]
    is_keyed: bool = False
    edits: LineEdits | None = field(default=None, compare=False)
    """The project's log of changed lines, and how many changes it held when this was captured: a later
    `capture(since=this)` of the same project copies the lines named after those only."""
    edits_seen: int = field(default=0, compare=False)

    def takes(self) -> list[Take]:
        if self.is_keyed:
            return [key[0] for _, keys in self.lines.values() for key in keys]
        return [take for _, takes in self.lines.values() for take in takes]

    def takes_of(self, line_id: str) -> list[Take]:
        """The takes of one line held here."""
        takes = self.lines[line_id][1]
        return [key[0] for key in takes] if self.is_keyed else list(takes)

    def keyed(self, base: DocState | None = None) -> DocState:
        """Each take with the fields of its row set after it is made (`TakeKey`, read now: a row is written as
        the take is when it is written, and written again when they change). `base`: an earlier keyed state of
        the same project, whose lines are taken as they are but for those changed since (`changed_between`):
        the cost is then what changed, not the lines of a book (the writer's thread calls this)."""
        if self.is_keyed:
            return self
        changed = changed_between(base, self) if base is not None and base.is_keyed else None
        if base is None or changed is None:
            lines = {k: _keyed_line(line) for k, line in self.lines.items()}
        else:  # (`changed` is None without a keyed base)
            lines = dict(base.lines)
            for line_id in changed:
                line = self.lines.get(line_id)
                if line is None:
                    lines.pop(line_id, None)
                else:
                    lines[line_id] = _keyed_line(line)
        return replace(self, lines=lines, is_keyed=True)


def _keyed_line(line: tuple[int, tuple[Any, ...]]) -> LineKey:
    picked, takes = line
    return picked, tuple((t, t.fingerprint, t.speaker, t.voice, t.settings, t.check) for t in takes)


def changed_between(before: DocState | None, now: DocState) -> set[str] | None:
    """The lines that may differ between two states of one project, `before` captured first (the project's log
    of changes, `Project.edits`); None when that log cannot say (another project's states): then any may."""
    if before is None or before.edits is None or before.edits is not now.edits or before.edits_seen > now.edits_seen:
        return None
    return before.edits.between(before.edits_seen, now.edits_seen)


def capture(project: Project, autosave_of: Path | None = None, since: DocState | None = None) -> DocState:
    """What `project` holds now (the GUI thread calls this: references only; the writer thread works from the
    result while the project goes on changing). `since`: an earlier capture of the same project (not `keyed`),
    whose lines are taken as they were but for those changed since (`Project.edits`): the cost of a capture
    is then what changed, not the lines of a book."""
    fields = {name: _copied(getattr(project, name)) for name in PLAIN_FIELDS[:-1]}
    fields["autosave_of"] = None if autosave_of is None else str(autosave_of)
    edits, entries = project.edits, project.lines
    if since is not None and since.edits is edits and not since.is_keyed:
        lines = dict(since.lines)
        for line_id in edits.since(since.edits_seen):
            entry = entries.get(line_id)
            if entry is None:
                lines.pop(line_id, None)
            else:
                lines[line_id] = (entry.picked, tuple(entry.takes))
    else:
        lines = {line_id: (entry.picked, tuple(entry.takes)) for line_id, entry in entries.items()}
    ids = tuple(project.line_ids) if project.line_ids is not None else None
    return DocState(fields, project.script, ids, lines, edits=edits, edits_seen=edits.count)


def _copied(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value  # the values themselves are immutable


# ----------------------------------------------------------------------------- rows


def take_row(key: TakeKey, dump: Any) -> dict[str, Any]:
    """A take's row in the document (`dump`: the TAKE record's `dump`)."""
    take, fingerprint, speaker, voice, settings, check = key
    return dump({"take_id": take.take_id, "text": take.text, "seed": take.seed, "fingerprint": fingerprint,
                 "speaker": speaker, "voice": voice, "settings": settings, "created": take.created,
                 "check": check, "sizes": take.sizes})


def line_entry(key: LineKey, dump: Any) -> dict[str, Any]:
    return {"picked": key[0], "takes": [take_row(k, dump) for k in key[1]]}


# ----------------------------------------------------------------------------- what changed


def _splice(old: Sequence[Any], new: Sequence[Any]) -> tuple[int, int, Sequence[Any]]:
    """(a, b, middle) such that old[:a] + middle + old[b:] == new, with the common head and tail left out."""
    n = min(len(old), len(new))
    lo, hi = 0, n  # the longest common prefix, by halving (slices compare in C)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if old[:mid] == new[:mid]:
            lo = mid
        else:
            hi = mid - 1
    head = lo
    lo, hi = 0, n - head
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if old[len(old) - mid:] == new[len(new) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    tail = lo
    return head, len(old) - tail, new[head:len(new) - tail]


def changes(before: DocState, now: DocState, dump_field: Any, dump_row: Any) -> dict[str, Any]:
    """One journal record that turns `before` into `now` ({} when nothing changed). `dump_field(name, value)`
    and `dump_row` turn values into JSON (the document's own kinds)."""
    record: dict[str, Any] = {}
    changed = {k: dump_field(k, v) for k, v in now.fields.items() if before.fields.get(k) != v}
    if changed:
        record["set"] = changed
    if now.script != before.script:
        a, b, text = _splice(before.script, now.script)
        record["script"] = [a, b, text]
    if now.line_ids != before.line_ids:
        a, b, ids = _splice(before.line_ids or (), now.line_ids or ())
        record["line_ids"] = [a, b, list(ids)]
    lines: dict[str, Any] = {}
    changed = changed_between(before, now)
    for line_id in now.lines if changed is None else sorted(changed):
        key = now.lines.get(line_id)
        if key is not None and before.lines.get(line_id) != key:
            lines[line_id] = line_entry(key, dump_row)
    for line_id in before.lines.keys() - now.lines.keys() if changed is None else changed - now.lines.keys():
        if line_id in before.lines:
            lines[line_id] = None
    if lines:
        record["lines"] = lines
    return record


# ----------------------------------------------------------------------------- the file


def encode(record: Mapping[str, Any]) -> bytes:
    """One journal line: the record as JSON, a space, its CRC-32 in hex, a newline."""
    text = json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    data = text.encode("utf-8", "backslashreplace")
    return data + b" %08x\n" % zlib.crc32(data)


def header(generation: int) -> bytes:
    return encode({"journal": JOURNAL_VERSION, "generation": generation})


@dataclass(frozen=True)
class Journal:
    """What a journal file holds: the records that check out, in order, and how far they reach."""

    generation: int | None
    """The project.json generation it follows (None: no usable header)."""
    records: tuple[dict[str, Any], ...]
    good_bytes: int
    """Bytes up to the end of the last good line: where the next save appends."""
    damage: str = ""
    """Why the lines after `good_bytes` were left out (empty: at most a torn tail, which is never reported)."""


def read_journal(data: bytes) -> Journal:
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last newline: empty, or a line a crash cut short
    records: list[dict[str, Any]] = []
    generation: int | None = None
    good = 0
    for i, line in enumerate(lines):
        body, _, crc = line.rpartition(b" ")
        record = None
        if len(crc) == 8:
            try:
                if int(crc, 16) == zlib.crc32(body):
                    record = json.loads(body.decode("utf-8"))
            except (ValueError, RecursionError):
                record = None
        if not isinstance(record, dict):
            return Journal(generation, tuple(records), good, f"line {i + 1} is damaged")
        if i == 0:
            generation = record.get("generation") if record.get("journal") == JOURNAL_VERSION else None
            if not isinstance(generation, int) or isinstance(generation, bool):
                return Journal(None, (), 0, "its first line is not a journal header")
        elif record.get("n") != len(records) + 1:
            return Journal(generation, tuple(records), good, f"line {i + 1} is out of sequence")
        else:
            records.append(record)
        good += len(line) + 1
    del torn
    return Journal(generation, tuple(records), good)


# ----------------------------------------------------------------------------- applying records


class JournalError(UserError):
    pass


def apply(doc: dict[str, Any], record: Mapping[str, Any], where: str) -> None:
    """Apply one record to the raw document `doc` (values are checked after, with the whole document);
    a record that cannot apply is a `JournalError` naming `where`."""

    def bad(what: str) -> JournalError:
        return JournalError(f"{where}: {what}; the project file is damaged (open a backup or fix it)")

    fields = record.get("set", {})
    if not isinstance(fields, dict):
        raise bad("set must be an object")
    for name, value in fields.items():
        if name not in PLAIN_FIELDS:
            raise bad(f"set names {printable(name, 40)!r}, which is not a field a save sets")
        doc[name] = value
    if "script" in record:
        doc["script"] = _apply_splice(doc.get("script", ""), record["script"], str, bad, "script")
    if "line_ids" in record:
        ids = doc.get("line_ids")
        doc["line_ids"] = _apply_splice(ids if isinstance(ids, list) else [], record["line_ids"], list, bad,
                                        "line_ids")
    lines = record.get("lines", {})
    if not isinstance(lines, dict):
        raise bad("lines must be an object")
    target = doc.setdefault("lines", {})
    if not isinstance(target, dict):
        raise bad("lines of the document is not an object")
    for line_id, entry in lines.items():
        if entry is None:
            target.pop(line_id, None)
        else:
            target[line_id] = entry


def _apply_splice(old: Any, splice: Any, kind: type, bad: Any, name: str) -> Any:
    if not (isinstance(splice, list) and len(splice) == 3 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                   for x in splice[:2])
            and isinstance(splice[2], kind) and isinstance(old, kind) and 0 <= splice[0] <= splice[1] <= len(old)):
        raise bad(f"{name} holds an edit that does not fit the document")
    a, b, middle = splice
    return old[:a] + middle + old[b:]
