"""Reading reference clips, the one rule a reference must meet, and the warnings about a clip.

`read_audio` is the one reader of audio files: the voice library calls it when a clip is added and
the codec's reference loader (`audio.io.read_channels` → `codec.resample.load_reference`) calls it before
encoding, so a clip the engine would refuse is refused when it is added, with the same words. The limits
are `state.audio_limits` (rate, channels, length, decoded samples), checked from the header before anything
is decoded, and the decode itself is cut at the limit, so a header that lies costs no more; then only finite
samples, and, for a voice's clip, at least a quarter second and some sound: a clip that is all silence carries
no voice (the codec itself encodes any length and any silence, as upstream does). `read_audio_from` is the
same reader for a file object (the server's inline references arrive as bytes).
`check_clip` and `audio_warnings` add the warnings that never block (length, clipping, mostly silence, a low
rate), for a file or for audio being prepared (trimmed, split) before it is a file.

Separate from the library so the window can check a clip while it is being recorded or dropped,
before any voice exists. Files are opened by Python and handed to soundfile, so a path that is not
UTF-8 (surrogate escapes of a Linux file name) reads like any other.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import soundfile as sf

from s2studio.errors import UserError, printable
from s2studio.state.audio_limits import (
    MAX_RECORDING_SECONDS, MAX_REFERENCE_SECONDS, MIN_REFERENCE_SECONDS, audio_problem, max_samples, rate_problem,
)

__all__ = ["MAX_RECORDING_SECONDS", "MAX_REFERENCE_SECONDS", "ClipAudio", "audio_warnings", "check_clip",
           "check_reference", "read_audio", "read_audio_from", "read_clip"]

SILENCE_DBFS = -60.0
"""A clip none of whose 50 ms blocks is louder than this (RMS) is silence: refused as a voice's clip."""
QUIET_DBFS = -45.0
"""Blocks quieter than this count as silence in the "mostly silence" warning."""


def block_levels(mono: np.ndarray, sr: int, block_s: float = 0.05) -> np.ndarray:
    """RMS level in dBFS of each whole `block_s` block of `mono` (-inf for digital silence)."""
    hop = max(1, int(sr * block_s))
    frames = len(mono) // hop
    if not frames:
        frames, hop = 1, len(mono)
    blocks = np.asarray(mono[:frames * hop], dtype=np.float64).reshape(frames, hop)
    with np.errstate(divide="ignore"):
        return 10 * np.log10(np.mean(blocks * blocks, axis=1))


def silence_problem(name: str, mono: np.ndarray, sr: int) -> str | None:
    """Why `mono` cannot be a voice's clip because it is all silence (None when it has sound)."""
    if len(mono) and float(block_levels(mono, sr).max()) > SILENCE_DBFS:
        return None
    return (f"{name} is silence (no sound above {SILENCE_DBFS:.0f} dBFS); record or choose a clip in which "
            "someone speaks")


def soundfile_reason(exc: BaseException) -> str:
    """libsndfile's own words for `exc` (without soundfile's "Error opening <file object>" prefix)."""
    return str(getattr(exc, "error_string", None) or exc).strip().rstrip(".")


