"""`s2studio codec encode|decode` round trip on the tiny golden codec, and its one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from codec_clips import CASES, CODEC_SEED, random_codes, write_clip
from s2studio.cli import main
from s2studio.demo_model.codec_weights import write_codec_checkpoint

GOLDEN = Path(__file__).parent / "golden" / "codec"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("model")
    write_codec_checkpoint(folder / "codec.pth", seed=CODEC_SEED, size="tiny")
    return folder


def test_encode_then_decode(model: Path, tmp_path: Path) -> None:
    case = next(c for c in CASES if c[0] == "s22k")
    clip = write_clip(tmp_path, *case)
    codes_path = tmp_path / "codes.npy"
    assert main(["codec", "encode", "--model", str(model), str(clip), "--codes-out", str(codes_path)]) == 0
    codes = np.load(codes_path)
    assert codes.dtype == np.int64
    np.testing.assert_array_equal(codes, np.load(GOLDEN / "encode.npz")["s22k"])

    full, streamed = tmp_path / "full.wav", tmp_path / "streamed.wav"
    assert main(["codec", "decode", "--model", str(model), str(codes_path), "--out", str(full)]) == 0
    assert main(["codec", "decode", "--model", str(model / "codec.pth"), str(codes_path), "--out", str(streamed),
                 "--stream-chunk", "3"]) == 0
    a, rate = sf.read(full, dtype="int16")
    b, _ = sf.read(streamed, dtype="int16")
    assert rate == 44100 and a.shape == (2048 * codes.shape[1],)
    golden = np.load(GOLDEN / "decode.npz")["dec_clip_pcm16"]  # the golden decode of these very codes
    assert np.abs(a.astype(np.int32) - golden).max() <= 1
    assert np.abs(a.astype(np.int32) - b).max() <= 1
    assert np.count_nonzero(a != b) <= 0.005 * a.size


@pytest.mark.parametrize(("argv", "message"), [
    (["codec", "decode", "--model", "{model}", "{tmp}/none.npy", "--out", "{tmp}/x.wav"], "codes file not found"),
    (["codec", "decode", "--model", "{model}", "{tmp}/bad.npy", "--out", "{tmp}/x.wav"], "has shape (3, 4)"),
    (["codec", "decode", "--model", "{model}", "{tmp}/neg.npy", "--out", "{tmp}/x.wav"], "negative values"),
    (["codec", "decode", "--model", "{model}", "{tmp}/neg.npy", "--out", "{tmp}/x.mp3"], "must be a .wav"),
    (["codec", "decode", "--model", "{tmp}", "{tmp}/bad.npy", "--out", "{tmp}/x.wav"], "has shape"),
    (["codec", "encode", "--model", "{tmp}", "{tmp}/bad.npy", "--codes-out", "{tmp}/c.npy"], "no codec found"),
    (["codec", "encode", "--model", "{model}", "{tmp}/bad.npy", "--codes-out", "{tmp}/c.npy"],
     "not an audio file"),
    (["codec", "decode", "--model", "{model}", "{tmp}/neg.npy", "--out", "{tmp}/x.wav", "--stream-chunk", "-1"],
     "--stream-chunk must be"),
])
def test_errors_are_one_line(model: Path, tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    np.save(tmp_path / "bad.npy", np.zeros((3, 4), dtype=np.int64))
    neg = np.zeros((10, 4), dtype=np.int64)
    neg[3, 2] = -1
    np.save(tmp_path / "neg.npy", neg)
    code = main([a.format(model=model, tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and err.startswith("s2studio codec: error: ")


def test_threads_are_set_and_reported(model: Path, tmp_path: Path, capsys) -> None:
    """The decoded bits depend on the thread count, so the command takes one (and says what it ran with)."""
    import torch

    codes = tmp_path / "codes.npy"
    np.save(codes, random_codes(3, 40))
    before = torch.get_num_threads()
    try:
        outs = {}
        for n in (2, 1):
            outs[n] = tmp_path / f"t{n}.wav"
            assert main(["codec", "decode", "--model", str(model), str(codes), "--out", str(outs[n]),
                         "--threads", str(n)]) == 0
            assert torch.get_num_threads() == n
            assert capsys.readouterr().err.rstrip().endswith(f"({n} thread{'s' if n > 1 else ''})")
        clip = write_clip(tmp_path, *next(c for c in CASES if c[0] == "s22k"))
        assert main(["codec", "encode", "--model", str(model), str(clip), "--codes-out", str(tmp_path / "e.npy"),
                     "--threads", "2"]) == 0
        assert capsys.readouterr().err.rstrip().endswith("(2 threads)")
    finally:
        torch.set_num_threads(before)
    one, two = sf.read(outs[1], dtype="int16")[0], sf.read(outs[2], dtype="int16")[0]
    assert one.shape == two.shape and np.abs(one.astype(np.int32) - two).max() <= 1
    assert main(["codec", "decode", "--model", str(model), str(codes), "--out", str(tmp_path / "x.wav"),
                 "--threads", "0"]) == 2
    err = capsys.readouterr().err
    assert "--threads must be a positive integer, got 0" in err and err.count("\n") == 1
