"""Incremental decode equals a full decode within float rounding (spec s2-codec.md §10.4), for any chunking,
over more frames than the quantizer transformer's window, with state that does not grow."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from codec_clips import random_codes
from streaming_checks import codec, codec_dir, full_decode, lsb_share  # noqa: F401 - fixtures
from s2studio.codec.config import TINY
from s2studio.codec.loading import load_codec
from s2studio.codec.streaming import IncrementalDecoder, decode_in_chunks

FRAMES = 160
"""> 128, the real codec's window, and far more than the tiny codec's 4. A multiple of 32: a full decode then
computes every frame with the kernels the streaming decoder uses (see `test_ragged_length` for the rest)."""

@pytest.fixture(scope="module")
def codes() -> np.ndarray:
    return random_codes(11, FRAMES)


@pytest.fixture(scope="module")
def full(codec, codes) -> np.ndarray:
    return full_decode(codec, codes)


def assert_close(streamed: np.ndarray, full: np.ndarray) -> None:
    """The issue's tolerance, tightened to what is measured: float rounding only, 1 LSB on at most 0.03 % of the
    samples (spec s2-codec.md §10.4's figure; the issue allows 0.1 %). The streaming decoder runs every kernel
    at a shape that rounds like a long full decode, so on this machine every chunking gives the very same
    samples here; other CPUs may pick other kernels. Before that, 1 LSB on 0.12-0.15 % of the samples; a lost
    or misplaced context would show as |Δ| ≥ 1e-3."""
    assert np.abs(streamed - full).max() <= 5e-7
    assert lsb_share(streamed, full) <= 0.0003


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8])
def test_fixed_chunks_equal_full_decode(codec, codes, full, chunk: int) -> None:
    assert_close(decode_in_chunks(codec, codes, chunk), full)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_chunks_equal_full_decode(codec, codes, full, seed: int) -> None:
    rng = np.random.default_rng(seed)
    decoder = IncrementalDecoder(codec)
    parts, start = [], 0
    while start < FRAMES:
        n = int(rng.integers(1, 20))
        part = decoder.push(codes[:, start:start + n])
        assert part.dtype == np.float32
        assert part.shape == (2048 * min(n, FRAMES - start),)  # the frames' samples come out at once
        parts.append(part)
        start += n
    assert decoder.frames == FRAMES
    assert_close(np.concatenate(parts), full)


@pytest.mark.parametrize("chunk", [1, 5])
def test_ragged_length(codec, chunk: int) -> None:
    """150 frames, not a multiple of 32: a full decode computes its last `150 mod 32` frames with other kernels
    (RMSNorm's and SDPA's leftover paths), which a streaming decoder cannot know are the last. Measured 1 LSB on
    0.02 % of the samples, all but a third of them in those frames."""
    codes = random_codes(11, 150)
    full = full_decode(codec, codes)
    streamed = decode_in_chunks(codec, codes, chunk)
    assert np.abs(streamed - full).max() <= 5e-7
    assert lsb_share(streamed, full) <= 0.001
    head = (150 - 22) * 2048
    assert lsb_share(streamed[:head], full[:head]) <= 0.0003


LENGTH_MODE_LIMIT = 0.001
"""1 LSB on at most 0.1 % of the samples (the issue's bound) where the full decode's own rounding depends on its
length. oneDNN picks the blocking of a long transposed conv by the input's width, so a full decode of T frames
rounds one of two ways in such a layer, by T; a streaming decoder, which cannot know T, rounds like the usual one.
Measured on AVX2 (torch 2.14, 1 thread) for the tiny codec's second transposed conv (64 -> 32 channels): the
unusual way at T = 32, 40, 208, 376 and 544 of the multiples of 8 up to 700; at 544 frames 1 LSB on 0.078 % of
the samples, every stage before that conv bit-identical. On AVX512 the same 544 frames are identical."""


def test_window_of_128_frames(codec_dir: Path) -> None:
    """The real window size (128) on the tiny weights, over 544 frames: streaming crosses the window after 128
    frames, and SDPA's key blocks at 256 and 512 (`layers.KEY_SPLIT`), as a long decode of S2 does. 544 is one
    of the lengths at which this CPU's full decode rounds its second transposed conv the unusual way (see
    `LENGTH_MODE_LIMIT`): the bound is the issue's, not the tightened one."""
    codec = load_codec(codec_dir, config=replace(TINY, quantizer_window=128))
    codes = random_codes(12, 544)
    full = full_decode(codec, codes)
    streamed = decode_in_chunks(codec, codes, 7)
    assert np.abs(streamed - full).max() <= 5e-7
    assert lsb_share(streamed, full) <= LENGTH_MODE_LIMIT


def test_state_does_not_grow(codec, codes) -> None:
    decoder = IncrementalDecoder(codec)
    for t in range(12):
        decoder.push(codes[:, t:t + 1])
    shapes = {k: tuple(v.shape) for k, v in decoder._state.items()}
    kv = [tuple(c.k.shape) for c in decoder._kv]
    for t in range(12, 40):
        decoder.push(codes[:, t:t + 1])
    assert {k: tuple(v.shape) for k, v in decoder._state.items()} == shapes
    assert [tuple(c.k.shape) for c in decoder._kv] == kv
    assert kv[0][2] == TINY.quantizer_window - 1  # keys of the previous window - 1 frames only


def test_reset_starts_a_new_sequence(codec, codes) -> None:
    decoder = IncrementalDecoder(codec)
    first = decoder.push(codes[:, :6])
    decoder.push(codes[:, 6:20])
    decoder.reset()
    assert decoder.frames == 0
    np.testing.assert_array_equal(decoder.push(codes[:, :6]), first)


def test_empty_push_and_caller_codes_untouched(codec) -> None:
    decoder = IncrementalDecoder(codec)
    assert decoder.push(np.zeros((10, 0), dtype=np.int64)).shape == (0,)
    codes = random_codes(2, 4, over=50)
    before = codes.copy()
    out = decoder.push(codes)
    np.testing.assert_array_equal(codes, before)
    assert out.shape == (4 * 2048,)


def test_decode_and_encode_edge_shapes(codec) -> None:
    assert codec.decode(torch.zeros(1, 10, 0, dtype=torch.long)).shape == (1, 1, 0)
    assert codec.encode(torch.zeros(2, 1, 0)).shape == (2, 10, 0)
    assert codec.encode(torch.zeros(2, 1, 2049)).shape == (2, 10, 2)
