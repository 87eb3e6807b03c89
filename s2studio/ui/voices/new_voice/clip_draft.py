"""A clip of the new-voice dialog as it will be stored: the audio in memory (read once; a recording never touches
the disk), the span kept, and what the speech detector and the person did to it. Plain data, no widgets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from s2studio.audio.clip_prep import Span, cut, prepared
from s2studio.errors import printable
from s2studio.state.clips import MAX_RECORDING_SECONDS, ClipAudio, read_audio

@dataclass
class ClipDraft:
    key: int
    name: str
    data: np.ndarray
    """(frames, channels) float32, the whole source."""
    rate: int
    subtype: str = "PCM_24"
    span: Span | None = None
    speech: Span | None = None
    analysed: bool = False
    """The speech detector has looked at it (`speech` None then means: no speech found)."""
    touched: bool = False
    """The person set the trim (or a split did): the detector's trim no longer replaces it."""
    generation: int = 0
    """Bumped whenever what a pending job works on changes: an older job's result is dropped."""

    def __post_init__(self) -> None:
        if self.span is None:
            self.span = Span(0.0, self.duration)

    @property
    def duration(self) -> float:
        return self.data.shape[0] / self.rate

    @property
    def mono(self) -> np.ndarray:
        return self.data.mean(axis=1) if self.data.shape[1] > 1 else self.data[:, 0]

    def kept_mono(self) -> np.ndarray:
        return cut(self.mono, self.rate, self.span)

    def clip_audio(self, normalize: bool) -> ClipAudio:
        """What the voice stores: the kept span, loudness-normalised when asked."""
        return ClipAudio(self.name, prepared(self.data, self.rate, self.span, normalize), self.rate, self.subtype)


Source = Path | ClipAudio | ClipDraft
"""What a clip is made from: a file (read when it is added), audio in memory, or a draft (a recording, a split)."""


def source_name(source: Source) -> str:
    return source.name if isinstance(source, (ClipAudio, ClipDraft)) else printable(Path(source).name)


def draft_of(source: Source, key: int) -> ClipDraft:
    """The draft of `source` under `key` (a file is read now; `UserError` says why it cannot be)."""
    if isinstance(source, ClipDraft):
        source.key = key
        return source
    if isinstance(source, ClipAudio):
        data = source.data if source.data.ndim == 2 else source.data[:, None]
        return ClipDraft(key, source.name, data, source.rate, source.subtype)
    data, rate, subtype = read_audio(Path(source), MAX_RECORDING_SECONDS, voice_clip=False)
    return ClipDraft(key, printable(Path(source).name), data, rate, subtype)
