"""A flag per line on the timeline (stale, being rendered), kept in step with the layout and with the lines
that changed, so the waveform finds the flagged lines on screen in one vectorised pass instead of asking
about each of a book's 10,000 lines at every repaint. Lines said to have changed are asked about when the flags
are next read (`sync`), not when they are said: a render ends lines many times a second, and the waveform reads
the flags a few times a second."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping

import numpy as np
import numpy.typing as npt

from s2studio.audio.timeline import Layout, Track
from s2studio.ui.player.track_runs import changed_runs



class TrackFlags:
    def __init__(self, flagged: Callable[[str], bool], members: Callable[[], Collection[str] | None] | None = None
                 ) -> None:
        self.flagged = flagged
        """Whether a line (its id) is flagged: asked for lines that come onto the timeline or change."""
        self.members = members
        """The lines flagged (None: unknown): a layout laid out afresh looks up these rather than ask about each of
        its lines, when they are fewer."""
        self._lineage = -1
        self._tracks: tuple[Track, ...] = ()
        self._index: Mapping[str, int] = {}
        """line id -> position in `_tracks`."""
        self.flags: npt.NDArray[np.bool_] = np.zeros(0, bool)
        """One per track of the layout last synced, in its order."""
        self.asked = 0
        """Lines asked about, counted (what keeping up cost)."""
        self._changed: set[str] | None = set()
        """Lines whose flags may have changed since the last `sync` (None: any line's)."""

    def update(self, line_ids: Iterable[str] | None) -> None:
        """These lines' flags may have changed (None: any line's): they are asked about at the next `sync`."""
        if line_ids is None:
            self._changed = None
        elif self._changed is not None:
            self._changed.update(line_ids)

    def sync(self, layout: Layout) -> None:
        """Follow the layout, then ask about the lines changed since the last sync."""
        self._follow(layout)
        changed, self._changed = self._changed, set()
        if changed is None:
            self.flags = self._ask_range(layout, 0, len(layout.tracks))
        elif changed:
            line_ids = list(changed)  # a render's start: all of a book's lines, looked up in C
            places = np.fromiter(map(layout.index.get, line_ids, itertools.repeat(-1)), np.int64, len(line_ids))
            found = places >= 0
            self.flags[places[found]] = self._ask(itertools.compress(line_ids, found))

    def _follow(self, layout: Layout) -> None:
        """Only tracks that were not on the layout before are asked about (`changed_runs`: a render of several
        scenes at once places lines far apart, and the tracks between them keep their flags)."""
        tracks = layout.tracks
        if tracks == self._tracks:
            return
        if layout.lineage != self._lineage:  # laid out afresh: nothing in common to look for
            runs = [(0, len(self._tracks), 0, len(tracks))]
        else:
            runs = changed_runs(self._tracks, tracks, self._index)
        pieces, kept = [], 0
        for i, j, a, b in runs:
            pieces += [self.flags[kept:i], self._ask_range(layout, a, b)]
            kept = j
        pieces.append(self.flags[kept:])
        self.flags = np.concatenate(pieces)
        self._tracks, self._index, self._lineage = tracks, layout.index, layout.lineage

    def _ask_range(self, layout: Layout, a: int, b: int) -> npt.NDArray[np.bool_]:
        """The flags of the layout's tracks [a, b): from `members` when they are fewer, else asked one by one."""
        members = self.members() if self.members is not None else None
        if members is None or len(members) >= b - a:
            return self._ask(t.line_id for t in layout.tracks[a:b])
        out = np.zeros(b - a, bool)
        for line_id in members:
            i = layout.index.get(line_id)
            if i is not None and a <= i < b:
                out[i - a] = True
        self.asked += len(members)
        return out

    def _ask(self, line_ids: Iterable[str]) -> npt.NDArray[np.bool_]:
        out = np.fromiter((self.flagged(i) for i in line_ids), bool)
        self.asked += len(out)
        return out
