"""Which earlier lines a line hears in line mode: the rolling context, moving in hops (design.md §6).

A line's prompt holds the references plus the newest earlier lines (their text and codes) that fit: at most
`max_lines` of them, and a prompt of at most `limit` columns. When the next line would no longer fit, the window
does not slide by one line per line (which changes the prompt right after the references every time, so the fast
path's cache could reuse nothing past them): it drops the oldest half of the lines it holds at once. The lines
after a hop start with the same system message, references and kept lines as each other, so each one prefills only
the line before it and its own turn.

The window is a function of the lines before it, counted from the first: a line rendered alone with all its
earlier lines as context hears what it heard in the render of the whole script, and no engine state enters it.
Studio, command line and server all render line mode through `S2Engine`, which calls `hop` for every line.
"""

from __future__ import annotations

from collections.abc import Sequence


def hop(start: int, lengths: Sequence[int], own: int, limit: int, max_lines: int) -> int:
    """The index of the oldest earlier line the next line hears, given the window of the line before it.

    `start`: the previous line's window (0 for the first line); `lengths`: the columns each earlier line adds to a
    prompt (its user turn and voice answer), oldest first; `own`: the columns of the next line's prompt without
    any earlier line (system message, references, its own turn). Returns `len(lengths)` when none fits."""
    count = len(lengths)
    kept = sum(lengths[start:])
    while start < count and (count - start > max_lines or own + kept > limit):
        dropped = (count - start + 1) // 2  # the oldest half, at once
        kept -= sum(lengths[start:start + dropped])
        start += dropped
    return start
