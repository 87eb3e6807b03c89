"""The script: plain text a person writes, parsed into spoken lines (design.md §5).

Syntax, one utterance per text line:

    # Chapter one                      heading (any number of '#'), not spoken
    Alice: Did you hear that? [whispering] Someone is at the door.
    Bob: [laughing] It's only the cat.
    A line without a name continues with the speaker of the line before.
    Bob:                               a name alone sets the speaker of the lines below it
    <|speaker:0|>Hi.<|speaker:1|>Hello!   upstream-style raw tags: speakers "Speaker 0", "Speaker 1"

Rules that matter to the rest of the studio:

- Nothing typed is ever silently dropped. Text before any name belongs to the narrator
  (`NARRATOR`); text before the first raw `<|speaker:i|>` tag on a text line belongs to the line's
  speaker (upstream drops it). Anything odd raises a `ScriptWarning`, never an exception.
- A raw `<|speaker:i|>` tag becomes the speaker named `"Speaker i"` (`raw_speaker_name`), so the cast
  maps it to a voice like any other name.
- The parser gives each line its *content id* (`make_line_id`): `"l" + sha1(speaker + "\\x1f" + text)[:10]`,
  plus `"-n"` for the n-th (n >= 1) earlier line with the same speaker and text. These are a script's
  first ids only: the studio carries ids across edits with a line diff (`state/line_ids.py`), so a
  line keeps its id, and its takes, while its text or speaker is edited (`Script.with_ids`).
- `serialize` writes the canonical form (a name whenever the speaker changes or the text would
  otherwise read as a name or a heading); parsing that gives the same lines and headings.
  `Script.source` keeps the exact text that was parsed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from operator import attrgetter
from pathlib import Path

from s2studio.errors import UserError
from s2studio.state.script_pieces import Pieces
from s2studio.state.tags import Tag, find_tags

NARRATOR = "Narrator"
MAX_TAGS_PER_SENTENCE = 3
MAX_SCRIPT_BYTES = 2_000_000
"""Scripts above this size are refused when read from a file (a book is ~1 MB)."""

_NAME = re.compile(r"[ \t]*(?P<name>[^\W_][\w.'’-]*(?: [\w.'’-]+){0,2})[ \t]*(?::(?=\s|$)|：)")
"""`Name:` at the start of a text line: one to three words (word characters and `.'-`), at most
40 characters with a letter in it, so `10: …`, `10:30` and `http://` are not names and neither is
prose like "The rule was simple: run." A full-width colon needs no space after it (CJK scripts)."""
MAX_NAME_CHARS = 40

_RAW_SPEAKER = re.compile(r"<\|speaker:(\d{1,4})\|>")
_SPECIAL = re.compile(r"<\|[^|<>\n]{1,40}\|>")
_SENTENCE_END = re.compile(r"[.!?。！？…]+(?=\s|$)|[。！？]+")


def raw_speaker_name(index: int) -> str:
    return f"Speaker {index}"


@dataclass(frozen=True)
class ScriptWarning:
    """Something the editor underlines (never blocks): `start`/`end` are offsets in the source."""

    start: int
    end: int
    kind: str
    """unknown_speaker, unbalanced_bracket, empty_tag, too_many_tags, only_tags, special_token."""
    message: str


@dataclass(frozen=True)
class Line:
    """One utterance. `text` is what the model reads (tags included, no name prefix)."""

    index: int
    line_id: str
    speaker: str
    text: str
    tags: tuple[Tag, ...]
    start: int
    """Offset of `text` in the source (after leading whitespace)."""
    end: int
    source_line: int
    """1-based text line it came from (several lines share it when raw speaker tags split it)."""

    @property
    def key(self) -> tuple[str, str]:
        """What the line says and who says it: what a line diff compares."""
        return (self.speaker, self.text)

    @property
    def has_words(self) -> bool:
        """False for a line of tags only (nothing for the model to speak)."""
        return _spoken_words(self.text, self.start, self.tags)


@dataclass(frozen=True)
class Heading:
    text: str
    level: int
    start: int
    end: int
    source_line: int


@dataclass(frozen=True)
class Script:
    lines: Sequence[Line]
    """A tuple, or after an edit `Pieces` (a sequence that makes the lines the edit moved when read)."""
    headings: tuple[Heading, ...]
    speakers: tuple[str, ...]
    """Speakers that have lines, in order of first appearance."""
    warnings: Sequence[ScriptWarning]
    source: str = ""

    def line(self, line_id: str) -> Line | None:
        i = self._positions.get(line_id)
        return None if i is None else self.lines[i]

    def position(self, line_id: str) -> int | None:
        """The line's index in `lines`."""
        return self._positions.get(line_id)

    @cached_property
    def _positions(self) -> dict[str, int]:
        return dict(zip(self.line_ids, range(len(self.lines)), strict=True))

    @cached_property
    def line_rows(self) -> tuple[int, ...]:
        """Each line's text row (`source_line`), in order (without making the lines an edit moved)."""
        if isinstance(self.lines, Pieces):
            return self.lines.moved("source_line", "rows")
        return tuple(map(attrgetter("source_line"), self.lines))  # in C: a book has 10,000 lines

    @cached_property
    def line_ids(self) -> tuple[str, ...]:
        return _unmoved(self.lines, "line_id")

    @cached_property
    def line_speakers(self) -> tuple[str, ...]:
        """Each line's speaker, in order (without making the lines an edit moved)."""
        return _unmoved(self.lines, "speaker")

    @cached_property
    def line_texts(self) -> tuple[str, ...]:
        """Each line's text, in order (without making the lines an edit moved)."""
        return _unmoved(self.lines, "text")

    def without_warnings(self) -> Script:
        """The same lines without warnings, with the lines' columns made already (a book's take a while)."""
        out = replace(self, warnings=())
        for name in _COLUMNS:
            if name in self.__dict__:
                out.__dict__[name] = self.__dict__[name]
        return out

    def with_ids(self, ids: Sequence[str]) -> Script:
        """The same script with its lines' ids replaced (one per line, unique)."""
        if len(ids) != len(self.lines) or len(set(ids)) != len(ids):
            raise ValueError(f"need {len(self.lines)} unique line ids, got {len(ids)} ({len(set(ids))} unique)")
        if tuple(ids) == self.line_ids:
            return self
        return replace(self, lines=tuple(replace(ln, line_id=i) for ln, i in zip(self.lines, ids, strict=True)))


