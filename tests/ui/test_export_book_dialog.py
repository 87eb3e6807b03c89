"""The export dialog with a book: typing a path never raises and the folders follow only a valid name, the name is
the project's, rows stay put when messages and progress come and go, the headings become chapters, FLAC stems are
offered (and said why) when WAV stems would be huge, and Stop leaves nothing."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import pytest
import soundfile as sf
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QMessageBox

from s2studio.audio import export_files, export_writer
from s2studio.engine.fake import FakeEngine
from s2studio.state.take_audio import TakeSound
from s2studio.ui.dialogs.export_dialog import ExportDialog
from ui_helpers import cast_two_voices, close_studio, on_modal, open_studio

SCRIPT = "# The start\nAlice: One [sigh] two.\nBob: Three.\n# The end\nAlice: Four [whispering] five."


@pytest.fixture
def studio(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: FakeEngine(frame_latency_s=0.001), begin_session=False)
    cast_two_voices(w, tmp_path, SCRIPT)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: len(w.document.project.lines) == 3 and not w.session.busy, timeout=15000)
    yield w
    close_studio(w)


def in_dialog(qtbot, w, steps) -> dict:
    """Open File ▸ Export, run `steps(dialog, seen)` in it and close it; what `steps` noted comes back (asserted
    outside, so that a failure closes the dialog instead of leaving it open)."""
    seen: dict = {}

    def run(d: ExportDialog) -> None:
        try:
            qtbot.waitUntil(lambda: d.ready, timeout=5000)  # the lines are counted off the GUI thread
            steps(d, seen)
        except Exception as exc:  # noqa: BLE001 - reported below, after the dialog closed
            seen["error"] = exc
        finally:
            d.reject()

    on_modal(qtbot, ExportDialog, run)
    w.actions_by_name["export"].trigger()
    if "error" in seen:
        raise seen["error"]
    return seen


def export_now(qtbot, d: ExportDialog) -> None:
    qtbot.mouseClick(d.export_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not d._task.running and d._phase == "", timeout=15000)


def folders(d: ExportDialog) -> tuple[str, str, str]:
    return d.options.stems_dir.text(), d.options.clips_dir.text(), d.options.chapters_dir.text()


def test_typing_clearing_and_pasting_a_path_never_raises(qtbot, studio, tmp_path):
    """Typed character by character, a path passes through "", "/", "/tmp/" …: none may raise, and the stems,
    clips and chapters folders follow only names that can be a file's."""
    def steps(d: ExportDialog, seen: dict) -> None:
        d.options.out.setFocus()
        qtbot.keyClick(d.options.out, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
        qtbot.keyClicks(d.options.out, "/tmp/x/")
        seen["half"] = folders(d)
        qtbot.keyClicks(d.options.out, "scene.flac")
        seen["typed"] = (d.options.out.text(), d.options.format.currentData(), folders(d))
        qtbot.keyClick(d.options.out, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
        qtbot.keyClick(d.options.out, Qt.Key.Key_Backspace)
        d.options.format.setCurrentIndex(d.options.format.findData("mp3"))  # a format chosen while there is no name
        seen["cleared"] = (d.options.out.text(), folders(d))
        qtbot.mouseClick(d.export_button, Qt.MouseButton.LeftButton)
        seen["refused"] = d.status.text()
        QGuiApplication.clipboard().setText(str(tmp_path / "book" / "take two.wav"))
        qtbot.keyClick(d.options.out, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
        seen["pasted"] = (d.options.out.text(), d.options.format.currentData(), folders(d))
        qtbot.keyClicks(d.options.stems_dir.edit, "/elsewhere")  # the person's own folder stops following
        d.options.out.setText(str(tmp_path / "again.wav"))
        seen["own"] = folders(d)

    seen = in_dialog(qtbot, studio, steps)
    assert seen["half"] == ("/tmp/x stems", "/tmp/x lines", "/tmp/x chapters")  # "/tmp/x" was a name; "/tmp/x/" not
    assert seen["typed"] == ("/tmp/x/scene.flac", "flac",
                             ("/tmp/x/scene stems", "/tmp/x/scene lines", "/tmp/x/scene chapters"))
    assert seen["cleared"] == ("", ("/tmp/x/scene stems", "/tmp/x/scene lines", "/tmp/x/scene chapters"))
    assert seen["refused"] == ("Give the mix a file name (for example …/scene.wav): it names the subtitles and "
                               "folders too.")
    book = tmp_path / "book"
    assert seen["pasted"] == (str(book / "take two.wav"), "wav",
                              (str(book / "take two stems"), str(book / "take two lines"), str(book / "take two chapters")))
    assert seen["own"][0] == str(book / "take two stems") + "/elsewhere"
    assert seen["own"][1:] == (str(tmp_path / "again lines"), str(tmp_path / "again chapters"))
    assert not (tmp_path / "book").exists()


def test_the_name_is_the_projects_and_rows_stay_put(qtbot, studio, tmp_path):
    with qtbot.waitSignal(studio.store.path_changed, timeout=30_000):  # saving runs on the writer thread
        studio.store.save(studio.document.project, tmp_path / "My book.s2proj")

    def steps(d: ExportDialog, seen: dict) -> None:
        seen["name"] = Path(d.options.out.text()).name
        d.options.out.setText(str(tmp_path / "out" / "My book.wav"))
        QApplication.processEvents()
        seen["before"] = d.buttons.mapTo(d, d.buttons.rect().topLeft()).y()
        d.options.mix.setChecked(False)
        d.options.srt.setChecked(False)
        d.options.markers.setChecked(False)
        qtbot.mouseClick(d.export_button, Qt.MouseButton.LeftButton)  # a message: nothing to write
        seen["message"] = d.status.text()
        QApplication.processEvents()
        seen["after message"] = d.buttons.mapTo(d, d.buttons.rect().topLeft()).y()
        d.options.mix.setChecked(True)
        d.set_progress_visible(True)  # as after a second of exporting
        QApplication.processEvents()
        seen["with progress"] = d.buttons.mapTo(d, d.buttons.rect().topLeft()).y()
        d.set_progress_visible(False)
        export_now(qtbot, d)
        seen["done"] = d.status.text()
        QApplication.processEvents()
        seen["after export"] = d.buttons.mapTo(d, d.buttons.rect().topLeft()).y()

    seen = in_dialog(qtbot, studio, steps)
    assert seen["name"] == "My book.wav"  # not "script.wav"
    assert seen["message"].startswith("Nothing to write")
    assert seen["done"].startswith("✓ Wrote 1 file: My book.wav")
    assert seen["before"] == seen["after message"] == seen["with progress"] == seen["after export"], seen


def test_headings_become_markers_a_cue_sheet_and_chapter_files(qtbot, studio, tmp_path):
    out = tmp_path / "book.wav"

    def steps(d: ExportDialog, seen: dict) -> None:
        o = d.options
        seen["enabled"] = o.markers.isEnabled() and o.chapter_files.isEnabled() and o.markers.isChecked()
        d.options.out.setText(str(out))
        d.options.chapter_files.setChecked(True)
        export_now(qtbot, d)
        seen["status"] = d.status.text()

    seen = in_dialog(qtbot, studio, steps)
    assert seen["enabled"] and seen["status"].startswith("✓ Wrote 5 files: book.wav, 01_The-start.wav, 02_The-end.wav, "
                                                         "book.srt")
    starts = [0, sf.info(str(tmp_path / "book chapters" / "01_The-start.wav")).frames
              + round(studio.document.project.gap_s * 44100)]
    with out.open("rb") as f:
        data = f.read()
    cue = data.index(b"cue ")
    count = struct.unpack_from("<I", data, cue + 8)[0]
    assert [struct.unpack_from("<I", data, cue + 12 + 24 * i + 4)[0] for i in range(count)] == starts
    assert b"labl" in data and b"The start\0" in data and b"The end\0" in data
    sheet = out.with_suffix(".cue").read_text()
    assert '    TITLE "The start"\n    INDEX 01 00:00:00\n' in sheet and '    TITLE "The end"\n' in sheet


def test_flac_stems_are_offered_when_wav_stems_would_be_huge(qtbot, studio, tmp_path, monkeypatch):
    monkeypatch.setattr(export_files, "HUGE_STEMS", 1000)  # these 3 short lines stand for a book

    def steps(d: ExportDialog, seen: dict) -> None:
        seen["default"] = d.options.stems_flac.isChecked()
        d.options.out.setText(str(tmp_path / "scene.wav"))
        qtbot.mouseClick(d.options.stems, Qt.MouseButton.LeftButton)
        seen["note"] = d.options.stems_note.isVisibleTo(d), d.options.stems_note.text()
        export_now(qtbot, d)
        seen["status"] = d.status.text()
        d.options.format.setCurrentIndex(d.options.format.findData("flac"))
        seen["flac mix"] = d.options.stems_flac.isVisibleTo(d)

    seen = in_dialog(qtbot, studio, steps)
    assert seen["default"]
    visible, note = seen["note"]
    assert visible and note.startswith("WAV stems would take about ") and "(2 full-length tracks); as FLAC about " in note
    assert note.endswith(", since FLAC stores their silence in almost nothing.")
    assert sorted(p.name for p in (tmp_path / "scene stems").iterdir()) == ["01_Alice.flac", "02_Bob.flac"]
    assert sf.info(str(tmp_path / "scene.wav")).format == "WAV"
    assert not seen["flac mix"]  # a FLAC mix has FLAC stems anyway


def test_stop_leaves_nothing(qtbot, studio, tmp_path, monkeypatch):
    monkeypatch.setattr(export_writer, "BLOCK", 64)  # many small steps, so that Stop comes in the middle
    out = tmp_path / "scene.wav"
    out.write_bytes(b"the last export")

    def steps(d: ExportDialog, seen: dict) -> None:
        d.options.out.setText(str(out))
        d.options.stems.setChecked(True)
        d.options.srt.setChecked(False)
        d._task.progress.connect(lambda f, _t: f > 0.2 and d.stop_button.click())
        on_modal(qtbot, QMessageBox, lambda box: box.button(QMessageBox.StandardButton.Yes).click())
        export_now(qtbot, d)
        seen["status"] = d.status.text()
        seen["export enabled"] = d.export_button.isEnabled()

    seen = in_dialog(qtbot, studio, steps)
    assert seen["status"] == "Stopped: nothing was written." and seen["export enabled"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left
    assert out.read_bytes() == b"the last export" and not (tmp_path / "scene stems").exists()


def test_the_dialog_never_walks_the_lines_on_the_window_thread(qtbot, studio, tmp_path, monkeypatch):
    """Counting, the summary, the stems' default format and their size note read one summary made off the window's
    thread: with a book's 10,000 lines, each walk of them there was a pass of tens of milliseconds."""
    monkeypatch.setattr(export_files, "HUGE_STEMS", 1000)  # the size note is shown: its estimates are made too
    walked_on: list[str] = []
    length = TakeSound.__len__

    def counted_len(self) -> int:  # noqa: ANN001
        walked_on.append(threading.current_thread().name)
        return length(self)

    monkeypatch.setattr(TakeSound, "__len__", counted_len)

    def steps(d: ExportDialog, seen: dict) -> None:
        qtbot.mouseClick(d.options.stems, Qt.MouseButton.LeftButton)
        d.options.format.setCurrentIndex(d.options.format.findData("ogg"))
        d.options.format.setCurrentIndex(d.options.format.findData("wav"))
        seen["note"] = d.options.stems_note.text()
        seen["summary"] = d.summary.text()

    seen = in_dialog(qtbot, studio, steps)
    assert "stems would take about" in seen["note"] and seen["summary"].startswith("3 rendered lines to export (")
    assert walked_on and threading.main_thread().name not in walked_on  # counted, and only by the worker
