"""The one timeline (design.md §6): every line's audio in script order, a gap between lines. The live
player reads it and export lays its files out with it, so what you hear is what you export.

Storage. A line's audio is its own: a finished line's is its picked take's audio itself (never copied),
given as an array or as a `TrackSource` (a take in its file, decoded in blocks on demand, with stored peaks:
`state/take_audio.py`); the line streaming in while it renders grows a buffer of its own. Lines without
audio take no room. What readers see is a `Layout`: an immutable snapshot of the tracks in order and their start
samples, replaced in one assignment, so the player's audio callback reads one consistent layout per
block without a lock and without allocating a buffer.

Costs, whatever the project's length: appending a chunk to the streaming line writes the chunk (the
buffer doubles when full, so O(chunk) amortised) and builds no new layout; swapping one line's take
moves the start of every line after it (one vectorised add) and copies no audio.

Only the last line with audio can stream (`begin_stream`), so a growing line never moves another: a line that
lands after it (scenes rendered side by side) stops it where it is, and the rest of its audio comes with its
take (`partial`: until then the timeline holds the first part of a render).
Re-rendering a line that has audio does not stream: its old take stays in place until the new one is
finished (`set_audio`), and every other line stays audible meanwhile.

Writers: the GUI thread only. Readers on any thread use `layout` and the `Layout` methods.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, Union

import numpy as np
import numpy.typing as npt

from s2studio.audio import SAMPLE_RATE
from s2studio.state.take_audio import PEAK_BIN, BlockKey, peaks_of
from s2studio.units import LINE_GAP_S

Audio = npt.NDArray[np.float32]

__all__ = ["PEAK_BIN", "Audio", "Layout", "Segment", "Timeline", "Track", "TrackSource"]

STREAM_CAPACITY_S = 8.0
"""A streaming line's first buffer; it doubles whenever a chunk does not fit."""


class TrackSource(Protocol):
    """A finished line's audio that need not be in memory (`state.take_audio.TakeSound`): `length` samples,
    read in pieces, with peaks of its own."""

    length: int

    def read_into(self, out: Audio, offset: int, wait: bool = True) -> bool: ...

    def read(self, offset: int, frames: int) -> Audio: ...

    def ready(self, offset: int, frames: int) -> bool: ...

    def prefetch(self, offset: int, frames: int) -> list[BlockKey]: ...

    def peaks(self) -> Audio: ...


LineAudio = Union[Audio, TrackSource]
"""What a line's audio may be given as: an array (held as it is) or a source."""


class Track:
    """One line's audio. Either `data[:length]` in memory, or a `source` (a take in its file). A streaming
    track grows in place: the writer fills `data[length:]` (or a larger copy, assigned to `data`) before it
    raises `length`, and a reader reads `length` before `data`, so it never sees samples that are not there
    yet."""

    __slots__ = ("line_id", "data", "length", "growing", "partial", "source", "_peaks", "_peaked")

    def __init__(self, line_id: str, data: Audio | None, length: int, growing: bool,
                 source: TrackSource | None = None) -> None:
        self.line_id = line_id
        self.data = data if data is not None else np.zeros(0, np.float32)
        self.length = length
        self.growing = growing
        self.partial = growing
        """The first part of a render's audio (streamed in; still growing or stopped), not a finished take."""
        self.source = source
        self._peaks = np.zeros(0, np.float32)
        self._peaked = 0
        """Samples `_peaks` covers; the last bin may be partial and is recomputed when the track grows."""

    def audio(self) -> Audio:
        return self.read(0, self.length)

    def read(self, offset: int, frames: int) -> Audio:
        """Samples `offset .. offset + frames` of this line (fewer at its end). Views read through this and
        `peaks`, never `data`, so a track's audio need not be one array in memory."""
        if self.source is not None:
            return self.source.read(offset, frames)
        n = self.length
        return self.data[max(0, offset):min(n, offset + frames)]

    def read_into(self, out: Audio, offset: int, wait: bool = True) -> bool:
        """Copy samples `offset ..` into `out` (nothing past the end); False when `wait` is off and some of
        them are not decoded yet (`TrackSource.read_into`)."""
        if self.source is not None:
            return self.source.read_into(out, offset, wait)
        n = self.length  # length before data (the contract above)
        data = self.data
        lo, hi = max(0, offset), min(n, offset + len(out))
        if hi > lo:
            out[lo - offset:hi - offset] = data[lo:hi]
        return True

    def ready(self, offset: int, frames: int) -> bool:
        return self.source is None or self.source.ready(offset, frames)

    def peaks(self) -> Audio:
        """Max |sample| per `PEAK_BIN` samples (the last bin may be partial), extended as the track grows;
        a source's own (stored with a take: drawing never decodes)."""
        if self.source is not None:
            return self.source.peaks()
        n = self.length
        if n > self._peaked:
            keep = self._peaked // PEAK_BIN
            self._peaks = np.concatenate([self._peaks[:keep], peaks_of(self.data[keep * PEAK_BIN:n])])
            self._peaked = n
        return self._peaks