_COLUMNS = ("_positions", "line_rows", "line_ids", "line_speakers", "line_texts")
"""`Script`'s cached columns of its lines (`without_warnings` keeps them)."""


def make_line_id(speaker: str, text: str, occurrence: int) -> str:
    digest = hashlib.sha1(f"{speaker}\x1f{text}".encode()).hexdigest()[:10]
    return f"l{digest}" if occurrence == 0 else f"l{digest}-{occurrence}"


def near_name(name: str, names: Collection[str]) -> str | None:
    """The one name of `names` that `name` is most likely a typo of ("Bbo" for "Bob"): at most one typing
    slip away (a letter wrong, missing, extra, or two swapped; two slips for names over 4 letters), case
    aside. Numbered names ("Speaker 2") are never near-misses of each other: their numbers are the point."""
    if any(ch.isdigit() for ch in name):
        return None
    key = name.casefold()
    allowed = 1 if len(key) <= 4 else 2
    best: tuple[int, str] | None = None
    for other in names:
        if other == name or other == NARRATOR or any(ch.isdigit() for ch in other):
            continue
        slips = _slips(key, other.casefold())
        if slips <= allowed and (best is None or slips < best[0]):
            best = (slips, other)
    return best[1] if best else None


def _slips(a: str, b: str) -> int:
    """Typing slips from `a` to `b`: substitutions, insertions, deletions and swaps of neighbours
    (the optimal string alignment distance)."""
    if abs(len(a) - len(b)) > 2:
        return 3
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[-1]


def _strip_span(s: str, start: int, end: int) -> tuple[int, int]:
    """Shrink [start, end) of `s` past surrounding whitespace."""
    while start < end and s[start].isspace():
        start += 1
    while end > start and s[end - 1].isspace():
        end -= 1
    return start, end


