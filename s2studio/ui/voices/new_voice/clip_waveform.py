"""A clip's waveform with its trim: two handles mark the start and end kept, the rest is dimmed.

Drag a handle (or anywhere near it) to move it; the handles never cross. With the keyboard, Left/Right move
the start handle by 50 ms and Shift+Left/Right the end handle (Alt for 10 ms steps). The speech that the
detector found is drawn as a thin band under the wave, so trimming to it is easy to judge; a playhead shows
what is playing. The envelope is computed once per audio (min/max of 2048 bins), never per paint.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QKeyEvent, QMouseEvent, QPainter, QPaintEvent, QPen, QPolygonF
from PySide6.QtWidgets import QSizePolicy, QWidget

from s2studio.audio.clip_prep import Span
from s2studio.ui.colors import is_dark

BINS = 2048
HANDLE_PX = 7
"""How close (in pixels) a press must be to a handle to grab it."""


def envelope(mono: np.ndarray, bins: int = BINS) -> np.ndarray:
    """(bins, 2) min and max of `mono` in `bins` equal slices (fewer bins for a shorter signal)."""
    mono = np.asarray(mono, dtype=np.float32).reshape(-1)
    n = min(bins, len(mono))
    if n == 0:
        return np.zeros((0, 2), np.float32)
    edges = np.linspace(0, len(mono), n + 1).astype(np.int64)
    lo = np.minimum.reduceat(mono, edges[:-1])
    hi = np.maximum.reduceat(mono, edges[:-1])
    return np.stack([lo, hi], axis=1)


class ClipWaveform(QWidget):
    span_changed = Signal(object)
    """The kept `Span` after a handle moved (while dragging too)."""
    edited = Signal()
    """The person moved a handle (not emitted by `set_span`)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("clipWaveform")
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setAccessibleName("Clip waveform and trim")
        self.setAccessibleDescription("Left and Right move the start of the clip, Shift with them its end.")
        self._peaks = np.zeros((0, 2), np.float32)
        self.duration = 0.0
        self.span = Span(0.0, 0.0)
        self.speech: Span | None = None
        self.playhead: float | None = None
        self._dragging: str | None = None

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(420, 64)

    # -- what the dialog sets ----------------------------------------------------------------------

    def set_audio(self, mono: np.ndarray, rate: int, span: Span | None = None) -> None:
        peaks = envelope(mono)
        loudest = float(np.abs(peaks).max()) if len(peaks) else 0.0
        # drawn up to 8× larger, so a quiet take is still readable (display only)
        self._peaks = peaks * min(8.0, 0.95 / loudest) if loudest > 0 else peaks
        self.duration = len(mono) / rate if rate else 0.0
        self.span = (span or Span(0.0, self.duration)).clamped(self.duration)
        self.update()

    def set_span(self, span: Span) -> None:
        self.span = span.clamped(self.duration)
        self.update()
        self.span_changed.emit(self.span)

    def set_speech(self, speech: Span | None) -> None:
        self.speech = speech
        self.update()

    def set_playhead(self, seconds: float | None) -> None:
        self.playhead = seconds
        self.update()

    # -- geometry ------------------------------------------------------------------------------

    def _x(self, seconds: float) -> float:
        return 0.0 if self.duration <= 0 else seconds / self.duration * (self.width() - 1)

    def _seconds(self, x: float) -> float:
        return 0.0 if self.width() <= 1 else max(0.0, min(self.duration, x / (self.width() - 1) * self.duration))

    def handle_x(self, which: str) -> float:
        """Where the "start" or "end" handle is drawn, in pixels (for tests that drag it)."""
        return self._x(self.span.start if which == "start" else self.span.end)

    # -- painting --------------------------------------------------------------------------------

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        dark = is_dark(self.palette())
        rect = QRectF(self.rect())
        p.fillRect(rect, QColor("#1f2329") if dark else QColor("#f4f5f7"))
        wave = QColor("#5ab0f0") if dark else QColor("#2f6fb0")
        mid, half = rect.height() / 2, rect.height() / 2 - 6
        n = len(self._peaks)
        if n:
            xs = np.linspace(0, rect.width() - 1, n)
            top = [QPointF(x, mid - float(hi) * half) for x, hi in zip(xs, self._peaks[:, 1], strict=True)]
            bottom = [QPointF(x, mid - float(lo) * half) for x, lo in zip(xs, self._peaks[:, 0], strict=True)]
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(wave)
            p.drawPolygon(QPolygonF(top + bottom[::-1]))
        if self.speech is not None:
            band = QColor("#3fb37f")
            p.fillRect(QRectF(self._x(self.speech.start), rect.height() - 3,
                              self._x(self.speech.end) - self._x(self.speech.start), 3), band)
        shade = QColor(0, 0, 0, 150) if dark else QColor(255, 255, 255, 170)
        a, b = self._x(self.span.start), self._x(self.span.end)
        p.fillRect(QRectF(0, 0, a, rect.height()), shade)
        p.fillRect(QRectF(b, 0, rect.width() - b, rect.height()), shade)
        accent = QColor("#f0a030") if dark else QColor("#d9480f")
        for x, focused in ((a, True), (b, False)):
            p.setPen(QPen(accent, 2))
            p.drawLine(QPointF(x, 0), QPointF(x, rect.height()))
            p.setBrush(accent)
            p.setPen(Qt.PenStyle.NoPen)
            tab = QRectF(x - 5, 0, 10, 10) if focused else QRectF(x - 5, rect.height() - 10, 10, 10)
            p.drawRoundedRect(tab, 2, 2)
        if self.playhead is not None:
            p.setPen(QPen(self.palette().text().color(), 1))
            x = self._x(self.playhead)
            p.drawLine(QPointF(x, 0), QPointF(x, rect.height()))
        if self.hasFocus():
            p.setPen(QPen(self.palette().highlight().color(), 1, Qt.PenStyle.DotLine))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRect(rect.adjusted(0.5, 0.5, -0.5, -0.5))
        p.end()

    # -- editing -------------------------------------------------------------------------------

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        if event.button() != Qt.MouseButton.LeftButton or self.duration <= 0:
            return
        x = event.position().x()
        a, b = self.handle_x("start"), self.handle_x("end")
        self._dragging = "start" if abs(x - a) <= abs(x - b) else "end"
        self._move(self._dragging, x)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        x = event.position().x()
        if self._dragging:
            self._move(self._dragging, x)
        else:
            near = min(abs(x - self.handle_x("start")), abs(x - self.handle_x("end"))) <= HANDLE_PX
            self.setCursor(Qt.CursorShape.SizeHorCursor if near else Qt.CursorShape.ArrowCursor)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        self._dragging = None

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        key, mods = event.key(), event.modifiers()
        if key not in (Qt.Key.Key_Left, Qt.Key.Key_Right) or self.duration <= 0:
            super().keyPressEvent(event)
            return
        step = 0.01 if mods & Qt.KeyboardModifier.AltModifier else 0.05
        step = -step if key == Qt.Key.Key_Left else step
        which = "end" if mods & Qt.KeyboardModifier.ShiftModifier else "start"
        self._set(which, (self.span.end if which == "end" else self.span.start) + step)

    def _move(self, which: str, x: float) -> None:
        self._set(which, self._seconds(x))

    def _set(self, which: str, seconds: float) -> None:
        least = min(0.1, self.duration)
        if which == "start":
            span = Span(max(0.0, min(seconds, self.span.end - least)), self.span.end)
        else:
            span = Span(self.span.start, min(self.duration, max(seconds, self.span.start + least)))
        if span != self.span:
            self.span = span
            self.update()
            self.span_changed.emit(span)
            self.edited.emit()
