"""Our codec against goldens from an independent port (mizuoto-fishspeech, bit-identical to upstream on CPU
fp32): same codes for clips at 8–192 kHz, mono and stereo, PCM16/24/float; same PCM16 decode within 1 LSB on
at most 0.1 % of samples. Goldens: `tools/make_codec_goldens.py`; clips: `tests/codec_clips.py`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from codec_clips import CASES, CODEC_SEED, write_clip
from s2studio.audio.io import write_wav
from s2studio.codec.loading import load_codec
from s2studio.codec.resample import encode_file, load_reference
from s2studio.demo_model.codec_weights import write_codec_checkpoint

GOLDEN = Path(__file__).parent / "golden" / "codec"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text(encoding="utf-8"))
ENCODE = np.load(GOLDEN / "encode.npz")
DECODE = np.load(GOLDEN / "decode.npz")


@pytest.fixture(scope="module")
def codec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("codec")
    write_codec_checkpoint(folder / "codec.pth", seed=CODEC_SEED, size="tiny")
    digest = hashlib.sha256((folder / "codec.pth").read_bytes()).hexdigest()
    assert digest == MANIFEST["codec_sha256"], "the codec.pth writer changed: rerun tools/make_codec_goldens.py"
    return folder


@pytest.fixture(scope="module")
def codec(codec_dir: Path):
    return load_codec(codec_dir)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_encode_equals_golden(codec, tmp_path: Path, case) -> None:
    name, rate, channels, seconds, subtype = case
    path = write_clip(tmp_path, name, rate, channels, seconds, subtype)
    assert load_reference(path).shape[0] == MANIFEST["resampled_lengths"][name]
    codes = encode_file(codec, path)
    expected = ENCODE[name].astype(np.int64)
    assert codes.dtype == np.int64
    assert codes.shape == expected.shape
    np.testing.assert_array_equal(codes, expected)


@pytest.mark.parametrize("name", ["dec_random", "dec_clip"])
def test_decode_equals_golden_pcm16(codec, tmp_path: Path, name: str) -> None:
    codes = torch.from_numpy(DECODE[name + "_codes"].astype(np.int64))
    before = codes.clone()
    audio = codec.decode(codes[None])
    assert torch.equal(codes, before), "decode must not clamp the caller's codes in place"
    assert audio.shape == (1, 1, 2048 * codes.shape[1]) and audio.dtype == torch.float32
    write_wav(tmp_path / "out.wav", audio.reshape(-1).numpy())
    ours, rate = sf.read(tmp_path / "out.wav", dtype="int16")
    assert rate == 44100
    diff = np.abs(ours.astype(np.int32) - DECODE[name + "_pcm16"].astype(np.int32))
    assert diff.max() <= 1
    assert np.count_nonzero(diff) <= 0.001 * diff.size


def test_golden_decode_clamps_out_of_range_codes() -> None:
    codes = DECODE["dec_random_codes"]
    assert codes[0].max() >= 64 and codes[1:].max() >= 32  # the golden really exercises the clamp
