"""The one timeline (design.md §6): every line's audio in script order, a gap between lines. The live
player reads it and export lays its files out with it, so what you hear is what you export.

Lines without audio take no room. What readers see is a `Layout` (`audio/layout.py`): tracks in order and their
start samples, replaced whole, never changed.

Costs, whatever the project's length: appending a chunk to the streaming line writes the chunk (the
buffer doubles when full, so O(chunk) amortised) and builds no new layout; swapping one line's take
moves the start of every line after it (one vectorised add) and copies no audio. Laying out a whole project
(`lay_out`) can go a slice of lines at a time, between which the window answers; the new layout shows when the
last slice is done, and anything that changes or asks the timeline meanwhile finishes it first.

Only the last line with audio can stream (`begin_stream`), so a growing line never moves another: a line that
lands after it (scenes rendered side by side) stops it where it is, and the rest of its audio comes with its
take (`partial`: until then the timeline holds the first part of a render).
Re-rendering a line that has audio does not stream: its old take stays in place until the new one is
finished (`set_audio`), and every other line stays audible meanwhile.

Writers: the GUI thread only. Readers on any thread use `layout` and the `Layout` methods.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Iterator, Sequence
from typing import Protocol

import numpy as np

from s2studio.audio import SAMPLE_RATE
from s2studio.audio.layout import (PEAK_BIN, Audio, Layout, LineAudio, Segment, Track, TrackSource, build, has_audio,
                                   new_lineage, track_of)
from s2studio.units import LINE_GAP_S

__all__ = ["PEAK_BIN", "Audio", "Layout", "Segment", "Timeline", "Track", "TrackSource"]

STREAM_CAPACITY_S = 8.0
"""A streaming line's first buffer; it doubles whenever a chunk does not fit."""
LAYOUT_SLICE = 256
"""Lines `lay_out` places per step."""


class AudioOf(Protocol):
    """Each line's audio, looked up as it is laid out (a mapping, or the project's picked takes)."""

    def get(self, line_id: str, /) -> LineAudio | None: ...

    def keys(self) -> Collection[str]:
        """The lines that may have audio (the others have none): `set_order` looks up these only."""
        ...


