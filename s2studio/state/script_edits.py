"""Reparsing a script after an edit in time proportional to the edit, not to the script (a book is 10,000
lines; the editor reparses after every pause in typing).

A row (text line) parses the same wherever it is, given the speaker in force before it (`RowParser`).
So `ScriptParser.reparse` keeps, from the last parse, the rows and the speaker before each one, and:

1. finds the rows the edit touched: those between the longest common run of rows at the start and at the
   end of the old and new text;
2. parses them, and the rows after them as long as the speaker they start with differs from the one they
   started with before (a line without a name carries the speaker of the line before: renaming a speaker
   reaches down to the next named line);
3. keeps every line, heading and warning before those rows as they were (the same objects), and moves
   those after them by what the edit added: offsets, row numbers and line indices. Lines and warnings
   move lazily (`script_pieces.Pieces`): a line below the edit is made anew only when something reads it.

The result equals `parse_script` of the new text, ids aside: the lines the edit touched carry the parser's
content ids until `LineIds.carry` gives them their lasting ones; `Edit` says which lines those are.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from s2studio.state.script import Heading, Line, RowParser, Script, ScriptWarning, speakers_of
from s2studio.state.script_pieces import Pieces, Shift
from s2studio.state.tags import Tag


@dataclass(frozen=True)
class Edit:
    """The lines an edit may have changed: old lines `[first, old_end)` became new lines `[first, new_end)`;
    the lines before `first` are the same, those after the ends the same lines moved."""

    first: int
    old_end: int
    new_end: int

    @staticmethod
    def everything(before: Script, after: Script) -> Edit:
        return Edit(0, len(before.lines), len(after.lines))


_NOT_PARSED = object()


class ScriptParser:
    """Parses one document's text, again and again as it is edited (module docstring)."""

    def __init__(self) -> None:
        self._rows: list[str] = []
        self._speakers: list[str] = []
        """The speaker in force before each row, and after the last one."""
        self._known: object = _NOT_PARSED
        self._split: tuple[str, list[str]] = ("", [""])
        """The last text asked about and its rows (`rows_to_parse` then `reparse` of one text split it once)."""

    def _rows_of(self, text: str) -> list[str]:
        if self._split[0] is not text:
            self._split = (text, text.split("\n"))
        return self._split[1]

    def parse(self, text: str, known: Collection[str] | None = None) -> Script:
        """A whole parse (`parse_script`), remembered for the next `reparse`."""
        self._rows = text.split("\n")
        self._speakers = []
        self._known = _frozen(known)
        return RowParser(text, known).run(self._rows, self._speakers)

    def rows_to_parse(self, text: str, known: Collection[str] | None = None) -> int:
        """About how many rows `reparse(text, known)` would parse: those between the rows the edit kept at
        either end (a renamed speaker reaches further down), all of them when the known speakers changed."""
        rows = self._rows_of(text)
        if _frozen(known) != self._known:
            return len(rows)
        p, s = common_ends(self._rows, rows)
        return len(rows) - p - s

    def reparse(self, before: Script, text: str, known: Collection[str] | None = None) -> tuple[Script, Edit]:
        """`text` parsed, reusing `before` (the script of the text last parsed here) outside the rows that
        changed. Parses everything when the known speakers changed."""
        frozen = _frozen(known)
        if frozen != self._known:
            after = self.parse(text, known)
            return after, Edit.everything(before, after)
        old_rows, rows = self._rows, self._rows_of(text)
        p, s = common_ends(old_rows, rows)
        delta = len(rows) - len(old_rows)
        offset = sum(map(len, rows[:p])) + p
        first_line = bisect_right(before.lines, p, key=_row_of_line)
        parser = RowParser(text, known, first_index=first_line)
        parser.speaker = self._speakers[p]
        speakers: list[str] = []
        end, at = len(rows) - s, offset
        row = p
        while row < len(rows):
            if row >= end and parser.speaker == self._speakers[row - delta]:
                break  # the rows from here on parse as they did
            speakers.append(parser.speaker)
            parser.text_line(rows[row], at, row + 1)
            at += len(rows[row]) + 1
            row += 1
        old_row_end = row - delta
        if row == len(rows):
            speakers.append(parser.speaker)
            self._speakers[p:] = speakers
        else:
            self._speakers[p:old_row_end] = speakers
        self._rows = rows
        old_at = offset + sum(map(len, old_rows[p:old_row_end])) + (old_row_end - p)
        old_line_end = bisect_right(before.lines, old_row_end, key=_row_of_line)
        new_line_end = first_line + len(parser.lines)
        shift = Shift(at - old_at, delta, new_line_end - old_line_end)
        lines = Pieces.splice(before.lines, first_line, old_line_end, parser.lines, shift, move_line)
        h0 = bisect_right(before.headings, p, key=_row_of_heading)
        h1 = bisect_right(before.headings, old_row_end, key=_row_of_heading)
        headings = (*before.headings[:h0], *parser.headings,
                    *(move_heading(h, shift) if shift else h for h in before.headings[h1:]))
        w0 = bisect_left(before.warnings, offset, key=_start_of_warning)
        w1 = bisect_left(before.warnings, old_at, key=_start_of_warning)
        warnings = Pieces.splice(before.warnings, w0, w1, parser.warnings, shift, move_warning)
        after = Script(lines, headings, speakers_of(lines), warnings, text)
        return after, Edit(first_line, old_line_end, new_line_end)


