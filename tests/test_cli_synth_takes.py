"""`s2studio synth --text … --takes N`: N takes at once on the batch (`--fast`), each to its own files, take k the
plain command's codes with seed + k - 1; and the one-line errors of the option."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

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


def synth(model_dir: Path, clip: Path, *args: object) -> int:
    return main(["synth", "--model", str(model_dir), "--text", TEXT, "--threads", "1", "--device", "cpu",
                 "--precision", "fp32", "--fast", "--max-new-tokens", "6", "--chunk-length", "20", "-q",
                 "--reference", str(clip), "--reference-text", "A voice.", *map(str, args)])


def test_takes_run_at_once_and_each_is_the_plain_command_with_its_seed(model_dir: Path, clip: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    takes = tmp_path / "takes"
    takes.mkdir()
    assert synth(model_dir, clip, "--seed", "4", "--takes", "3", "--out", takes / "speech.wav",
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
        assert synth(model_dir, clip, "--seed", seed, "--codes-out", plain) == 0
        assert np.array_equal(np.load(plain), codes[k - 1]), k


def test_the_option_is_refused_where_it_cannot_work(model_dir: Path, clip: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    def error(*args: object) -> str:
        assert synth(model_dir, clip, *args) == 2
        return capsys.readouterr().err.strip().removeprefix("s2studio synth: error: ")

    assert error("--takes", "0", "--out", tmp_path / "a.wav") == "--takes must be between 1 and 16, got 0"
    assert error("--takes", "2") == ("--takes writes each take to its own files; give --out FILE and/or "
                                     "--codes-out FILE.npy")
    assert error("--takes", "2", "--pick", "best", "--out", tmp_path / "a.wav").startswith(
        "--pick belongs to a --script render")
    assert list(tmp_path.iterdir()) == []
