"""User-facing errors. Anything a person can cause (bad file, bad folder, bad option) raises
`UserError` with one line that says what went wrong and what to do; the CLI prints it and the
worker turns it into `JobFailed`. Any other exception is a bug: logged in full, shown briefly.

Text that came from a file or a command line (a voice name, a path, a transcript) may hold control
characters (a terminal escape that retitles the window or clears the screen), bidi overrides that
reorder what is shown, or bytes that are not UTF-8 (Python's surrogate escapes). `is_control` is the
one definition of such characters; `printable` shows them as visible escapes, so a message stays one
honest line."""

from __future__ import annotations

import unicodedata

BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Characters that reorder the text around them (a name shown as "evil.exe" that is "exe.live")."""


class UserError(Exception):
    """A problem the user can fix. `str(exc)` is the whole message, one line."""


class Cancelled(Exception):
    """Work stopped because the person asked (a cancel event was set): not an error, never shown as one.
    Raised by long work below the window (a download, a transcript) and by the window's background tasks."""


def is_control(ch: str) -> bool:
    """A character that changes how a terminal or a text view shows what follows it, or that is not text
    at all: C0/C1 controls (newline and tab included), line/paragraph separators, bidi controls and
    lone surrogates (undecodable bytes of a file name or argument)."""
    return unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") or ch in BIDI_CONTROLS


def printable(text: object, limit: int = 200) -> str:
    """`text` as one visible line: controls become `\\x1b`-style escapes, an undecodable byte of a path
    becomes `\\xff`, and anything past `limit` characters becomes `…`."""
    out = []
    for ch in str(text):
        if not is_control(ch):
            out.append(ch)
        elif 0xDC80 <= ord(ch) <= 0xDCFF:  # surrogateescape of a byte that is not UTF-8
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif ord(ch) < 0x100:
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\x{ord(ch):02x}"))
        else:
            out.append(f"\\u{ord(ch):04x}")
    shown = "".join(out)
    return shown if len(shown) <= limit else shown[:limit - 1] + "…"
