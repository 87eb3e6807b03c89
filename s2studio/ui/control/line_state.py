"""What a line's picked take says of it (none, fresh, stale and why, its checks), worked out from the project's
plain data. QtCore-free.

A book's lines are all worked out when it opens or when the settings or the voices change: `stale_among` does a
run of them in one loop (the settings as takes record them made once, each speaker's voice key once, the lines'
texts and speakers read as columns of the script), with the same rule as a single line's `line_state`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from s2studio.state.project import LineTakes, Project
from s2studio.state.script import Script
from s2studio.state.staleness import Stale, reasons_for, take_settings
from s2studio.state.take_check import TakeCheck

LineKind = Literal["none", "fresh", "stale"]


@dataclass(frozen=True)
class LineState:
    """What the gutter and the takes panel show of one line."""

    kind: LineKind
    """none: no take; fresh: the picked take answers the line as it is; stale: it answers an older one."""
    reasons: tuple[Stale, ...]
    takes: int
    check: TakeCheck | None = None
    """What the checks found in the picked take (None: not checked yet)."""


def line_state(entry: LineTakes | None, text: str, speaker: str, voice: str, wanted: Mapping[str, Any]) -> LineState:
    """The state of a line of `text` and `speaker` whose takes are `entry`, its speaker's voice key being `voice`
    and `wanted` the settings as takes record them (`take_settings`)."""
    take = entry.current if entry is not None else None
    if entry is None or take is None:
        return LineState("none", (), 0)
    reasons = reasons_for(take, text, speaker, voice, wanted)
    return LineState("stale" if reasons else "fresh", reasons, len(entry.takes), take.check)


def stale_among(project: Project, script: Script, line_ids: Iterable[str],
                voice_key_of: Callable[[str], str]) -> set[str]:
    """The ids among `line_ids` of the script's lines whose picked take is stale (ids the script no longer has are
    left out); `voice_key_of`: a speaker's voice key now."""
    wanted = take_settings(project.settings)
    texts, speakers, entries = script.line_texts, script.line_speakers, project.lines
    keys: dict[str, str] = {}
    stale = set()
    for line_id in line_ids:
        at, entry = script.position(line_id), entries.get(line_id)
        take = entry.current if entry is not None else None
        if at is None or take is None:
            continue
        speaker = speakers[at]
        voice = keys.get(speaker)
        if voice is None:
            voice = keys[speaker] = voice_key_of(speaker)
        if reasons_for(take, texts[at], speaker, voice, wanted):
            stale.add(line_id)
    return stale
