"""The waveform's image: one pixel column per x, each drawn from the peak of the audio under it, kept between
repaints and drawn again only where the timeline changed (the new tail of a streaming line, a swapped take's
span, the lines whose speaker changed). The peaks come from the whole timeline's packed peaks
(`timeline_peaks`) when a column spans many samples, else from the few lines on screen."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt
from PySide6.QtGui import QColor, QPalette

from s2studio.audio.timeline import Layout, Timeline
from s2studio.ui.player.timeline_peaks import BINS, TimelinePeaks
from s2studio.ui.player.track_runs import common_ends
from s2studio.ui.player.waveform_paint import edges_of, paint_columns, track_columns, visible_tracks


class View(Protocol):
    """What the image reads of the view (`waveform.WaveformView`)."""

    timeline: Timeline
    origin: int
    samples_per_pixel: float

    def width(self) -> int: ...
    def height(self) -> int: ...
    def palette(self) -> QPalette: ...
    def x_of(self, sample: float) -> float: ...
    def speaker_of(self, line_id: str) -> str: ...
    def speaker_colour(self, speaker: str) -> QColor | None: ...


class WaveformImage:
    def __init__(self, peaks: TimelinePeaks, top: int, ruler: int) -> None:
        self.peaks = peaks
        self.top, self.ruler = top, ruler
        self.pixels: npt.NDArray[np.uint32] | None = None
        """Rows × columns of 0xAARRGGBB (Qt's ARGB32), for `_key`."""
        self._key: tuple = ()
        self._drawn: tuple[Layout, int] | None = None
        """The layout the image shows, and the length its last line had then."""
        self._damage: list[tuple[float, float]] = []
        """Sample ranges whose columns must be drawn again (colours of lines that changed)."""
        self.columns_drawn = 0
        """Pixel columns computed, counted (what a change cost)."""

    def forget(self) -> None:
        """Draw every column at the next update (colours or palette changed)."""
        self._key = ()

    def damage(self, lo: float, hi: float) -> None:
        """Samples [lo, hi) must be drawn again."""
        self._damage.append((lo, hi))

    def update(self, view: View) -> npt.NDArray[np.uint32]:
        """The pixels, redrawn where the timeline changed since they were drawn."""
        layout = view.timeline.layout
        w, h = max(1, view.width()), max(1, view.height())
        spp, origin = view.samples_per_pixel, view.origin
        pal = view.palette()
        key = (w, h, spp, origin, pal.color(QPalette.ColorRole.Base).rgba(), pal.color(QPalette.ColorRole.Text).rgba())
        changed = self.peaks.sync(layout)
        if key != self._key or self.pixels is None:
            self.pixels = np.empty((h, w), np.uint32)
            self._key = key
            self._damage.clear()
            self._draw_columns(view, 0, w)
        else:
            spans = self._layout_damage(layout)
            if changed is not None and changed[1] > changed[0] and len(layout.tracks):
                i, j = changed
                spans.append((int(layout.starts[i]), int(layout.starts[j - 1]) + layout.tracks[j - 1].length))
            spans += self._damage
            self._damage.clear()
            columns = [(max(int(np.floor(view.x_of(a))) - 1, 0), min(int(np.ceil(view.x_of(b))) + 2, w))
                       for a, b in spans]
            for x0, x1 in _merged(columns):
                self._draw_columns(view, x0, x1)
        self._drawn = (layout, layout.tracks[-1].length if layout.tracks else 0)
        return self.pixels

    def _layout_damage(self, layout: Layout) -> list[tuple[float, float]]:
        """Sample ranges where `layout` differs from the one drawn."""
        if self._drawn is None:
            return [(0, max(layout.end, 1))]
        old, old_last = self._drawn
        if old is layout:
            if layout.tracks and layout.tracks[-1].length != old_last:
                end = int(layout.starts[-1])
                return [(end + min(old_last, layout.tracks[-1].length), layout.end)]
            return []
        a, b = len(old.tracks), len(layout.tracks)
        p, s = common_ends(old.tracks, layout.tracks)
        if b and layout.tracks[-1].length != old_last and old.tracks and old.tracks[-1] is layout.tracks[-1]:
            p, s = min(p, b - 1), max(s - 1, 0)  # the last line grew since it was drawn
        moved = np.nonzero(old.starts[:p] != layout.starts[:p])[0]
        p = int(moved[0]) if len(moved) else p
        moved = np.nonzero(old.starts[a - s:] != layout.starts[b - s:])[0] if s else moved[:0]
        s = s - int(moved[-1]) - 1 if len(moved) else s
        lo = min(_start(old, p), _start(layout, p))
        hi = max(_end(old, a - s - 1), _end(layout, b - s - 1))
        return [(lo, hi)] if hi > lo else []

    def _draw_columns(self, view: View, x0: int, x1: int) -> None:
        layout, image = view.timeline.layout, self.pixels
        spp, origin = view.samples_per_pixel, view.origin
        edges = edges_of(origin, spp, x0, x1)
        if spp >= BINS[0]:
            amps, at = self.peaks.columns(layout, edges, spp)
            if layout.growing:  # the line streaming in is not packed: drawn from its track
                amps = np.maximum(amps, track_columns(layout.tracks[-1], int(layout.starts[-1]), edges, spp))
        else:
            amps = np.zeros(x1 - x0, np.float32)
            for i in visible_tracks(layout, edges[0], edges[-1]):
                amps = np.maximum(amps, track_columns(layout.tracks[i], int(layout.starts[i]), edges, spp))
            at = np.searchsorted(layout.starts, (edges[:-1] + edges[1:]) / 2, side="right") - 1
        text = view.palette().color(QPalette.ColorRole.Text)
        palette: dict[str, int] = {}
        pixel = np.empty(len(layout.tracks) + 1, np.uint32)  # by track index (+1: -1 before the first)
        shown = at[np.concatenate(([True], at[1:] != at[:-1]))] if len(at) else at  # `at` never decreases:
        # its distinct values without np.unique (which sorts, and imports numpy.ma on its first call)
        for i in shown:
            speaker = view.speaker_of(layout.tracks[i].line_id) if i >= 0 else ""
            argb = palette.get(speaker)
            if argb is None:
                argb = palette[speaker] = _argb(view.speaker_colour(speaker) or text)
            pixel[i + 1] = argb
        colours = pixel[at + 1]
        faint = QColor(text)
        faint.setAlpha(40)
        base = view.palette().color(QPalette.ColorRole.Base)
        bottom = view.height() - self.ruler
        paint_columns(image, x0, amps, colours, self.top, max(bottom, self.top + 1), _argb(base), _blend(faint, base),
                      view.x_of(layout.end))
        self.columns_drawn += x1 - x0

def _argb(colour: QColor) -> int:
    """The colour, opaque, as a pixel of an ARGB32 image."""
    return 0xFF000000 | (colour.rgb() & 0xFFFFFF)



def _start(layout: Layout, i: int) -> float:
    if i < len(layout.tracks):
        return float(layout.starts[i])
    return float(layout.end)


def _end(layout: Layout, i: int) -> float:
    if 0 <= i < len(layout.tracks):
        return float(layout.starts[i]) + layout.tracks[i].length
    return 0.0


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Column ranges merged where they overlap or touch (each column drawn once)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _blend(colour: QColor, base: QColor) -> int:
    """`colour` over `base`, opaque, as an ARGB32 pixel."""
    a = colour.alphaF()
    r, g, b = (round(a * c + (1 - a) * d) for c, d in ((colour.red(), base.red()), (colour.green(), base.green()),
                                                      (colour.blue(), base.blue())))
    return 0xFF000000 | (r << 16) | (g << 8) | b
