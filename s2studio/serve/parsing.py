"""Checks a route makes on a validated request: names, lines, voices. One message naming the field, never a
traceback, and never more of a client's own text echoed back than a short excerpt."""

from __future__ import annotations

from s2studio.engine.api import LineSpec
from s2studio.errors import UserError, printable
from s2studio.serve.config import Limits
from s2studio.serve.errors import ApiError
from s2studio.state.voices import Voice, VoiceLibrary

SHOWN = 60
"""Characters of a client's name shown back in a message."""


def check_name(name: str, param: str, limits: Limits) -> None:
    """A voice name, id or cast name of at most `max_name_chars`."""
    if len(name) > limits.max_name_chars:
        raise ApiError(400, f"{param}: a name of {len(name)} characters; names have at most {limits.max_name_chars}",
                       "name_too_long", param)


def check_lines(lines: tuple[LineSpec, ...], limits: Limits, param: str = "text") -> tuple[LineSpec, ...]:
    """At most `max_lines` lines, none of them empty."""
    if len(lines) > limits.max_lines:
        raise ApiError(400, f"{param}: {len(lines)} lines; this server takes at most {limits.max_lines} in one "
                       "request", "too_many_lines", param)
    empty = next((i for i, line in enumerate(lines) if not line.text.strip()), None)
    if empty is not None:
        raise ApiError(400, f"{param}: line {empty + 1} has no text; leave out empty lines", "empty_line", param)
    return lines


LIBRARY_HINT = "add it with `s2studio voice add` or in the studio"
UPLOAD_HINT = ("upload it (again: unused uploads make room for new ones) with POST /v1/audio/voices, or add it with "
               "`s2studio voice add`")


def find_voice(library: VoiceLibrary, name: str, param: str, hint: str = LIBRARY_HINT) -> Voice:
    """A library voice by id or name, or a 404 that names it (shortened), the voices there are, and `hint`: what
    to do (where a route also takes uploaded voices, that an evicted one is uploaded again)."""
    try:
        return library.resolve(name)
    except UserError:
        known = ", ".join(repr(printable(v.name, SHOWN)) for v in library.list()[:8]) or "none yet"
        raise ApiError(404, f"no voice called {printable(name, SHOWN)!r} on this server (voices: {known}); {hint}",
                       "voice_not_found", param) from None