@dataclass(frozen=True)
class Segment:
    """Where one line sits on the timeline, in samples."""

    line_id: str
    start: int
    length: int
    finished: bool
    """False while the line is streaming in."""

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass(frozen=True, eq=False)
class Layout:
    """The tracks in order and where each starts. Never changed after it is built (the last track's
    `length` may grow while it streams; nothing after it moves)."""

    tracks: tuple[Track, ...]
    starts: npt.NDArray[np.int64]
    index: Mapping[str, int]
    """line id -> position in `tracks`."""

    @property
    def end(self) -> int:
        """Samples from 0 to the end of the last line's audio."""
        if not self.tracks:
            return 0
        return int(self.starts[-1]) + self.tracks[-1].length

    @property
    def growing(self) -> bool:
        return bool(self.tracks) and self.tracks[-1].growing

    def bounds(self, line_id: str) -> tuple[int, int] | None:
        """(start, end) of the line's audio, None when it has none."""
        i = self.index.get(line_id)
        if i is None:
            return None
        start = int(self.starts[i])
        return start, start + self.tracks[i].length

    def line_at(self, sample: int) -> str | None:
        """The line heard at `sample`, or in the gap after it."""
        i = int(np.searchsorted(self.starts, sample, side="right")) - 1
        if i < 0 or sample >= self.end:
            return None
        return self.tracks[i].line_id

    def segments(self) -> list[Segment]:
        return [Segment(t.line_id, int(s), t.length, not t.growing) for t, s in zip(self.tracks, self.starts)]

    def _overlapping(self, start: int, frames: int) -> Iterable[tuple[Track, int]]:
        """The tracks with audio in `start .. start + frames`, each with its start sample."""
        end = start + frames
        i = max(int(np.searchsorted(self.starts, start, side="right")) - 1, 0)
        while i < len(self.tracks):
            at = int(self.starts[i])
            if at >= end:
                break
            track = self.tracks[i]
            if at + track.length > start:
                yield track, at
            i += 1

    def read_into(self, out: Audio, start: int, wait: bool = True) -> int:
        """Fill `out` with the timeline from `start` (zeros in gaps and past the end); returns how many of
        its samples lie before the end. Allocates no buffer. Without `wait` nothing is decoded (the audio
        callback: it checks `ready` first); with it, the audio of takes in their files is decoded as needed
        (export, in blocks: memory stays bounded by the take cache)."""
        frames = len(out)
        out[:] = 0.0
        last = start
        for track, at in self._overlapping(start, frames):
            lo = max(start, at)
            hi = min(start + frames, at + track.length)
            track.read_into(out[lo - start:hi - start], lo - at, wait)
            last = max(last, at + track.length)
        return max(0, min(frames, last - start))

    def ready(self, start: int, frames: int) -> bool:
        """True when `read_into(…, wait=False)` would find every sample of this range."""
        return all(track.ready(max(0, start - at), start + frames - max(start, at))
                   for track, at in self._overlapping(start, frames))

    def prefetch(self, start: int, frames: int) -> list[BlockKey]:
        """Decode what this range needs that is not decoded yet; returns the blocks it uses (to pin)."""
        keys: list[BlockKey] = []
        for track, at in self._overlapping(start, frames):
            if track.source is not None:
                lo = max(start, at)
                keys += track.source.prefetch(lo - at, start + frames - lo)
        return keys

    def read(self, start: int, frames: int) -> Audio:
        out = np.zeros(frames, np.float32)
        self.read_into(out, start)
        return out

    def mix(self) -> Audio:
        """The whole timeline as one array."""
        return self.read(0, self.end)


def _build(tracks: list[Track], gap: int) -> Layout:
    lengths = np.fromiter((t.length for t in tracks), np.int64, len(tracks))
    starts = np.zeros(len(tracks), np.int64)
    if len(tracks) > 1:
        np.cumsum(lengths[:-1] + gap, out=starts[1:])
    return Layout(tuple(tracks), starts, {t.line_id: i for i, t in enumerate(tracks)})