class Timeline:
    def __init__(self, gap_s: float = LINE_GAP_S, sample_rate: int = SAMPLE_RATE) -> None:
        self.sample_rate = sample_rate
        self.gap = self._samples(gap_s)
        self._order: list[str] = []
        self._position: dict[str, int] = {}
        self._tracks: dict[str, Track] = {}
        self._laying: Iterator[int] | None = None
        """The rest of a `lay_out` in progress."""
        self.layout = build([], self.gap, new_lineage())
        """The current snapshot; replaced whole, never changed (module docstring)."""

    def _samples(self, gap_s: float) -> int:
        if not gap_s >= 0:
            raise ValueError(f"gap must be >= 0 s, got {gap_s}")
        return round(gap_s * self.sample_rate)

    # ------------------------------------------------------------------ layout

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(self._order)

    def __contains__(self, line_id: object) -> bool:
        """Whether the line is on the timeline (a dict lookup: `order` copies a book's ids)."""
        return line_id in self._position

    def set_lines(self, order: Sequence[str], audio: AudioOf) -> None:
        """The lines in script order and each one's audio (missing or None: no audio), all at once."""
        for _ in self.lay_out(order, audio):
            pass

    def lay_out(self, order: Sequence[str], audio: AudioOf) -> Iterator[int]:
        """`set_lines` a slice of lines per step: the steps to run (each yields the lines looked at so far), the
        new layout (a new lineage) in place after the last. Until then the timeline is empty and holds the new
        order; any other change, and any question but `layout`, `order` and `in`, lays out the rest at once."""
        self._laying = None
        self._set_order(order)
        self._tracks = {}
        self.layout = build([], self.gap, new_lineage())
        self._laying = steps = self._lay_out(audio)
        return steps

    def finish_laying_out(self) -> None:
        """Lay out at once what `lay_out` has left, if anything."""
        steps = self._laying
        if steps is not None:
            for _ in steps:
                pass

    def _lay_out(self, audio: AudioOf) -> Iterator[int]:
        order, tracks, placed, index = self._order, self._tracks, [], {}
        for lo in range(0, len(order), LAYOUT_SLICE):
            for line_id in order[lo:lo + LAYOUT_SLICE]:
                data = audio.get(line_id)
                if has_audio(data):
                    index[line_id] = len(placed)
                    placed.append(track := track_of(line_id, data))
                    tracks[line_id] = track
            yield min(lo + LAYOUT_SLICE, len(order))
        if self._laying is not None and self._tracks is tracks:  # not started again meanwhile
            self._laying = None
            self.layout = build(placed, self.gap, new_lineage(), index)

    def set_order(self, order: Sequence[str], audio: AudioOf | None = None) -> None:
        """The script's lines changed (added, deleted, moved): audio of lines still there is kept, a line
        that comes (back) takes its audio from `audio`. A streaming line that is no longer last stops
        growing where it is."""
        self.finish_laying_out()
        self._set_order(order)
        self._tracks = {k: t for k, t in self._tracks.items() if k in self._position}
        if audio is not None:  # the lines that came (a pasted book's 10,000): found by set operations, in C
            for line_id in (self._position.keys() - self._tracks.keys()).intersection(audio.keys()):
                data = audio.get(line_id)
                if has_audio(data):
                    self._tracks[line_id] = track_of(line_id, data)
        placed = [k for k in self._order if k in self._tracks]
        for k in placed[:-1]:
            self._tracks[k].growing = False
        self._relayout()

    def set_gap(self, gap_s: float) -> None:
        self.gap = self._samples(gap_s)
        if self._laying is None:  # else the layout to come takes it
            self._relayout()

    def set_audio(self, line_id: str, audio: LineAudio | None) -> None:
        """Put one line's (new) take on the timeline, or take its audio off (None). Only the lines after
        it move; no audio is copied. The audio it holds already changes nothing (the layout stays the same
        object)."""
        self.finish_laying_out()
        if line_id not in self._position:
            raise ValueError(f"line {line_id!r} is not on this timeline")
        old = self._tracks.get(line_id)
        if not has_audio(audio):
            if old is not None:
                del self._tracks[line_id]
                self._relayout()
            return
        if old is not None and not old.partial and (old.data is audio or old.source is audio):
            return  # the same take again (its check or notes changed): nothing moves, nothing to draw again
        track = track_of(line_id, audio)
        self._tracks[line_id] = track
        layout = self.layout
        i = layout.index.get(line_id)
        if old is None or i is None:
            last = layout.tracks[-1] if layout.tracks else None
            if last is not None and last.growing and self._position[last.line_id] < self._position[line_id]:
                last.growing = False  # it may not grow under the line placed after it
            if i is None:
                self._place(track)
            else:
                self._relayout()
            return
        tracks = list(layout.tracks)
        tracks[i] = track
        starts = layout.starts.copy()
        starts[i + 1:] += track.length - old.length
        self.layout = Layout(tuple(tracks), starts, layout.index, layout.lineage)

    # ------------------------------------------------------------------ streaming

    def can_stream(self, line_id: str) -> bool:
        """True when no line after `line_id` has audio (and it has none itself), and no line before it streams (the
        earliest line of a render is the one heard first: a later one, rendered beside it, comes whole)."""
        self.finish_laying_out()
        pos = self._position.get(line_id)
        if pos is None or line_id in self._tracks:
            return False
        tracks = self.layout.tracks  # in script order: the last one placed is the last on the timeline
        return not tracks or (self._position[tracks[-1].line_id] < pos and not tracks[-1].growing)

    def begin_stream(self, line_id: str) -> bool:
        """Start growing `line_id` at the end; False (nothing changes) when it cannot (`can_stream`)."""
        self.finish_laying_out()
        if not self.can_stream(line_id):
            return False
        capacity = round(STREAM_CAPACITY_S * self.sample_rate)
        track = self._tracks[line_id] = Track(line_id, np.zeros(capacity, np.float32), 0, True)
        layout = self.layout  # appended after the last line: nothing moves, no relayout of a book's lines
        start = layout.end + self.gap if layout.tracks else 0
        self.layout = Layout(layout.tracks + (track,), np.append(layout.starts, np.int64(start)),
                             {**layout.index, line_id: len(layout.tracks)}, layout.lineage)
        return True

    def streaming(self, line_id: str) -> bool:
        self.finish_laying_out()
        track = self._tracks.get(line_id)
        return track is not None and track.growing

    def partial(self, line_id: str) -> bool:
        """The line holds the first part of a render in progress: streaming, or stopped where it was when a line
        after it landed (`end_stream` puts its take or nothing in its place)."""
        self.finish_laying_out()
        track = self._tracks.get(line_id)
        return track is not None and track.partial

    def append(self, line_id: str, start_sample: int, samples: Audio) -> int:
        """Add an `AudioChunk` (`start_sample`: its offset within the line) to the streaming line.
        Returns the timeline sample where the chunk landed."""
        self.finish_laying_out()
        track = self._tracks.get(line_id)
        if track is None or not track.growing:
            raise ValueError(f"line {line_id!r} is not streaming on this timeline")
        if start_sample != track.length:
            raise ValueError(f"chunk of {line_id!r} starts at {start_sample}, expected {track.length}")
        chunk = np.asarray(samples, dtype=np.float32).reshape(-1)
        need = track.length + len(chunk)
        if need > len(track.data):
            grown = np.zeros(max(need, 2 * len(track.data)), np.float32)
            grown[:track.length] = track.data[:track.length]
            grown[track.length:need] = chunk
            track.data = grown  # data first, then length (Track's contract)
        else:
            track.data[track.length:need] = chunk
        track.length = need
        i = self.layout.index[line_id]
        return int(self.layout.starts[i]) + start_sample

    def end_stream(self, line_id: str, audio: LineAudio | None) -> None:
        """The streamed line (`partial`) finished (its final audio replaces the chunks) or was cancelled (None)."""
        self.finish_laying_out()
        track = self._tracks.get(line_id)
        if track is None:
            return
        track.growing = False
        self.set_audio(line_id, audio)

    # ------------------------------------------------------------------ reads

    def wait_point(self, line_id: str) -> int | None:
        """Where playing the timeline must wait until `line_id` has its new audio (a render runs it, and lines
        after it, rendered side by side, may already be here): the start of its old take, the end of its audio
        streamed so far, or the end of the last line with audio before it. None when it streams (the timeline's end
        is where it waits then) or is not here."""
        self.finish_laying_out()
        pos = self._position.get(line_id)
        if pos is None or self.streaming(line_id):
            return None
        layout = self.layout
        i = layout.index.get(line_id)
        if i is not None:
            return int(layout.starts[i]) + (layout.tracks[i].length if layout.tracks[i].partial else 0)
        i = bisect_left(layout.tracks, pos, key=lambda t: self._position[t.line_id])  # the lines before it
        return int(layout.starts[i - 1]) + layout.tracks[i - 1].length if i else 0

    def segments(self) -> list[Segment]:
        self.finish_laying_out()
        return self.layout.segments()

    def line_audio(self, line_id: str) -> Audio:
        self.finish_laying_out()
        track = self._tracks.get(line_id)
        return track.audio() if track is not None else np.zeros(0, np.float32)

    def mix(self) -> Audio:
        self.finish_laying_out()
        return self.layout.mix()

    # ------------------------------------------------------------------ internals

    def _set_order(self, order: Sequence[str]) -> None:
        if len(set(order)) != len(order):
            raise ValueError("line ids of a timeline must be unique")
        self._order = list(order)
        self._position = dict(zip(self._order, range(len(self._order))))

    def _place(self, track: Track) -> None:
        """A line's first audio put in among the lines placed: those after it move, and only their entries of
        the index change (a render places lines in script order: few or none), not a relayout of a book."""
        layout, position = self.layout, self._position
        tracks = layout.tracks
        i = bisect_left(tracks, position[track.line_id], key=lambda t: position[t.line_id])
        start = int(layout.starts[i - 1]) + tracks[i - 1].length + self.gap if i else 0
        starts = np.insert(layout.starts, i, np.int64(start))
        starts[i + 1:] += track.length + self.gap
        index = dict(layout.index)
        index.update((t.line_id, j) for j, t in enumerate(tracks[i:], start=i + 1))
        index[track.line_id] = i
        self.layout = Layout(tracks[:i] + (track,) + tracks[i:], starts, index, layout.lineage)

    def _relayout(self) -> None:
        self.layout = build([self._tracks[k] for k in self._order if k in self._tracks], self.gap, self.layout.lineage)

