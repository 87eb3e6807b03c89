"""A sine tone written to an audio file: the clip the serve and hostile tests upload, encode and refuse.

It lives in a module of its own (not a `conftest.py`) so that every test imports the same function whatever
order pytest collects the test folders in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf


def tone(path: Path, seconds: float = 1.5, hz: float = 220.0, rate: int = 22050) -> Path:
    """Write `seconds` of a `hz` sine at `rate` to `path`, in the format its suffix names (WAV otherwise)."""
    t = np.arange(round(seconds * rate)) / rate
    kind = path.suffix.lstrip(".").upper() if path.suffix.lower() in (".wav", ".flac", ".ogg") else "WAV"
    with open(path, "wb") as f:  # a file object: the name may be bytes that are not UTF-8
        sf.write(f, (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32), rate, format=kind)
    return path
