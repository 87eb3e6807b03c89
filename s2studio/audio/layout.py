"""What the timeline's readers see (`timeline.Timeline` writes it): each line's audio as a `Track`, and a `Layout`,
an immutable snapshot of the tracks in order and their start samples, replaced in one assignment, so the player's
audio callback reads one consistent layout per block without a lock and without allocating a buffer.

A track's audio is its own: a finished line's is its picked take's audio itself (never copied), given as an array
or as a `TrackSource` (a take in its file, decoded in blocks on demand, with stored peaks: `state/take_audio.py`);
the line streaming in while it renders grows a buffer of its own.

Layouts of one lineage share their tracks: one made from another (a take placed or swapped, lines moved, a line
streaming in) keeps every track that did not change, so a view follows it by comparing tracks; a layout laid out
afresh (`Timeline.set_lines`, a project opened) starts a new lineage and shares none, so a view starts over at
once instead of comparing a book's tracks one by one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import count
from typing import Protocol, Union

import numpy as np
import numpy.typing as npt

from s2studio.state.take_audio import PEAK_BIN, BlockKey, peaks_of

Audio = npt.NDArray[np.float32]

__all__ = ["PEAK_BIN", "Audio", "Layout", "LineAudio", "Segment", "Track", "TrackSource", "build", "new_lineage",
           "track_of"]

_EMPTY = np.zeros(0, np.float32)
_EMPTY.setflags(write=False)
"""No samples, shared: a track in its file holds no array, and a track's peaks start empty (replaced, never
written)."""

_lineages = count(1)


def new_lineage() -> int:
    """A lineage no layout has had yet."""
    return next(_lineages)


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
        self.data = data if data is not None else _EMPTY
        self.length = length
        self.growing = growing
        self.partial = growing
        """The first part of a render's audio (streamed in; still growing or stopped), not a finished take."""
        self.source = source
        self._peaks = _EMPTY
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
    lineage: int = 0
    """Shared with the layouts made from this one (module docstring)."""

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


def build(tracks: list[Track], gap: int, lineage: int, index: Mapping[str, int] | None = None) -> Layout:
    """The layout of `tracks` in order, `gap` samples apart (`index`: their positions, when made already)."""
    lengths = np.fromiter((t.length for t in tracks), np.int64, len(tracks))
    starts = np.zeros(len(tracks), np.int64)
    if len(tracks) > 1:
        np.cumsum(lengths[:-1] + gap, out=starts[1:])
    if index is None:
        index = {t.line_id: i for i, t in enumerate(tracks)}
    return Layout(tuple(tracks), starts, index, lineage)


def track_of(line_id: str, audio: LineAudio) -> Track:
    """A finished line's track: its audio held as it is (an array, or a source read on demand)."""
    if not isinstance(audio, np.ndarray) and hasattr(audio, "read_into"):
        return Track(line_id, None, audio.length, False, source=audio)
    data = np.asarray(audio, dtype=np.float32)
    if data.ndim != 1:
        data = data.reshape(-1)
    return Track(line_id, data, len(data), False)


def has_audio(audio: LineAudio | None) -> bool:
    return audio is not None and (audio.length if hasattr(audio, "length") else len(audio)) > 0
