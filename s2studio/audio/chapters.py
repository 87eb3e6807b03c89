"""Chapters of an exported book: the script's `# …` headings as markers inside the exported files and as a
CUE sheet beside them, and the parts that "one file per chapter" writes.

What each format carries, and how it is written:

- WAV and RF64: a `cue ` chunk (one point per chapter) and a `LIST`/`adtl` chunk of `labl` names, appended
  after the audio. These are the RIFF markers that audio editors (Audition, Reaper, Sound Forge, ocenaudio)
  show; libsndfile writes cue points only for plain WAV and never their names, so the two chunks are written
  here, the same way for both;
- MP3: ID3v2 chapter frames (`CHAP` under one `CTOC`, the ID3 chapter addendum that podcast and audiobook
  players read), through mutagen;
- FLAC, Ogg Vorbis and Opus: `CHAPTERnnn` / `CHAPTERnnnNAME` comments (the Vorbis-comment chapter
  convention that VLC, foobar2000 and ffmpeg read), through mutagen;
- every format: a CUE sheet (`.cue`) that names the exported file and starts one track per part.

M4B is not offered: neither libsndfile nor any package the studio installs writes AAC, and ffmpeg is not a
dependency.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from s2studio.state.script import Script

CUE_FRAMES = 75
"""A CUE sheet counts time in CD frames, 75 per second."""
MAX_CUE_SAMPLE = 0xFFFFFFFF
"""A RIFF cue point's position is 32-bit: 27 hours at 44.1 kHz; chapters past it are left out of the chunk."""


@dataclass(frozen=True)
class Part:
    """A stretch of the mix, in samples at the export's rate: a chapter, or the opening before the first heading."""

    title: str
    start: int
    end: int
    heading: bool
    """False for the opening (lines before the first heading): it gets a file and a CUE track, not a marker."""


def chapter_titles(script: Script, line_ids: Iterable[str]) -> dict[str, str]:
    """The chapters that the exported lines `line_ids` open: each heading's text keyed by the first of those
    lines after it. A heading with no exported line before the next one opens nothing; several headings
    before one line ("# Part one", "## Chapter 1") name its chapter together."""
    wanted = set(line_ids)
    events = [(h.start, 0, h.text.strip()) for h in script.headings]
    events += [(ln.start, 1, ln.line_id) for ln in script.lines if ln.line_id in wanted]
    titles: dict[str, str] = {}
    waiting: list[str] = []
    for _, kind, value in sorted(events):
        if kind == 0:
            waiting.append(value)
        elif waiting:
            titles[value] = " — ".join(t for t in waiting if t) or "Chapter"
            waiting = []
    return titles


def parts(marks: Sequence[tuple[str, int]], starts: Sequence[int], ends: Sequence[int], opening: str) -> list[Part]:
    """The parts of a mix whose lines start at `starts` and end at `ends` (samples, in order), where each
    mark is (title, index of the line it opens). Lines before the first mark form an opening part."""
    if not starts:
        return []
    bounds = [(title, i, True) for title, i in marks]
    if not bounds or bounds[0][1] > 0:
        bounds.insert(0, (opening, 0, False))
    nexts = [b[1] for b in bounds[1:]] + [len(starts)]
    return [Part(title, starts[first], ends[following - 1], heading)
            for (title, first, heading), following in zip(bounds, nexts, strict=True)]


# ----------------------------------------------------------------------------- CUE sheet


def _cue_time(samples: int, rate: int) -> str:
    frames = samples * CUE_FRAMES // rate
    return f"{frames // (60 * CUE_FRAMES):02d}:{frames // CUE_FRAMES % 60:02d}:{frames % CUE_FRAMES:02d}"


def _quoted(text: str) -> str:
    return '"' + " ".join(text.replace('"', "'").split()) + '"'


def cue_sheet(audio_name: str, fmt: str, chapters: Sequence[Part], rate: int, title: str = "",
              performer: str = "") -> str:
    """A CUE sheet for the file `audio_name`: one track per part, starting where it starts."""
    kind = "MP3" if fmt == "mp3" else "WAVE"  # the sheet's file types; players read FLAC and Ogg under WAVE
    lines = ['REM COMMENT "S2 Studio"']
    if title:
        lines.append(f"TITLE {_quoted(title)}")
    if performer:
        lines.append(f"PERFORMER {_quoted(performer)}")
    lines.append(f"FILE {_quoted(audio_name)} {kind}")
    for number, part in enumerate(chapters, start=1):
        lines += [f"  TRACK {number:02d} AUDIO", f"    TITLE {_quoted(part.title)}",
                  f"    INDEX 01 {_cue_time(part.start, rate)}"]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- markers inside the file


