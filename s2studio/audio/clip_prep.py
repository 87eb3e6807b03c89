"""Preparing reference clips: the span kept (trimmed by hand or to the speech), loudness, and a long recording
split at its pauses into clips a voice can use.

A `Span` is what the new-voice dialog's trim handles edit and what a split produces; `prepared` applies one to
the audio (cut, then loudness-normalised) just before the clip is stored, so the original file is never
changed. Loudness follows fish-speech's data recipe (fish-audio-preprocess `loudness-norm`): -23 LUFS
integrated (ITU-R BS.1770, `dsp.integrated_loudness`), with the peak kept at or below -1 dBFS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from s2studio.audio.dsp import Audio, integrated_loudness, peak
from s2studio.audio.speech_regions import Region, speech_bounds, speech_regions

TARGET_LUFS = -23.0
PEAK_DBFS = -1.0
MAX_GAIN_DB = 30.0
"""Never raise a quiet clip by more than this: above it the noise floor would come up with the voice."""
SPLIT_ABOVE_S = 30.0
"""Recordings longer than this are offered to be split (a clip longer than 30 s hurts cloning)."""
PIECE_MIN_S = 5.0
PIECE_MAX_S = 30.0
PIECE_BEST_S = 15.0


@dataclass(frozen=True)
class Span:
    """The part of a recording a clip keeps, in seconds."""

    start: float
    end: float

    @property
    def length(self) -> float:
        return self.end - self.start

    def clamped(self, total: float, least: float = 0.1) -> Span:
        """Within [0, total], at least `least` long (the handles never cross)."""
        start = min(max(0.0, self.start), max(0.0, total - least))
        return Span(start, min(total, max(self.end, start + least)))


def cut(audio: np.ndarray, rate: int, span: Span) -> np.ndarray:
    """The samples of `audio` ((frames,) or (frames, channels)) inside `span`."""
    a, b = int(round(span.start * rate)), int(round(span.end * rate))
    return audio[max(0, a):max(0, b)]


def speech_span(mono: np.ndarray, rate: int, pad_s: float = 0.1) -> Span | None:
    """The span from the first speech to the last with `pad_s` of margin (`speech_regions`); None for a
    recording without speech."""
    bounds = speech_bounds(mono, rate, pad_s)
    return Span(*bounds) if bounds else None


def loudness_gain_db(audio: Audio, rate: int, target_lufs: float = TARGET_LUFS, peak_dbfs: float = PEAK_DBFS,
                     max_gain_db: float = MAX_GAIN_DB) -> float:
    """The gain that brings `audio` to `target_lufs` without its peak passing `peak_dbfs` (0 for silence or
    audio too short to measure)."""
    mono = np.asarray(audio, dtype=np.float32)
    mono = mono if mono.ndim == 1 else mono.mean(axis=1)
    p = peak(np.asarray(audio, dtype=np.float32).reshape(-1))
    loudness = integrated_loudness(mono, rate)
    if p == 0.0 or not math.isfinite(loudness):
        return 0.0
    return float(min(target_lufs - loudness, peak_dbfs - 20 * math.log10(p), max_gain_db))


def normalized(audio: np.ndarray, rate: int, target_lufs: float = TARGET_LUFS) -> np.ndarray:
    """`audio` at `target_lufs` (peak at most -1 dBFS), float32."""
    gain = 10 ** (loudness_gain_db(audio, rate, target_lufs) / 20)
    return (np.asarray(audio, dtype=np.float32) * np.float32(gain)).astype(np.float32)


def prepared(audio: np.ndarray, rate: int, span: Span | None = None, normalize: bool = True) -> np.ndarray:
    """What a voice stores for a clip: the `span` of `audio` (all of it when None), loudness-normalised
    when `normalize`."""
    out = cut(audio, rate, span) if span is not None else np.asarray(audio, dtype=np.float32)
    return normalized(out, rate) if normalize else out


def split_spans(mono: np.ndarray, rate: int, min_s: float = PIECE_MIN_S, max_s: float = PIECE_MAX_S,
                pad_s: float = 0.1) -> list[Span]:
    """A long recording cut at its pauses into spans of `min_s`–`max_s` seconds of speech, each from the
    first speech to the last with `pad_s` of margin (`pieces_at_pauses`)."""
    regions = speech_regions(mono, rate, min_silence_s=0.25, pad_s=0.0, max_speech_s=max_s - 2 * pad_s)
    total = len(mono) / rate
    return [Span(max(0.0, p.start - pad_s), min(total, p.end + pad_s))
            for p in pieces_at_pauses(regions, min_s, max_s - 2 * pad_s)]


def pieces_at_pauses(regions: list[Region], min_s: float = PIECE_MIN_S, max_s: float = PIECE_MAX_S,
                     best_s: float = PIECE_BEST_S) -> list[Region]:
    """Group consecutive speech regions into pieces of `min_s`–`max_s` (from a piece's first speech to its
    last), cutting at the longest pauses: the grouping minimises Σ 1/pause over the cuts (a 1 s pause costs
    1, a 0.25 s one 4) plus a gentle pull of each piece towards `best_s`. A piece that cannot reach `min_s`
    (the recording's speech is short, or a region stands alone between long silences) is kept when the
    rule cannot be met otherwise: no speech is dropped."""
    n = len(regions)
    if n == 0:
        return []
    inf = float("inf")
    cost = [inf] * (n + 1)
    back = [-1] * (n + 1)
    cost[0] = 0.0
    for j in range(1, n + 1):  # a piece of regions i..j-1 ends the grouping of the first j regions
        for i in range(j - 1, -1, -1):
            length = regions[j - 1].end - regions[i].start
            if length > max_s and i < j - 1:
                break
            if cost[i] == inf:
                continue
            short = max(0.0, min_s - length)
            cut_cost = 0.0 if j == n else 1.0 / max(regions[j].start - regions[j - 1].end, 1e-3)
            c = cost[i] + cut_cost + 0.5 * ((length - best_s) / best_s) ** 2 + 100.0 * short
            if c < cost[j]:
                cost[j], back[j] = c, i
    pieces = []
    j = n
    while j > 0:
        i = back[j]
        pieces.append(Region(regions[i].start, regions[j - 1].end))
        j = i
    return pieces[::-1]
