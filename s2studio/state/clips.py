"""Reading reference clips, the one rule a reference must meet, and the warnings about a clip.

`read_audio` is the one reader of reference audio: the voice library calls it when a clip is added and
the codec's reference loader (`audio.io.read_channels` → `codec.resample.load_reference`) calls it before
encoding, so a clip the engine would refuse is refused when it is added, with the same words
(`reference_problem`): at most 5 minutes (the encoder's exact attention grows with the square of the
length), a sample rate of at least 8 kHz, only finite samples, and, for a voice's clip, at least a quarter
second (the codec itself encodes any length, as upstream does).
`check_clip` adds the warnings that never block (length, clipping, silence, a low rate).

Separate from the library so the window can check a clip while it is being recorded or dropped,
before any voice exists. Files are opened by Python and handed to soundfile, so a path that is not
UTF-8 (surrogate escapes of a Linux file name) reads like any other.
"""

from __future__ import annotations

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
               min_seconds: float = MIN_REFERENCE_SECONDS) -> tuple[np.ndarray, int, str]:
    """(frames, channels) float32 as soundfile reads it, sample rate, subtype; one `UserError` for anything
    that is not a usable reference clip (`reference_problem`). The codec alone reads with `min_seconds=0`:
    it encodes any length as upstream does (a clip shorter than a frame is one frame, a parity case)."""
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
    if data.shape[0] == 0 or data.shape[1] == 0:
        raise UserError(f"{name} contains no audio samples; record or choose a longer clip")
    if not np.isfinite(data).all():
        raise UserError(f"{name} contains invalid samples (NaN or infinity); re-export it")
    problem = reference_problem(name, data.shape[0], int(sr), max_seconds, min_seconds)
    if problem:
        raise UserError(problem)
    return data, int(sr), info.subtype


def check_clip(path: Path) -> list[str]:
    """Warnings about a reference clip (never blocking): length, clipping, silence, sample rate. A clip that
    cannot be a reference at all raises `UserError` (`read_audio`)."""
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
