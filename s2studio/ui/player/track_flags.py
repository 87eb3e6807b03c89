"""A flag per line on the timeline (stale, being rendered), kept in step with the layout and with the lines
that changed, so the waveform finds the flagged lines on screen in one vectorised pass instead of asking
about each of a book's 10,000 lines at every repaint."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import numpy.typing as npt

from s2studio.audio.timeline import Layout, Track
from s2studio.ui.player.timeline_peaks import changed_runs



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
        """Follow the layout: only tracks that were not on it before are asked about (`changed_runs`: a render
        of several scenes at once places lines far apart, and the tracks between them keep their flags)."""
        tracks = layout.tracks
        if tracks == self._tracks:
            return
        pieces, kept = [], 0
        for i, j, a, b in changed_runs(self._tracks, tracks, self._index):
            pieces += [self.flags[kept:i], self._ask(t.line_id for t in tracks[a:b])]
            kept = j
        pieces.append(self.flags[kept:])
        self.flags = np.concatenate(pieces)
        self._tracks, self._index = tracks, layout.index

    def update(self, layout: Layout, line_ids: Iterable[str] | None) -> None:
        """These lines' flags may have changed (None: any line's)."""
        self.sync(layout)
        if line_ids is None:
            self.flags = self._ask(t.line_id for t in layout.tracks)
            return
        line_ids = list(line_ids)  # a render's start: all of a book's lines, looked up in C
        places = np.fromiter(map(layout.index.get, line_ids, itertools.repeat(-1)), np.int64, len(line_ids))
        found = places >= 0
        self.flags[places[found]] = self._ask(itertools.compress(line_ids, found))

    def _ask(self, line_ids: Iterable[str]) -> npt.NDArray[np.bool_]:
        out = np.fromiter((self.flagged(i) for i in line_ids), bool)
        self.asked += len(out)
        return out