def read_audio(path: Path, max_seconds: float = MAX_REFERENCE_SECONDS,
               voice_clip: bool = True) -> tuple[np.ndarray, int, str]:
    """(frames, channels) float32 as soundfile reads it, sample rate, subtype; one `UserError` for anything
    that is not a usable clip (`state.audio_limits`; a voice's clip is also at least a quarter second long and
    not silence). The codec alone reads with `voice_clip=False`: it encodes any length and any content as
    upstream does (a clip shorter than a frame is one frame, a parity case). A recording that is only read
    (to be split, or transcribed) passes `max_seconds=MAX_RECORDING_SECONDS`."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{printable(path)} is a folder; give an audio file (WAV, FLAC, OGG or MP3)")
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise UserError(f"audio file not found: {printable(path)}") from None
    except OSError as exc:
        raise UserError(f"cannot read {printable(path)}: {printable(exc.strerror or exc)}") from None
    if not stat.S_ISREG(mode):
        raise UserError(f"{printable(path)} is not a regular file (a device, pipe or socket); give an audio file")
    try:
        with path.open("rb") as f:
            return read_audio_from(f, printable(path.name), max_seconds, voice_clip)
    except OSError as exc:
        raise UserError(f"cannot read {printable(path)}: {printable(exc.strerror or exc)}") from None


def read_audio_from(f: BinaryIO, name: str, max_seconds: float = MAX_REFERENCE_SECONDS,
                    voice_clip: bool = True) -> tuple[np.ndarray, int, str]:
    """`read_audio` of an open file (or `io.BytesIO`) that messages call `name`."""
    try:
        info = sf.info(f)
        rate, channels = int(info.samplerate), max(1, int(info.channels))
        # refused from the header: a file that would decode to more than its limit is never decoded
        known = 0 < info.frames < 2**62  # a stream that does not say its length reports 0 or 2**63 - 1
        problem = rate_problem(name, rate) or (
            audio_problem(name, info.frames, rate, channels, max_seconds) if known else None)
        if problem:
            raise UserError(problem)
        limit = min(int(max_seconds * rate), max_samples(max_seconds) // channels) + 1
        f.seek(0)
        data, sr = sf.read(f, frames=limit, dtype="float32", always_2d=True)
    except UserError:
        raise
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise UserError(f"{name} is not an audio file that can be read ({printable(soundfile_reason(exc), 120)}); "
                        "use WAV, FLAC, OGG or MP3") from None
    if data.shape[0] >= limit:  # the header did not say (or said less than) what the file holds: cut at the limit
        raise UserError(audio_problem(name, data.shape[0], int(sr), channels, max_seconds)
                        if data.shape[0] * channels > max_samples(max_seconds)
                        else f"{name} is longer than {max_seconds:.0f} s; use a clip of at most {max_seconds:.0f} s "
                             "(cut it shorter)")
    check_reference(name, data, int(sr), max_seconds, voice_clip)
    return data, int(sr), info.subtype


def check_reference(name: str, data: np.ndarray, sr: int, max_seconds: float = MAX_REFERENCE_SECONDS,
                    voice_clip: bool = True) -> None:
    """The rule of `read_audio` for samples already in memory ((frames, channels) float32): one `UserError`
    when they cannot be a reference (a voice's clip: `voice_clip`)."""
    if data.ndim != 2 or data.shape[0] == 0 or data.shape[1] == 0:
        raise UserError(f"{name} contains no audio samples; record or choose a longer clip")
    problem = audio_problem(name, data.shape[0], sr, data.shape[1], max_seconds,
                            MIN_REFERENCE_SECONDS if voice_clip else 0.0)
    if problem:
        raise UserError(problem)
    if not np.isfinite(data).all():
        raise UserError(f"{name} contains invalid samples (NaN or infinity); re-export it")
    if voice_clip:
        problem = silence_problem(name, data.mean(axis=1), sr)
        if problem:
            raise UserError(problem)


@dataclass(frozen=True)
class ClipAudio:
    """A voice's clip that is not a file (yet): recorded, or trimmed, split and normalised in the studio."""

    name: str
    """What messages call it ("Recording", "long-take.wav, part 2")."""
    data: np.ndarray
    """(frames, channels) float32."""
    rate: int
    subtype: str = "PCM_24"
    """How its source was stored: a 16-bit source stays 16-bit in the library."""

    def checked(self) -> tuple[np.ndarray, int, str]:
        """(data, rate, subtype) as `read_audio` returns them, once the reference rule holds."""
        data = np.asarray(self.data, dtype=np.float32)
        data = data[:, None] if data.ndim == 1 else data
        check_reference(printable(self.name), data, self.rate)
        return data, self.rate, self.subtype


def read_clip(source: Path | ClipAudio) -> tuple[np.ndarray, int, str]:
    """A voice's clip from a file (`read_audio`) or from memory (`ClipAudio.checked`), by the same rule."""
    return source.checked() if isinstance(source, ClipAudio) else read_audio(Path(source))


def check_clip(path: Path) -> list[str]:
    """Warnings about a reference clip file (never blocking, `audio_warnings`). A clip that cannot be a
    reference at all raises `UserError` (`read_audio`)."""
    data, sr, _ = read_audio(path)
    return audio_warnings(data, sr)


def audio_warnings(data: np.ndarray, sr: int) -> list[str]:
    """Warnings about reference audio, (frames,) or (frames, channels): length, clipping, mostly silence,
    sample rate."""
    data = np.asarray(data, dtype=np.float32)
    mono = data if data.ndim == 1 else data.mean(axis=1)
    warnings = []
    duration = len(mono) / sr
    if duration < 3.0:  # (longer than 30 s is refused: `state.audio_limits.MAX_REFERENCE_SECONDS`)
        warnings.append(f"clip is {duration:.1f} s long; use 3–30 s (10–30 s clones best)")
    clipped = float(np.mean(np.abs(data) >= 0.999)) if data.size else 0.0
    if clipped > 0.001:
        warnings.append(f"clip is clipped ({clipped:.1%} of samples at full scale); record it quieter")
    if len(mono) >= sr // 20:
        silent = float(np.mean(block_levels(mono, sr) < QUIET_DBFS))
        if silent > 0.5:
            warnings.append(f"clip is mostly silence ({silent:.0%}); trim the silence around the speech")
    if sr < 22050:
        warnings.append(f"sample rate is {sr} Hz; use 22.05 kHz or more (S2 works at 44.1 kHz)")
    return warnings
