"""The waveform's range, zoom and scroll: which samples of the timeline (or of one chapter's lines, `set_scope`)
its width shows, fitted or zoomed in, and the pixel of each sample. A part of `waveform.WaveformView`, which holds
the state read here."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from s2studio.audio.timeline import Timeline
from s2studio.engine.api import SAMPLE_RATE

MIN_SPAN = SAMPLE_RATE * 8
"""Fitted, the view spans at least this much, so the first chunks of a render do not fill the width."""
MIN_SAMPLES_PER_PIXEL = 2.0
ZOOM_STEP = 1.5


class ViewRange:
    timeline: Timeline
    _scope: tuple[str, ...] | None
    _fit: bool
    _spp: float
    _origin: float
    _grown_span: int
    _playhead: int
    _busy: Callable[[], bool]

    if TYPE_CHECKING:  # the widget's
        def width(self) -> int: ...

        def _changed(self) -> None: ...

    @property
    def samples_per_pixel(self) -> float:
        return self._fit_spp() if self._fit else self._spp

    @property
    def origin(self) -> int:
        """The sample at the left edge."""
        return self.range()[0] if self._fit else int(self._origin)

    @property
    def visible(self) -> int:
        """Samples across the width."""
        return int(self.samples_per_pixel * max(1, self.width()))

    @property
    def fitted(self) -> bool:
        return self._fit

    @property
    def scope(self) -> tuple[str, ...] | None:
        """The lines the view is limited to (a chapter's), None for the whole timeline."""
        return self._scope

    def range(self) -> tuple[int, int]:
        """Samples [lo, hi) the view can show: the timeline, or the scope's lines."""
        layout = self.timeline.layout
        if self._scope is None:
            return 0, layout.end
        at = [i for line_id in self._scope if (i := layout.index.get(line_id)) is not None]
        if not at:
            return 0, 0
        first, last = min(at), max(at)
        return int(layout.starts[first]), int(layout.starts[last]) + layout.tracks[last].length

    def span(self) -> int:
        """Samples the scroll bar covers: the range, or the view when that is longer."""
        lo, hi = self.range()
        return max(hi - lo, self.visible)

    def _fit_spp(self) -> float:
        lo, hi = self.range()
        length = hi - lo
        if self._scope is None and (self.timeline.layout.growing or (self._grown_span and self._busy())):
            # grown in steps while a render appends lines (between two lines too), not at every chunk
            if not self._grown_span or length * 1.05 > self._grown_span or self._grown_span > max(MIN_SPAN, length * 4):
                self._grown_span = max(MIN_SPAN, int(length * 1.5))
            span = self._grown_span
        else:
            self._grown_span = 0
            span = MIN_SPAN if length == 0 else int(length * 1.01) + 1
        return span / max(1, self.width())

    def x_of(self, sample: float) -> float:
        return (sample - self.origin) / self.samples_per_pixel

    def sample_at(self, x: float) -> int:
        return max(0, int(round(self.origin + x * self.samples_per_pixel)))

    def zoom(self, factor: float, anchor_x: float | None = None) -> None:
        """Samples per pixel times 1/`factor` (> 1 zooms in), keeping the sample under `anchor_x` (the
        playhead when it is on screen, else the middle) where it is."""
        if anchor_x is None:
            px = self.x_of(self._playhead)
            anchor_x = px if 0 <= px <= self.width() else self.width() / 2
        anchor = self.origin + anchor_x * self.samples_per_pixel
        widest = max(self._fit_spp(), MIN_SAMPLES_PER_PIXEL)
        spp = min(max(self.samples_per_pixel / factor, MIN_SAMPLES_PER_PIXEL), widest)
        if spp >= widest and factor < 1:
            self.fit()
            return
        self._fit, self._spp = False, spp
        self._set_origin(anchor - anchor_x * spp)

    def zoom_in(self) -> None:
        self.zoom(ZOOM_STEP)

    def zoom_out(self) -> None:
        self.zoom(1 / ZOOM_STEP)

    def fit(self) -> None:
        """The whole range across the width (and it stays fitted while it grows)."""
        self._fit, self._origin = True, float(self.range()[0])
        self._changed()

    def set_scope(self, line_ids: Sequence[str] | None) -> None:
        """Show only these lines' stretch of the timeline (a chapter), or the whole timeline (None)."""
        self._scope = tuple(line_ids) if line_ids is not None else None
        self.fit()

    def scroll_to(self, sample: int) -> None:
        """Put `sample` at the left edge (zoomed in; fitted there is nothing to scroll)."""
        if not self._fit:
            self._set_origin(sample)

    def ensure_visible(self, sample: int, margin: float = 0.1) -> None:
        """Scroll so that `sample` is on screen, a page at a time (as a DAW follows its playhead)."""
        if self._fit:
            return
        left, width = self.origin, self.visible
        if not left + width * margin <= sample <= left + width * (1 - margin):
            self._set_origin(sample - width * margin)

    def _set_origin(self, origin: float) -> None:
        lo, hi = self.range()
        self._origin = min(max(origin, float(lo)), max(float(lo), hi - self.visible))
        self._changed()
