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
   those after them by what the edit added: offsets, row numbers and line indices. Only this last step
   touches every later line, and it copies them without parsing.

The result equals `parse_script` of the new text, ids aside: the lines the edit touched carry the parser's
content ids until `LineIds.carry` gives them their lasting ones; `Edit` says which lines those are.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from s2studio.state.script import NARRATOR, Heading, Line, RowParser, Script, ScriptWarning, speakers_of
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

    def parse(self, text: str, known: Collection[str] | None = None) -> Script:
        """A whole parse (`parse_script`), remembered for the next `reparse`."""
        self._rows = text.split("\n")
        self._speakers = []
        self._known = _frozen(known)
        return RowParser(text, known).run(self._rows, self._speakers)

    def reparse(self, before: Script, text: str, known: Collection[str] | None = None) -> tuple[Script, Edit]:
        """`text` parsed, reusing `before` (the script of the text last parsed here) outside the rows that
        changed. Parses everything when the known speakers changed, or when the narrator is not among them
        (its warning is the one that depends on the rows before it)."""
        frozen = _frozen(known)
        if frozen != self._known or (frozen is not None and NARRATOR not in frozen):
            after = self.parse(text, known)
            return after, Edit.everything(before, after)
        old_rows, rows = self._rows, text.split("\n")
        p, s = _common_ends(old_rows, rows)
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
        shift = _Shift(at - old_at, delta, new_line_end - old_line_end)
        lines = before.lines[:first_line] + tuple(parser.lines) + shift.lines(before.lines[old_line_end:])
        h0 = bisect_right(before.headings, p, key=_row_of_heading)
        h1 = bisect_right(before.headings, old_row_end, key=_row_of_heading)
        headings = before.headings[:h0] + tuple(parser.headings) + shift.headings(before.headings[h1:])
        w0 = bisect_left(before.warnings, offset, key=_start_of_warning)
        w1 = bisect_left(before.warnings, old_at, key=_start_of_warning)
        warnings = before.warnings[:w0] + tuple(parser.warnings) + shift.warnings(before.warnings[w1:])
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


def _common_ends(old: Sequence[str], new: Sequence[str]) -> tuple[int, int]:
    """Rows equal at the start (p) and, not overlapping those, at the end (s)."""
    n = min(len(old), len(new))
    p = 0
    while p < n and old[p] == new[p]:
        p += 1
    s = 0
    while s < n - p and old[-1 - s] == new[-1 - s]:
        s += 1
    return p, s


def _moved(item: object, changes: dict[str, object]) -> object:
    """`dataclasses.replace(item, **changes)` without running `__init__` again: the same fields, some of them
    moved. Half the cost of `replace`, which matters when an edit at the top of a book moves 10,000 lines."""
    copy = object.__new__(type(item))
    object.__setattr__(copy, "__dict__", {**item.__dict__, **changes})
    return copy


@dataclass(frozen=True)
class _Shift:
    """What an edit adds to everything after it: characters, rows, lines."""

    chars: int
    rows: int
    indices: int

    def lines(self, lines: Sequence[Line]) -> tuple[Line, ...]:
        if not (self.chars or self.rows or self.indices):
            return tuple(lines)
        c, r, i = self.chars, self.rows, self.indices
        return tuple(_moved(ln, {"start": ln.start + c, "end": ln.end + c, "source_line": ln.source_line + r,
                                 "index": ln.index + i, "tags": self.tags(ln.tags) if ln.tags else ()})
                     for ln in lines)

    def tags(self, tags: Sequence[Tag]) -> tuple[Tag, ...]:
        c = self.chars
        return tuple(Tag(t.name, t.start + c, t.end + c) for t in tags) if c else tuple(tags)

    def headings(self, headings: Sequence[Heading]) -> tuple[Heading, ...]:
        c, r = self.chars, self.rows
        if not (c or r):
            return tuple(headings)
        return tuple(_moved(h, {"start": h.start + c, "end": h.end + c, "source_line": h.source_line + r})
                     for h in headings)

    def warnings(self, warnings: Sequence[ScriptWarning]) -> tuple[ScriptWarning, ...]:
        c = self.chars
        if not c:
            return tuple(warnings)
        return tuple(_moved(w, {"start": w.start + c, "end": w.end + c}) for w in warnings)
