"""Colours shared by the window's regions: one stable colour per speaker, and light or dark."""

from __future__ import annotations

import hashlib

from PySide6.QtGui import QColor, QPalette

_SPEAKER_HUES = (210, 20, 140, 280, 50, 330, 170, 0)


def speaker_color(name: str, dark: bool) -> QColor:
    """A stable colour per speaker name, readable on the current background."""
    hue = _SPEAKER_HUES[int(hashlib.sha1(name.strip().encode()).hexdigest(), 16) % len(_SPEAKER_HUES)]
    return QColor.fromHsl(hue, 170, 170 if dark else 95)


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Base).lightness() < 128