def _frozen(known: Collection[str] | None) -> frozenset[str] | None:
    return None if known is None else frozenset(known)


def _row_of_line(line: Line) -> int:
    return line.source_line


def _row_of_heading(heading: Heading) -> int:
    return heading.source_line


def _start_of_warning(warning: ScriptWarning) -> int:
    return warning.start


def common_ends(old: Sequence[object], new: Sequence[object]) -> tuple[int, int]:
    """Items (rows, ids, lines) equal at the start (p) and, not overlapping those, at the end (s). Compared a block of rows at a
    time (a list comparison runs in C), then row by row inside the first block that differs."""
    n = min(len(old), len(new))
    p = 0
    while p + _BLOCK <= n and old[p:p + _BLOCK] == new[p:p + _BLOCK]:
        p += _BLOCK
    while p < n and old[p] == new[p]:
        p += 1
    s, a, b = 0, len(old), len(new)
    while s + _BLOCK <= n - p and old[a - s - _BLOCK:a - s] == new[b - s - _BLOCK:b - s]:
        s += _BLOCK
    while s < n - p and old[-1 - s] == new[-1 - s]:
        s += 1
    return p, s


_BLOCK = 128


def _moved(item: object, changes: dict[str, object]) -> object:
    """`dataclasses.replace(item, **changes)` without running `__init__` again: the same fields, some moved."""
    copy = object.__new__(type(item))
    object.__setattr__(copy, "__dict__", {**item.__dict__, **changes})
    return copy


def move_line(line: Line, by: Shift) -> Line:
    c = by.chars
    tags = tuple(Tag(t.name, t.start + c, t.end + c) for t in line.tags) if c and line.tags else line.tags
    return _moved(line, {"start": line.start + c, "end": line.end + c, "source_line": line.source_line + by.rows,
                         "index": line.index + by.indices, "tags": tags})  # type: ignore[return-value]


def move_heading(heading: Heading, by: Shift) -> Heading:
    return _moved(heading, {"start": heading.start + by.chars, "end": heading.end + by.chars,
                            "source_line": heading.source_line + by.rows})  # type: ignore[return-value]


def move_warning(warning: ScriptWarning, by: Shift) -> ScriptWarning:
    return _moved(warning, {"start": warning.start + by.chars, "end": warning.end + by.chars})  # type: ignore[return-value]


@dataclass(frozen=True)
class Change:
    """What a script change did to its lines, by id, for views that update only those lines."""

    touched: tuple[str, ...]
    """Lines of the new script that are new, or whose text, speaker or place among the others changed."""
    gone: tuple[str, ...]
    """Lines of the old script that the new one no longer has."""

    @staticmethod
    def between(before: Script, after: Script, edit: Edit) -> Change:
        """The change from `before` to `after` (its ids carried), `edit` saying where the text changed."""
        old, new = before.line_ids, after.line_ids
        p, s = common_ends(old, new)  # where the ids differ: [p, len - s)
        touched = tuple(dict.fromkeys(new[edit.first:edit.new_end] + new[p:len(new) - s]))
        were = old[edit.first:edit.old_end] + old[p:len(old) - s]
        kept = set(touched)
        return Change(touched, tuple(i for i in dict.fromkeys(were) if i not in kept and after.line(i) is None))
