"""A script's chapters: its headings (`# …`), each with the lines under it down to the next heading of
the same or a higher level (a `## scene` belongs to the `# chapter` above it). Lines before the first
heading make an untitled opening. Found by bisection over the lines' rows, so a book's 10,000 lines are
never walked to find one chapter's."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from s2studio.state.script import Line, Script

OPENING = "Opening"
"""The name of the lines before the first heading."""


@dataclass(frozen=True)
class Chapter:
    title: str
    level: int
    """1 for `#`, 2 for `##`…; 0 for the opening."""
    row: int
    """1-based text line of the heading (of the first line for the opening)."""
    end_row: int
    """The first row after the chapter (the next heading of its level or higher), or past the end."""


def chapters(script: Script) -> list[Chapter]:
    heads = script.headings
    past_end = script.source.count("\n") + 2
    ends: list[int] = [past_end] * len(heads)
    open_at: list[int] = []  # headings whose end is not found yet, their levels increasing
    for i, h in enumerate(heads):
        while open_at and heads[open_at[-1]].level >= h.level:
            ends[open_at.pop()] = h.source_line
        open_at.append(i)
    out: list[Chapter] = []
    if script.lines and (not heads or script.lines[0].source_line < heads[0].source_line):
        out.append(Chapter(OPENING, 0, script.lines[0].source_line, heads[0].source_line if heads else past_end))
    out += [Chapter(h.text or "Untitled", h.level, h.source_line, end) for h, end in zip(heads, ends, strict=True)]
    return out


def chapter_span(script: Script, chapter: Chapter) -> tuple[int, int]:
    """Indices [i, j) of the chapter's lines in `script.lines`."""
    rows = script.line_rows  # not the lines: reading a line an edit moved makes it
    return bisect_left(rows, chapter.row), bisect_left(rows, chapter.end_row)


def chapter_lines(script: Script, chapter: Chapter) -> Sequence[Line]:
    """The chapter's lines, in order."""
    i, j = chapter_span(script, chapter)
    return script.lines[i:j]


def chapter_at(found: Sequence[Chapter], row: int) -> int | None:
    """Index in `found` of the innermost chapter holding text line `row` (1-based)."""
    i = bisect_right([c.row for c in found], row) - 1
    while i >= 0 and not found[i].row <= row < found[i].end_row:
        i -= 1
    return i if i >= 0 else None


def scene_start(script: Script, line: Line) -> int:
    """The text row (1-based) of the heading that opens `line`'s scene (a heading starts a scene, whose first line
    hears no earlier line); 0 before the first heading."""
    number = bisect_left([h.source_line for h in script.headings], line.source_line)
    return script.headings[number - 1].source_line if number else 0
