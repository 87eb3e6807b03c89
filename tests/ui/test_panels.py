"""The studio's smaller promises: the real FakeEngine renders, crash restore, no PortAudio, the model
page, shortcuts and accessible names, tag completion, voice delete with undo."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QAbstractButton, QComboBox, QLineEdit, QToolButton

from s2studio import app
from s2studio.errors import UserError
from s2studio.ui.control import player as player_module
from s2studio.ui.actions import SPECS, ShortcutsDialog
from s2studio.ui.dialogs.model_page import ModelPage, validate_model_dir
from ui_helpers import cast_two_voices, close_studio, fake_engine, open_studio, write_wav


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_renders_with_the_fake_engine(qtbot, data_dir, tmp_path):
    from s2studio.engine.fake import FakeEngine

    w = open_studio(qtbot, lambda: FakeEngine(frame_latency_s=0.002))
    cast_two_voices(w, tmp_path)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: len(w.document.project.lines) == 2 and not w.session.busy, timeout=15000)
    takes = [w.document.project.current(ln.line_id) for ln in w.document.script.lines]
    assert all(len(t.audio) > 0 for t in takes)
    # the reference clips were encoded once and cached for the fake codec
    voice = w.library.list()[0]
    assert len(w.library.codes(voice, lambda p: pytest.fail("re-encoded"), "fake-codec-1")) == 1
    assert w.timeline.layout.end == sum(len(t.audio) for t in takes) + round(0.4 * 44100)
    assert w.document.stale_lines() == []
    w.editor.setPlainText("Alice: One [sigh] two, edited.\nBob: Three.")
    w.reparse()
    assert [ln.text for ln in w.document.stale_lines()] == ["One [sigh] two, edited."]
    bob = w.document.script.lines[1].line_id
    w.actions_by_name["render_stale"].trigger()
    qtbot.waitUntil(lambda: not w.document.stale_lines() and not w.session.busy, timeout=15000)
    assert len(w.document.project.lines[bob].takes) == 1  # only the edited line rendered again
    # play from the cursor's line: the playhead starts where Bob's line starts on the timeline
    started_at: list[int] = []
    w.player.play = lambda: started_at.append(w.player.position) or True
    cursor = w.editor.textCursor()
    cursor.setPosition(w.document.script.lines[1].start + 1)
    w.editor.setTextCursor(cursor)
    w.actions_by_name["play_from_cursor"].trigger()
    assert started_at == [w.timeline.layout.bounds(bob)[0]] and started_at[0] > 0
    close_studio(w)


def test_missing_voice_is_a_clear_message(qtbot, data_dir, monkeypatch):
    w = open_studio(qtbot, fake_engine)
    shown: list[str] = []
    monkeypatch.setattr(w.renders, "failed", shown.append)
    w.editor.setPlainText("Alice: hi")
    w.reparse()
    w.actions_by_name["render_all"].trigger()
    assert shown == ["No voice for Alice: pick one in the cast above the script."]
    assert not w.session.busy
    close_studio(w)


def test_restart_after_a_crash_offers_the_autosave(qtbot, data_dir, tmp_path):
    w = open_studio(qtbot, fake_engine)
    cast_two_voices(w, tmp_path)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: len(w.document.project.lines) == 2 and not w.session.busy, timeout=15000)
    w.store.flush()  # the autosave on disk now, then killed
    script, cast = w.editor.toPlainText(), dict(w.document.project.cast)
    audio = {k: v.current.audio.copy() for k, v in w.document.project.lines.items()}
    close_studio(w, clean=False)  # killed: no closeEvent, the session lock stays

    w2 = open_studio(qtbot, fake_engine)
    assert w2.store.crashed_before()
    assert w2.projects.restore_autosave()
    assert w2.editor.toPlainText() == script and w2.document.project.cast == cast
    assert {k: v.current.audio for k, v in w2.document.project.lines.items()}.keys() == audio.keys()
    for k, a in audio.items():
        assert np.allclose(w2.document.project.lines[k].current.audio, a, atol=1e-6)
    w2.close()  # a clean exit clears the lock: no offer next time
    assert not w2.store.crashed_before()
    close_studio(w2, clean=False)


def test_without_portaudio_the_studio_starts_and_says_why(qtbot, data_dir, monkeypatch):
    reason = "Audio is off: PortAudio is not installed (test). Install libportaudio2 to play and record."
    monkeypatch.setattr(player_module, "load_sounddevice", lambda: (None, reason))
    w = open_studio(qtbot, fake_engine)
    assert not w.actions_by_name["play_pause"].isEnabled()
    assert w.player_bar.notice.isVisibleTo(w) and w.player_bar.notice.text() == reason
    assert not w.player.play()
    close_studio(w)


def test_without_a_sound_output_the_notice_is_in_words_and_the_error_in_the_log(monkeypatch, caplog):
    import sounddevice  # noqa: PLC0415

    def refuse(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - what PortAudio says on a machine without one
        raise sounddevice.PortAudioError("Error querying device -1")

    monkeypatch.setattr(sounddevice, "query_devices", refuse)
    sd, reason = player_module.load_sounddevice()
    assert sd is sounddevice and reason == player_module.NO_OUTPUT
    assert "-1" not in reason and "Error" not in reason
    assert "Error querying device -1" in caplog.text


def test_model_folder_validation(tmp_path):
    with pytest.raises(UserError, match="is not a folder"):
        validate_model_dir(tmp_path / "nope")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UserError) as exc:
        validate_model_dir(tmp_path)
    assert str(exc.value) == (f"Not an S2 model folder: tokenizer.json, model weights (model.safetensors or "
                              f"model.pth), codec.pth missing in {tmp_path}.")
    for name in ("tokenizer.json", "model.safetensors", "codec.pth"):
        (tmp_path / name).write_text("x")
    assert validate_model_dir(tmp_path) == "S2 model"
    (tmp_path / "README.md").write_text("# Demo model (random weights)\n")
    assert validate_model_dir(tmp_path) == "demo model (random weights: produces noise)"


def test_model_page_needs_the_licence_before_downloading(qtbot, tmp_path):
    page = ModelPage(tmp_path)
    qtbot.addWidget(page)
    assert not page.download_button.isEnabled()
    qtbot.mouseClick(page.accept_license, Qt.MouseButton.LeftButton)
    assert page.download_button.isEnabled() == page.has_hub
    assert not page.ok_button.isEnabled()
    qtbot.keyClicks(page.folder, str(tmp_path))
    assert page.verdict.text().startswith("✗ Not an S2 model folder: config.json")
    page.done(0)


def test_every_action_has_a_unique_shortcut_and_a_name(qtbot, data_dir):
    w = open_studio(qtbot, fake_engine)
    seqs = [QKeySequence(s.shortcut).toString() for s in SPECS]
    assert all(seqs) and len(set(seqs)) == len(seqs)
    for spec in SPECS:
        act = w.actions_by_name[spec.name]
        assert act.shortcut().toString() == QKeySequence(spec.shortcut).toString()
    dialog = ShortcutsDialog(w)
    assert dialog.table.rowCount() == len(SPECS)
    unnamed = [type(c).__name__ + ":" + c.text() for c in w.findChildren(QAbstractButton) + w.findChildren(QComboBox)
               + w.findChildren(QLineEdit)
               if c.isVisibleTo(w) and not c.accessibleName() and not (isinstance(c, QToolButton) and c.defaultAction())]
    assert unnamed == []
    dialog.deleteLater()
    close_studio(w)


def test_tag_completion_after_bracket(qtbot, data_dir):
    w = open_studio(qtbot, fake_engine)
    w.activateWindow()
    w.editor.setFocus()
    qtbot.keyClicks(w.editor, "Alice: Well [whisp")
    popup = w.editor.completer.popup()
    assert popup.isVisible()
    assert w.editor.completer.currentCompletion() == "whisper"
    qtbot.keyClick(popup, Qt.Key.Key_Return)
    assert w.editor.toPlainText() == "Alice: Well [whisper]"
    w.inspector.tag_palette.tag_chosen.emit("sigh")
    assert w.editor.toPlainText() == "Alice: Well [whisper] [sigh] "
    # keyboard only: Ctrl+T, type a filter, Enter inserts the first match at the cursor
    qtbot.keyClick(w, Qt.Key.Key_T, Qt.KeyboardModifier.ControlModifier)
    assert w.inspector.tag_palette.filter.hasFocus()
    qtbot.keyClicks(w.inspector.tag_palette.filter, "laugh")
    qtbot.keyClick(w.inspector.tag_palette.filter, Qt.Key.Key_Return)
    assert w.editor.toPlainText() == "Alice: Well [whisper] [sigh] [laughing tone] "
    assert w.editor.hasFocus()
    assert w.status.memory.text().startswith("RAM ")
    close_studio(w)


def test_delete_voice_then_undo(qtbot, data_dir, tmp_path):
    w = open_studio(qtbot, fake_engine)
    v = w.library.create("Narrator voice", [(write_wav(tmp_path / "n.wav"), "a clip")])
    w.voices.refresh()
    w.voices.select(v.id)
    qtbot.mouseClick(w.voices.delete_button, Qt.MouseButton.LeftButton)
    assert w.library.list() == []
    assert w.voices.undo_button.isVisibleTo(w)
    qtbot.mouseClick(w.voices.undo_button, Qt.MouseButton.LeftButton)
    assert [x.id for x in w.library.list()] == [v.id]
    assert w.voices.selected_id() == v.id
    close_studio(w)


def test_a_delete_that_cannot_keep_its_undo_copy_deletes_nothing(qtbot, data_dir, tmp_path, monkeypatch):
    from s2studio.state.disk import WriteError
    from s2studio.ui.control import voices as voice_commands
    from s2studio.ui.voices import voices_panel

    w = open_studio(qtbot, fake_engine)
    v = w.library.create("Narrator voice", [(write_wav(tmp_path / "n.wav"), "a clip")])
    w.voices.refresh()
    w.voices.select(v.id)
    warnings: list[str] = []
    monkeypatch.setattr(voices_panel.QMessageBox, "warning", lambda _parent, _title, text: warnings.append(text))
    making = voice_commands.tempfile.TemporaryDirectory
    monkeypatch.setattr(voice_commands.tempfile, "TemporaryDirectory",  # the temp folder cannot be made
                        lambda **_: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    qtbot.mouseClick(w.voices.delete_button, Qt.MouseButton.LeftButton)
    assert [x.id for x in w.library.list()] == [v.id]
    assert warnings == ["The temp folder cannot hold the undo copy (No space left on device); free some space "
                        "there.\n“Narrator voice” was not deleted."]
    monkeypatch.setattr(voice_commands.tempfile, "TemporaryDirectory", making)  # it can; the copy cannot be written
    monkeypatch.setattr(w.library, "export", lambda *_: (_ for _ in ()).throw(WriteError("No space left on device", tmp_path, 28)))
    qtbot.mouseClick(w.voices.delete_button, Qt.MouseButton.LeftButton)
    assert [x.id for x in w.library.list()] == [v.id]
    assert warnings[-1] == "No space left on device\n“Narrator voice” was not deleted."
    assert not w.voices.undo_button.isVisibleTo(w)
    close_studio(w)


def test_the_voice_panel_leaves_nothing_in_the_temp_folder(qtbot, data_dir, tmp_path, monkeypatch):
    """The undo copy of a deleted voice is made at the delete, and its folder goes when the window closes (an
    earlier build made a folder per window and never removed it: thousands of them in /tmp)."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    w = open_studio(qtbot, fake_engine)
    assert list(temp.iterdir()) == []  # nothing until something is deleted
    first = w.library.create("First", [(write_wav(tmp_path / "a.wav"), "a clip")])
    second = w.library.create("Second", [(write_wav(tmp_path / "b.wav"), "a clip")])
    w.voices.refresh()
    for voice in (first, second):
        w.voices.select(voice.id)
        qtbot.mouseClick(w.voices.delete_button, Qt.MouseButton.LeftButton)
    (undo_dir,) = temp.iterdir()
    assert [f.name for f in undo_dir.iterdir()] == [f"{second.id}.s2voice"]  # one level of undo
    close_studio(w)
    assert list(temp.iterdir()) == []


