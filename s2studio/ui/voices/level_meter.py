"""The record dialog's input meter: the level in dBFS (-60 … 0), green, then amber above -12 dB and red
above -3 dB, a peak mark that holds for 1.5 s, and a clip lamp that stays lit once a sample reached full
scale (until the next take), so a clipped take is never missed."""

from __future__ import annotations

import math
import time

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from s2studio.ui.colors import is_dark

FLOOR_DB = -60.0
PEAK_HOLD_S = 1.5
CLIP_LEVEL = 0.999
LAMP_PX = 44


def to_db(amplitude: float) -> float:
    return FLOOR_DB if amplitude <= 10 ** (FLOOR_DB / 20) else max(FLOOR_DB, 20 * math.log10(amplitude))


class LevelMeter(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("levelMeter")
        self.setAccessibleName("Input level")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.level_db = FLOOR_DB
        self.peak_db = FLOOR_DB
        self.clipped = False
        self._peak_at = 0.0

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(360, 22)

    def reset(self) -> None:
        self.level_db = self.peak_db = FLOOR_DB
        self.clipped = False
        self._update_text()
        self.update()

    def show_block(self, rms: float, peak: float) -> None:
        """The latest input: its RMS and peak amplitude (0..1)."""
        now = time.monotonic()
        self.level_db = to_db(rms)
        peak_db = to_db(peak)
        if peak_db >= self.peak_db or now - self._peak_at > PEAK_HOLD_S:
            self.peak_db, self._peak_at = peak_db, now
        if peak >= CLIP_LEVEL:
            self.clipped = True
        self._update_text()
        self.update()

    def _update_text(self) -> None:
        clip = "; clipping: record quieter or move away from the microphone" if self.clipped else ""
        self.setAccessibleDescription(f"level {self.level_db:.0f} dBFS, peak {self.peak_db:.0f} dBFS{clip}")
        self.setToolTip(f"Peak {self.peak_db:.0f} dBFS" + (" — the take clipped" if self.clipped else ""))

    def _x(self, db: float, width: float) -> float:
        return (db - FLOOR_DB) / -FLOOR_DB * width

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        p = QPainter(self)
        dark = is_dark(self.palette())
        bar = QRectF(0, 4, self.width() - LAMP_PX - 6, self.height() - 8)
        p.fillRect(bar, QColor("#2a2e35") if dark else QColor("#e3e6ea"))
        level = self._x(self.level_db, bar.width())
        for lo, hi, color in ((FLOOR_DB, -12.0, "#2fb36b"), (-12.0, -3.0, "#e0a020"), (-3.0, 0.0, "#e03c31")):
            a, b = self._x(lo, bar.width()), min(self._x(hi, bar.width()), level)
            if b > a:
                p.fillRect(QRectF(bar.left() + a, bar.top(), b - a, bar.height()), QColor(color))
        for db in (-48, -36, -24, -12, -6, -3):
            x = bar.left() + self._x(db, bar.width())
            p.fillRect(QRectF(x, bar.bottom() - 3, 1, 3), self.palette().mid())
        x = bar.left() + self._x(self.peak_db, bar.width())
        p.fillRect(QRectF(max(bar.left(), x - 1.5), bar.top(), 3, bar.height()), self.palette().text())
        lamp = QRectF(self.width() - LAMP_PX, 2, LAMP_PX, self.height() - 4)
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor("#e03c31") if self.clipped else (QColor("#3a3f47") if dark else QColor("#cfd3d8")))
        p.drawRoundedRect(lamp, 3, 3)
        p.setPen(QColor("#ffffff") if self.clipped else self.palette().mid().color())
        font = p.font()
        font.setBold(True)
        font.setPixelSize(10)
        p.setFont(font)
        p.drawText(lamp, Qt.AlignmentFlag.AlignCenter, "CLIP")
        p.end()
