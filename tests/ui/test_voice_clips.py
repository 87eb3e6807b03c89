"""Voices of several clips in the studio: dropping or choosing several audio files makes one voice
with a transcript per clip, a selected voice gets another clip or loses one, and a render encodes only
clips whose codes are not cached yet (the new one)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QDialogButtonBox, QInputDialog

from s2studio.engine.fake import FakeEngine
from s2studio.ui.voices import voices_panel
from s2studio.ui.voices.new_voice.dialog import NewVoiceDialog
from ui_helpers import close_studio, drop_files, on_modal, open_studio, write_wav

ENCODED: list[str] = []


class CountingFake(FakeEngine):
    """The fake engine, noting which clips it was asked to encode."""

    def encode(self, request, cancel):  # noqa: ANN001, ANN201
        ENCODED.extend(c.clip_id for c in request.clips)
        yield from super().encode(request, cancel)


def fill(qtbot, name: str | None, transcripts: list[str], seen: list[NewVoiceDialog]):
    def handler(d: NewVoiceDialog) -> None:
        seen.append(d)
        assert len(d.transcripts) == len(transcripts)
        if name is not None:
            d.name.setText(name)
        for edit, text in zip(d.transcripts, transcripts, strict=True):
            qtbot.mouseClick(edit.viewport(), Qt.MouseButton.LeftButton)
            qtbot.keyClicks(edit, text)
        seen.append(d.reason.text())
        qtbot.mouseClick(d.buttons.button(QDialogButtonBox.StandardButton.Ok), Qt.MouseButton.LeftButton)
    return handler


def render(qtbot, w) -> None:
    done: list[bool] = []
    w.session.finished.connect(lambda cancelled: done.append(cancelled))
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: done == [False], timeout=15000)


def test_voices_of_several_clips(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    ENCODED.clear()
    w = open_studio(qtbot, lambda: CountingFake(frame_latency_s=0.001), begin_session=False)
    try:
        # two files dropped at once: one voice, a transcript typed for each clip
        wavs = [write_wav(tmp_path / f"take_{i}.wav", seconds=3.0 + i, hz=200 + 50 * i) for i in range(6)]
        seen: list = []
        on_modal(qtbot, NewVoiceDialog, fill(qtbot, "Alice", ["First clip words.", "Second clip words."], seen))
        drop_files(w, wavs[:2])
        qtbot.waitUntil(lambda: len(w.library.list()) == 1, timeout=5000)
        (voice,) = w.library.list()
        assert [(c.id, c.transcript, c.duration_s) for c in voice.clips] == [
            ("c1", "First clip words.", 3.0), ("c2", "Second clip words.", 4.0)]
        assert seen[0].windowTitle() == "New voice" and seen[1] == ""
        assert "2 clips · 7 s" in w.voices.list.currentItem().text()

        w.editor.setPlainText("Alice: Hello there, this is a test.")
        w.reparse()
        w.cast_panel.combos["Alice"].setCurrentIndex(w.cast_panel.combos["Alice"].findData(voice.id))
        render(qtbot, w)
        assert ENCODED == [f"{voice.id}/c1", f"{voice.id}/c2"]

        # the selected voice gets a third clip through its "+" button
        monkeypatch.setattr(voices_panel.QFileDialog, "getOpenFileName", lambda *a, **k: (str(wavs[2]), ""))
        seen.clear()
        on_modal(qtbot, NewVoiceDialog, fill(qtbot, None, ["Third clip words."], seen))
        qtbot.mouseClick(w.voices.add_clip_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: len(w.library.get(voice.id).clips) == 3, timeout=5000)
        assert seen[0].windowTitle() == "Add a clip to “Alice”"
        assert w.library.get(voice.id).clips[2].transcript == "Third clip words."
        assert "Third clip words." in w.voices.details.clips.item(2).text()
        assert w.document.stale_lines() == list(w.document.script.lines)  # the voice changed: its line is stale
        done: list[bool] = []
        w.session.finished.connect(done.append)
        w.actions_by_name["render_stale"].trigger()
        qtbot.waitUntil(lambda: done == [False], timeout=15000)
        assert w.document.stale_lines() == []
        assert ENCODED[2:] == [f"{voice.id}/c3"]  # only the new clip was encoded
        assert len(w.document.project.lines[w.document.script.lines[0].line_id].takes) == 2

        # "−" removes a clip chosen from a list
        offered: list[list[str]] = []

        def choose_second(d: QInputDialog) -> None:
            combo = d.findChild(QComboBox)
            offered.append([combo.itemText(i) for i in range(combo.count())])
            combo.setCurrentIndex(1)
            box = d.findChild(QDialogButtonBox)
            qtbot.mouseClick(box.button(QDialogButtonBox.StandardButton.Ok), Qt.MouseButton.LeftButton)

        on_modal(qtbot, QInputDialog, choose_second)
        qtbot.mouseClick(w.voices.remove_clip_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: len(w.library.get(voice.id).clips) == 2, timeout=5000)
        assert offered == [["Clip 1 · 3.0 s · “First clip words.”", "Clip 2 · 4.0 s · “Second clip words.”",
                            "Clip 3 · 5.0 s · “Third clip words.”"]]
        assert [c.id for c in w.library.get(voice.id).clips] == ["c1", "c3"]
        assert w.document.stale_lines() == list(w.document.script.lines)

        # choosing five files: the first four make the voice, and the dialog says so
        monkeypatch.setattr(voices_panel.QFileDialog, "getOpenFileNames",
                            lambda *a, **k: ([str(p) for p in wavs[1:]], ""))
        seen.clear()
        on_modal(qtbot, NewVoiceDialog, fill(qtbot, "Bob", ["one", "two", "three", "four"], seen))
        qtbot.mouseClick(w.voices.add_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: len(w.library.list()) == 2, timeout=5000)
        bob = w.library.find("Bob")
        assert [c.transcript for c in bob.clips] == ["one", "two", "three", "four"]
        assert seen[1] == "⚠ A voice takes 1–4 clips: only the first 4 of the 5 files are used."
        # a voice with four clips refuses a fifth without opening a dialog
        messages: list[str] = []
        w.voices.message.connect(messages.append)
        qtbot.mouseClick(w.voices.add_clip_button, Qt.MouseButton.LeftButton)
        assert messages == ["“Bob” has 4 clips already; a voice takes at most 4."]
        w.voices.select(voice.id)
        assert w.voices.remove_clip_button.isEnabled()
        w.library.remove_clip(voice.id, "c1")
        w.voices.refresh()
        assert not w.voices.remove_clip_button.isEnabled()  # the last clip stays
    finally:
        close_studio(w)


def test_a_refused_voice_keeps_the_dialog_open_with_what_was_typed(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: FakeEngine(frame_latency_s=0.001), begin_session=False)
    try:
        first, second = (write_wav(tmp_path / f"take_{i}.wav", seconds=4.0, hz=220 + 40 * i) for i in range(2))
        on_modal(qtbot, NewVoiceDialog, fill(qtbot, "Alice", ["Clip words one."], []))
        drop_files(w, [first])
        qtbot.waitUntil(lambda: len(w.library.list()) == 1, timeout=5000)

        # the same name again: refused in the dialog, which opens again with the transcript still typed
        seen: list = []

        def again(d: NewVoiceDialog) -> None:
            seen.append((d.reason.text(), d.transcripts[0].toPlainText()))
            d.name.setText("Alice B")
            qtbot.mouseClick(d.buttons.button(QDialogButtonBox.StandardButton.Ok), Qt.MouseButton.LeftButton)

        def refused(d: NewVoiceDialog) -> None:
            fill(qtbot, "Alice", ["Clip words two."], [])(d)
            on_modal(qtbot, NewVoiceDialog, again)

        on_modal(qtbot, NewVoiceDialog, refused)
        drop_files(w, [second])
        qtbot.waitUntil(lambda: len(w.library.list()) == 2, timeout=5000)
        assert seen == [("⚠ a voice called 'Alice' exists; pick another name or remove that voice",
                         "Clip words two.")]
        assert sorted(v.name for v in w.library.list()) == ["Alice", "Alice B"]
        assert [c.transcript for c in w.library.get(w.voices.selected_id()).clips] == ["Clip words two."]
    finally:
        close_studio(w)


def test_dropped_voice_files_are_imported_and_a_bad_one_is_one_warning(qtbot, tmp_path, monkeypatch):
    from s2studio.state.voices import VoiceLibrary  # noqa: PLC0415

    other = VoiceLibrary(tmp_path / "elsewhere")
    carol = other.create("Carol", [(write_wav(tmp_path / "carol.wav", seconds=4.0), "Carol speaking here.")])
    good = other.export(carol.id, tmp_path / "carol.s2voice")
    bad = tmp_path / "broken.s2voice"
    bad.write_bytes(b"not a zip at all")
    warnings: list[tuple[str, str]] = []
    monkeypatch.setattr(voices_panel.QMessageBox, "warning", lambda parent, title, text: warnings.append((title, text)))
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: FakeEngine(frame_latency_s=0.001), begin_session=False)
    try:
        drop_files(w.voices, [bad, good])
        qtbot.waitUntil(lambda: len(w.library.list()) == 1 and len(warnings) == 1, timeout=5000)
        (voice,) = w.library.list()
        assert voice.name == "Carol" and w.voices.selected_id() == voice.id
        assert warnings[0][0] == "Import voice" and "broken.s2voice" in warnings[0][1]
    finally:
        close_studio(w)
