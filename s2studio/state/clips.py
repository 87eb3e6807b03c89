"""Reading reference clips, the one rule a reference must meet, and the warnings about a clip.

`read_audio` is the one reader of reference audio: the voice library calls it when a clip is added and
the codec's reference loader (`audio.io.read_channels` → `codec.resample.load_reference`) calls it before
encoding, so a clip the engine would refuse is refused when it is added, with the same words
(`reference_problem`): at most 5 minutes (the encoder's exact attention grows with the square of the
length), a sample rate of at least 8 kHz, only finite samples, and, for a voice's clip, at least a quarter
second and some sound: a clip that is all silence carries no voice (the codec itself encodes any length and
any silence, as upstream does).
`check_clip` and `audio_warnings` add the warnings that never block (length, clipping, mostly silence, a low
rate), for a file or for audio being prepared (trimmed, split) before it is a file.

Separate from the library so the window can check a clip while it is being recorded or dropped,
before any voice exists. Files are opened by Python and handed to soundfile, so a path that is not
UTF-8 (surrogate escapes of a Linux file name) reads like any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from s2studio.errors import UserError, printable

MAX_REFERENCE_SECONDS = 300.0
"""Longest clip accepted (5 min). A voice reference needs seconds; the encoder's exact attention builds a
T×T mask at 86 Hz (upstream's too: 2.7 GB as float at 5 min, 11 GB at 10 min), so longer files would
exhaust memory instead of failing clearly."""
MIN_REFERENCE_SECONDS = 0.25
"""Shortest clip accepted: about 11 codec frames; less carries no voice (a 1-sample clip gives one frame)."""
MIN_SAMPLE_RATE = 8000
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


def reference_problem(name: str, frames: int, sample_rate: int, max_seconds: float = MAX_REFERENCE_SECONDS,
                      min_seconds: float = MIN_REFERENCE_SECONDS) -> str | None:
    """Why a clip of `frames` samples at `sample_rate` cannot be a reference (None when it can)."""
    if sample_rate < MIN_SAMPLE_RATE:
        return (f"{name} has a sample rate of {sample_rate} Hz, too low to be speech; use at least "
                f"{MIN_SAMPLE_RATE // 1000} kHz (22.05 kHz or more clones best)")
    seconds = frames / sample_rate
    if seconds > max_seconds:
        return f"{name} is {seconds:.0f} s long; use a clip of at most {max_seconds:.0f} s (cut it shorter)"
    if seconds < min_seconds:
        return (f"{name} is {seconds:.2f} s long ({frames} samples); a reference needs at least "
                f"{min_seconds} s of speech (3–30 s clones best)")
    return None


def read_audio(path: Path, max_seconds: float = MAX_REFERENCE_SECONDS,
               voice_clip: bool = True) -> tuple[np.ndarray, int, str]:
    """(frames, channels) float32 as soundfile reads it, sample rate, subtype; one `UserError` for anything
    that is not a usable reference clip (`reference_problem`; a voice's clip is also at least a quarter
    second long and not silence). The codec alone reads with `voice_clip=False`: it encodes any length and
    any content as upstream does (a clip shorter than a frame is one frame, a parity case)."""
    path = Path(path)
    name = printable(path.name)
    if path.is_dir():
        raise UserError(f"{printable(path)} is a folder; give an audio file (WAV, FLAC, OGG or MP3)")
    if not path.is_file():
        raise UserError(f"audio file not found: {printable(path)}")
    try:
        with path.open("rb") as f:
            info = sf.info(f)
            rate = info.samplerate
            if rate > 0 and (rate < MIN_SAMPLE_RATE or info.frames / rate > max_seconds):
                # refused from the header: a 10-minute file is never loaded
                raise UserError(reference_problem(name, info.frames, rate, max_seconds) or "")
            f.seek(0)
            data, sr = sf.read(f, dtype="float32", always_2d=True)
    except UserError:
        raise
    except OSError as exc:
        raise UserError(f"cannot read {printable(path)}: {printable(exc.strerror or exc)}") from None
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise UserError(f"{name} is not an audio file that can be read ({printable(soundfile_reason(exc), 120)}); "
                        "use WAV, FLAC, OGG or MP3") from None
    check_reference(name, data, int(sr), max_seconds, voice_clip)
    return data, int(sr), info.subtype


def check_reference(name: str, data: np.ndarray, sr: int, max_seconds: float = MAX_REFERENCE_SECONDS,
                    voice_clip: bool = True) -> None:
    """The rule of `read_audio` for samples already in memory ((frames, channels) float32): one `UserError`
    when they cannot be a reference (a voice's clip: `voice_clip`)."""
    if data.ndim != 2 or data.shape[0] == 0 or data.shape[1] == 0:
        raise UserError(f"{name} contains no audio samples; record or choose a longer clip")
    if not np.isfinite(data).all():
        raise UserError(f"{name} contains invalid samples (NaN or infinity); re-export it")
    problem = reference_problem(name, data.shape[0], sr, max_seconds, MIN_REFERENCE_SECONDS if voice_clip else 0.0)
    if problem is None and voice_clip:
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
    if duration < 3.0:
        warnings.append(f"clip is {duration:.1f} s long; use 3–30 s (10–30 s clones best)")
    elif duration > 30.0:
        warnings.append(f"clip is {duration:.1f} s long; use at most 30 s (longer clips hurt cloning)")
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
