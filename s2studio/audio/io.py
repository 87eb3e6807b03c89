"""Reading and writing audio files with soundfile, torch-free (the UI imports this).

Reading returns float32 in [-1, 1) per channel exactly as upstream's `torchaudio.load(normalize=True)` does
(16-bit PCM / 32768, 24-bit / 2²³, 32-bit / 2³¹, float as stored), so codes made from our reading equal
upstream's. Writing PCM16 goes through `soundfile.write` like upstream's: python-soundfile turns libsndfile's
clipping on, so samples become `(rint(x · 2³¹) clipped) >> 16`, not `round(x · 32767)` (spec s2-codec.md §9.2).

Every problem a user can cause (missing file, not audio, empty, too long, NaNs) is a one-line UserError.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import soundfile as sf

from s2studio.audio import SAMPLE_RATE
from s2studio.state.atomic import write_bytes_atomic
from s2studio.state.audio_limits import MAX_REFERENCE_SECONDS
from s2studio.state.clips import read_audio as read_reference

MAX_SECONDS = MAX_REFERENCE_SECONDS
"""Longest clip the codec encodes (`state.audio_limits`)."""


def read_channels(path: Path, max_seconds: float = MAX_SECONDS) -> tuple[np.ndarray, int]:
    """`(samples (channels, N) float32, sample_rate)` of any file soundfile reads (WAV of every sample format,
    FLAC, OGG, MP3 …), refused with one line unless it can be a reference clip (`state.clips.read_audio`, the
    one reader and the one rule, shared with the voice library)."""
    data, rate, _ = read_reference(Path(path), max_seconds, voice_clip=False)
    return np.ascontiguousarray(data.T), rate


def read_audio(path: Path, max_seconds: float = MAX_SECONDS) -> tuple[np.ndarray, int]:
    """`(mono samples (N,) float32, sample_rate)`: channels averaged (for previews and checks; the codec path
    mixes in torch, as upstream, see `s2studio.codec.resample`)."""
    channels, rate = read_channels(path, max_seconds)
    if channels.shape[0] == 1:
        return channels[0], rate
    return channels.mean(axis=0, dtype=np.float32), rate


def pcm16(samples: np.ndarray) -> np.ndarray:
    """The int16 samples `soundfile.write(…, subtype="PCM_16")` stores for float `samples` (libsndfile's
    clipping path): for comparing decodes as written, without a file."""
    s = np.rint(np.asarray(samples, dtype=np.float32).astype(np.float64) * 2.0**31)
    return (np.clip(s, -(2.0**31), 2.0**31 - 1).astype(np.int64) >> 16).astype(np.int16)


def wav_bytes(samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> bytes:
    """Mono float samples as the bytes of a PCM16 WAV exactly as upstream writes it (canonical 44-byte header)."""
    buf = io.BytesIO()
    sf.write(buf, np.asarray(samples, dtype=np.float32).reshape(-1), sample_rate, subtype="PCM_16", format="WAV")
    return buf.getvalue()


def write_wav(path: Path, samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    """`wav_bytes` to the file `path`, atomically (a crash never leaves half a file)."""
    write_bytes_atomic(Path(path), wav_bytes(samples, sample_rate))
