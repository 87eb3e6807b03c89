"""Subtitles of an export: SubRip and WebVTT, one cue per spoken line, timed by the timeline's layout.

They show what is heard: delivery tags such as "[whispering]" are left out unless asked for, and a line
left without words ("[laughing]") gets no subtitle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from s2studio.state.tags import without_tags


@dataclass(frozen=True)
class Cue:
    index: int
    """1-based, as SRT numbers them."""
    line_id: str
    speaker: str
    text: str
    start_s: float
    end_s: float


def _srt_time(seconds: float) -> str:
    ms = round(seconds * 1000)
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"


def _shown(cues: Sequence[Cue], keep_tags: bool) -> list[tuple[Cue, str]]:
    """Each cue with the text it shows; a cue left without words (a line that is only "[laughing]") is
    dropped, since a subtitle with nothing to read is noise."""
    shown = [(c, c.text if keep_tags else without_tags(c.text)) for c in cues]
    return [(c, text) for c, text in shown if text.strip()]


def srt_text(cues: Sequence[Cue], with_speakers: bool = True, keep_tags: bool = False) -> str:
    """SubRip subtitles, numbered from 1; delivery tags left out unless `keep_tags`."""
    blocks = []
    for number, (c, text) in enumerate(_shown(cues, keep_tags), start=1):
        text = f"{c.speaker}: {text}" if with_speakers else text
        blocks.append(f"{number}\n{_srt_time(c.start_s)} --> {_srt_time(c.end_s)}\n{text}\n")
    return "\n".join(blocks)


def vtt_text(cues: Sequence[Cue], with_speakers: bool = True, keep_tags: bool = False) -> str:
    """WebVTT subtitles, each cue named by its line id, the speaker as a voice span."""
    def esc(s: str) -> str:
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    out = ["WEBVTT\n"]
    for c, text in _shown(cues, keep_tags):
        text = f"<v {esc(c.speaker)}>{esc(text)}" if with_speakers else esc(text)
        out.append(f"{c.line_id}\n{_srt_time(c.start_s).replace(',', '.')} --> "
                   f"{_srt_time(c.end_s).replace(',', '.')}\n{text}\n")
    return "\n".join(out)