class Timeline:
    def __init__(self, gap_s: float = LINE_GAP_S, sample_rate: int = SAMPLE_RATE) -> None:
        self.sample_rate = sample_rate
        self.gap = self._samples(gap_s)
        self._order: list[str] = []
        self._position: dict[str, int] = {}
        self._tracks: dict[str, Track] = {}
        self.layout = _build([], self.gap)
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

    def set_lines(self, order: Sequence[str], audio: Mapping[str, LineAudio | None]) -> None:
        """The lines in script order and each one's audio (missing or None: no audio), all at once."""
        self._set_order(order)
        self._tracks = {}
        for line_id in self._order:
            data = audio.get(line_id)
            if _has_audio(data):
                self._tracks[line_id] = _final(line_id, data)
        self._relayout()

    def set_order(self, order: Sequence[str], audio: Mapping[str, LineAudio | None] | None = None) -> None:
        """The script's lines changed (added, deleted, moved): audio of lines still there is kept, a line
        that comes (back) takes its audio from `audio`. A streaming line that is no longer last stops
        growing where it is."""
        self._set_order(order)
        self._tracks = {k: t for k, t in self._tracks.items() if k in self._position}
        for line_id in self._order:
            data = audio.get(line_id) if audio is not None and line_id not in self._tracks else None
            if _has_audio(data):
                self._tracks[line_id] = _final(line_id, data)
        placed = [k for k in self._order if k in self._tracks]
        for k in placed[:-1]:
            self._tracks[k].growing = False
        self._relayout()

    def set_gap(self, gap_s: float) -> None:
        self.gap = self._samples(gap_s)
        self._relayout()

    def set_audio(self, line_id: str, audio: LineAudio | None) -> None:
        """Put one line's (new) take on the timeline, or take its audio off (None). Only the lines after
        it move; no audio is copied."""
        if line_id not in self._position:
            raise ValueError(f"line {line_id!r} is not on this timeline")
        old = self._tracks.get(line_id)
        if not _has_audio(audio):
            if old is not None:
                del self._tracks[line_id]
                self._relayout()
            return
        track = _final(line_id, audio)
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
        self.layout = Layout(tuple(tracks), starts, layout.index)

    # ------------------------------------------------------------------ streaming

    def can_stream(self, line_id: str) -> bool:
        """True when no line after `line_id` has audio (and it has none itself), and no line before it streams (the
        earliest line of a render is the one heard first: a later one, rendered beside it, comes whole)."""
        pos = self._position.get(line_id)
        if pos is None or line_id in self._tracks:
            return False
        tracks = self.layout.tracks  # in script order: the last one placed is the last on the timeline
        return not tracks or (self._position[tracks[-1].line_id] < pos and not tracks[-1].growing)

    def begin_stream(self, line_id: str) -> bool:
        """Start growing `line_id` at the end; False (nothing changes) when it cannot (`can_stream`)."""
        if not self.can_stream(line_id):
            return False
        capacity = round(STREAM_CAPACITY_S * self.sample_rate)
        track = self._tracks[line_id] = Track(line_id, np.zeros(capacity, np.float32), 0, True)
        layout = self.layout  # appended after the last line: nothing moves, no relayout of a book's lines
        start = layout.end + self.gap if layout.tracks else 0
        self.layout = Layout(layout.tracks + (track,), np.append(layout.starts, np.int64(start)),
                             {**layout.index, line_id: len(layout.tracks)})
        return True

    def streaming(self, line_id: str) -> bool:
        track = self._tracks.get(line_id)
        return track is not None and track.growing

    def partial(self, line_id: str) -> bool:
        """The line holds the first part of a render in progress: streaming, or stopped where it was when a line
        after it landed (`end_stream` puts its take or nothing in its place)."""
        track = self._tracks.get(line_id)
        return track is not None and track.partial

    def append(self, line_id: str, start_sample: int, samples: Audio) -> int:
        """Add an `AudioChunk` (`start_sample`: its offset within the line) to the streaming line.
        Returns the timeline sample where the chunk landed."""
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
        return self.layout.segments()

    def line_audio(self, line_id: str) -> Audio:
        track = self._tracks.get(line_id)
        return track.audio() if track is not None else np.zeros(0, np.float32)

    def mix(self) -> Audio:
        return self.layout.mix()

    # ------------------------------------------------------------------ internals

    def _set_order(self, order: Sequence[str]) -> None:
        if len(set(order)) != len(order):
            raise ValueError("line ids of a timeline must be unique")
        self._order = list(order)
        self._position = {k: i for i, k in enumerate(self._order)}

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
        self.layout = Layout(tracks[:i] + (track,) + tracks[i:], starts, index)

    def _relayout(self) -> None:
        self.layout = _build([self._tracks[k] for k in self._order if k in self._tracks], self.gap)


def _final(line_id: str, audio: LineAudio) -> Track:
    if not isinstance(audio, np.ndarray) and hasattr(audio, "read_into"):
        return Track(line_id, None, audio.length, False, source=audio)
    data = np.asarray(audio, dtype=np.float32)
    if data.ndim != 1:
        data = data.reshape(-1)
    return Track(line_id, data, len(data), False)


def _has_audio(audio: LineAudio | None) -> bool:
    return audio is not None and (audio.length if hasattr(audio, "length") else len(audio)) > 0
