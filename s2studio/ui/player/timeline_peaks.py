"""The waveform's overview of the whole timeline: peaks at several resolutions for every line, packed one
after another, so that a view of any zoom finds the peak of each pixel column in one vectorised pass, with
no loop over the lines (a book has 10,000 of them).

Each finished line's audio is summarised at `LEVELS` resolutions from its `Track.peaks()` (the timeline's
peaks every `PEAK_BIN` samples; the waveform never reads a track's samples for the overview). Level k packs
every line's level-k values in timeline order; a pixel column covering samples [a, b) maps, through the
lines' start samples, to one run of packed values (lines in between included, the gaps between lines
holding no values), and `np.maximum.reduceat` takes each run's maximum.

Lines come and go by diffing layouts: a finished take appends or swaps one line's values (the others are
copied once, in C, never recomputed), a relayout that moved lines recomputes nothing. The line streaming in
(the last one, while it grows) is left out: the view draws it from its track directly.

Packing many lines at once (a project just opened: a layout of a new lineage, `audio/layout.py`) is the worker
thread's: it summarises the lines and packs them, in order, and hands over packs of the first lines, larger and
larger, each taken in by the next `sync` in one assignment; lines not packed yet count as silent until then
(`pending`). The window's thread never looks at a book's lines one by one. When the layout changes meanwhile
(a take lands), what was handed over stays and the lines after it are taken in as any change is.

A change of the same lineage summarises its new lines on the window's thread when they are few (`INLINE`), else
on the worker; those count as silent until their summaries arrive, then are packed where they are.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from s2studio import priority
from s2studio.audio.timeline import PEAK_BIN, Layout, Track
from s2studio.ui.player.track_runs import changed_runs, with_places

FACTOR = 8
LEVELS = 4
"""Resolutions: PEAK_BIN × 8, × 64, × 512, × 4096 samples per value (46 ms … 24 s at 44.1 kHz)."""
BINS = tuple(PEAK_BIN * FACTOR ** (k + 1) for k in range(LEVELS))
INLINE = 32
"""Lines summarised on the GUI thread at once; more go to the worker."""
HANDOVER_S = 0.1
"""The worker hands over a pack of the lines packed so far at most this often (and when it is done)."""

Peaks = npt.NDArray[np.float32]


def summarise(peaks: Peaks) -> tuple[Peaks, ...]:
    """A line's `LEVELS` coarser summaries of its `Track.peaks()` (each value the max of FACTOR below it)."""
    out = []
    level = np.asarray(peaks, np.float32)
    for _ in range(LEVELS):
        pad = (-len(level)) % FACTOR
        if pad:
            level = np.concatenate([level, np.zeros(pad, np.float32)])
        level = level.reshape(-1, FACTOR).max(axis=1) if len(level) else level
        out.append(level)
    return tuple(out)


@dataclass
class _Pack:
    tracks: tuple[Track, ...]
    """The finished tracks packed, in timeline order (the layout's, less a growing last one)."""
    values: list[Peaks]
    """Per level: every track's values, one after another."""
    offsets: list[npt.NDArray[np.int64]]
    """Per level: where each track's values begin (one more entry: the end)."""

    def head(self, n: int) -> _Pack:
        """The pack of the first `n` tracks (views of this one's arrays)."""
        return _Pack(self.tracks[:n], [v[:o[n]] for v, o in zip(self.values, self.offsets, strict=True)],
                     [o[:n + 1] for o in self.offsets])


def _empty_pack() -> _Pack:
    return _Pack((), [np.zeros(0, np.float32) for _ in BINS], [np.zeros(1, np.int64) for _ in BINS])


@dataclass(eq=False)
class _Job:
    """The worker's: pack `tracks`, going on from `built` (a pack of the first of them)."""

    tracks: tuple[Track, ...]
    built: _Pack
    """The latest pack handed over (replaced whole by the worker)."""
    cancelled: bool = False


