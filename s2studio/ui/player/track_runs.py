"""Where two sequences of a timeline's tracks differ, found without comparing a book's tracks one by one where
they agree (tuples of tracks compare in C): what the waveform's peaks and flags repack or ask again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from s2studio.audio.timeline import Track

__all__ = ["changed_runs", "common_ends", "with_places"]


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
