"""The studio window driven offscreen with clicks and key presses: voices from a dropped WAV and
from the (file-backed) microphone, a two-speaker script with tags, a live render, seek, takes,
export read back, and a project saved and reopened."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf
from PySide6.QtCore import QPoint, QSettings, Qt
from PySide6.QtWidgets import QDialogButtonBox, QToolBar, QToolButton

from s2studio import app
from s2studio.engine.api import SAMPLE_RATE
from s2studio.ui.dialogs.export_dialog import ExportDialog
from s2studio.ui.voices.record_dialog import RecordDialog
from s2studio.ui.voices.new_voice.dialog import NewVoiceDialog
from ui_helpers import CHUNK, drop_files, fake_engine, on_modal, playback_raw, project_shown, write_wav

FRAMES = 12
LINE = CHUNK * FRAMES
GAP = round(0.4 * SAMPLE_RATE)


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    app.make_application()
    QSettings().clear()  # before the window reads them: another test may have left a fixed seed remembered
    w = app.build_window("fake", factory=lambda: fake_engine(FRAMES, 0.03))
    w.projects.ask = False
    qtbot.addWidget(w)
    w.show()
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=3000)  # shortcuts only reach the active window
    w.store.begin_session()
    app.start_engine(w)
    qtbot.waitUntil(lambda: w.model.info is not None, timeout=5000)
    yield w
    w.player.close()
    w.close()
    w.ctx.host.shutdown()


def toolbar_button(w, name: str) -> QToolButton:
    bar = w.findChild(QToolBar, "mainToolbar")
    return bar.widgetForAction(w.actions_by_name[name])


def press(qtbot, w, key, modifiers) -> None:
    """A key press on the active window (after a modal dialog the offscreen platform leaves none active)."""
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=3000)
    qtbot.keyClick(w, key, modifiers)


def type_script(qtbot, editor, lines: list[str]) -> None:
    editor.setFocus()
    for i, line in enumerate(lines):
        qtbot.keyClicks(editor, line)
        if editor.completer.popup().isVisible():
            qtbot.keyClick(editor.completer.popup(), Qt.Key.Key_Escape)
        if i < len(lines) - 1:
            qtbot.keyClick(editor, Qt.Key.Key_Return)


def make_voices(qtbot, w, tmp_path) -> tuple[str, str]:
    """One voice from a dropped WAV, one recorded from the fake microphone. Returns their ids."""
    wav = write_wav(tmp_path / "alice_clip.wav")

    def fill_new_voice(name: str, transcript: str | None):
        def handler(d: NewVoiceDialog) -> None:
            d.name.setText(name)
            if transcript is not None:
                d.transcript.setPlainText(transcript)
            qtbot.mouseClick(d.buttons.button(QDialogButtonBox.StandardButton.Ok), Qt.MouseButton.LeftButton)
        return handler

    on_modal(qtbot, NewVoiceDialog, fill_new_voice("Alice voice", "Hello, this is Alice speaking."))
    drop_files(w, [wav])
    qtbot.waitUntil(lambda: len(w.library.list()) == 1, timeout=5000)

    def record(d: RecordDialog) -> None:
        qtbot.mouseClick(d.record_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: d.seconds >= 3.5, timeout=10000)
        qtbot.mouseClick(d.stop_button, Qt.MouseButton.LeftButton)
        on_modal(qtbot, NewVoiceDialog, fill_new_voice("Bob voice", None))
        qtbot.mouseClick(d.buttons.button(QDialogButtonBox.StandardButton.Ok), Qt.MouseButton.LeftButton)

    on_modal(qtbot, RecordDialog, record)
    press(qtbot, w, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: len(w.library.list()) == 2, timeout=10000)
    voices = {v.name: v for v in w.library.list()}
    recorded = w.library.clip_path(voices["Bob voice"], voices["Bob voice"].clips[0])
    data, rate = sf.read(recorded)
    # the microphone played a 440 Hz tone: the recording holds it
    spectrum = np.abs(np.fft.rfft(data[rate: 3 * rate]))
    assert abs(np.argmax(spectrum) / 2 - 440) < 10
    assert voices["Bob voice"].clips[0].transcript.startswith("The quick brown fox")
    return voices["Alice voice"].id, voices["Bob voice"].id


def test_gui_never_imports_torch():
    code = "import sys, s2studio.ui.window.main_window, s2studio.app; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_studio_end_to_end(qtbot, window, tmp_path):
    w = window
    alice, bob = make_voices(qtbot, w, tmp_path)

    type_script(qtbot, w.editor, ["# Scene", "Alice: Did you hear that? [whispering] Someone is here.",
                                  "Bob: [laughing] It's only the cat."])
    qtbot.waitUntil(lambda: w.document.script.speakers == ("Alice", "Bob"), timeout=3000)
    assert [ln.text for ln in w.document.script.lines] == ["Did you hear that? [whispering] Someone is here.",
                                                  "[laughing] It's only the cat."]
    # both speakers lack a voice: the parser's warnings are underlined in the editor
    assert sorted(x.message.split("'")[1] for x in w.editor.warnings) == ["Alice", "Bob"]
    w.cast_panel.combos["Alice"].setCurrentIndex(w.cast_panel.combos["Alice"].findData(alice))
    w.cast_panel.combos["Bob"].setCurrentIndex(w.cast_panel.combos["Bob"].findData(bob))
    qtbot.waitUntil(lambda: w.editor.warnings == [], timeout=3000)
    assert w.document.project.cast == {"Alice": alice, "Bob": bob}

    # render: playback must start while the engine is still rendering
    order: list[str] = []
    w.player.started_audio.connect(lambda: order.append("playing" if w.session.busy else "played after"))
    w.session.finished.connect(lambda cancelled: order.append("finished"))
    qtbot.mouseClick(toolbar_button(w, "render_all"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "finished" in order, timeout=15000)
    assert order[0] == "playing"
    assert w.timeline.layout.end == 2 * LINE + GAP
    assert [(s.start, s.end) for s in w.timeline.segments()] == [(0, LINE), (LINE + GAP, 2 * LINE + GAP)]
    qtbot.waitUntil(lambda: not w.player.playing, timeout=10000)
    # the 'speaker' (a file, 16 kHz) received the rendered tones: 180 Hz (Alice) and 207 Hz (Bob)
    played = np.fromfile(playback_raw(), dtype="<i2").astype(np.float32) / 32767
    start = int(np.argmax(np.abs(played) > 0.01))
    first_line = played[start:start + 8000]  # 0.5 s of the first line at the device's 16 kHz
    assert len(first_line) == 8000 and np.abs(first_line).max() > 0.09
    assert abs(np.argmax(np.abs(np.fft.rfft(first_line))) * 2 - 180) < 4  # FakeEngine: 180 Hz for speaker 0

    # seek by clicking the waveform (paused: the playhead stays where the click put it)
    wave = w.player_bar.waveform
    x = wave.width() // 3
    qtbot.mouseClick(wave, Qt.MouseButton.LeftButton, pos=QPoint(x, wave.height() // 2))
    assert w.player.position == min(wave.sample_at(x), w.timeline.layout.end)
    assert w.player.position > 0

    # a second take of the first line (cursor on it, Ctrl+Return), then pick take 1 again
    cursor = w.editor.textCursor()
    cursor.setPosition(w.document.script.lines[0].start + 3)
    w.editor.setTextCursor(cursor)
    first = w.document.script.lines[0].line_id
    take1 = w.document.project.current(first).audio.copy()
    qtbot.keyClick(w.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: len(w.document.project.lines[first].takes) == 2 and not w.session.busy, timeout=10000)
    assert w.document.project.lines[first].picked == 1
    assert not np.array_equal(w.timeline.mix()[:LINE], take1)
    w.inspector.setCurrentWidget(w.inspector.takes)
    item = w.inspector.takes.list.item(0)
    qtbot.mouseClick(w.inspector.takes.list.viewport(), Qt.MouseButton.LeftButton,
                     pos=w.inspector.takes.list.visualItemRect(item).center())
    assert w.document.project.lines[first].picked == 0
    assert np.array_equal(w.timeline.mix()[:LINE], take1)

    # export WAV + SRT through the dialog, read them back
    out = tmp_path / "out" / "scene.wav"

    def do_export(d: ExportDialog) -> None:
        qtbot.waitUntil(lambda: d.ready, timeout=5000)  # the lines are counted off the GUI thread
        d.options.out.setText(str(out))
        d.options.srt.setChecked(True)
        qtbot.mouseClick(d.export_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: d.result is not None or d.status.text().startswith("✗"), timeout=10000)
        d.accept()

    on_modal(qtbot, ExportDialog, do_export)
    press(qtbot, w, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
    audio, rate = sf.read(out, dtype="float32")
    assert rate == SAMPLE_RATE
    assert len(audio) == 2 * LINE + round(0.4 * SAMPLE_RATE)
    assert np.allclose(audio[:LINE], take1, atol=1 / 32767)
    srt = out.with_suffix(".srt").read_text(encoding="utf-8")
    assert len(re.findall(r"^\d+$", srt, flags=re.M)) == 2
    assert "00:00:00,000 --> 00:00:00,557" in srt
    assert "It's only the cat." in srt

    # save, start a new project, reopen: script, cast, takes and the pick come back
    saved = tmp_path / "scene.s2proj"
    w.projects.save_as(saved)
    script_text = w.editor.toPlainText()
    w.projects.new()
    assert w.editor.toPlainText() == "" and w.document.project.lines == {}
    w.projects.open(saved)
    project_shown(qtbot, w)
    assert w.editor.toPlainText() == script_text
    assert w.document.project.cast == {"Alice": alice, "Bob": bob}
    assert len(w.document.project.lines[first].takes) == 2 and w.document.project.lines[first].picked == 0
    assert np.allclose(w.document.project.current(first).audio, take1, atol=1e-6)
    assert w.timeline.layout.end == 2 * LINE + GAP
    assert not w.document.stale_lines()
