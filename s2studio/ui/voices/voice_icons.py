"""The voice list's pictures: the add-voice icon and each voice's round badge of initials."""

from __future__ import annotations

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QFont, QIcon, QPainter, QPainterPath, QPen, QPixmap

from s2studio.ui.colors import speaker_color


def add_voice_icon(color: QColor, size: int = 32) -> QIcon:
    """"Add voice from a file": a sound wave with a plus, drawn so it reads at 16–32 px on any theme."""
    icon = QIcon()
    for px in (16, 24, size):
        pix = QPixmap(px, px)
        pix.fill(Qt.GlobalColor.transparent)
        p = QPainter(pix)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.scale(px / 32, px / 32)
        p.setPen(QPen(color, 2.6, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
        for x, h in ((4, 6), (9, 14), (14, 22), (19, 12), (24, 7)):
            p.drawLine(QPointF(x, 16 - h / 2), QPointF(x, 16 + h / 2))
        plus = QPainterPath()
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor("#2f9e44"))
        p.drawEllipse(QPointF(25, 25), 6.5, 6.5)
        p.setPen(QPen(QColor("#ffffff"), 2.2, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
        plus.moveTo(25, 21.5)
        plus.lineTo(25, 28.5)
        plus.moveTo(21.5, 25)
        plus.lineTo(28.5, 25)
        p.drawPath(plus)
        p.end()
        icon.addPixmap(pix)
    return icon


def avatar(name: str, dark: bool, size: int = 60) -> QIcon:
    """A round badge with the voice's initials, in a colour that stays the same for the name."""
    pix = QPixmap(size, size)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    color = speaker_color(name, dark)
    p.setBrush(color)
    p.setPen(Qt.PenStyle.NoPen)
    p.drawEllipse(0, 0, size, size)
    font = QFont()
    font.setPixelSize(int(size * 0.42))
    font.setBold(True)
    p.setFont(font)
    p.setPen(QColor("#ffffff") if color.lightness() < 150 else QColor("#1b1b1b"))
    initials = "".join(w[0] for w in name.split()[:2] if w[:1].isalnum()).upper() or "?"
    p.drawText(pix.rect(), Qt.AlignmentFlag.AlignCenter, initials)
    p.end()
    return QIcon(pix)
