"""Reference audio → the codec's input, exactly as upstream's reference loader prepares it (spec s2-codec.md §8.1).

Channels are averaged with `torch.mean` in float32, then a new `torchaudio.transforms.Resample(sr, 44100)` is
applied (Hann-windowed sinc, width 6, rolloff 0.99, kernel computed in float64 and kept in float32). The
transform, not `torchaudio.functional.resample`: their kernels differ by up to 1e-5, which can change codes.
Only rates `state.audio_limits` accepts are resampled: the transform's kernel has as many rows as the reduced
ratio's target term and as many columns as its source term, so an odd rate (8009 Hz: 8009 × 44100) would ask
for gigabytes. Kept out of `s2studio.audio` because it needs torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torchaudio

from s2studio.audio import SAMPLE_RATE
from s2studio.audio.io import MAX_SECONDS, read_channels
from s2studio.codec.codec import Codec
from s2studio.errors import UserError
from s2studio.state.audio_limits import rate_problem


def to_codec_rate(channels: np.ndarray, sample_rate: int, target: int = SAMPLE_RATE) -> torch.Tensor:
    """`(channels, N)` float32 at `sample_rate` → mono `(N',)` float32 at `target`."""
    problem = rate_problem("the audio", sample_rate) if sample_rate != target else None
    if problem:
        raise UserError(problem)
    wav = torch.from_numpy(np.ascontiguousarray(channels, dtype=np.float32))
    if wav.ndim == 1:
        wav = wav[None]
    if wav.shape[0] > 1:
        wav = torch.mean(wav, dim=0, keepdim=True)
    if sample_rate != target:
        wav = torchaudio.transforms.Resample(orig_freq=sample_rate, new_freq=target)(wav)
    return wav[0]


def load_reference(path: Path, max_seconds: float = MAX_SECONDS) -> torch.Tensor:
    """Any audio file → mono float32 `(N,)` at 44.1 kHz, ready for `Codec.encode`."""
    channels, rate = read_channels(path, max_seconds)
    return to_codec_rate(channels, rate)


def encode_audio(codec: Codec, audio: torch.Tensor) -> np.ndarray:
    """Codes `(10, T)` int64 of mono 44.1 kHz audio `(N,)` from `load_reference` (float32)."""
    return codec.encode(audio[None, None]).squeeze(0).cpu().numpy()


def encode_file(codec: Codec, path: Path, max_seconds: float = MAX_SECONDS) -> np.ndarray:
    """Codes `(10, T)` int64 of an audio file, as upstream's `encode_reference` computes them (float32)."""
    return encode_audio(codec, load_reference(path, max_seconds))
