"""Voices as a new user met them: transcripts offline with the models already on this computer, a folder chosen
in Settings ▸ Transcripts only when it holds a faster-whisper model, and a voice list that keeps its rows when
a voice with four clips is selected."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from s2studio.ui.control.asr_choice import MODEL_KEY
from s2studio.ui.inspector import transcripts_box
from s2studio.ui.inspector.transcripts_box import CHOOSE, TranscriptsBox
from speech import tiny_model
from ui_helpers import close_studio, fake_engine, open_studio, write_wav


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def entries(box: TranscriptsBox) -> list[str]:
    return [box.model.itemText(i) for i in range(box.model.count())]


def test_transcripts_offer_the_models_on_this_computer_and_a_checked_folder(qtbot, tmp_path, monkeypatch):
    tiny = tiny_model()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = tmp_path / "hub" / "models--Systran--faster-whisper-small" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    for f in tiny.iterdir():
        (snapshot / f.name).symlink_to(f)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    box = TranscriptsBox(settings)
    qtbot.addWidget(box)
    box.show()
    assert entries(box) == ["Tiny: fastest, least exact (75 MB)", "Base: fast (145 MB)",
                            "Small: slower, more exact (484 MB)", "Large v3 turbo: most exact, slow on a CPU (1,620 MB)",
                            "Systran/faster-whisper-small (Hugging Face cache)",
                            "Tiny, English only (installed with the tests)", "Choose a folder…"]
    assert box.model.currentData() == "base"  # not downloaded: the note offers what is here
    assert box.note.text() == ("Downloaded from Hugging Face the first time a clip is transcribed (145 MB). Without "
                               "internet, choose one already on this computer: Systran/faster-whisper-small (Hugging "
                               "Face cache).")
    box.model.setCurrentIndex(box.model.findData(str(tiny)))
    assert settings.value(MODEL_KEY) == str(tiny)
    assert box.note.text().startswith("New clips are transcribed automatically")

    empty = tmp_path / "not-a-model"
    empty.mkdir()
    chosen = [str(empty)]
    monkeypatch.setattr(transcripts_box.QFileDialog, "getExistingDirectory", lambda *a, **k: chosen.pop(0))
    box.model.setCurrentIndex(box.model.findData(CHOOSE))
    assert box.model.currentData() == str(tiny) and settings.value(MODEL_KEY) == str(tiny)  # refused: unchanged
    assert box.note.text() == (f"✗ {empty} is not a faster-whisper model folder (model.bin, config.json, "
                               "tokenizer.json missing).")
    mine = tmp_path / "my-whisper"
    mine.mkdir()
    for f in tiny.iterdir():
        (mine / f.name).symlink_to(f)
    chosen.append(str(mine))
    box.model.setCurrentIndex(box.model.findData(CHOOSE))
    assert box.model.currentText() == "Folder: my-whisper" and settings.value(MODEL_KEY) == str(mine)
    assert entries(box)[-1] == "Choose a folder…"
    chosen.append("")  # the folder dialog cancelled: nothing changes
    box.model.setCurrentIndex(box.model.findData(CHOOSE))
    assert settings.value(MODEL_KEY) == str(mine) and box.model.currentText() == "Folder: my-whisper"
    again = TranscriptsBox(settings)  # remembered
    qtbot.addWidget(again)
    assert again.model.currentText() == "Folder: my-whisper"


def test_the_voice_list_keeps_four_rows_when_a_voice_with_four_clips_is_selected(qtbot, data_dir, tmp_path):
    w = open_studio(qtbot, fake_engine)
    w.resize(1280, 800)
    clips = [(write_wav(tmp_path / f"c{i}.wav", seconds=3.0, hz=200 + 40 * i),
              f"Clip number {i} says a sentence long enough to wrap over two lines in the narrow panel.")
             for i in range(4)]
    for name in ("Alice", "Bob", "Carol"):
        w.library.create(name, clips[:1])
    full = w.library.create("Dave", clips)
    w.voices.refresh()
    w.voices.select(full.id)
    qtbot.waitUntil(lambda: w.voices.details.clips.count() == 4)
    qtbot.wait(50)
    voices = w.voices.list
    rows = [voices.visualItemRect(voices.item(i)) for i in range(voices.count())]
    assert all(voices.viewport().rect().contains(r) for r in rows)  # all four voices in view, none cut
    assert voices.height() >= voices.minimumHeight() > 4 * rows[0].height()
    clip_list = w.voices.details.clips
    assert clip_list.verticalScrollBar().maximum() > 0 or clip_list.height() >= clip_list.sizeHint().height()
    close_studio(w)