def test_settings_are_remembered_between_sessions(qtbot, data_dir):
    w = open_studio(qtbot, fake_engine)
    w.inspector.settings_panel.temperature.setValue(0.55)
    w.inspector.settings_panel.seed_mode.setCurrentIndex(w.inspector.settings_panel.seed_mode.findData("fixed"))
    w.inspector.settings_panel.seed.setValue(99)
    assert w.document.project.settings.temperature == 0.55 and w.document.project.settings.seed == 99
    close_studio(w)
    app.make_application()
    w2 = app.build_window("fake", factory=fake_engine)  # no settings.clear(): the remembered values load
    qtbot.addWidget(w2)
    w2.projects.ask = False
    s = w2.document.project.settings
    assert (s.temperature, s.seed_mode, s.seed) == (0.55, "fixed", 99)
    assert w2.inspector.settings_panel.temperature.value() == 0.55 and w2.inspector.settings_panel.seed.isEnabled()
    close_studio(w2)


def test_stop_cancels_the_render_and_the_studio_stays_usable(qtbot, data_dir, tmp_path):
    w = open_studio(qtbot, lambda: fake_engine(frames=40, latency_s=0.05))
    cast_two_voices(w, tmp_path)
    ended: list[bool] = []
    w.session.finished.connect(ended.append)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: w.timeline.layout.end > 0, timeout=10000)
    assert w.actions_by_name["stop_render"].isEnabled()
    qtbot.waitUntil(lambda: "frames/s" in w.status.speed.text(), timeout=10000)  # once a speed is measured
    assert "ETA" in w.status.speed.text()
    w.actions_by_name["stop_render"].trigger()
    qtbot.waitUntil(lambda: ended == [True], timeout=10000)
    assert w.document.project.lines == {} and not w.timeline.layout.growing
    assert w.status.speed.text() == "Render cancelled."
    assert w.actions_by_name["render_all"].isEnabled()
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: len(ended) == 2, timeout=20000)
    assert ended == [True, False] and len(w.document.project.lines) == 2
    close_studio(w)


