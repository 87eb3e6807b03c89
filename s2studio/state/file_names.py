"""File and folder names made from what a person typed (a voice's name, a speaker, a line's words), valid everywhere.

A name that Linux takes may be refused by Windows, or mean something else there: the device names (`CON`, `NUL`,
`COM1`, …, with any extension: `con.wav` is the console), the characters `<>:"/\\|?*` and control characters, a
trailing dot or space (silently dropped, so `Bob.` and `Bob` are one file), and more than 255 characters in one
component. Windows paths longer than 259 characters fail in most programs, and two names that differ only in
case are one file on Windows' and macOS's default file systems. `portable_name` turns text into a name free of
all of that, `fit_in_folder` shortens one to keep its whole path under the limit, and `unique_ignoring_case`
tells names apart that only case told apart. `name_problem` says what is wrong with a name (the tests run it on
every file the writers make from user text).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

RESERVED = frozenset({"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$",
                      *(f"{port}{n}" for port in ("COM", "LPT") for n in (*"123456789", "¹", "²", "³"))})
"""Windows' device names: reserved as a name's first part, whatever follows its first dot."""
FORBIDDEN = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')
MAX_COMPONENT = 255
"""Characters in one file or folder name (NTFS counts UTF-16 units; ext4 bytes: the smaller limit is kept below)."""
MAX_PATH = 259
"""Characters in a whole path that Windows programs accept without the long-path opt-in (MAX_PATH less the NUL)."""


def name_problem(name: str) -> str | None:
    """Why `name` is not a file name that every system takes as written, or None."""
    if not name or name in (".", ".."):
        return "the name is empty"
    if FORBIDDEN.search(name):
        return f"{name!r} holds a character Windows does not allow in a name (<>:\"/\\|?* or a control character)"
    if name[-1] in ". ":
        return f"{name!r} ends in a dot or a space, which Windows drops"
    if _is_device(name):
        return f"{name!r} is a device name on Windows"
    if len(name) > MAX_COMPONENT or len(name.encode("utf-8")) > MAX_COMPONENT or _utf16(name) > MAX_COMPONENT:
        return f"{name[:20]!r}… is longer than {MAX_COMPONENT} characters"
    return None


def _is_device(name: str) -> bool:
    return name.split(".", 1)[0].rstrip(" ").upper() in RESERVED


def _split(name: str) -> tuple[str, str]:
    """(stem, ".ext"); a leading dot (a hidden file) is part of the stem."""
    stem, dot, ext = name.rpartition(".") if "." in name[1:] else (name, "", "")
    return stem, dot + ext


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _cut(text: str, limit: int) -> str:
    """The longest start of `text` within `limit` characters, UTF-8 bytes and UTF-16 units."""
    while len(text) > limit or len(text.encode("utf-8")) > limit or _utf16(text) > limit:
        text = text[:-1]
    return text


def portable_name(text: str, suffix: str = "", fallback: str = "untitled", limit: int = MAX_COMPONENT) -> str:
    """`text` + `suffix` as a name every system takes: forbidden characters become "-", trailing dots and spaces
    go, a device name gets a "_" (`CON` -> `CON_`), and the text is cut so that the name stays within `limit`;
    `fallback` when nothing is left."""
    stem = FORBIDDEN.sub("-", " ".join(text.split())).strip()
    stem = _cut(stem, max(1, limit - len(suffix.encode("utf-8")))).rstrip(". ")
    if not stem:
        stem = fallback
    if _is_device(stem):
        first = stem.split(".", 1)[0]
        stem = first + "_" + stem[len(first):]
    return stem + suffix


def fit_in_folder(folder: Path, name: str, limit: int = MAX_PATH) -> str:
    """`name` shortened (before its extension) so that `folder / name` stays within `limit` characters, at least
    one character of the stem kept; unchanged when it fits."""
    room = limit - len(str(Path(folder) / "x")) + 1
    if len(name) <= room:
        return name
    stem, ext = _split(name)
    kept = stem[:max(1, room - len(ext))].rstrip(". -_")
    return portable_name(kept or stem[:1], ext)


def unique_ignoring_case(names: Iterable[str]) -> list[str]:
    """`names` in order, a later one equal to an earlier one but for case (or equal) given "-2", "-3", … before its
    extension: on Windows and macOS they would be one file."""
    seen: set[str] = set()
    out = []
    for name in names:
        stem, ext = _split(name)
        candidate, n = name, 2
        while candidate.casefold() in seen:
            candidate, n = f"{stem}-{n}{ext}", n + 1
        seen.add(candidate.casefold())
        out.append(candidate)
    return out