def riff_marker_chunks(marks: Sequence[tuple[int, str]]) -> bytes:
    """`cue ` and `LIST`/`adtl` chunks for (sample, name) markers, ids from 1."""
    marks = [(at, name) for at, name in marks if 0 <= at <= MAX_CUE_SAMPLE]
    points = b"".join(struct.pack("<II4sIII", i, at, b"data", 0, 0, at) for i, (at, _) in enumerate(marks, start=1))
    cue = b"cue " + struct.pack("<II", 4 + len(points), len(marks)) + points
    labels = b""
    for i, (_, name) in enumerate(marks, start=1):
        text = name.encode("utf-8") + b"\0"
        labels += b"labl" + struct.pack("<II", 4 + len(text), i) + text + b"\0" * (len(text) % 2)
    return cue + b"LIST" + struct.pack("<I", 4 + len(labels)) + b"adtl" + labels


def append_riff_markers(fd: int, marks: Sequence[tuple[int, str]]) -> None:
    """Append cue points and their names to the closed WAV or RF64 file open at `fd`, and grow the RIFF size
    it declares (a 32-bit field in WAV, the `ds64` chunk's 64-bit one in RF64)."""
    if not marks:
        return
    head = os.pread(fd, 24, 0)
    end = os.fstat(fd).st_size
    chunks = b"\0" * (end % 2) + riff_marker_chunks(marks)
    os.pwrite(fd, chunks, end)
    riff = end + len(chunks) - 8
    if head[:4] == b"RF64" and head[12:16] == b"ds64":
        os.pwrite(fd, struct.pack("<Q", riff), 20)
    elif head[:4] == b"RIFF" and riff <= 0xFFFFFFFF:
        os.pwrite(fd, struct.pack("<I", riff), 4)
    else:  # a WAV that cannot declare more: leave it as libsndfile closed it
        os.ftruncate(fd, end)


def _clock(seconds: float) -> str:
    ms = round(seconds * 1000)
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


def tag_chapters(fileobj, fmt: str, marks: Sequence[tuple[float, float, str]]) -> None:  # noqa: ANN001
    """Write (start s, end s, title) chapters into the closed MP3, FLAC or Ogg file `fileobj` (opened r+b)."""
    if not marks:
        return
    if fmt == "mp3":
        from mutagen.id3 import CHAP, CTOC, ID3, TIT2, CTOCFlags, ID3NoHeaderError

        try:
            tags = ID3(fileobj)
        except ID3NoHeaderError:
            tags = ID3()
        ids = [f"chp{i}" for i in range(len(marks))]
        tags.add(CTOC(element_id="toc", flags=CTOCFlags.TOP_LEVEL | CTOCFlags.ORDERED, child_element_ids=ids,
                      sub_frames=[TIT2(text=["Chapters"])]))
        for cid, (start, end, title) in zip(ids, marks, strict=True):
            tags.add(CHAP(element_id=cid, start_time=round(start * 1000), end_time=round(end * 1000),
                          sub_frames=[TIT2(text=[title])]))
        fileobj.seek(0)
        tags.save(fileobj)
        return
    if fmt == "flac":
        from mutagen.flac import FLAC as Kind
    elif fmt == "ogg":
        from mutagen.oggvorbis import OggVorbis as Kind
    elif fmt == "opus":
        from mutagen.oggopus import OggOpus as Kind
    else:
        raise ValueError(f"{fmt} carries no chapter tags")
    fileobj.seek(0)
    audio = Kind(fileobj)
    if audio.tags is None:
        audio.add_tags()
    for i, (start, _, title) in enumerate(marks, start=1):
        audio.tags[f"CHAPTER{i:03d}"] = _clock(start)
        audio.tags[f"CHAPTER{i:03d}NAME"] = title
    fileobj.seek(0)
    audio.save(fileobj)