def test_a_model_load_can_be_cancelled_and_loaded_again(qtbot, data_dir):
    from s2studio.engine.fake import FakeEngine

    app.make_application()
    w = app.build_window("fake", factory=lambda: FakeEngine(frame_latency_s=0.3))
    w.ctx.settings.clear()
    w.projects.ask = False
    qtbot.addWidget(w)
    w.models.load(Path("fake-model"))
    a = w.actions_by_name
    assert a["cancel_load"].isEnabled() and not a["stop_render"].isEnabled()  # Stop Rendering is for renders
    assert not a["render_all"].isEnabled()
    qtbot.waitUntil(lambda: w.status.model.text().startswith("Loading model"), timeout=5000)
    assert w.status.cancel_load.isVisibleTo(w)
    a["cancel_load"].trigger()
    qtbot.waitUntil(lambda: w.status.model.text() == "No model (loading cancelled)", timeout=5000)
    assert w.model.info is None and not a["cancel_load"].isEnabled() and not w.status.cancel_load.isVisibleTo(w)
    w.models.load(Path("fake-model"))
    qtbot.waitUntil(lambda: w.model.info is not None, timeout=10000)
    assert w.status.model.text() == "Model: fake"
    close_studio(w)


def test_download_shows_progress_and_cancels(qtbot, tmp_path, monkeypatch):
    hub = pytest.importorskip("huggingface_hub")
    import time as _time

    def fake_snapshot_download(repo_id, local_dir, tqdm_class):
        # long enough that the cancel click always lands first, even on a loaded machine: cancel ends it early
        bar = tqdm_class(total=3000, desc="model.safetensors", disable=False)
        for _ in range(3000):
            _time.sleep(0.01)
            bar.update(1)
        bar.close()
        return str(local_dir)

    monkeypatch.setattr(hub, "snapshot_download", fake_snapshot_download)
    page = ModelPage(tmp_path)
    qtbot.addWidget(page)
    qtbot.mouseClick(page.accept_license, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(page.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.progress.value() > 0, timeout=5000)
    assert page.cancel_button.isEnabled() and not page.download_button.isEnabled()
    qtbot.mouseClick(page.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.status.text() == "✗ Cancelled.", timeout=5000)
    assert page.download_button.isEnabled() and not page.progress.isVisible()
    page.done(0)


def test_rename_voice(qtbot, data_dir, tmp_path):
    from PySide6.QtWidgets import QDialogButtonBox, QInputDialog

    from ui_helpers import on_modal

    w = open_studio(qtbot, fake_engine)
    v = w.library.create("Old name", [(write_wav(tmp_path / "n.wav"), "a clip")])
    w.voices.refresh()
    w.voices.select(v.id)

    def rename(d: QInputDialog) -> None:
        d.setTextValue("New name")
        qtbot.mouseClick(d.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok),
                         Qt.MouseButton.LeftButton)

    on_modal(qtbot, QInputDialog, rename)
    qtbot.mouseClick(w.voices.rename_button, Qt.MouseButton.LeftButton)
    assert [x.name for x in w.library.list()] == ["New name"]
    assert w.voices.list.currentItem().text().startswith("New name")
    close_studio(w)
