"""What the streaming-decode tests share: the tiny codec's folder, a full decode to compare with, the share of
PCM16 samples a streamed decode rounds 1 LSB away from it, (for the bfloat16 decode) its SNR, and the C++ codec ops
that must build."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from s2studio.audio.io import pcm16
from s2studio.codec.loading import load_codec
from s2studio.demo_model.codec_weights import write_codec_checkpoint


@pytest.fixture(scope="module")
def codec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the tiny random codec (seed 3) that both decoders' tests decode (import the fixture)."""
    folder = tmp_path_factory.mktemp("codec")
    write_codec_checkpoint(folder / "codec.pth", seed=3, size="tiny")
    return folder


@pytest.fixture(scope="module")
def codec(codec_dir: Path):
    return load_codec(codec_dir)


def built_codec_ops():
    """The engine's C++ codec ops (the fused Snake), which must load here (the test session builds them), and a
    silent fallback to torch's Snake would leave the fused one untested."""
    from s2studio.engine.weights.cpu_codec import CpuCodecOps, codec_ops

    ops = codec_ops(torch.device("cpu"))
    assert isinstance(ops, CpuCodecOps), "the CPU kernels must load here (tests/conftest.py builds them)"
    return ops


def full_decode(codec, codes: np.ndarray) -> np.ndarray:
    """`codes (10, T)` decoded in one pass: 1-D float32 samples."""
    with torch.inference_mode():
        return codec.decode(torch.from_numpy(codes)[None]).reshape(-1).numpy()


def server_decode(codec, codes: np.ndarray) -> np.ndarray:
    """`codes` decoded as upstream's CPU server does: a full decode under bfloat16 autocast (the bar the bfloat16
    streaming decode must clear), 1-D float32 samples."""
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        return codec.decode(torch.from_numpy(codes)[None]).float().reshape(-1).numpy()


def lsb_share(streamed: np.ndarray, full: np.ndarray, largest: float | None = None) -> float:
    """Share of PCM16 samples that differ, after checking that none differs by more than 1 LSB and, with
    `largest`, that the float difference is rounding (a lost or misplaced context shows as |Δ| ≥ 1e-3)."""
    assert streamed.shape == full.shape
    if largest is not None:
        assert np.abs(streamed - full).max() <= largest
    lsb = np.abs(pcm16(streamed).astype(np.int32) - pcm16(full).astype(np.int32))
    assert lsb.max() <= 1
    return np.count_nonzero(lsb) / lsb.size


def snr_db(streamed: np.ndarray, full: np.ndarray, per: int | None = None) -> float:
    """Signal-to-noise ratio of `streamed` against `full` in dB, over the whole clip or (with `per`) the worst of
    its pieces of `per` samples (a lost or misplaced context shows there first)."""
    assert streamed.shape == full.shape
    ref = full.astype(np.float64).reshape(-1, per or full.size)
    noise = ((streamed.astype(np.float64).reshape(ref.shape) - ref) ** 2).sum(axis=1)
    return float((10 * np.log10((ref ** 2).sum(axis=1) / np.maximum(noise, 1e-300))).min())
