"""S2's full-size codec (random weights, 1.9 GB codec.pth in the real layout) against goldens from the
independent port: the tiny goldens cannot catch what only the real widths exercise (16 heads, 1024/1536
channels, 4096-entry semantic codebook). Slow: minutes of CPU and ~6 GB of memory; `-m slow` runs it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from codec_clips import CASES, CODEC_SEED, write_clip
from s2studio.audio.io import pcm16
from s2studio.codec.config import S2
from s2studio.codec.loading import load_codec
from s2studio.codec.resample import encode_file
from s2studio.codec.streaming import decode_in_chunks
from golden_sets import binding_set, why_unbound
from s2studio.demo_model.codec_weights import write_codec_checkpoint

BOUND = binding_set("codec/full")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("full")
    write_codec_checkpoint(folder / "codec.pth", seed=CODEC_SEED, size="full")
    codec = load_codec(folder)
    (folder / "codec.pth").unlink()
    return codec


def test_full_size_matches_goldens(codec, tmp_path: Path) -> None:
    if BOUND is None:
        pytest.skip(why_unbound("codec/full"))
    GOLDEN = BOUND.folder
    assert codec.config == S2
    manifest = json.loads((GOLDEN / "manifest.json").read_text(encoding="utf-8"))
    encoded = np.load(GOLDEN / "encode.npz")
    for case in CASES:
        if case[0] in encoded.files:
            np.testing.assert_array_equal(encode_file(codec, write_clip(tmp_path, *case)), encoded[case[0]])
    decoded = np.load(GOLDEN / "decode.npz")
    for name in ("dec_random", "dec_clip"):
        codes = torch.from_numpy(decoded[name + "_codes"].astype(np.int64))
        audio = codec.decode(codes[None]).reshape(-1).numpy()
        diff = np.abs(pcm16(audio).astype(np.int32) - decoded[name + "_pcm16"])
        assert diff.max() <= 1 and np.count_nonzero(diff) <= 0.001 * diff.size
        streamed = decode_in_chunks(codec, codes, 1)
        assert np.abs(streamed - audio).max() <= 1e-5
    assert manifest["codec_size"] == "full"
