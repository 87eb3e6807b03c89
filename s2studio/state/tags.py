"""Inline `[tags]`: finding them in a line, and the curated palette the editor offers.

S2 reads tags as plain text (spec §8: free-form, "15,000+ unique tags"), so any bracketed phrase is
a tag; the palette in `s2studio/resources/tags.json` (shipped inside the package) only lists the
documented ones, grouped for people who do not know what to type.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources


@dataclass(frozen=True)
class Tag:
    """`[name]` in a line; `start`/`end` are source offsets of the whole bracket pair."""

    name: str
    start: int
    end: int


_BRACKET = re.compile(r"[\[\]]")
Problem = tuple[int, int, str, str]
"""(start, end, kind, message) with source offsets; the script turns them into `ScriptWarning`s."""


def find_tags(text: str, base: int = 0) -> tuple[tuple[Tag, ...], list[Problem]]:
    """Bracket pairs in `text` (offsets shifted by `base`) and the bracket problems found.

    Tags do not nest: a `[` inside an open tag abandons the earlier `[` (reported) and opens anew,
    so one stray bracket never swallows the rest of the line."""
    tags: list[Tag] = []
    problems: list[Problem] = []
    if "[" not in text and "]" not in text:  # most lines of a book (a character at a time is slow in Python)
        return (), problems
    open_at: int | None = None
    for bracket in _BRACKET.finditer(text):
        i, ch = bracket.start(), bracket.group()
        if ch == "[":
            if open_at is not None:
                problems.append((base + open_at, base + open_at + 1, "unbalanced_bracket",
                                 "'[' is never closed; add ']' after the tag"))
            open_at = i
        elif ch == "]":
            if open_at is None:
                problems.append((base + i, base + i + 1, "unbalanced_bracket",
                                 "']' has no matching '['; remove it or open the tag"))
                continue
            name = text[open_at + 1:i].strip()
            if name:
                tags.append(Tag(name, base + open_at, base + i + 1))
            else:
                problems.append((base + open_at, base + i + 1, "empty_tag",
                                 "empty tag '[]'; write what it should do, e.g. [pause]"))
            open_at = None
    if open_at is not None:
        problems.append((base + open_at, base + open_at + 1, "unbalanced_bracket",
                         "'[' is never closed; add ']' after the tag"))
    return tuple(tags), problems


def without_tags(text: str) -> str:
    """`text` as it is heard, without its delivery tags: subtitles and file names do not show
    "[whispering]". Runs of spaces collapse to one, and a tag removed before punctuation takes the space
    before it along ("Hi [laughing], you" -> "Hi, you"); a stray bracket stays (it is text)."""
    tags, _ = find_tags(text)
    out, at = "", 0
    for tag in tags:
        out += text[at:tag.start]
        at = tag.end
        if text[at:].lstrip()[:1] in PUNCTUATION:
            out = out.rstrip()
            at += len(text[at:]) - len(text[at:].lstrip())
    out += text[at:]
    return " ".join(out.split())


PUNCTUATION = tuple(",.;:!?…")


@dataclass(frozen=True)
class PaletteTag:
    tag: str
    """Without brackets, e.g. "whispering"."""
    hint: str


@dataclass(frozen=True)
class TagCategory:
    name: str
    description: str
    tags: tuple[PaletteTag, ...]


@lru_cache(maxsize=1)
def load_palette() -> tuple[TagCategory, ...]:
    """The curated palette from the packaged `resources/tags.json`."""
    raw = json.loads(resources.files("s2studio").joinpath("resources", "tags.json").read_text("utf-8"))
    return tuple(
        TagCategory(c["name"], c.get("description", ""),
                    tuple(PaletteTag(t["tag"], t.get("hint", "")) for t in c["tags"]))
        for c in raw["categories"]
    )


def palette_tags() -> tuple[str, ...]:
    """Every palette tag once, in palette order."""
    return tuple(dict.fromkeys(t.tag for c in load_palette() for t in c.tags))


def complete(prefix: str, limit: int = 12) -> list[str]:
    """Palette tags for completion after `[`: prefix matches first, then substring matches."""
    p = prefix.strip().lower()
    tags = palette_tags()
    first = [t for t in tags if t.lower().startswith(p)]
    rest = [t for t in tags if p in t.lower() and t not in first]
    return (first + rest)[:limit]
