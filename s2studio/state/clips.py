"""Reading reference clips and checking them (length, clipping, silence, sample rate).

Separate from the library so the window can check a clip while it is being recorded or dropped,
before any voice exists.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

from s2studio.errors import UserError


def read_audio(path: Path) -> tuple[np.ndarray, int, str]:
    """(frames, channels) float32, sample rate, subtype; UserError for anything not audio."""
    if not path.is_file():
        raise UserError(f"clip {path} does not exist")
    try:
        info = sf.info(str(path))
        data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        raise UserError(f"{path} is not an audio file soundfile can read ({exc}); use WAV, FLAC, OGG or MP3") from None
    if data.shape[0] == 0:
        raise UserError(f"clip {path} has no audio in it")
    return data, int(sr), info.subtype


def check_clip(path: Path) -> list[str]:
    """Warnings about a reference clip (never blocking): length, clipping, silence, sample rate."""
    data, sr, _ = read_audio(path)
    mono = data.mean(axis=1)
    warnings = []
    duration = len(mono) / sr
    if duration < 3.0:
        warnings.append(f"clip is {duration:.1f} s long; use 3–30 s (10–30 s clones best)")
    elif duration > 30.0:
        warnings.append(f"clip is {duration:.1f} s long; use at most 30 s (longer clips hurt cloning)")
    clipped = float(np.mean(np.abs(data) >= 0.999))
    if clipped > 0.001:
        warnings.append(f"clip is clipped ({clipped:.1%} of samples at full scale); record it quieter")
    hop = max(1, sr // 20)
    frames = len(mono) // hop
    if frames:
        rms = np.sqrt(np.mean(mono[:frames * hop].reshape(frames, hop) ** 2, axis=1))
        silent = float(np.mean(rms < 10 ** (-45 / 20)))
        if silent > 0.5:
            warnings.append(f"clip is mostly silence ({silent:.0%}); trim it to the speech")
    if sr < 22050:
        warnings.append(f"sample rate is {sr} Hz; use 22.05 kHz or more (S2 works at 44.1 kHz)")
    return warnings
