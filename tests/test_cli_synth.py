"""`s2studio synth` on a tiny demo model folder: the codes file it writes, per-batch files, and the
one-line error for every bad input we can think of."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from s2studio.cli import main

TEXT = "<|speaker:0|>Hello there, friend. <|speaker:1|>[laugh] How are you today?"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from s2studio.demo_model import write_demo_model

    return write_demo_model(tmp_path_factory.mktemp("demo") / "model", seed=0, codec=False)


@pytest.fixture(scope="module")
def refs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("refs")
    rng = np.random.default_rng(0)
    paths = []
    for i, n in enumerate((12, 8)):
        p = folder / f"ref{i}.npy"
        np.save(p, rng.integers(0, 1024, size=(10, n)).astype(np.int64))
        paths.append(p)
    return paths


def error_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    rc = main(["synth", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith("s2studio synth: error: ")
    return err.removeprefix("s2studio synth: error: ")


def test_subprocess_writes_int64_codes(model_dir: Path, refs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "codes.npy"
    argv = [sys.executable, "-m", "s2studio", "synth", "--model", str(model_dir), "--text", TEXT,
            "--reference-codes", str(refs[0]), "--reference-text", "First reference.",
            "--reference-codes", str(refs[1]), "--reference-text", "Second one.",
            "--seed", "7", "--temperature", "0.8", "--top-p", "0.8", "--max-new-tokens", "12",
            "--chunk-length", "40", "--device", "cpu", "--precision", "fp32", "--threads", "1",
            "--codes-out", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    codes = np.load(out)
    assert codes.dtype == np.int64 and codes.ndim == 2 and codes.shape[0] == 10
    assert 1 <= codes.shape[1] <= 22  # two batches of at most 11 kept frames
    assert f"{codes.shape[1]} frames" in proc.stdout and "in 2 batch(es)" in proc.stdout
    assert "batch 2/2" in proc.stderr
    assert 0 <= codes.min() and codes.max() < 4096

    # the same request in process, text from a file, per-batch files: the same codes
    text_file = tmp_path / "text.txt"
    text_file.write_text(TEXT, encoding="utf-8")
    out2, per_batch = tmp_path / "again.npy", tmp_path / "batches"
    i = argv.index("--text")
    argv2 = argv[3:i] + ["--text-file", str(text_file)] + argv[i + 2:-1] + [str(out2), "--codes-out-dir",
                                                                            str(per_batch), "-q"]
    assert main(argv2) == 0
    np.testing.assert_array_equal(np.load(out2), codes)
    files = sorted(per_batch.glob("batch_*.npy"))
    assert [f.name for f in files] == ["batch_000.npy", "batch_001.npy"]
    np.testing.assert_array_equal(np.concatenate([np.load(f) for f in files], axis=1), codes)


def test_bad_inputs_give_one_line(model_dir: Path, refs: list[Path], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    m = ["--model", str(model_dir), "--device", "cpu"]
    assert "does not exist" in error_of(["--model", str(tmp_path / "none"), "--text", "hi"], capsys)
    assert "text file not found" in error_of([*m, "--text-file", str(tmp_path / "none.txt")], capsys)
    assert "the text is empty" in error_of([*m, "--text", "  \n"], capsys)
    bad_utf8 = tmp_path / "latin1.txt"
    bad_utf8.write_bytes("caf\xe9".encode("latin-1"))
    assert "not UTF-8" in error_of([*m, "--text-file", str(bad_utf8)], capsys)
    assert "one transcript per --reference" in error_of([*m, "--text", "hi", "--reference-codes", str(refs[0])], capsys)
    five = [a for _ in range(5) for a in ("--reference-codes", str(refs[0]), "--reference-text", "t")]
    assert "at most 4 references" in error_of([*m, "--text", "hi", *five], capsys)
    nine = tmp_path / "nine.npy"
    np.save(nine, np.zeros((9, 4), dtype=np.int64))
    assert "shape (10, frames), got (9, 4)" in error_of(
        [*m, "--text", "hi", "--reference-codes", str(nine), "--reference-text", "t"], capsys)
    junk = tmp_path / "junk.npy"
    junk.write_text("not numpy")
    assert "not a .npy array" in error_of(
        [*m, "--text", "hi", "--reference-codes", str(junk), "--reference-text", "t"], capsys)
    assert "reference codes file not found" in error_of(
        [*m, "--text", "hi", "--reference-codes", str(tmp_path / "x.npy"), "--reference-text", "t"], capsys)
    assert "unknown device 'tpu'" in error_of(["--model", str(model_dir), "--device", "tpu", "--text", "hi"], capsys)
    assert "unknown --precision" in error_of([*m, "--precision", "fp8", "--text", "hi"], capsys)
    assert "unknown --batching" in error_of([*m, "--batching", "words", "--text", "hi"], capsys)
    assert "temperature must be between 0.05 and 1.95, got 2.5" in error_of([*m, "--temperature", "2.5", "--text", "hi"],
                                                                             capsys)
    assert "top-p must be between 0.05 and 1, got 0.0" in error_of([*m, "--top-p", "0", "--text", "hi"], capsys)
    assert "folder" in error_of([*m, "--text", "hi", "--codes-out", str(tmp_path / "no" / "c.npy")], capsys)
    assert "must end in .npy" in error_of([*m, "--text", "hi", "--codes-out", str(tmp_path / "c.txt")], capsys)


def test_bad_model_folders(model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    no_tok = tmp_path / "no_tok"
    no_tok.mkdir()
    (no_tok / "config.json").write_text((model_dir / "config.json").read_text())
    assert "tokenizer.json is missing" in error_of(["--model", str(no_tok), "--device", "cpu", "--text", "hi"], capsys)
    assert "config.json" in error_of(["--model", str(tmp_path), "--device", "cpu", "--text", "hi"], capsys)

    no_sem = tmp_path / "no_sem"
    no_sem.mkdir()
    doc = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    doc["added_tokens"] = [t for t in doc["added_tokens"] if not t["content"].startswith("<|semantic:")]
    (no_sem / "config.json").write_text((model_dir / "config.json").read_text())
    (no_sem / "tokenizer.json").write_text(json.dumps(doc), encoding="utf-8")
    assert "no <|semantic:N|> tokens" in error_of(["--model", str(no_sem), "--device", "cpu", "--text", "hi"], capsys)


def test_reference_code_beyond_codebook(model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "big.npy"
    np.save(big, np.full((10, 3), 4096, dtype=np.int64))
    msg = error_of(["--model", str(model_dir), "--device", "cpu", "--text", "hi", "--max-new-tokens", "2",
                    "--reference-codes", str(big), "--reference-text", "t"], capsys)
    assert msg == f"reference codes {big} holds code 4096, beyond the codebook size 4096"


def test_warns_about_text_before_the_first_tag(model_dir: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c.npy"
    rc = main(["synth", "--model", str(model_dir), "--device", "cpu", "--text", "Lead words. <|speaker:0|>Hello.",
               "--max-new-tokens", "3", "--codes-out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0
    assert "warning: text before the first <|speaker:i|> tag is not spoken, as upstream: 'Lead words.'" in err
    assert np.load(out).shape == (10, 2)  # 3 frames at most, the last one dropped, no <|im_end|> in between


def _frames_per_batch(model_dir: Path, tmp_path: Path, *extra: str) -> list[int]:
    out = tmp_path / f"batches-{len(list(tmp_path.iterdir()))}"
    assert main(["synth", "--model", str(model_dir), "--text", TEXT, "--seed", "4", "--device", "cpu",
                 "--precision", "fp32", "--chunk-length", "40", "-q", *extra, "--codes-out-dir", str(out)]) == 0
    return [np.load(p).shape[1] for p in sorted(out.glob("batch_*.npy"))]


def test_frames_and_ignore_eos_make_exactly_n_frames(model_dir: Path, tmp_path: Path) -> None:
    """For benchmarks: --ignore-eos never stops at <|im_end|>, --frames N keeps exactly N frames per batch."""
    # with seed 4 the first batch says <|im_end|> after 9 frames when left alone
    assert _frames_per_batch(model_dir, tmp_path, "--max-new-tokens", "16") == [9, 15]
    assert _frames_per_batch(model_dir, tmp_path, "--max-new-tokens", "16", "--ignore-eos") == [15, 15]
    assert _frames_per_batch(model_dir, tmp_path, "--frames", "12") == [12, 12]
    assert _frames_per_batch(model_dir, tmp_path, "--frames", "12", "--fast") == [12, 12]


def test_benchmark_flags_and_script_options_refused_where_they_mean_nothing(
        model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = ["--model", str(model_dir), "--device", "cpu", "--text", "<|speaker:0|>Hi."]
    assert error_of([*m, "--frames", "0"], capsys) == "--frames must be at least 1, got 0"
    assert error_of([*m, "--max-new-tokens", "-1"], capsys) == "--max-new-tokens must be 0 (no limit) or more, got -1"
    assert error_of([*m, "--frames", "5", "--max-new-tokens", "9"], capsys) == (
        "give --frames or --max-new-tokens, not both")
    assert "--frames 5000: batch 1 leaves room for " in error_of([*m, "--frames", "5000", "-q"], capsys)
    for flag, value in (("--events", str(tmp_path / "ev.jsonl")), ("--srt", str(tmp_path / "a.srt")),
                        ("--stems", str(tmp_path / "stems")), ("--cast", "A=B"), ("--normalize", "peak")):
        assert error_of([*m, flag, value, "--codes-out", str(tmp_path / "c.npy")], capsys) == (
            f"{flag} belongs to a --script render; with --text/--text-file write the codes (--codes-out) or the "
            "speech (--out), or render a script")
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_a_render_that_writes_nothing_says_so_before_it_starts(model_dir: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["synth", "--model", str(model_dir), "--text", "<|speaker:0|>Hi.", "--device", "cpu",
                 "--max-new-tokens", "3"]) == 0
    err = capsys.readouterr().err
    said = err.index("warning: nothing will be written: add --out FILE.wav for the speech (or --codes-out FILE.npy "
                     "for its codes)")
    assert err.index("loaded ") < said < err.index("batch 1/1")  # before the slow part: it can be stopped
