"""JSON text read a piece at a time, so that the thread reading it lets the others run between pieces.

`json.loads` is one call into C, and it holds the interpreter from the first character to the last: a book's
project.json (megabytes, ten thousand lines' rows) kept every other thread, the window's too, waiting for tens of
milliseconds. `loads` reads the outer objects itself, down to `depth` levels, and hands each of their values to
json's own scanner, one value per call (an array, a project's list of line ids, is one value); the interpreter can
switch threads between calls. The value and the errors are json's: text this reading does not take is read again by
`json.loads`, which returns it or raises its own error."""

from __future__ import annotations

import json
import json.scanner
import re
from typing import Any

_SPACE = re.compile(r"[ \t\n\r]*")
_scan = json.scanner.make_scanner(json.JSONDecoder())


class _NotTaken(Exception):
    """The text is not what this reading takes: `json.loads` says why (or reads it)."""


def loads(text: str, depth: int = 2) -> Any:
    """What `json.loads(text)` returns, each value of the outer `depth` levels of objects read by a call of its
    own."""
    try:
        value, end = _value(text, _skip(text, 0), depth)
        if _skip(text, end) == len(text):
            return value
    except (_NotTaken, StopIteration):
        pass
    return json.loads(text)


def _skip(text: str, at: int) -> int:
    return _SPACE.match(text, at).end()  # type: ignore[union-attr]  # (matches the empty string anywhere)


def _value(text: str, at: int, depth: int) -> tuple[Any, int]:
    if depth > 0 and text.startswith("{", at):
        return _object(text, _skip(text, at + 1), depth - 1)
    return _scan(text, at)  # (StopIteration where no value starts)


def _object(text: str, at: int, depth: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    if text.startswith("}", at):
        return out, at + 1
    while True:
        if not text.startswith('"', at):
            raise _NotTaken
        key, at = _scan(text, at)
        at = _skip(text, at)
        if not text.startswith(":", at):
            raise _NotTaken
        out[key], at = _value(text, _skip(text, at + 1), depth)
        at = _skip(text, at)
        if text.startswith("}", at):
            return out, at + 1
        if not text.startswith(",", at):
            raise _NotTaken
        at = _skip(text, at + 1)