def match_name(text: str) -> re.Match[str] | None:
    """The `Name:` prefix of one text line, if it has one."""
    m = _NAME.match(text)
    if m is None:
        return None
    name = m.group("name")
    if len(name) > MAX_NAME_CHARS or not any(ch.isalpha() for ch in name):
        return None
    return m


class RowParser:
    """Parses a script's text lines (rows) one at a time, in order: `parse_script` runs it over every row,
    `script_edits` over the rows an edit touched. What a row gives depends on the row and on the speaker in
    force before it (`speaker`), never on other rows: every narrated row warns when the narrator has no
    voice, as every row of another unknown speaker does, so that a reparse of the touched rows is exact."""

    def __init__(self, source: str, known: Collection[str] | None, first_index: int = 0) -> None:
        self.src = source
        self.known = None if known is None else set(known)
        self.first_index = first_index
        """Index of the first line this parser makes (a reparse of part of a script: `script_edits`)."""
        self.lines: list[Line] = []
        self.headings: list[Heading] = []
        self.warnings: list[ScriptWarning] = []
        self.speaker = NARRATOR
        self.occurrences: dict[tuple[str, str], int] = {}

    def warn(self, start: int, end: int, kind: str, message: str) -> None:
        self.warnings.append(ScriptWarning(start, end, kind, message))

    def check_speaker(self, name: str, start: int, end: int) -> None:
        if self.known is None or name in self.known:
            return
        if name == NARRATOR:
            self.warn(start, end, "unknown_speaker", f"the {NARRATOR} reads lines without a speaker's name and has "
                      "no voice: give it one in the cast, or start the line with a name")
            return
        near = near_name(name, self.known)
        hint = f"did you mean {near}?" if near else "give it a voice or fix the name"
        self.warn(start, end, "unknown_speaker", f"'{name}' is not in the cast: {hint}")

    def run(self, rows: list[str], speakers_before: list[str] | None = None) -> Script:
        """Parse `rows` (the source's text lines); `speakers_before` receives the speaker in force before
        each row, and after the last one."""
        pos = 0
        for number, raw in enumerate(rows, start=1):
            if speakers_before is not None:
                speakers_before.append(self.speaker)
            self.text_line(raw, pos, number)
            pos += len(raw) + 1
        if speakers_before is not None:
            speakers_before.append(self.speaker)
        return Script(tuple(self.lines), tuple(self.headings), speakers_of(self.lines), tuple(self.warnings),
                      self.src)

    def text_line(self, raw: str, offset: int, number: int) -> None:
        start, end = _strip_span(raw, 0, len(raw))
        if start == end:
            return
        if raw[start] == "#":
            hashes = start
            while hashes < end and raw[hashes] == "#":
                hashes += 1
            hs, he = _strip_span(raw, hashes, end)
            self.headings.append(Heading(raw[hs:he], hashes - start, offset + start, offset + end, number))
            return
        speaker_known_here = False
        m = match_name(raw)
        if m is not None:
            self.speaker = m.group("name").strip()
            self.check_speaker(self.speaker, offset + m.start("name"), offset + m.end("name"))
            speaker_known_here = True
            start, end = _strip_span(raw, m.end(), len(raw))
        pieces: list[tuple[str, int, int]] = []  # (speaker, start, end) within raw
        cursor, speaker = start, self.speaker
        for tag in _RAW_SPEAKER.finditer(raw, start, end):
            pieces.append((speaker, cursor, tag.start()))
            speaker = raw_speaker_name(int(tag.group(1)))
            self.check_speaker(speaker, offset + tag.start(), offset + tag.end())
            cursor = tag.end()
        pieces.append((speaker, cursor, end))
        for speaker, ps, pe in pieces:
            ps, pe = _strip_span(raw, ps, pe)
            if ps < pe:
                if speaker == NARRATOR and not speaker_known_here:
                    self.check_speaker(NARRATOR, offset + ps, offset + pe)
                self.add_line(speaker, raw, ps, pe, offset, number)
        self.speaker = speaker

    def add_line(self, speaker: str, raw: str, start: int, end: int, offset: int, number: int) -> None:
        text = raw[start:end]
        tags, problems = find_tags(text, offset + start)
        for p_start, p_end, kind, message in problems:
            self.warn(p_start, p_end, kind, message)
        for special in _SPECIAL.finditer(text):
            self.warn(offset + start + special.start(), offset + start + special.end(), "special_token",
                      f"'{special.group()}' is a model control token; the model reads it as such")
        if len(tags) > MAX_TAGS_PER_SENTENCE:  # else no sentence can hold too many
            self.check_sentences(text, offset + start, tags)
        if tags and not _spoken_words(text, offset + start, tags):
            self.warn(offset + start, offset + end, "only_tags",
                      "this line has only tags and nothing to say; add words after the tag")
        key = (speaker, text)
        occurrence = self.occurrences.get(key, 0)
        self.occurrences[key] = occurrence + 1
        self.lines.append(Line(self.first_index + len(self.lines), make_line_id(speaker, text, occurrence), speaker,
                               text, tags, offset + start, offset + end, number))

    def check_sentences(self, text: str, base: int, tags: tuple[Tag, ...]) -> None:
        sentence_start = 0
        bounds = [m.end() for m in _SENTENCE_END.finditer(text)] + [len(text)]
        for bound in bounds:
            inside = [t for t in tags if base + sentence_start <= t.start < base + bound]
            if len(inside) > MAX_TAGS_PER_SENTENCE:
                self.warn(inside[0].start, inside[-1].end, "too_many_tags",
                          f"{len(inside)} tags in one sentence; S2 follows at most "
                          f"{MAX_TAGS_PER_SENTENCE} well, so split the sentence or drop some")
            sentence_start = bound


