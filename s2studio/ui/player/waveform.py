"""The waveform of the rendered timeline: line boundaries, rendered-up-to marker, playhead, click to seek.

Peaks are kept per bin of `BIN` samples and updated only where audio changed, so a long render
repaints cheaply. The view spans the rendered audio (at least a few seconds, so the first chunks of a
render do not fill the whole width).
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent, QPalette, QPen, QPixmap
from PySide6.QtWidgets import QSizePolicy, QWidget

from s2studio.engine.api import SAMPLE_RATE
from s2studio.ui.control.player import PlaybackBuffer

BIN = 512
MIN_SPAN = SAMPLE_RATE * 8
RULER = 16


class WaveformView(QWidget):
    seek_requested = Signal(int)
    """A click asks to move the playhead to this sample."""

    def __init__(self, buffer: PlaybackBuffer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("waveform")
        self.setAccessibleName("Waveform of the rendered script; click to seek")
        self.setMinimumHeight(90)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self._buffer = buffer
        self._peaks = np.zeros(0, np.float32)
        self._boundaries: list[tuple[str, int, int]] = []
        self._playhead = 0
        self._current: str | None = None
        self._span = MIN_SPAN
        self._labels: dict[str, tuple[str, QColor]] = {}
        self._cache: QPixmap | None = None
        """Everything but the playhead; redrawn only when the audio, lines or size change."""

    # -- model ----------------------------------------------------------------------------------

    def refresh(self, start: int = 0) -> None:
        """Recompute peaks from sample `start` to the end of the buffer."""
        data = self._buffer.view()
        first = start // BIN
        nbins = (len(data) + BIN - 1) // BIN
        peaks = np.zeros(nbins, np.float32)
        keep = min(first, len(self._peaks), nbins)
        peaks[:keep] = self._peaks[:keep]
        tail = data[keep * BIN:]
        if len(tail):
            pad = (-len(tail)) % BIN
            blocks = np.pad(np.abs(tail), (0, pad)).reshape(-1, BIN)
            peaks[keep:] = blocks.max(axis=1)
        self._peaks = peaks
        n = self._buffer.length
        # while rendering leave room to grow; once done, the whole timeline fits the width
        self._span = max(MIN_SPAN, int(n * 1.25)) if self._buffer.growing or n == 0 else int(n * 1.01) + 1
        self._invalidate()

    def set_boundaries(self, boundaries: list[tuple[str, int, int]]) -> None:
        """(line_id, start, end) of every line on the timeline."""
        self._boundaries = list(boundaries)
        self._invalidate()

    def set_playhead(self, sample: int) -> None:
        self._playhead = sample
        self.update()

    def set_current_line(self, line_id: str | None) -> None:
        if line_id != self._current:
            self._current = line_id
            self._invalidate()

    def _invalidate(self) -> None:
        self._cache = None
        self.update()

    def resizeEvent(self, event) -> None:  # noqa: ANN001, N802 - Qt override
        self._cache = None
        super().resizeEvent(event)

    def changeEvent(self, event) -> None:  # noqa: ANN001, N802 - Qt override: palette switches
        self._cache = None
        super().changeEvent(event)

    @property
    def span(self) -> int:
        return self._span

    # -- view -----------------------------------------------------------------------------------

    def _x(self, sample: float) -> float:
        return sample / self._span * max(1, self.width() - 1)

    def sample_at(self, x: float) -> int:
        return int(round(x / max(1, self.width() - 1) * self._span))

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        if event.button() == Qt.MouseButton.LeftButton:
            self.seek_requested.emit(min(self.sample_at(event.position().x()), self._buffer.length))

    def set_labels(self, labels: dict[str, tuple[str, QColor]]) -> None:
        """line_id -> (speaker name, colour) for drawing each line in its speaker's colour."""
        self._labels = dict(labels)
        self._invalidate()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        if self._cache is None or self._cache.size() != self.size() * self.devicePixelRatioF():
            self._cache = self._draw_background()
        p = QPainter(self)
        p.drawPixmap(0, 0, self._cache)
        p.setPen(QPen(self.palette().color(QPalette.ColorRole.Highlight), 2))
        x = self._x(self._playhead)
        p.drawLine(QPointF(x, 0), QPointF(x, self.height() - RULER))
        p.end()

    def _columns(self, cols: int) -> np.ndarray:
        """Peak amplitude (0..1) of each pixel column up to `cols`, vectorised."""
        if cols <= 0 or not len(self._peaks):
            return np.zeros(0, np.float32)
        edges = (np.arange(cols + 1) / max(1, self.width() - 1) * self._span / BIN).astype(np.int64)
        starts = edges[:-1][edges[:-1] < len(self._peaks)]
        if not len(starts):
            return np.zeros(0, np.float32)
        return np.minimum(np.maximum.reduceat(self._peaks, starts), 1.0)

    def _draw_background(self) -> QPixmap:
        ratio = self.devicePixelRatioF()
        pix = QPixmap(self.size() * ratio)
        pix.setDevicePixelRatio(ratio)
        pal = self.palette()
        pix.fill(pal.color(QPalette.ColorRole.Base))
        p = QPainter(pix)
        w, h = self.width(), self.height()
        top, bottom = 18, h - RULER
        mid = (top + bottom) / 2
        half = (bottom - top) / 2 - 2
        rendered_x = self._x(self._buffer.length)
        accent = pal.color(QPalette.ColorRole.Highlight)
        text_color = pal.color(QPalette.ColorRole.Text)
        for line_id, start, end in self._boundaries:  # the line being heard
            if line_id == self._current:
                c = QColor(accent)
                c.setAlpha(45)
                p.fillRect(QRectF(self._x(start), top, self._x(end) - self._x(start), bottom - top), c)
        if self._buffer.growing:  # not rendered yet
            dim = QColor(text_color)
            dim.setAlpha(12)
            p.fillRect(QRectF(rendered_x, top, w - rendered_x, bottom - top), dim)
        faint = QColor(text_color)
        faint.setAlpha(40)
        p.setPen(QPen(faint, 1))
        p.drawLine(QPointF(0, mid), QPointF(rendered_x, mid))
        # peaks: one vertical line per pixel column, in the colour of the line's speaker
        amps = self._columns(int(rendered_x) + 1) * half
        default = QColor(text_color)
        default.setAlpha(150)
        color_of = np.zeros(len(amps), np.int64)  # 0 = default, i + 1 = colours[i]
        colours: list[QColor] = []
        for line_id, start, end in self._boundaries:
            _, colour = self._labels.get(line_id, ("", default))
            colours.append(colour)
            a, b = int(self._x(start)), int(self._x(end)) + 1
            color_of[max(a, 0):min(b, len(amps))] = len(colours)
        for index, colour in enumerate([default] + colours):
            xs = np.nonzero((color_of == index) & (amps > 0.25))[0]
            if len(xs):
                p.setPen(QPen(colour, 1))
                p.drawLines([QLineF(float(x), mid - float(amps[x]), float(x), mid + float(amps[x])) for x in xs])
        # line boundaries and speaker names
        grid = QColor(text_color)
        grid.setAlpha(60)
        small = self.font()
        small.setPointSizeF(max(small.pointSizeF() * 0.85, 7.0))
        p.setFont(small)
        for line_id, start, _end in self._boundaries:
            x = self._x(start)
            p.setPen(QPen(grid, 1, Qt.PenStyle.DotLine))
            p.drawLine(QPointF(x, top - 14), QPointF(x, bottom))
            name, colour = self._labels.get(line_id, ("", text_color))
            if name:
                p.setPen(colour)
                p.drawText(QRectF(x + 4, 2, 160, 14), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, name)
        # time ruler
        p.setPen(QPen(grid, 1))
        p.drawLine(QPointF(0, bottom), QPointF(w, bottom))
        seconds = self._span / SAMPLE_RATE
        step = next((s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600) if seconds / s <= max(w / 70, 1)), 1200)
        muted = pal.color(QPalette.ColorRole.PlaceholderText)
        t = 0
        while t <= seconds:
            x = self._x(t * SAMPLE_RATE)
            p.setPen(QPen(grid, 1))
            p.drawLine(QPointF(x, bottom), QPointF(x, bottom + 4))
            p.setPen(muted)
            p.drawText(QRectF(x + 3, bottom + 1, 60, RULER - 1), Qt.AlignmentFlag.AlignLeft,
                       f"{int(t // 60)}:{int(t % 60):02d}")
            t += step
        if self._buffer.growing:  # rendered-up-to marker
            p.setPen(QPen(QColor("#e0a030"), 2))
            p.drawLine(QPointF(rendered_x, top), QPointF(rendered_x, bottom))
        p.end()
        return pix
