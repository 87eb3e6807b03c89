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

from s2studio.errors import UserError
from s2studio.state.atomic import write_bytes_atomic

MAX_SECONDS = 300.0
"""Longest clip accepted for reading (5 min). A voice reference needs seconds; the encoder's exact attention
builds a T×T mask at 86 Hz (upstream's too: 2.7 GB as float at 5 min, 11 GB at 10 min), so longer files
would exhaust memory instead of failing clearly."""


def read_channels(path: Path, max_seconds: float = MAX_SECONDS) -> tuple[np.ndarray, int]:
    """`(samples (channels, N) float32, sample_rate)` of any file soundfile reads (WAV of every sample format,
    FLAC, OGG, MP3 …)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"audio file not found: {path}")
    try:
        info = sf.info(str(path))
        if info.frames > 0 and info.samplerate > 0 and info.frames / info.samplerate > max_seconds:
            raise UserError(_too_long(path, info.frames / info.samplerate, max_seconds))
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except UserError:
        raise
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise UserError(f"{path.name} is not an audio file that can be read ({exc}); "
                        "use WAV, FLAC, OGG or MP3") from exc
    if data.shape[0] == 0 or data.shape[1] == 0:
        raise UserError(f"{path.name} contains no audio samples; record or choose a longer clip")
    if data.shape[0] / rate > max_seconds:
        raise UserError(_too_long(path, data.shape[0] / rate, max_seconds))
    if not np.isfinite(data).all():
        raise UserError(f"{path.name} contains invalid samples (NaN or infinity); re-export it")
    return np.ascontiguousarray(data.T), int(rate)


def _too_long(path: Path, seconds: float, max_seconds: float) -> str:
    return f"{path.name} is {seconds:.0f} s long; use a clip of at most {max_seconds:.0f} s (cut it shorter)"


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


def wav_bytes(samples: np.ndarray, sample_rate: int = 44100) -> bytes:
    """Mono float samples as the bytes of a PCM16 WAV exactly as upstream writes it (canonical 44-byte header)."""
    buf = io.BytesIO()
    sf.write(buf, np.asarray(samples, dtype=np.float32).reshape(-1), sample_rate, subtype="PCM_16", format="WAV")
    return buf.getvalue()


def write_wav(path: Path, samples: np.ndarray, sample_rate: int = 44100) -> None:
    """`wav_bytes` to the file `path`, atomically (a crash never leaves half a file)."""
    write_bytes_atomic(Path(path), wav_bytes(samples, sample_rate))
