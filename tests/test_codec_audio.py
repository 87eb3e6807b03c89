"""Reading, mixing, resampling and writing audio for the codec: bad input gives one clear UserError, odd
input (silence, 8/192 kHz, 6 channels, FLAC/OGG) a correct result, and PCM16 is written as upstream writes it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio

from codec_clips import CASES, CODEC_SEED, make_clip
from s2studio.audio.io import pcm16, read_audio, read_channels, write_wav
from s2studio.codec.loading import load_codec
from s2studio.codec.resample import encode_file, load_reference
from s2studio.demo_model.codec_weights import write_codec_checkpoint
from s2studio.errors import UserError

GOLDEN = Path(__file__).parent / "golden" / "codec"


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("codec")
    write_codec_checkpoint(folder / "codec.pth", seed=CODEC_SEED, size="tiny")
    return load_codec(folder)


def test_not_audio(tmp_path: Path) -> None:
    path = tmp_path / "notes.wav"
    path.write_text("this is text, not sound")
    with pytest.raises(UserError, match="notes.wav is not an audio file that can be read"):
        read_channels(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="audio file not found"):
        read_audio(tmp_path / "nope.wav")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.wav"
    sf.write(path, np.zeros(0, dtype=np.float32), 44100, subtype="PCM_16")
    with pytest.raises(UserError, match="empty.wav contains no audio samples"):
        read_channels(path)


def test_too_long(tmp_path: Path) -> None:
    path = tmp_path / "long.wav"
    sf.write(path, np.zeros(8000 * 63, dtype=np.int16), 8000, subtype="PCM_16")  # 1 min 3 s
    with pytest.raises(UserError, match=r"long.wav is 63 s long; use a clip of at most 30 s"):
        read_channels(path)


def test_nan_samples(tmp_path: Path) -> None:
    path = tmp_path / "nan.wav"
    sf.write(path, np.array([0.1, np.nan, 0.2], dtype=np.float32), 44100, subtype="FLOAT")
    with pytest.raises(UserError, match="invalid samples"):
        read_channels(path)


def test_silence_encodes(codec, tmp_path: Path) -> None:
    path = tmp_path / "silence.wav"
    sf.write(path, np.zeros(44100, dtype=np.float32), 44100, subtype="PCM_16")
    codes = encode_file(codec, path)
    assert codes.shape == (10, 22) and codes.dtype == np.int64
    assert codes[0].max() < 64 and codes[1:].max() < 32 and codes.min() >= 0


def test_six_channels_are_averaged(codec, tmp_path: Path) -> None:
    data = make_clip("six", 24000, 6, 0.8)
    path = tmp_path / "six.wav"
    sf.write(path, data, 24000, subtype="FLOAT")
    mono = torch.mean(torch.from_numpy(np.ascontiguousarray(data.T)), dim=0, keepdim=True)  # upstream's mix
    expected = torchaudio.transforms.Resample(24000, 44100)(mono)[0]
    assert torch.equal(load_reference(path), expected)
    assert encode_file(codec, path).shape == (10, 18)  # ceil(35,280 / 2048)
    assert read_audio(path)[0].shape == (data.shape[0],)


@pytest.mark.parametrize("fmt", ["FLAC", "OGG", "MP3"])
def test_compressed_formats(codec, tmp_path: Path, fmt: str) -> None:
    name, rate, channels, seconds, _ = next(c for c in CASES if c[0] == "s22k")
    path = tmp_path / f"clip.{fmt.lower()}"
    sf.write(path, make_clip(name, rate, channels, seconds), rate, format=fmt)
    codes = encode_file(codec, path)
    golden = np.load(GOLDEN / "encode.npz")[name]
    assert codes.shape == golden.shape
    if fmt == "FLAC":  # lossless PCM16: the very codes of the WAV
        np.testing.assert_array_equal(codes, golden)


def test_pcm16_matches_soundfile(tmp_path: Path) -> None:
    """Our PCM16 rule equals what soundfile/libsndfile store (clipping path, not round(x · 32767))."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-1.2, 1.2, 20000), [1.0, -1.0, 0.5, -0.5, 1e-12, -1e-12, 0.99999, 3.0517578125e-05,
                                                       -3.0517578125e-05, 1.5e-05, -1.5e-05]]).astype(np.float32)
    write_wav(tmp_path / "x.wav", x)
    stored, rate = sf.read(tmp_path / "x.wav", dtype="int16")
    assert rate == 44100
    np.testing.assert_array_equal(stored, pcm16(x))
    assert pcm16(np.array([1.0, -1.0, 0.5, -1e-12], dtype=np.float32)).tolist() == [32767, -32768, 16384, 0]
    raw = (tmp_path / "x.wav").read_bytes()
    assert raw[:4] == b"RIFF" and raw[8:16] == b"WAVEfmt " and raw[36:40] == b"data"  # canonical 44-byte header
    assert len(raw) == 44 + 2 * x.size


def test_write_wav_is_atomic_and_reports_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot write .*x.wav: folder .*missing-dir does not exist"):
        write_wav(tmp_path / "missing-dir" / "x.wav", np.zeros(10, dtype=np.float32))
    assert list(tmp_path.iterdir()) == []


def test_resampled_length_follows_torchaudios_float32_rule() -> None:
    """16 kHz → 44.1 kHz of 200,004 samples: 551,261 samples, one less than the exact ceiling (spec §8.2)."""
    manifest = json.loads((GOLDEN / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["resampled_lengths"]["m16k_long"] == 551261
    from s2studio.codec.resample import to_codec_rate

    assert to_codec_rate(np.zeros((1, 200004), dtype=np.float32), 16000).shape == (551261,)
