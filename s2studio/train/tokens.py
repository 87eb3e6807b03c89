"""Clips to codes as upstream's `extract_vq.py` makes them for training (spec s2-lora.md §3.1).

Each clip is read as float32, its channels averaged, resampled to 44.1 kHz with `torchaudio.functional.resample`,
and encoded by the model's own codec in float32, two clips at a time on a CPU and eight on a GPU, zero-padded on
the right to the longer one: the padding is part of what the codec sees, so the batching is part of the result.
Each clip's codes are cut to its own frames. (The voice library's reference codes are encoded one clip at a time
with the reference loader's resampler; training codes are kept apart, in the run's own folder.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torchaudio
from torch.nn import functional as F

from s2studio.audio import SAMPLE_RATE
from s2studio.audio.io import read_channels
from s2studio.codec.codec import Codec
from s2studio.train.clips import TrainClip


def codec_batch(device: torch.device) -> int:
    return 2 if device.type == "cpu" else 8


def load_clip(clip: TrainClip, device: torch.device) -> torch.Tensor:
    channels, rate = read_channels(clip.audio)
    wav = torch.from_numpy(channels).to(device)
    wav = torch.mean(wav, dim=0) if wav.shape[0] > 1 else wav[0]
    if rate != SAMPLE_RATE:
        wav = torchaudio.functional.resample(wav[None], rate, SAMPLE_RATE)[0]
    return wav


def encode_clips(codec: Codec, clips: Sequence[TrainClip],
                 progress: Callable[[int, int], None] | None = None) -> list[np.ndarray]:
    """Each clip's (10, frames) int64 codes, in `clips` order."""
    device = codec.device
    batch = codec_batch(device)
    out: list[np.ndarray] = []
    for start in range(0, len(clips), batch):
        wavs = [load_clip(c, device) for c in clips[start:start + batch]]
        longest = max(len(w) for w in wavs)
        audio = torch.stack([F.pad(w, (0, longest - len(w))) for w in wavs])[:, None]
        codes = codec.encode(audio).cpu().numpy()
        for wav, c in zip(wavs, codes):
            out.append(np.ascontiguousarray(c[:, :math.ceil(len(wav) / codec.frame_length)], dtype=np.int64))
        if progress:
            progress(len(out), len(clips))
    return out
