"""`s2studio synth` with reference clips as audio and speech written as audio: a clip given with
--reference conditions exactly like its codes given with --reference-codes, and --out holds every frame; `--takes N`
runs N takes at once on the batch (`--fast`), each to its own files, take k the plain command's codes with
seed + k - 1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from s2studio.cli import main

TEXT = "<|speaker:0|>Hello there. <|speaker:1|>[laughing] And hello to you."


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from s2studio.demo_model import write_demo_model

    return write_demo_model(tmp_path_factory.mktemp("demo") / "model", seed=1)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("clips") / "voice.flac"
    t = np.arange(int(1.3 * 22050)) / 22050
    sf.write(str(path), (0.3 * np.sin(2 * np.pi * 220 * t) * np.exp(-t)).astype(np.float32), 22050)
    return path


def synth(model_dir: Path, *args: object) -> int:
    return main(["synth", "--model", str(model_dir), "--text", TEXT, "--seed", "4", "--threads", "1",
                 "--max-new-tokens", "6", "--chunk-length", "20", "-q", *map(str, args)])


def test_audio_reference_equals_its_encoded_codes(model_dir: Path, clip: Path, tmp_path: Path) -> None:
    from s2studio.codec.loading import load_codec
    from s2studio.codec.resample import encode_file

    codes_file = tmp_path / "clip.npy"
    np.save(codes_file, encode_file(load_codec(model_dir), clip))
    from_clip, from_codes = tmp_path / "a.npy", tmp_path / "b.npy"
    # mixed order: the clip is the second reference in one run, its codes in the other
    other = tmp_path / "other.npy"
    np.save(other, np.random.default_rng(0).integers(0, 1024, size=(10, 5)))
    assert synth(model_dir, "--reference-codes", other, "--reference-text", "First.",
                 "--reference", clip, "--reference-text", "Second.", "--codes-out", from_clip) == 0
    assert synth(model_dir, "--reference-codes", other, "--reference-text", "First.",
                 "--reference-codes", codes_file, "--reference-text", "Second.", "--codes-out", from_codes) == 0
    np.testing.assert_array_equal(np.load(from_clip), np.load(from_codes))


@pytest.mark.parametrize("suffix", [".wav", ".flac", ".mp3"])
def test_out_writes_each_batch_decoded_and_joined(model_dir: Path, tmp_path: Path, suffix: str) -> None:
    from s2studio.codec.loading import load_codec

    out, codes_dir = tmp_path / f"speech{suffix}", tmp_path / "batches"
    assert synth(model_dir, "--out", out, "--codes-out-dir", codes_dir) == 0
    batches = [np.load(p) for p in sorted(codes_dir.glob("batch_*.npy"))]
    assert len(batches) == 2
    audio, rate = sf.read(str(out), dtype="float32")
    assert rate == 44100
    frames = sum(b.shape[1] for b in batches)
    if suffix == ".mp3":
        assert abs(len(audio) - 2048 * frames) <= 2048  # the MP3 encoder pads its frames
        return
    assert len(audio) == 2048 * frames
    if suffix == ".wav":
        codec = load_codec(model_dir)
        with torch.inference_mode():
            want = np.concatenate([codec.decode(torch.from_numpy(b)[None]).reshape(-1).numpy() for b in batches])
        from s2studio.audio.io import pcm16

        np.testing.assert_array_equal(sf.read(str(out), dtype="int16")[0], pcm16(want))


def test_bad_reference_and_out_give_one_line(model_dir: Path, clip: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"definitely not audio" * 20)
    assert synth(model_dir, "--reference", junk, "--reference-text", "x") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("s2studio synth: error: junk.wav is not an audio file") and "\n" not in err
    assert synth(model_dir, "--reference", clip) == 2
    assert "one transcript per --reference" in capsys.readouterr().err
    assert synth(model_dir, "--out", tmp_path / "speech.xyz") == 2
    assert "cannot tell the format of speech.xyz" in capsys.readouterr().err
    assert synth(model_dir, "--out", tmp_path / "missing" / "a.wav") == 2
    assert "folder" in capsys.readouterr().err


def fast(model_dir: Path, clip: Path, *args: object) -> int:
    """`synth` on the fast path (where takes run side by side) with the clip as its one reference."""
    return synth(model_dir, "--device", "cpu", "--precision", "fp32", "--fast", "--reference", clip,
                 "--reference-text", "A voice.", *args)


def test_takes_run_at_once_and_each_is_the_plain_command_with_its_seed(model_dir: Path, clip: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    takes = tmp_path / "takes"
    takes.mkdir()
    assert fast(model_dir, clip, "--seed", "4", "--takes", "3", "--out", takes / "speech.wav",
                 "--codes-out", takes / "codes.npy") == 0
    assert sorted(p.name for p in takes.iterdir()) == [f"{name}_take{k}.{ext}" for name, ext in
                                                       (("codes", "npy"), ("speech", "wav")) for k in (1, 2, 3)]
    assert "3 takes (3 at once)" in capsys.readouterr().err
    codes = [np.load(takes / f"codes_take{k}.npy") for k in (1, 2, 3)]
    for k, c in enumerate(codes, 1):
        assert sf.info(str(takes / f"speech_take{k}.wav")).frames == c.shape[1] * 2048
    assert not all(np.array_equal(codes[0], c) for c in codes[1:])
    for k, seed in ((1, 4), (2, 5)):
        plain = tmp_path / f"plain{seed}.npy"
        assert fast(model_dir, clip, "--seed", seed, "--codes-out", plain) == 0
        assert np.array_equal(np.load(plain), codes[k - 1]), k


def test_takes_are_refused_where_they_cannot_work(model_dir: Path, clip: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    def error(*args: object) -> str:
        assert fast(model_dir, clip, *args) == 2
        return capsys.readouterr().err.strip().removeprefix("s2studio synth: error: ")

    assert error("--takes", "0", "--out", tmp_path / "a.wav") == "--takes must be between 1 and 16, got 0"
    assert error("--takes", "2") == ("--takes writes each take to its own files; give --out FILE and/or "
                                     "--codes-out FILE.npy")
    assert error("--takes", "2", "--pick", "best", "--out", tmp_path / "a.wav").startswith(
        "--pick belongs to a --script render")
    assert list(tmp_path.iterdir()) == []
