"""Colours shared by the window's regions: one colour per speaker, and light or dark.

Speakers are coloured by the place in the palette the project gave them when they first appeared
(`Project.speaker_colors`, kept for the life of the project, so inserting a line above or Undo recolours
nobody), from a palette of twelve colours chosen to stay apart from each other (each pair at least 18 CIE76 ΔE
apart, which the eye tells apart at a glance) and readable as text on the theme's background (contrast at least
3:1), one set for a light and one for a dark theme. The thirteenth place and later ones reuse the palette in
order. A name with no place (a voice in the library, a speaker being typed) gets a colour from its name, stable
across runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from PySide6.QtGui import QColor, QPalette

LIGHT = ("#1f5fbf", "#d35400", "#2e7d32", "#c2185b", "#6a3cb5", "#00838f",
         "#795548", "#8a8a00", "#e53935", "#ad00d4", "#00a86b", "#b8860b")
"""Blue, orange, green, raspberry, violet, teal, brown, olive, red, magenta, jade, gold (on white)."""
DARK = ("#6ea8ff", "#ff9a4d", "#6fcf73", "#f06292", "#b39ddb", "#4dd0e1",
        "#c8a27a", "#d4d45a", "#ff5252", "#ea05ff", "#00e5a0", "#ffd54f")
"""The same twelve, lighter, for a dark background."""


def palette_color(index: int, dark: bool) -> QColor:
    """The colour of the speaker at `index` (0-based) in the order the script names them."""
    colors = DARK if dark else LIGHT
    return QColor(colors[index % len(colors)])


def speaker_colors(places: Mapping[str, int], dark: bool) -> dict[str, QColor]:
    """Each speaker's colour by its place in the palette (`Project.speaker_colors`)."""
    return {name: palette_color(place, dark) for name, place in places.items()}


def speaker_color(name: str, dark: bool) -> QColor:
    """A stable colour for a name that has no place in a script (a voice's avatar, a name being typed)."""
    return palette_color(int(hashlib.sha1(name.strip().encode()).hexdigest(), 16), dark)


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Base).lightness() < 128
