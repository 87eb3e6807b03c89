"""What one take's check is given: the take, its line and its voice's clips. Apart from the checker (`checks.checker`)
so that the window builds jobs without importing the checker, which it never runs (a first import of it is a
block of the window's thread at the first finished take)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Clip:
    """A clip of the take's voice: its file and its transcript."""

    path: str
    transcript: str


@dataclass(frozen=True)
class CheckJob:
    """One take to check, with what the checks compare it to."""

    take_id: str
    line_id: str
    text: str
    """The line as the model read it, tags included."""
    samples: np.ndarray
    rate: int
    max_frames: int | None = None
    """The frame limit the take was made under (None when unknown)."""
    clips: tuple[Clip, ...] = ()
    """The voice's clips (the pace and voice checks compare with them)."""
    neighbour_paces: tuple[float, ...] = ()
    """Syllables per second of the picked takes of the lines around it, same speaker."""
