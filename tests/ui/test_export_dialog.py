"""The export dialog as a producer uses it: speaker stems and line clips, the selected lines only, a question
before anything is replaced, the umask's modes, voice names as the artist, subtitles without tags, the bitrate,
and Open Folder."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import numpy as np
import pytest
from umask import umask_set
import soundfile as sf
from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import QMessageBox

from s2studio.engine.fake import FakeEngine
from s2studio.ui import desktop
from s2studio.ui.dialogs.export_dialog import ExportDialog
from ui_helpers import cast_two_voices, close_studio, on_modal, open_studio

SCRIPT = "Alice: One [sigh] two.\nBob: Three.\nAlice: Four [whispering] five."


@pytest.fixture
def studio(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: FakeEngine(frame_latency_s=0.001), begin_session=False)
    cast_two_voices(w, tmp_path, SCRIPT)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: len(w.document.project.lines) == 3 and not w.session.busy, timeout=15000)
    yield w
    close_studio(w)


def export_with(qtbot, w, setup, answer: QMessageBox.StandardButton | None = None) -> dict:
    """Open File ▸ Export, let `setup(dialog)` fill it in, click Export (answering a replace question with
    `answer`), and return what the dialog said."""
    seen: dict = {}

    def run(d: ExportDialog) -> None:
        qtbot.waitUntil(lambda: d.ready, timeout=5000)  # the lines are counted off the GUI thread
        setup(d)
        if answer is not None:
            def reply(box: QMessageBox) -> None:
                seen["question"] = box.text()
                box.button(answer).click()

            on_modal(qtbot, QMessageBox, reply)
        qtbot.mouseClick(d.export_button, Qt.MouseButton.LeftButton)
        if answer is not None:
            qtbot.waitUntil(lambda: "question" in seen, timeout=5000)
        qtbot.waitUntil(lambda: not d._task.running and d._phase == "", timeout=15000)  # checked, then written
        seen.update(status=d.status.text(), result=d.result, open=d.open_button.isEnabled())
        seen["dialog"] = d
        if "keep" not in seen:
            d.accept()

    on_modal(qtbot, ExportDialog, run)
    w.actions_by_name["export"].trigger()
    return seen


def test_speaker_stems_and_line_clips(qtbot, studio, tmp_path):
    w = studio
    out = tmp_path / "out" / "scene.wav"

    def setup(d: ExportDialog) -> None:
        d.options.out.setText(str(out))
        qtbot.mouseClick(d.options.stems, Qt.MouseButton.LeftButton)
        qtbot.mouseClick(d.options.clips, Qt.MouseButton.LeftButton)

    seen = export_with(qtbot, w, setup)
    assert seen["status"].startswith("✓ Wrote 7 files")
    takes = [w.document.project.current(ln.line_id).audio for ln in w.document.script.lines]
    mix, _ = sf.read(out, dtype="float32")
    stems = sorted((tmp_path / "out" / "scene stems").iterdir())
    assert [p.name for p in stems] == ["01_Alice.wav", "02_Bob.wav"]  # one per speaker, not one per line
    tracks = [sf.read(p, dtype="float32")[0] for p in stems]
    assert [len(t) for t in tracks] == [len(mix)] * 2
    np.testing.assert_allclose(tracks[0] + tracks[1], mix, atol=2 / 32767)
    clips = sorted((tmp_path / "out" / "scene lines").iterdir())
    assert [p.name for p in clips] == ["001_Alice_one-two.wav", "002_Bob_three.wav", "003_Alice_four-five.wav"]
    assert [len(sf.read(p)[0]) for p in clips] == [len(t) for t in takes]  # each take's length
    artists = {}
    for p in (out, *stems, *clips):
        with sf.SoundFile(p) as f:
            artists[p.name] = f.copy_metadata().get("artist")
    assert artists == {"scene.wav": "A, B", "01_Alice.wav": "A", "02_Bob.wav": "B", "001_Alice_one-two.wav": "A",
                       "002_Bob_three.wav": "B", "003_Alice_four-five.wav": "A"}  # names, never voice ids
    srt = out.with_suffix(".srt").read_text("utf-8")
    assert "Alice: One two.\n" in srt and "[" not in srt  # subtitles show what is heard


def test_replacing_files_asks_first(qtbot, studio, tmp_path):
    out = tmp_path / "scene.flac"
    first = export_with(qtbot, studio, lambda d: d.options.out.setText(str(out)))
    assert first["status"].startswith("✓ Wrote 2 files") and "question" not in first
    out.write_bytes(b"keep me")
    declined = export_with(qtbot, studio, lambda d: d.options.out.setText(str(out)), QMessageBox.StandardButton.No)
    assert "2 files already exist and will be replaced:\n  scene.flac\n  scene.srt" == declined["question"]
    assert declined["status"] == "Nothing written: choose another file name or folder." and declined["result"] is None
    assert out.read_bytes() == b"keep me"
    replaced = export_with(qtbot, studio, lambda d: d.options.out.setText(str(out)), QMessageBox.StandardButton.Yes)
    assert replaced["status"].startswith("✓ Wrote 2 files") and sf.info(out).format == "FLAC"


def test_files_get_the_umask_mode_and_open_folder_shows_them(qtbot, studio, tmp_path, monkeypatch):
    opened: list[QUrl] = []
    monkeypatch.setattr(desktop.QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    out = tmp_path / "new" / "scene.wav"
    with umask_set(0o022):
        def setup(d: ExportDialog) -> None:
            d.options.out.setText(str(out))
            d.options.vtt.setChecked(True)
            d.options.clips.setChecked(True)
            assert not d.open_button.isEnabled()

        seen = export_with(qtbot, studio, setup)
        assert seen["open"]
        qtbot.mouseClick(seen["dialog"].open_button, Qt.MouseButton.LeftButton)
    files = sorted(p for p in (tmp_path / "new").rglob("*") if p.is_file())
    assert len(files) == 6 and {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o644}
    assert stat.S_IMODE((tmp_path / "new" / "scene lines").stat().st_mode) == 0o755
    assert [Path(u.toLocalFile()) for u in opened] == [tmp_path / "new"]


def test_only_the_selected_lines_with_tags_kept_and_a_bitrate(qtbot, studio, tmp_path):
    w = studio
    bob, alice = w.document.script.lines[1], w.document.script.lines[2]
    cursor = w.editor.textCursor()
    cursor.setPosition(bob.start + 1)
    cursor.setPosition(alice.start + 2, cursor.MoveMode.KeepAnchor)  # from Bob's line into Alice's second
    w.editor.setTextCursor(cursor)
    out = tmp_path / "bob.mp3"

    def setup(d: ExportDialog) -> None:
        assert d.which.itemText(1) == "Selected lines (2)"
        d.which.setCurrentIndex(1)
        qtbot.waitUntil(lambda: d.ready, timeout=5000)
        assert re.fullmatch(r"2 rendered lines to export \(\d s\)", d.summary.text())
        d.options.format.setCurrentIndex(d.options.format.findData("mp3"))
        assert d.options.bitrate.isVisibleTo(d) and d.options.bitrate.currentData() == 192
        d.options.bitrate.setCurrentIndex(d.options.bitrate.findData(64))
        d.options.out.setText(str(out))
        d.options.clips.setChecked(True)
        d.options.keep_tags.setChecked(True)
        assert d.options.settings().bitrate_kbps == 64  # the encoder's bitrates are measured in tests/test_export.py

    seen = export_with(qtbot, w, setup)
    assert seen["status"].startswith("✓ Wrote 4 files")
    assert sorted(p.name for p in (tmp_path / "bob lines").iterdir()) == ["002_Bob_three.mp3",
                                                                          "003_Alice_four-five.mp3"]
    seconds = [len(w.document.project.current(ln.line_id).audio) / 44100 for ln in (bob, alice)]
    assert sf.info(out).format == "MP3"
    assert abs(sf.info(out).duration - (sum(seconds) + w.document.project.gap_s)) < 0.06
    srt = out.with_suffix(".srt").read_text("utf-8")
    assert srt.startswith("1\n00:00:00,000 --> ") and "Bob: Three.\n\n2\n" in srt
    assert srt.endswith("Alice: Four [whispering] five.\n")  # tags kept, as asked
