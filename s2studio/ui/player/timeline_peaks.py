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

Summarising many lines at once (a project just opened) runs on a worker thread; lines not summarised yet
count as silent until it is done (`pending`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from s2studio.audio.timeline import PEAK_BIN, Layout, Track

FACTOR = 8
LEVELS = 4
"""Resolutions: PEAK_BIN × 8, × 64, × 512, × 4096 samples per value (46 ms … 24 s at 44.1 kHz)."""
BINS = tuple(PEAK_BIN * FACTOR ** (k + 1) for k in range(LEVELS))
INLINE = 32
"""Lines summarised on the GUI thread at once; more go to the worker."""

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


class TimelinePeaks:
    """Packed per-level peaks of a layout's finished tracks (module docstring). GUI thread, apart from the
    worker that summarises tracks, which only fills `_levels`."""

    def __init__(self, on_ready: Callable[[], None] | None = None) -> None:
        self._levels: dict[Track, tuple[Peaks, ...]] = {}
        self._lock = threading.Lock()
        self._wanted: list[Track] = []
        self._worker: threading.Thread | None = None
        self._on_ready = on_ready
        """Called (from the worker thread) when lines it summarised can be drawn: re-sync then."""
        self._pack = _Pack((), [np.zeros(0, np.float32) for _ in BINS], [np.zeros(1, np.int64) for _ in BINS])
        self._index: Mapping[str, int] = {}
        """line id -> position in the layout the pack was made from."""
        self._missing: set[Track] = set()
        """Packed tracks whose values were not ready when packed (silent until the next sync)."""
        self.packed_changes = 0
        """Tracks (re)packed, counted: what a layout change cost."""

    @property
    def pending(self) -> int:
        """Packed lines still silent, waiting for the worker."""
        return len(self._missing)

    def wait(self) -> None:
        """Block until the worker has summarised every line asked for (tests, benchmarks)."""
        worker = self._worker
        if worker is not None:
            worker.join()

    def sync(self, layout: Layout) -> tuple[int, int] | None:
        """Follow `layout`; returns the range of track indices [i, j) of the new layout whose values changed
        (None when nothing did)."""
        tracks = layout.tracks[:-1] if layout.growing else layout.tracks
        old = self._pack.tracks
        if tracks == old and not self._ready_missing():
            return None
        # only what changed: a render of several scenes at once places lines far apart
        runs = changed_runs(old, tracks, self._index)
        if self._missing:  # and the tracks whose summaries arrived since, where they are
            ready = sorted(i for t in self._missing if t in self._levels
                           and (i := self._index.get(t.line_id, -1)) >= 0 and i < len(old) and old[i] is t)
            runs = with_places(runs, ready)
        for _i, _j, a, b in runs:
            self._ask(tracks[a:b])
        self._repack(runs, tracks)
        self._pack.tracks, self._index = tracks, layout.index
        self.packed_changes += sum(b - a for _i, _j, a, b in runs)
        return (runs[0][2], runs[-1][3]) if runs else None

    def columns(self, layout: Layout, edges: npt.NDArray[np.float64], spp: float) -> tuple[Peaks, npt.NDArray[np.int64]]:
        """Per pixel column between consecutive `edges` (timeline samples): its peak (0..1) over the packed
        tracks, and the index of the layout's track at the column's middle (-1 before the first)."""
        k = max(i for i, b in enumerate(BINS) if b <= spp) if spp >= BINS[0] else 0
        binsize = BINS[k]
        values = np.append(self._pack.values[k], np.float32(0))
        offsets = self._pack.offsets[k]
        n = len(self._pack.tracks)
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
        middle = (edges[:-1] + edges[1:]) / 2
        at = np.searchsorted(layout.starts, middle, side="right") - 1
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
        done = 0
        while True:
            with self._lock:
                if not self._wanted:
                    self._worker = None
                    break
                track = self._wanted.pop(0)
            if track not in self._levels:
                self._levels[track] = summarise(track.peaks())
            done += 1
            if done % 500 == 0 and self._on_ready is not None:
                self._on_ready()
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


_NONE_YET = np.zeros(0, np.float32)
"""A track whose peaks are not read yet (one array for all: a book's 10,000 tracks repacked at once)."""


def changed_runs(old: Sequence[Track], new: Sequence[Track], old_index: Mapping[str, int]
                 ) -> list[tuple[int, int, int, int]]:
    """Where the tracks `new` differ from `old` (`old_index`: line id -> position in `old`, or in a longer
    sequence `old` begins): runs (i, j, a, b), in order, each `old[i:j]` replaced by `new[a:b]`; between runs the
    same tracks. Identical stretches are compared a block at a time (tuples of tracks compare in C), the block
    doubling while they match, so a change far from another costs a few comparisons, not one per track."""
    p, s = common_ends(old, new)
    end_old, end_new = len(old) - s, len(new) - s
    runs: list[tuple[int, int, int, int]] = []
    i = a = p
    while i < end_old or a < end_new:
        step = 64
        while i < end_old and a < end_new:  # the identical stretch
            k = min(step, end_old - i, end_new - a)
            if old[i:i + k] == new[a:a + k]:
                i, a, step = i + k, a + k, 2 * step
            elif k == 1:
                break
            else:
                step = max(1, k // 2)
        if i >= end_old and a >= end_new:
            break
        ri, ra = i, a
        while i < end_old or a < end_new:  # the run that differs, up to where they agree again
            if i < end_old and a < end_new and old[i] is new[a]:
                break
            if a >= end_new:  # the rest of the old stretch left
                i = end_old
                break
            track = new[a]
            was = old_index.get(track.line_id, -1)
            if i <= was < end_old and old[was] is track:  # the old tracks before it left
                i = was
                continue
            a += 1  # new (or its audio replaced: its old track goes too)
            if i < end_old and old[i].line_id == track.line_id:
                i += 1
        runs.append((ri, i, ra, a))
    return runs


def with_places(runs: Sequence[tuple[int, int, int, int]], places: Sequence[int], gap: int = 32
                ) -> list[tuple[int, int, int, int]]:
    """`runs` (`changed_runs`) and a run of one track for each of `places` (positions in the old tracks, in
    order, of tracks that stay but whose values changed) that no run covers, runs less than `gap` tracks apart
    made one (the same tracks between them are repacked as they are: fewer runs, each a few array operations)."""
    extra, r, shift = [], 0, 0
    for i in places:
        while r < len(runs) and runs[r][1] <= i:  # the runs before it: it moved by what they added
            ri, rj, ra, rb = runs[r]
            shift += (rb - ra) - (rj - ri)
            r += 1
        if r < len(runs) and runs[r][0] <= i:
            continue  # inside a run: repacked with it
        extra.append((i, i + 1, i + shift, i + shift + 1))
    merged: list[tuple[int, int, int, int]] = []
    for run in sorted([*runs, *extra]):
        if merged and run[0] - merged[-1][1] < gap:
            i, _j, a, _b = merged[-1]
            merged[-1] = (i, run[1], a, run[3])
        else:
            merged.append(run)
    return merged


def common_ends(old: Sequence[object], new: Sequence[object], block: int = 256) -> tuple[int, int]:
    """Items identical at the start (p) and, not overlapping those, at the end (s): compared a block at a
    time (tuples of tracks compare in C), then one by one."""
    n = min(len(old), len(new))
    p = 0
    while p + block <= n and old[p:p + block] == new[p:p + block]:
        p += block
    while p < n and old[p] is new[p]:
        p += 1
    s, a, b = 0, len(old), len(new)
    while s + block <= n - p and old[a - s - block:a - s] == new[b - s - block:b - s]:
        s += block
    while s < n - p and old[a - 1 - s] is new[b - 1 - s]:
        s += 1
    return p, s
