"""The waveform of the timeline: each line in its speaker's colour, stale lines hatched, the line being
rendered marked, the rendered-up-to marker, the playhead; zoom (Ctrl+wheel, +/−, fit) and horizontal
scroll; a click seeks and selects the line under it.

It draws from the timeline's layout, one line's audio at a time, through `Track.peaks` (every `BIN` samples,
extended as a streaming line grows) and `Track.read`, so zoomed out it reads a few values per pixel, and zoomed
in it reads the samples on screen only.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QMouseEvent, QPainter, QPaintEvent, QPalette, QPen, QPixmap, QWheelEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from s2studio.audio.timeline import PEAK_BIN as BIN
from s2studio.audio.timeline import Timeline, Track
from s2studio.engine.api import SAMPLE_RATE

MIN_SPAN = SAMPLE_RATE * 8
"""Fitted, the view spans at least this much, so the first chunks of a render do not fill the width."""
MIN_SAMPLES_PER_PIXEL = 2.0
ZOOM_STEP = 1.5
RULER = 16
TOP = 18


class WaveformView(QWidget):
    seek_requested = Signal(int)
    """A click asks to move the playhead to this sample."""
    line_clicked = Signal(str)
    """A click landed on this line's audio (or the gap after it)."""
    view_changed = Signal()
    """The visible range or the zoom changed (the scroll bar follows)."""

    def __init__(self, timeline: Timeline, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("waveform")
        self.setAccessibleName("Waveform of the script: click a line to select it; Ctrl+wheel zooms")
        self.setMinimumHeight(90)
        self.setMinimumWidth(120)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.timeline = timeline
        self._playhead = 0
        self._current: str | None = None
        self._selected: str | None = None
        self._loop: str | None = None
        self._labels: dict[str, tuple[str, QColor]] = {}
        self._stale: set[str] = set()
        self._rendering: set[str] = set()
        self._fit = True
        self._spp = MIN_SPAN / 1000
        self._origin = 0.0
        self.follow = True
        """Keep the playhead in view while it moves (page by page)."""
        self._cache: QPixmap | None = None

    # -- the view --------------------------------------------------------------------------------

    @property
    def samples_per_pixel(self) -> float:
        return self._fit_spp() if self._fit else self._spp

    @property
    def origin(self) -> int:
        """The sample at the left edge."""
        return 0 if self._fit else int(self._origin)

    @property
    def visible(self) -> int:
        """Samples across the width."""
        return int(self.samples_per_pixel * max(1, self.width()))

    @property
    def fitted(self) -> bool:
        return self._fit

    @property
    def selected_line(self) -> str | None:
        return self._selected

    @property
    def stale_lines(self) -> frozenset[str]:
        """Lines drawn stale (hatched)."""
        return frozenset(self._stale)

    @property
    def rendering_lines(self) -> frozenset[str]:
        """Lines drawn as being rendered."""
        return frozenset(self._rendering)

    def span(self) -> int:
        """Samples the scroll bar covers: the timeline, or the view when that is longer."""
        return max(self.timeline.layout.end, self.visible)

    def _fit_spp(self) -> float:
        end = self.timeline.layout.end
        growing = self.timeline.layout.growing or bool(self._rendering)
        span = max(MIN_SPAN, int(end * 1.25)) if growing or end == 0 else int(end * 1.01) + 1
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
        """The whole timeline across the width (and it stays fitted while it grows)."""
        self._fit, self._origin = True, 0.0
        self._changed()

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
        self._origin = min(max(origin, 0.0), max(0.0, self.span() - self.visible))
        self._changed()

    def _changed(self) -> None:
        self._invalidate()
        self.view_changed.emit()

    # -- what to draw ----------------------------------------------------------------------------

    def refresh(self, lines_moved: bool = True) -> None:
        """The timeline changed: lines moved or a take swapped, or (`lines_moved=False`) only the streaming
        line grew, which costs no work per line of the script."""
        if not self._fit:
            self._origin = min(self._origin, max(0.0, self.span() - self.visible))
        self._changed()

    def set_labels(self, labels: dict[str, tuple[str, QColor]]) -> None:
        """line_id -> (speaker name, colour)."""
        self._labels = dict(labels)
        self._invalidate()

    def set_states(self, stale: set[str], rendering: set[str]) -> None:
        """Lines whose picked take is stale (hatched), and lines being rendered (marked)."""
        if stale != self._stale or rendering != self._rendering:
            self._stale, self._rendering = set(stale), set(rendering)
            self._invalidate()

    def set_follow(self, on: bool) -> None:
        self.follow = on

    def set_playhead(self, sample: int, moving: bool = False) -> None:
        """The playhead; `moving` (playing): the view follows it when `follow` is on."""
        self._playhead = sample
        if moving and self.follow:
            self.ensure_visible(sample)
        self.update()

    def set_current_line(self, line_id: str | None) -> None:
        """The line being heard."""
        if line_id != self._current:
            self._current = line_id
            self._invalidate()

    def set_selected_line(self, line_id: str | None) -> None:
        """The line selected in the editor: outlined, and scrolled into view."""
        if line_id != self._selected:
            self._selected = line_id
            bounds = self.timeline.layout.bounds(line_id) if line_id else None
            if bounds is not None and not self._fit:
                if not (self.origin <= bounds[0] and bounds[1] <= self.origin + self.visible):
                    self._set_origin(bounds[0] - self.visible * 0.1)
            self._invalidate()

    def set_loop_line(self, line_id: str | None) -> None:
        if line_id != self._loop:
            self._loop = line_id
            self._invalidate()

    def _invalidate(self) -> None:
        self._cache = None
        self.update()

    # -- input -----------------------------------------------------------------------------------

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        if event.button() != Qt.MouseButton.LeftButton:
            return
        self.setFocus(Qt.FocusReason.MouseFocusReason)
        sample = self.sample_at(event.position().x())
        line_id = self.timeline.layout.line_at(sample)
        self.seek_requested.emit(min(sample, self.timeline.layout.end))
        if line_id is not None:
            self.line_clicked.emit(line_id)

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 - Qt override
        steps = event.angleDelta().y() / 120 or event.angleDelta().x() / 120
        if not steps:
            return
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self.zoom(ZOOM_STEP ** steps, event.position().x())
        elif not self._fit:
            self._set_origin(self._origin - steps * self.visible / 8)
        event.accept()

    def resizeEvent(self, event) -> None:  # noqa: ANN001, N802 - Qt override
        self._cache = None
        super().resizeEvent(event)
        self.view_changed.emit()

    def changeEvent(self, event) -> None:  # noqa: ANN001, N802 - Qt override: palette switches
        self._cache = None
        super().changeEvent(event)

    # -- painting --------------------------------------------------------------------------------

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        if self._cache is None or self._cache.size() != self.size() * self.devicePixelRatioF():
            self._cache = self._draw_background()
        p = QPainter(self)
        p.drawPixmap(0, 0, self._cache)
        x = self.x_of(self._playhead)
        if 0 <= x <= self.width():
            p.setPen(QPen(self.palette().color(QPalette.ColorRole.Highlight), 2))
            p.drawLine(QPointF(x, 0), QPointF(x, self.height() - RULER))
        p.end()

    def _columns(self, track: Track, start: int, x0: int, x1: int) -> np.ndarray:
        """Peak amplitude (0..1) of `track` (starting at timeline sample `start`) in pixel columns x0..x1-1:
        from the track's peaks when a column spans a bin or more, else from the samples on screen."""
        spp = self.samples_per_pixel
        n = track.length
        edges = np.clip(self.origin + np.arange(x0, x1 + 1) * spp - start, 0, n).astype(np.int64)
        if spp >= BIN:
            values = track.peaks()
            lo, hi = edges[:-1] // BIN, -(-edges[1:] // BIN)
        else:
            first = int(edges[0])
            values = np.abs(track.read(first, int(edges[-1]) - first))
            lo, hi = edges[:-1] - first, edges[1:] - first
        values = np.append(values, np.float32(0))  # a zero past the end, so every index is in range
        last = len(values) - 1
        lo = np.minimum(lo, last)
        hi = np.minimum(np.maximum(hi, lo + 1), last)
        pairs = np.empty(2 * len(lo), np.int64)
        pairs[0::2], pairs[1::2] = lo, hi
        out = np.maximum.reduceat(values, pairs)[0::2]  # max of values[lo:hi] per column
        out[edges[:-1] >= n] = 0.0
        return np.minimum(out, 1.0)

    def _draw_background(self) -> QPixmap:
        ratio = self.devicePixelRatioF()
        pix = QPixmap(self.size() * ratio)
        pix.setDevicePixelRatio(ratio)
        pal = self.palette()
        pix.fill(pal.color(QPalette.ColorRole.Base))
        p = QPainter(pix)
        w, h = self.width(), self.height()
        bottom = h - RULER
        mid = (TOP + bottom) / 2
        half = (bottom - TOP) / 2 - 2
        accent = pal.color(QPalette.ColorRole.Highlight)
        text_color = pal.color(QPalette.ColorRole.Text)
        layout = self.timeline.layout
        faint = QColor(text_color)
        faint.setAlpha(40)
        grid = QColor(text_color)
        grid.setAlpha(60)
        small = self.font()
        small.setPointSizeF(max(small.pointSizeF() * 0.85, 7.0))
        p.setFont(small)
        end_x = self.x_of(layout.end)
        p.setPen(QPen(faint, 1))
        p.drawLine(QPointF(max(self.x_of(0), 0), mid), QPointF(min(end_x, w), mid))
        first = max(int(np.searchsorted(layout.starts, self.origin, side="right")) - 1, 0)
        last = int(np.searchsorted(layout.starts, self.origin + self.visible, side="right"))
        for track, start in zip(layout.tracks[first:last], layout.starts[first:last]):  # the lines on screen
            start = int(start)
            x0f, x1f = self.x_of(start), self.x_of(start + track.length)
            if x1f < 0 or x0f > w:
                continue
            line_id = track.line_id
            band = QRectF(x0f, TOP, max(x1f - x0f, 1.0), bottom - TOP)
            if line_id == self._current:
                c = QColor(accent)
                c.setAlpha(45)
                p.fillRect(band, c)
            if line_id in self._stale:
                hatch = QColor("#e8590c")
                hatch.setAlpha(60)
                p.fillRect(band, QBrush(hatch, Qt.BrushStyle.BDiagPattern))
            if line_id in self._rendering:
                c = QColor("#1c7ed6")
                c.setAlpha(35)
                p.fillRect(band, c)
            name, colour = self._labels.get(line_id, ("", QColor(text_color)))
            colour = QColor(colour)
            if line_id in self._stale:
                colour.setAlpha(110)
            x0, x1 = max(int(x0f), 0), min(int(x1f) + 1, w)
            if x1 > x0:
                amps = self._columns(track, start, x0, x1) * half
                xs = np.nonzero(amps > 0.25)[0]
                if len(xs):
                    p.setPen(QPen(colour, 1))
                    p.drawLines([QLineF(float(x0 + x), mid - float(amps[x]), float(x0 + x), mid + float(amps[x]))
                                 for x in xs])
            if line_id == self._selected or line_id == self._loop:
                pen = QPen(accent, 2, Qt.PenStyle.SolidLine if line_id == self._loop else Qt.PenStyle.DashLine)
                p.setPen(pen)
                p.setBrush(Qt.BrushStyle.NoBrush)
                p.drawRect(band.adjusted(1, 1, -1, -1))
            p.setPen(QPen(grid, 1, Qt.PenStyle.DotLine))
            p.drawLine(QPointF(x0f, TOP - 14), QPointF(x0f, bottom))
            label = name + ("  ⟳ loop" if line_id == self._loop else "") + \
                ("  · stale" if line_id in self._stale else "") + ("  · rendering…" if line_id in self._rendering else "")
            left = max(x0f, 0.0)  # the name stays in view while the line's start is scrolled off
            if label and x1f - left > 24:
                p.setPen(QColor(colour.red(), colour.green(), colour.blue()))
                p.drawText(QRectF(left + 4, 2, max(x1f - left - 6, 10), 14),
                           Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, label)
        self._draw_ruler(p, w, bottom, grid, pal.color(QPalette.ColorRole.PlaceholderText))
        if layout.growing and 0 <= end_x <= w:  # rendered-up-to marker
            p.setPen(QPen(QColor("#e0a030"), 2))
            p.drawLine(QPointF(end_x, TOP), QPointF(end_x, bottom))
        p.end()
        return pix

    def ruler_marks(self, w: int) -> list[tuple[float, QRectF, str]]:
        """The ruler's ticks: (x of the tick, the rectangle of its label, the label). A label sits right of
        its tick, or left of it where the right would leave the view (the last one), never clipped."""
        metrics = self.fontMetrics()
        seconds_visible = self.visible / SAMPLE_RATE
        steps = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1200)
        step = next((s for s in steps if seconds_visible / s <= max(w / 70, 1)), 1800)
        first = np.ceil(self.origin / SAMPLE_RATE / step) * step
        marks = []
        t = float(first)
        while t * SAMPLE_RATE <= self.origin + self.visible:
            x = self.x_of(t * SAMPLE_RATE)
            text = f"{int(t // 60)}:{t % 60:04.1f}" if step < 1 else f"{int(t // 60)}:{int(round(t % 60)):02d}"
            width = metrics.horizontalAdvance(text) + 2
            left = x + 3 if x + 3 + width <= w else x - 3 - width
            marks.append((x, QRectF(max(left, 0.0), 0, width, RULER - 1), text))
            t += step
        return marks

    def _draw_ruler(self, p: QPainter, w: int, bottom: float, grid: QColor, muted: QColor) -> None:
        p.setPen(QPen(grid, 1))
        p.drawLine(QPointF(0, bottom), QPointF(w, bottom))
        for x, rect, text in self.ruler_marks(w):
            p.setPen(QPen(grid, 1))
            p.drawLine(QPointF(x, bottom), QPointF(x, bottom + 4))
            p.setPen(muted)
            p.drawText(rect.translated(0, bottom + 1), Qt.AlignmentFlag.AlignLeft, text)
