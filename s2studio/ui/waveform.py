"""The waveform of the rendered timeline: line boundaries, rendered-up-to marker, playhead, click to seek.

Peaks are kept per bin of `BIN` samples and updated only where audio changed, so a long render
repaints cheaply. The view spans the rendered audio (at least a few seconds, so the first chunks of a
render do not fill the whole width).
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from s2studio.engine.api import SAMPLE_RATE
from s2studio.ui.player import PlaybackBuffer

BIN = 512
MIN_SPAN = SAMPLE_RATE * 8


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
        self._span = max(MIN_SPAN, self._buffer.length)
        self.update()

    def set_boundaries(self, boundaries: list[tuple[str, int, int]]) -> None:
        """(line_id, start, end) of every line on the timeline."""
        self._boundaries = list(boundaries)
        self.update()

    def set_playhead(self, sample: int) -> None:
        self._playhead = sample
        self.update()

    def set_current_line(self, line_id: str | None) -> None:
        self._current = line_id
        self.update()

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

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        p = QPainter(self)
        pal = self.palette()
        w, h = self.width(), self.height()
        p.fillRect(self.rect(), pal.color(QPalette.ColorRole.Base))
        mid = h / 2
        rendered_x = self._x(self._buffer.length)
        accent = pal.color(QPalette.ColorRole.Highlight)
        # highlighted current line
        for line_id, start, end in self._boundaries:
            if line_id == self._current:
                c = QColor(accent)
                c.setAlpha(40)
                p.fillRect(QRectF(self._x(start), 0, self._x(end) - self._x(start), h), c)
        # not yet rendered region
        dim = pal.color(QPalette.ColorRole.AlternateBase)
        p.fillRect(QRectF(rendered_x, 0, w - rendered_x, h), dim)
        # peaks: one vertical line per pixel column
        if len(self._peaks):
            wave = QColor(pal.color(QPalette.ColorRole.Text))
            wave.setAlpha(170)
            p.setPen(QPen(wave, 1))
            cols = int(rendered_x) + 1
            edges = (np.arange(cols + 1) / max(1, w - 1) * self._span / BIN).astype(np.int64)
            for x in range(cols):
                a, b = edges[x], max(edges[x] + 1, edges[x + 1])
                seg = self._peaks[a:b]
                if len(seg) == 0:
                    break
                amp = float(seg.max()) * (h / 2 - 4)
                p.drawLine(QPointF(x, mid - amp), QPointF(x, mid + amp))
        # line boundaries
        grid = QColor(pal.color(QPalette.ColorRole.Mid))
        p.setPen(QPen(grid, 1, Qt.PenStyle.DashLine))
        for _, start, _end in self._boundaries:
            x = self._x(start)
            p.drawLine(QPointF(x, 0), QPointF(x, h))
        # rendered-up-to marker
        if self._buffer.growing:
            p.setPen(QPen(QColor("#e0a030"), 2))
            p.drawLine(QPointF(rendered_x, 0), QPointF(rendered_x, h))
        # playhead
        p.setPen(QPen(accent, 2))
        x = self._x(self._playhead)
        p.drawLine(QPointF(x, 0), QPointF(x, h))
        # time label
        p.setPen(pal.color(QPalette.ColorRole.PlaceholderText))
        p.drawText(QRectF(6, 4, 200, 16), Qt.AlignmentFlag.AlignLeft,
                   f"{self._playhead / SAMPLE_RATE:5.1f} s / {self._buffer.length / SAMPLE_RATE:.1f} s")
        p.end()
