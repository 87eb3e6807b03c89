"""The limits audio must meet before it is decoded, wherever it enters: one table, read by every reader.

A file's header says its sample rate, channels and length; everything below is decided from those three
numbers before a sample is decoded, so a small file cannot make a reader allocate much more than its limit (a
16 kB WAV at 8009 Hz once asked the resampler for a 2.8 GB kernel; a 338 kB FLAC of silence at 655 kHz × 8
channels decoded to 2 GB). The readers are `state.clips.read_audio` (voices, `.s2voice` imports, the studio's
clips, `transcribe`, training data and the codec's reference loader) and the server's inline references
(`serve.references`), which read the same way from bytes; the resamplers (`codec.resample`,
`train.tokens`, `audio.dsp` for speech recognition) refuse a rate this table refuses, as a second line of
defence.

Rates: only those whose ratio to 44.1 kHz, reduced, has both terms at most `MAX_RATIO_TERM`, so the
resampling kernel stays small (its size is the product of the two terms) and every common rate (8, 11.025,
12, 16, 22.05, 24, 32, 44.1, 48, 64, 88.2, 96, 176.4, 192 kHz) is resampled exactly as upstream does. Other
rates (8009 Hz, 44101 Hz) are refused with one line that says to convert the clip.

Lengths: a reference (a voice's clip, a request's inline reference, a training clip) is what the codec
encodes, and the codec's exact encoder costs memory in proportion to the length (its convolutions at the full
sample rate) plus the square of it (its attention at 86 Hz); `MAX_REFERENCE_SECONDS` bounds that. A recording
(a take dropped into the studio to be trimmed and split, a file to transcribe) is only read, so it may be
longer. Decoded samples (frames × channels) are bounded as well: at most `SAMPLES_PER_SECOND` for each second
of the limit, i.e. the limit's length of 48 kHz stereo.
"""

from __future__ import annotations

import math

from s2studio.units import SAMPLE_RATE

MIN_SAMPLE_RATE = 8000
MAX_SAMPLE_RATE = 192_000
MAX_RATIO_TERM = 1000
"""Largest numerator or denominator of a rate's reduced ratio to 44.1 kHz (16 kHz: 160/441; 48 kHz: 160/147)."""
MAX_CHANNELS = 8
MAX_REFERENCE_SECONDS = 30.0
"""Longest clip the codec encodes: what clones best (10-30 s) and what the record dialog takes. The exact encoder's
peak memory grows with the length (`bench/reference_memory.py` prints what a clip costs; the README states it)."""
MIN_REFERENCE_SECONDS = 0.25
"""Shortest voice clip: about 11 codec frames; less carries no voice (a 1-sample clip gives one frame)."""
MAX_RECORDING_SECONDS = 600.0
"""Longest file that is only read: a take to be trimmed and split into clips, a file to transcribe (10 min)."""
SAMPLES_PER_SECOND = 96_000
"""Decoded samples (frames × channels) allowed per second of a length limit: that length of 48 kHz stereo."""


def max_samples(max_seconds: float) -> int:
    """Most decoded samples (frames × channels) a file under the length limit `max_seconds` may hold."""
    return int(max_seconds * SAMPLES_PER_SECOND)


def resample_ratio(rate: int, target: int = SAMPLE_RATE) -> tuple[int, int]:
    """(from, to) of `rate` → `target`, reduced: the resampling kernel's size is their product."""
    g = math.gcd(rate, target)
    return rate // g, target // g


def rate_problem(name: str, rate: int) -> str | None:
    """Why audio at `rate` Hz cannot be used (None when it can): too low for speech, higher than any reader
    takes, or a rate that converts to 44.1 kHz only through a huge kernel."""
    if rate < MIN_SAMPLE_RATE:
        return (f"{name} has a sample rate of {rate} Hz, too low to be speech; use at least "
                f"{MIN_SAMPLE_RATE // 1000} kHz (22.05 kHz or more clones best)")
    if rate > MAX_SAMPLE_RATE:
        return (f"{name} has a sample rate of {rate / 1000:g} kHz, above the {MAX_SAMPLE_RATE // 1000} kHz this "
                "program reads; convert the clip to 44.1 or 48 kHz")
    if max(resample_ratio(rate)) > MAX_RATIO_TERM:
        return (f"{name} has an unusual sample rate of {rate} Hz, which does not convert to 44.1 kHz exactly; "
                "convert the clip to 44.1 or 48 kHz")
    return None


def size_problem(name: str, frames: int, rate: int, channels: int, max_seconds: float,
                 min_seconds: float = 0.0) -> str | None:
    """Why `frames` frames of `channels` channels at `rate` Hz are not a usable clip under the length limit
    `max_seconds` (None when they are). `rate` is assumed to have passed `rate_problem`."""
    if channels > MAX_CHANNELS:
        return (f"{name} has {channels} channels; at most {MAX_CHANNELS} are read: mix it down to mono or stereo")
    seconds = frames / rate
    if seconds > max_seconds:
        return f"{name} is {seconds:.0f} s long; use a clip of at most {max_seconds:.0f} s (cut it shorter)"
    if frames * channels > max_samples(max_seconds):
        return (f"{name} holds {frames * channels / 1e6:.1f} million samples ({channels} channels at "
                f"{rate / 1000:g} kHz), more than the {max_samples(max_seconds) / 1e6:.1f} million a clip of "
                f"{max_seconds:.0f} s may hold; convert it to mono at 44.1 or 48 kHz")
    if seconds < min_seconds:
        return (f"{name} is {seconds:.2f} s long ({frames} samples); a reference needs at least "
                f"{min_seconds} s of speech (3–30 s clones best)")
    return None


def audio_problem(name: str, frames: int, rate: int, channels: int, max_seconds: float,
                  min_seconds: float = 0.0) -> str | None:
    """`rate_problem`, then `size_problem`: everything a header can tell about a clip."""
    return rate_problem(name, rate) or size_problem(name, frames, rate, channels, max_seconds, min_seconds)
