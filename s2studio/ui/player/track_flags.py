"""A flag per line on the timeline (stale, being rendered), kept in step with the layout and with the lines
that changed, so the waveform finds the flagged lines on screen in one vectorised pass instead of asking
about each of a book's 10,000 lines at every repaint."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np
import numpy.typing as npt

from s2studio.audio.timeline import Layout, Track


BLOCK = 128
"""Tracks compared at a time while walking two layouts."""


class TrackFlags:
    def __init__(self, flagged: Callable[[str], bool]) -> None:
        self.flagged = flagged
        """Whether a line (its id) is flagged: asked for lines that come onto the timeline or change."""
        self._tracks: tuple[Track, ...] = ()
        self._index: Mapping[str, int] = {}
        """line id -> position in `_tracks`."""
        self.flags: npt.NDArray[np.bool_] = np.zeros(0, bool)
        """One per track of the layout last synced, in its order."""
        self.asked = 0
        """Lines asked about, counted (what keeping up cost)."""

    def sync(self, layout: Layout) -> None:
        """Follow the layout: only tracks that were not on it before are asked about. The layouts are walked
        side by side a block at a time (tuples of tracks compare in C): a render of several scenes at once
        places lines far apart, and the tracks between them keep their flags without a look at each."""
        tracks = layout.tracks
        if tracks == self._tracks:
            return
        self.flags = self._follow(self._tracks, tracks)
        self._tracks, self._index = tracks, layout.index

    def _follow(self, old: tuple[Track, ...], new: tuple[Track, ...]) -> npt.NDArray[np.bool_]:
        pieces: list[npt.NDArray[np.bool_]] = []
        i = j = 0
        while j < len(new):
            if i + BLOCK <= len(old) and j + BLOCK <= len(new) and old[i:i + BLOCK] == new[j:j + BLOCK]:
                pieces.append(self.flags[i:i + BLOCK])
                i, j = i + BLOCK, j + BLOCK
                continue
            kept = i
            while i < len(old) and j < len(new) and i - kept < BLOCK and old[i] is new[j]:
                i, j = i + 1, j + 1
            if i > kept:
                pieces.append(self.flags[kept:i])
                continue
            track = new[j]
            was = self._index.get(track.line_id, -1)
            if was >= i and old[was] is track:  # the tracks before it left the layout
                i = was
                continue
            pieces.append(self._ask([track.line_id]))  # new on the layout (or its audio replaced)
            j += 1
            if i < len(old) and old[i].line_id == track.line_id:
                i += 1
        return np.concatenate(pieces) if pieces else np.zeros(0, bool)

    def update(self, layout: Layout, line_ids: Iterable[str] | None) -> None:
        """These lines' flags may have changed (None: any line's)."""
        self.sync(layout)
        if line_ids is None:
            self.flags = self._ask(t.line_id for t in layout.tracks)
            return
        for line_id in line_ids:
            i = layout.index.get(line_id)
            if i is not None:
                self.asked += 1
                self.flags[i] = self.flagged(line_id)

    def _ask(self, line_ids: Iterable[str]) -> npt.NDArray[np.bool_]:
        out = np.fromiter((self.flagged(i) for i in line_ids), bool)
        self.asked += len(out)
        return out
