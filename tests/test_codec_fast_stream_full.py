"""The non-exact incremental decode on S2 Pro's full-size codec (random weights in the real shape): within 1 LSB of
a full float32 decode on at least 99 % of the PCM16 samples, for the engine's 4-frame chunks and for 1 and 3.

The tiny codec cannot show what only the real widths exercise (1536..96 decoder channels, oneDNN's blocked
weights packed per width, the 128-frame window). Slow: a 1.9 GB checkpoint is written and 160 frames are decoded
four times on one thread; `-m slow` runs it. Measured (AVX2 EPYC, torch 2.14, 1 thread, the bench's random
codec): 1 LSB on 0.10-0.11 % of the samples for each chunking, never 2, SNR 119 dB against the full decode; the
exact streaming decoder is 0.096 % away on this CPU (tests/test_codec_streaming_full.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from codec_clips import random_codes
from s2studio.audio.io import pcm16
from s2studio.codec.config import S2
from s2studio.codec.loading import load_codec
from s2studio.codec.streaming import decode_in_chunks
from s2studio.demo_model.codec_weights import write_codec_checkpoint

pytestmark = pytest.mark.slow

FRAMES = 150
"""Past the 128-frame window, and a length no chunk below divides: pieces of the step and of 1 frame both run."""
LIMIT = 0.01
"""The issue's bound: at most 1 % of the samples 1 LSB off, none more."""


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("full-fast-streaming")
    write_codec_checkpoint(folder / "codec.pth", seed=0, size="full")
    codec = load_codec(folder)
    (folder / "codec.pth").unlink()
    return codec


@pytest.fixture(scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def codes_and_full(codec, one_thread) -> tuple[np.ndarray, np.ndarray]:
    codes = random_codes(12, FRAMES)
    with torch.inference_mode():
        full = codec.decode(torch.from_numpy(codes)[None]).reshape(-1).numpy()
    return codes, full


@pytest.mark.parametrize("chunk", [4, 1, 3])
def test_non_exact_streaming_of_the_full_size_codec_is_within_one_lsb(codec, codes_and_full, chunk: int) -> None:
    assert codec.config == S2
    codes, full = codes_and_full
    streamed = decode_in_chunks(codec, codes, chunk, exact=False)
    assert streamed.shape == full.shape == (2048 * FRAMES,)
    assert np.abs(streamed - full).max() <= 1e-5  # float rounding only; a lost context shows as >= 1e-3
    lsb = np.abs(pcm16(streamed).astype(np.int32) - pcm16(full).astype(np.int32))
    assert lsb.max() <= 1
    assert np.count_nonzero(lsb) / lsb.size <= LIMIT, f"{np.count_nonzero(lsb) / lsb.size:.4%} of samples"
