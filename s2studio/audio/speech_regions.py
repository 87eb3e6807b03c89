"""Where the speech is in a recording: a voice-activity detector for trimming and splitting reference clips.

Silero VAD (v6) does the work: its ONNX model ships inside the faster-whisper wheel (`faster_whisper/assets/
silero_vad_v6.onnx`, run by onnxruntime, no torch), which the `asr` extra installs for the transcripts anyway, and
faster-whisper's `get_speech_timestamps` applies it at 16 kHz in 32 ms windows. Without that extra an energy gate
stands in (`energy_regions`: 20 ms blocks above the recording's own noise floor), so trimming still works in a
studio installed without transcripts; it is fooled by loud steady noise, which Silero is not.

Everything here is numpy, runs in a worker thread (a 30 s clip takes ~0.2 s on one core) and returns seconds.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import numpy as np

from s2studio.audio.dsp import resample
from s2studio.state.clips import block_levels

VAD_RATE = 16000
"""Silero's rate (it also takes 8 kHz; 16 kHz is what faster-whisper feeds it)."""


@dataclass(frozen=True)
class Region:
    """A stretch of speech, in seconds from the start of the recording."""

    start: float
    end: float

    @property
    def length(self) -> float:
        return self.end - self.start


def detector() -> str:
    """"silero" when faster-whisper (and so its Silero model and onnxruntime) is installed, else "energy"."""
    found = importlib.util.find_spec("faster_whisper") is not None and importlib.util.find_spec("onnxruntime")
    return "silero" if found else "energy"


def speech_regions(mono: np.ndarray, rate: int, min_silence_s: float = 0.3, pad_s: float = 0.05,
                   max_speech_s: float = float("inf")) -> list[Region]:
    """The speech in `mono` (float samples at `rate`), as regions separated by pauses of at least
    `min_silence_s`, each widened by `pad_s` (within the recording). A region longer than `max_speech_s` is
    cut at its last short pause before that length (Silero; the energy gate cuts at its quietest block)."""
    mono = np.asarray(mono, dtype=np.float32).reshape(-1)
    if not len(mono):
        return []
    if detector() == "silero":
        regions = _silero_regions(mono, rate, min_silence_s, max_speech_s)
    else:
        regions = energy_regions(mono, rate, min_silence_s, max_speech_s)
    total = len(mono) / rate
    return [Region(max(0.0, r.start - pad_s), min(total, r.end + pad_s)) for r in regions]


def speech_bounds(mono: np.ndarray, rate: int, pad_s: float = 0.1) -> tuple[float, float] | None:
    """(start, end) in seconds from the first speech to the last, `pad_s` of margin each side, for
    trimming the silence around a clip; None when there is no speech at all."""
    regions = speech_regions(mono, rate, pad_s=pad_s)
    if not regions:
        return None
    return regions[0].start, regions[-1].end


def _silero_regions(mono: np.ndarray, rate: int, min_silence_s: float, max_speech_s: float) -> list[Region]:
    from faster_whisper.vad import VadOptions, get_speech_timestamps  # noqa: PLC0415 - the optional extra

    audio = resample(mono, rate, VAD_RATE) if rate != VAD_RATE else mono
    options = VadOptions(min_silence_duration_ms=int(min_silence_s * 1000), speech_pad_ms=0,
                         min_speech_duration_ms=100, max_speech_duration_s=max_speech_s)
    found = get_speech_timestamps(np.ascontiguousarray(audio, dtype=np.float32), options, VAD_RATE)
    return [Region(s["start"] / VAD_RATE, s["end"] / VAD_RATE) for s in found if s["end"] > s["start"]]


def energy_regions(mono: np.ndarray, rate: int, min_silence_s: float = 0.3,
                   max_speech_s: float = float("inf"), block_s: float = 0.02) -> list[Region]:
    """The energy gate: 20 ms blocks louder than the noise floor (the 10th percentile of block levels) by
    12 dB, and than the loudest block less 40 dB, and than -55 dBFS, are speech; gaps shorter than
    `min_silence_s` are bridged and blips under 100 ms dropped."""
    levels = block_levels(mono, rate, block_s)
    finite = levels[np.isfinite(levels)]
    if not len(finite):
        return []
    threshold = max(float(np.percentile(finite, 10)) + 12.0, float(finite.max()) - 40.0, -55.0)
    loud = levels > threshold
    runs: list[list[int]] = []
    for i in np.flatnonzero(loud):
        if runs and (i - runs[-1][1]) * block_s < min_silence_s:
            runs[-1][1] = i + 1
        else:
            runs.append([int(i), int(i) + 1])
    pieces: list[tuple[int, int]] = []
    limit = max(1, int(max_speech_s / block_s)) if np.isfinite(max_speech_s) else None
    for start, end in runs:
        while limit is not None and end - start > limit:  # cut at the quietest block of the allowed length
            window = levels[start + limit // 2:start + limit]
            cut = start + limit // 2 + int(np.argmin(window))
            pieces.append((start, cut))
            start = cut
        pieces.append((start, end))
    return [Region(s * block_s, e * block_s) for s, e in pieces if (e - s) * block_s >= 0.1]
