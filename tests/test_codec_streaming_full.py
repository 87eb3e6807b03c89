"""Both incremental decodes on S2 Pro's full-size codec (random weights in the real shape) against a full decode,
for the engine's 4-frame chunks and for 1- and 3-frame chunks:

- the exact decoder (the Exact speed): 1 LSB on at most 0.1 % of the PCM16 samples, at T = 160;
- the non-exact decoder (every other speed, `codec/fast_stream.py`) in float32: 1 LSB on at most 1 %, never 2, at
  T = 150 (past the 128-frame window, and a length no chunk divides, so pieces of the step and of 1 frame both run);
- the same in bfloat16, where the CPU has it: an SNR against the full decode of at least `BF16_SNR`;
- both non-exact ones with torch's Snake and with the engine's fused one (`engine/weights/cpu_codec.py`).

The tiny codec cannot show what only the real widths exercise (1536..96 decoder channels, 16 heads, the 128-frame
window, oneDNN's weights packed per width). Slow: a 1.9 GB checkpoint is written once, and each length is decoded
four times on one thread (several minutes); `-m slow` runs it.

Why the exact bound is asserted at T = 160 only (AVX2 EPYC, torch 2.14, 1 thread): the full decode is not
consistent with itself at that bound. oneDNN rounds S2's last transposed conv one of two ways by the input's width
(about half of all T each), SDPA rounds the rows from T/2 on differently for 193 ≤ T ≤ 383, and the last T mod 32
frames take leftover paths; the same codes decoded at T = 200 and 231 are 1 LSB apart on 0.26 % of their common
samples, so no causal streaming decoder stays within 0.1 % of both. Measured here: 0.096 % at T = 160 for each
chunking; the other lengths and the approaches tried (a float64 conv, the mean of both roundings) are in
docs/codec-streaming.md. On the AVX512 machine the streaming constants were first tuned on, 160 frames were
identical and 144 frames 0.007 % away. The non-exact decoder measured 0.10-0.11 % at T = 150, SNR 119 dB.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from codec_clips import random_codes
from streaming_checks import built_codec_ops, full_decode, lsb_share, server_decode, snr_db
from s2studio.codec import fast_stream
from s2studio.codec.config import S2
from s2studio.codec.loading import load_codec
from s2studio.codec.streaming import decode_in_chunks
from s2studio.demo_model.codec_weights import write_codec_checkpoint
from s2studio.engine.weights.cpu_codec import CpuCodecOps

pytestmark = pytest.mark.slow

EXACT = (160, 0.001, 1e-6)
"""Frames, the issue's bound (1 LSB on at most 0.1 % of the samples), the largest float difference."""
NON_EXACT = (150, 0.01, 1e-5)
"""The non-exact decode's in float32: at most 1 % of the samples 1 LSB off."""
BF16_SNR = (41.0, 40.0, 2.5)
"""The non-exact decode's in bfloat16, at T = 150 (dB): the whole clip's SNR, its worst frame's, and its margin over
upstream's CPU server decode (bf16 autocast). Measured (AMD EPYC Zen 4, AVX512-BF16, 1 thread, chunks 4/1/3): 41.8,
worst frame 41.1-41.2, autocast 37.3; the float32 decode here was 1 LSB off on 0.37-0.44 % of the samples."""


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("full-streaming")
    write_codec_checkpoint(folder / "codec.pth", seed=0, size="full")
    codec = load_codec(folder)
    (folder / "codec.pth").unlink()
    return codec


@pytest.fixture(scope="module")
def fused() -> CpuCodecOps:
    """The engine's C++ Snake (which must build here)."""
    return built_codec_ops()


@pytest.fixture(params=["torch", "fused"])
def snake_ops(request, fused) -> CpuCodecOps | None:
    """The non-exact decode's Snake: torch's or the engine's."""
    return None if request.param == "torch" else fused


@pytest.fixture(scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def full_decodes(codec, one_thread) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Frames -> (codes, their full decode), each made once for the module."""
    made: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for frames in (EXACT[0], NON_EXACT[0]):
        codes = random_codes(12, frames)
        made[frames] = codes, full_decode(codec, codes)
    return made


@pytest.mark.parametrize("mode", ["exact", "non-exact", "non-exact, fused Snake"])
@pytest.mark.parametrize("chunk", [4, 1, 3])
def test_streaming_the_full_size_codec_stays_within_its_bound(codec, full_decodes, fused, chunk: int,
                                                              mode: str) -> None:
    assert codec.config == S2
    exact = mode == "exact"
    frames, limit, largest = EXACT if exact else NON_EXACT
    codes, full = full_decodes[frames]
    ops = fused if mode.endswith("fused Snake") else None
    streamed = decode_in_chunks(codec, codes, chunk, exact=exact, dtype=torch.float32, ops=ops)
    assert streamed.shape == full.shape == (2048 * frames,)
    share = lsb_share(streamed, full, largest)  # float rounding only; a lost context shows as >= 1e-3
    assert share <= limit, f"{share:.4%} of samples"


@pytest.mark.skipif(not fast_stream.native_bf16(), reason="this CPU has no native bfloat16")
@pytest.mark.parametrize("chunk", [4, 1, 3])
def test_the_bfloat16_decode_of_the_full_size_codec_holds_its_snr(codec, full_decodes, server_snr, snake_ops,
                                                                   chunk: int) -> None:
    codes, full = full_decodes[NON_EXACT[0]]
    streamed = decode_in_chunks(codec, codes, chunk, exact=False, dtype=torch.bfloat16, ops=snake_ops)
    whole, worst = snr_db(streamed, full), snr_db(streamed, full, per=2048)
    assert whole >= BF16_SNR[0] and worst >= BF16_SNR[1], (whole, worst)
    assert whole >= server_snr + BF16_SNR[2], (whole, server_snr)


@pytest.fixture(scope="module")
def server_snr(codec, full_decodes) -> float:
    """The SNR of upstream's CPU server decode (a full decode under bf16 autocast) at T = 150."""
    codes, full = full_decodes[NON_EXACT[0]]
    return snr_db(server_decode(codec, codes), full)