def _spoken_words(text: str, base: int, tags: tuple[Tag, ...]) -> bool:
    rest = list(text)
    for t in tags:
        for i in range(t.start - base, t.end - base):
            rest[i] = " "
    return any(ch.isalnum() for ch in rest)


def parse_script(text: str, known_speakers: Collection[str] | None = None) -> Script:
    """Parse any string (never raises). `known_speakers`: the cast's names, for warnings."""
    return RowParser(text, known_speakers).run(text.split("\n"))


def speakers_of(lines: Sequence[Line]) -> tuple[str, ...]:
    """The speakers that have lines, in order of first appearance (`Script.speakers`)."""
    return tuple(dict.fromkeys(_unmoved(lines, "speaker")))  # Script.line_speakers, before there is a Script


def _unmoved(lines: Sequence[Line], name: str) -> tuple:
    """Each line's `name` (an attribute an edit never moves), without making the lines of `Pieces`."""
    return lines.unmoved(name) if isinstance(lines, Pieces) else tuple(map(attrgetter(name), lines))


def _needs_name(text: str) -> bool:
    return text.startswith("#") or match_name(text) is not None


def serialize(script: Script) -> str:
    """Canonical text of `script`: headings and lines in source order, names where needed."""
    items: list[tuple[int, int, str]] = [(h.start, 0, "#" * max(h.level, 1) + (" " + h.text if h.text else ""))
                                         for h in script.headings]
    previous = NARRATOR
    for line in script.lines:
        if line.speaker != previous or _needs_name(line.text):
            out = f"{line.speaker}: {line.text}"
        else:
            out = line.text
        previous = line.speaker
        items.append((line.start, 1 + line.index, out))
    items.sort()
    return "\n".join(text for _, _, text in items) + ("\n" if items else "")


def read_script(path: Path) -> str:
    """Read a script file for the CLI and the studio, refusing what cannot be a script."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise UserError(f"cannot read script {path}: {exc.strerror or exc}") from None
    if size > MAX_SCRIPT_BYTES:
        raise UserError(f"script {path} is {size / 1e6:.1f} MB; split it into files under "
                        f"{MAX_SCRIPT_BYTES // 1_000_000} MB")
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"script {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise UserError(f"cannot read script {path}: {exc.strerror or exc}") from None
