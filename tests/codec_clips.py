"""Deterministic test clips for the codec goldens (numpy only: `tools/make_codec_goldens.py` runs it in the
reference venv, the tests in ours, and both must write the very same files).

A clip is a voiced-speech-like signal: a gliding fundamental with decaying harmonics, syllable-rate amplitude
modulation and a little noise, different per channel, about -12 dBFS. Codes of pure noise or silence would
exercise fewer codebook entries.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

CASES = [
    # name, sample rate, channels, seconds, soundfile subtype
    ("m16k_short", 16000, 1, 0.5, "PCM_16"),
    ("s16k", 16000, 2, 3.3, "PCM_16"),
    ("m16k_long", 16000, 1, 12.50025, "PCM_16"),  # > 2**19 output samples, fractional: float32 length rule
    ("m22k", 22050, 1, 1.7, "PCM_16"),
    ("s22k", 22050, 2, 0.9, "PCM_16"),
    ("m24k", 24000, 1, 2.4, "PCM_24"),
    ("s24k", 24000, 2, 4.1, "PCM_16"),
    ("m44k_tiny", 44100, 1, 0.03, "PCM_16"),  # less than one frame
    ("s44k", 44100, 2, 2.0, "PCM_16"),
    ("m44k_float", 44100, 1, 1.3, "FLOAT"),
    ("m48k_long", 48000, 1, 7.2, "PCM_16"),  # > 512 latent frames: the encoder transformer's window
    ("s48k", 48000, 2, 1.1, "PCM_16"),
    ("m8k", 8000, 1, 1.0, "PCM_16"),
    ("m192k", 192000, 1, 0.6, "PCM_16"),
]

CODEC_SEED = 20260311
"""Seed of the tiny random `codec.pth` the goldens were made with."""


def make_clip(name: str, rate: int, channels: int, seconds: float) -> np.ndarray:
    """`(N, channels)` float32 in about [-0.5, 0.5]."""
    seed = sum(name.encode()) * 7919 + rate
    rng = np.random.default_rng(seed)
    n = max(1, int(round(rate * seconds)))
    t = np.arange(n) / rate
    out = np.zeros((n, channels))
    for c in range(channels):
        f0 = 110 + 60 * rng.random() + 30 * np.sin(2 * np.pi * (0.5 + rng.random()) * t)
        phase = 2 * np.pi * np.cumsum(f0) / rate
        voice = sum(np.sin(k * phase + rng.random() * 6.28) / k**1.3 for k in range(1, 30) if k * f0.max() < rate / 2)
        envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4.0 * t + rng.random() * 6.28) ** 2
        out[:, c] = 0.2 * voice * envelope + 0.01 * rng.standard_normal(n)
    return out.astype(np.float32)


def write_clip(folder: Path, name: str, rate: int, channels: int, seconds: float, subtype: str) -> Path:
    path = Path(folder) / f"{name}.wav"
    sf.write(str(path), make_clip(name, rate, channels, seconds), rate, subtype=subtype)
    return path


def random_codes(seed: int, frames: int, semantic: int = 64, residual: int = 32, over: int = 0) -> np.ndarray:
    """`(10, frames)` int64 codes; `over` > 0 draws values up to that much above each codebook (clamped)."""
    rng = np.random.default_rng(seed)
    codes = np.empty((10, frames), dtype=np.int64)
    codes[0] = rng.integers(0, semantic + over, frames)
    codes[1:] = rng.integers(0, residual + over, (9, frames))
    return codes