class TimelinePeaks:
    """Packed per-level peaks of a layout's finished tracks (module docstring). GUI thread, apart from the
    worker that summarises tracks, which only fills `_levels`."""

    def __init__(self, on_ready: Callable[[], None] | None = None) -> None:
        self._levels: dict[Track, tuple[Peaks, ...]] = {}
        self._lock = threading.Lock()
        self._wanted: list[Track] = []
        self._queued: _Job | None = None
        """The job the worker takes next (before `_wanted`)."""
        self._job: _Job | None = None
        """The job packing the layout last synced, until its last pack is taken in."""
        self._worker: threading.Thread | None = None
        self._on_ready = on_ready
        """Called (from the worker thread) when lines it summarised or packed can be drawn: re-sync then."""
        self._pack = _empty_pack()
        self._index: Mapping[str, int] = {}
        """line id -> position in the layout the pack was made from."""
        self._lineage = -1
        """The lineage of that layout."""
        self._missing: set[Track] = set()
        """Packed tracks whose values were not ready when packed (silent until the next sync)."""
        self.packed_changes = 0
        """Tracks (re)packed, counted: what a layout change cost."""

    @property
    def pending(self) -> int:
        """Lines of the layout last synced still silent, waiting for the worker."""
        job = self._job
        return len(self._missing) + (len(job.tracks) - len(self._pack.tracks) if job is not None else 0)

    def wait(self) -> None:
        """Block until the worker has summarised or packed every line asked for (tests, benchmarks)."""
        worker = self._worker
        if worker is not None:
            worker.join()

    def sync(self, layout: Layout) -> tuple[int, int] | None:
        """Follow `layout`; returns the range of track indices [i, j) of the new layout whose values changed
        (None when nothing did)."""
        tracks = layout.tracks[:-1] if layout.growing else layout.tracks
        job = self._job
        if job is not None and tracks == job.tracks:
            return self._take_built(job, tracks)
        if job is not None:  # the layout moved on while the worker packed it: what it handed over is kept
            job.cancelled = True
            self._job = None
            if job.built is not self._pack and layout.lineage == self._lineage:
                self.packed_changes += len(job.built.tracks) - len(self._pack.tracks)
                self._pack = job.built  # (the rest is a tail to pack: the worker goes on with it below)
        fresh = layout.lineage != self._lineage
        self._lineage = layout.lineage
        if fresh and len(tracks) > INLINE:  # laid out afresh (a project opened): the worker packs it all
            self._missing.clear()
            self._pack, self._index = _empty_pack(), layout.index
            self._start(_Job(tracks, self._pack))
            return 0, len(tracks)
        old = self._pack.tracks
        if tracks == old and not self._ready_missing():
            self._index = layout.index
            return None
        if fresh:  # nothing in common to look for
            runs = [(0, len(old), 0, len(tracks))]
        else:  # only what changed: a render of several scenes at once places lines far apart
            runs = changed_runs(old, tracks, self._index)
        if self._missing:  # and the tracks whose summaries arrived since, where they are
            ready = sorted(i for t in self._missing if t in self._levels
                           and (i := self._index.get(t.line_id, -1)) >= 0 and i < len(old) and old[i] is t)
            runs = with_places(runs, ready)
        tail = _long_tail(runs, len(old), len(tracks))
        if tail:  # lines added after the packed ones (or not packed yet): the worker packs them, in order
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2], runs[-1][2])
        for _i, _j, a, b in runs:
            self._ask(tracks[a:b])
        self._repack(runs, tracks)
        self._index = layout.index
        self.packed_changes += sum(b - a for _i, _j, a, b in runs)
        if tail:
            self._pack.tracks = tracks[:runs[-1][2]]
            self._start(_Job(tracks, self._pack))
            return runs[0][2], len(tracks)
        self._pack.tracks = tracks
        return (runs[0][2], runs[-1][3]) if runs else None

    def columns(self, layout: Layout, edges: npt.NDArray[np.float64], spp: float) -> tuple[Peaks, npt.NDArray[np.int64]]:
        """Per pixel column between consecutive `edges` (timeline samples): its peak (0..1) over the packed
        tracks, and the index of the layout's track at the column's middle (-1 before the first)."""
        k = max(i for i, b in enumerate(BINS) if b <= spp) if spp >= BINS[0] else 0
        binsize = BINS[k]
        values = np.append(self._pack.values[k], np.float32(0))
        offsets = self._pack.offsets[k]
        n = len(self._pack.tracks)
        middle = (edges[:-1] + edges[1:]) / 2
        at = np.searchsorted(layout.starts, middle, side="right") - 1
        if n == 0:  # nothing packed yet: silence
            return np.zeros(len(middle), np.float32), at
        starts = layout.starts[:n]
        e = edges.astype(np.int64)
        t = np.searchsorted(starts, e, side="right") - 1
        tc = np.maximum(t, 0)
        count = offsets[tc + 1] - offsets[tc]
        local = e - starts[tc]
        floor = np.where(t >= 0, offsets[tc] + np.clip(local // binsize, 0, count), 0)
        ceil = np.where(t >= 0, offsets[tc] + np.clip(-(-local // binsize), 0, count), 0)
        lo, hi = floor[:-1], ceil[1:]
        empty = hi <= lo
        last = len(values) - 1
        lo_i = np.minimum(lo, last)
        hi_i = np.minimum(np.maximum(hi, lo_i + 1), last)
        pairs = np.empty(2 * len(lo_i), np.int64)
        pairs[0::2], pairs[1::2] = lo_i, hi_i
        out = np.maximum.reduceat(values, pairs)[0::2] if len(pairs) else np.zeros(0, np.float32)
        out[empty] = 0.0
        return np.minimum(out, 1.0), at

    # -- internals -------------------------------------------------------------------------------

    def _ready_missing(self) -> bool:
        return any(t in self._levels for t in self._missing)

    def _ask(self, tracks: Sequence[Track]) -> None:
        """Summarise `tracks` now when they are few, else on the worker."""
        todo = [t for t in tracks if t not in self._levels]
        if len(todo) <= INLINE:
            for track in todo:
                self._levels[track] = summarise(track.peaks())
            return
        with self._lock:
            self._wanted.extend(todo)
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="waveform-peaks", daemon=True)
                self._worker.start()

    def _work(self) -> None:
        priority.background()
        done = 0
        while True:
            with self._lock:
                job, self._queued = self._queued, None
                if job is None and not self._wanted:
                    self._worker = None
                    break
                track = self._wanted.pop(0) if job is None else None
            if job is not None:
                self._pack_job(job)
                continue
            if track not in self._levels:
                self._levels[track] = summarise(track.peaks())
            done += 1
            if done % 500 == 0 and self._on_ready is not None:
                self._on_ready()
        if self._on_ready is not None:
            self._on_ready()

    def _summary(self, track: Track) -> tuple[Peaks, ...]:
        levels = self._levels.get(track)
        if levels is None:
            levels = self._levels[track] = summarise(track.peaks())
        return levels

    def _take_built(self, job: _Job, tracks: tuple[Track, ...]) -> tuple[int, int] | None:
        """The worker's latest pack, if it has handed over another."""
        built = job.built
        if built is self._pack:
            return None
        was = len(self._pack.tracks)
        self._pack = built
        self.packed_changes += len(built.tracks) - was
        if len(built.tracks) == len(tracks):
            self._job = None
            self._forget_gone(tracks)
        return was, len(built.tracks)

    def _forget_gone(self, tracks: tuple[Track, ...]) -> None:
        """Drop the summaries of lines no longer on the timeline, once they are as many as those that are."""
        if len(self._levels) > 2 * len(tracks) + 64 and (self._worker is None or not self._worker.is_alive()):
            live = set(tracks)
            self._levels = {t: v for t, v in self._levels.items() if t in live}

    def _start(self, job: _Job) -> None:
        self._job = job
        with self._lock:
            if self._queued is not None:
                self._queued.cancelled = True
            self._queued = job
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="waveform-peaks", daemon=True)
                self._worker.start()

    def _pack_job(self, job: _Job) -> None:
        """Summarise and pack `job.tracks` after those of `job.built`, handing over a pack of the lines packed so
        far now and then: at most every `HANDOVER_S`, and once the lines packed grew by a quarter (each handover
        copies them all)."""
        values, offsets = list(job.built.values), list(job.built.offsets)
        more: list[list[Peaks]] = [[] for _ in BINS]
        ends: list[list[int]] = [[] for _ in BINS]
        end = [int(o[-1]) for o in offsets]
        handed, at = time.monotonic(), len(job.built.tracks)
        for i in range(at, len(job.tracks)):
            if job.cancelled:
                return
            for k, level in enumerate(self._summary(job.tracks[i])):
                more[k].append(level)
                end[k] += len(level)
                ends[k].append(end[k])
            last = i + 1 == len(job.tracks)
            if last or (time.monotonic() - handed >= HANDOVER_S and i + 1 >= at * 1.25):
                values = [np.concatenate([v, *m]) for v, m in zip(values, more, strict=True)]
                offsets = [np.concatenate([o, np.array(e, np.int64)]) for o, e in zip(offsets, ends, strict=True)]
                more, ends = [[] for _ in BINS], [[] for _ in BINS]
                job.built = _Pack(job.tracks[:i + 1], values, offsets)
                handed, at = time.monotonic(), i + 1
                if self._on_ready is not None:
                    self._on_ready()

    def _repack(self, runs: Sequence[tuple[int, int, int, int]], tracks: Sequence[Track]) -> None:
        """For each run (i, j, a, b): old packed tracks [i, j) replaced by `tracks[a:b]`."""
        pack = self._pack
        got = []
        for i, j, a, b in runs:
            self._missing.difference_update(pack.tracks[i:j])
            got.append([self._levels.get(t) for t in tracks[a:b]])
            self._missing.update(t for t, g in zip(tracks[a:b], got[-1], strict=True) if g is None)
        pack = self._pack = _Pack(pack.tracks, list(pack.values), list(pack.offsets))  # the worker may read the last
        none_yet = all(g is None for levels in got for g in levels)  # a project just opened: all on the worker
        for k in range(LEVELS):
            offsets, values = pack.offsets[k], pack.values[k]
            new_values: list[npt.NDArray[np.float32]] = []
            new_offsets: list[npt.NDArray[np.int64]] = []
            kept, shift = 0, 0  # old tracks [kept, i) stay, their offsets moved by `shift`
            for (i, j, _a, _b), levels in zip(runs, got, strict=True):
                parts = [] if none_yet else [_NONE_YET if g is None else g[k] for g in levels]
                new_values += [values[offsets[kept]:offsets[i]], *parts]
                lengths = np.zeros(len(levels), np.int64) if none_yet else np.array([len(v) for v in parts], np.int64)
                start = int(offsets[i]) + shift
                new_offsets += [offsets[kept:i] + shift, start + np.concatenate([[0], np.cumsum(lengths)])[:-1]
                                .astype(np.int64)]
                shift += int(lengths.sum()) - int(offsets[j] - offsets[i])
                kept = j
            new_values.append(values[offsets[kept]:])
            new_offsets.append(offsets[kept:] + shift)
            pack.values[k] = np.concatenate(new_values)
            pack.offsets[k] = np.concatenate(new_offsets).astype(np.int64, copy=False)
        if len(self._levels) > 2 * len(tracks) + 64 and self._worker is None:  # forget lines gone
            live = set(tracks)
            self._levels = {t: v for t, v in self._levels.items() if t in live}


def _long_tail(runs: Sequence[tuple[int, int, int, int]], old: int, new: int) -> bool:
    """Whether the last run reaches the end of both the `old` and the `new` tracks and brings more than `INLINE`
    tracks: what a project opened and changed while the worker packed it leaves, or lines added at the end."""
    return bool(runs) and runs[-1][1] == old and runs[-1][3] == new and runs[-1][3] - runs[-1][2] > INLINE


_NONE_YET = np.zeros(0, np.float32)
"""A track whose peaks are not read yet (one array for all: a book's 10,000 tracks repacked at once)."""
