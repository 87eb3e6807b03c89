"""Nothing unsaved is dropped without asking: File ▸ New and File ▸ Open offer to save the script, cast and
takes first (Save, Discard, Cancel), and the autosave outlives an exit that left unsaved work nobody chose
to discard; and a project saved before line ids and take records existed still opens, up to date."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

import numpy as np
import soundfile as sf
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from s2studio.state.project import GenerationSettings
from s2studio.state.script import make_line_id, parse_script
from s2studio.state.staleness import fingerprint_of, take_settings, voice_key
from s2studio.ui.dialogs import project_commands
from ui_helpers import close_studio, fake_engine, on_modal, open_studio, project_shown, write_wav


def answer(qtbot, button: QMessageBox.StandardButton, seen: list[str]):
    """Answer the next "Save changes?" box with `button`, remembering its question."""
    def handler(box: QMessageBox) -> None:
        seen.append(box.text())
        qtbot.mouseClick(box.button(button), Qt.MouseButton.LeftButton)
    on_modal(qtbot, QMessageBox, handler)


def typed(qtbot, w, text: str) -> None:
    w.editor.setFocus()
    qtbot.keyClicks(w.editor, text)
    w.reparse()


def test_new_and_open_ask_to_save_unsaved_changes(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, fake_engine)
    w.projects.ask = True
    try:
        typed(qtbot, w, "Alice: Words I do not want to lose.")
        asked: list[str] = []
        answer(qtbot, QMessageBox.StandardButton.Cancel, asked)
        qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)  # File ▸ New, cancelled
        assert asked == ["Save the changes to the project before starting a new project?"]
        assert w.editor.toPlainText() == "Alice: Words I do not want to lose."

        saved = tmp_path / "kept.s2proj"
        monkeypatch.setattr(project_commands.QFileDialog, "getSaveFileName", lambda *a, **k: (str(saved), ""))
        answer(qtbot, QMessageBox.StandardButton.Save, asked)
        assert w.projects.new()  # Save: written first, then the new project
        assert w.editor.toPlainText() == "" and not w.store.unsaved_work
        assert json.loads((saved / "project.json").read_text())["script"] == "Alice: Words I do not want to lose."

        typed(qtbot, w, "Bob: A second draft.")
        monkeypatch.setattr(project_commands.QFileDialog, "getExistingDirectory", lambda *a, **k: str(saved))
        answer(qtbot, QMessageBox.StandardButton.Cancel, asked)
        assert not w.projects.open()  # Open, cancelled: nothing asked for a folder, the draft stays
        assert w.editor.toPlainText() == "Bob: A second draft."
        answer(qtbot, QMessageBox.StandardButton.Discard, asked)
        assert w.projects.open()  # Discard: the person chose to drop the draft
        assert w.editor.toPlainText() == "Alice: Words I do not want to lose."
        assert asked[-1] == "Save the changes to the project before opening another project?"
        assert len(asked) == 4
        assert w.projects.new()  # nothing unsaved now: no question
        assert len(asked) == 4
    finally:
        w.projects.ask = False
        close_studio(w)


def test_unsaved_work_outlives_an_exit_nobody_chose_to_discard(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, fake_engine)
    typed(qtbot, w, "Alice: Typed, never saved.")
    close_studio(w)  # a clean exit that asked nothing (as S2STUDIO_QUIT_AFTER_MS does)
    assert (tmp_path / "data" / "autosave" / "current.s2proj" / "project.json").is_file()

    w2 = open_studio(qtbot, fake_engine, begin_session=False)  # as app.main: the offer comes before the lock
    assert not w2.store.crashed_before() and w2.store.kept_before()
    on_modal(qtbot, QMessageBox, lambda box: (box.text().startswith("Your last session ended with unsaved")
                                              and qtbot.mouseClick(box.button(QMessageBox.StandardButton.Yes),
                                                                   Qt.MouseButton.LeftButton)))
    assert w2.projects.offer_restore()
    w2.store.begin_session()
    assert w2.editor.toPlainText() == "Alice: Typed, never saved."
    w2.projects.ask = True
    on_modal(qtbot, QMessageBox, lambda box: qtbot.mouseClick(box.button(QMessageBox.StandardButton.Discard),
                                                              Qt.MouseButton.LeftButton))
    w2.close()  # asked, and Discard chosen: now the autosave goes
    assert not (tmp_path / "data" / "autosave" / "current.s2proj").exists()
    w2.projects.ask = False
    close_studio(w2, clean=False)


def _old_fingerprint(speaker: str, text: str, voice, settings: GenerationSettings) -> str:
    """The take fingerprint studios before line ids wrote (their `staleness_key`), written out again here."""
    values = asdict(settings)
    values.pop("threads")  # later settings: those studios had none
    values.pop("max_batch")
    if settings.seed_mode == "random":
        values.pop("seed")
    voice_id = voice.id + ":" + ",".join(c.sha256[:12] for c in voice.clips)
    return hashlib.sha1(json.dumps([speaker, text, voice_id, values], sort_keys=True).encode()).hexdigest()[:16]


def test_an_old_project_file_still_opens_up_to_date(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, fake_engine)
    try:
        a = w.library.create("A", [(write_wav(tmp_path / "a.wav"), "hello there")])
        b = w.library.create("B", [(write_wav(tmp_path / "b.wav", hz=330), "hi again")])
        w.voices.refresh()
        w.voice_commands.reread()
        script = "Alice: An old line.\nBob: Another old line.\nCarol: A line of last month.\n"
        settings = GenerationSettings()
        folder = tmp_path / "old.s2proj"
        (folder / "takes").mkdir(parents=True)
        lines = {}
        for i, (ln, voice) in enumerate(zip(parse_script(script).lines[:2], (a, b), strict=True)):
            take_id = f"0a0b0c0d0e0{i}"
            sf.write(folder / "takes" / f"{take_id}.flac", np.full(4096, 0.1 * (i + 1), np.float32), 44100,
                     subtype="PCM_24")
            np.save(folder / "takes" / f"{take_id}.npy", np.zeros((10, 2), np.int64))
            lines[make_line_id(ln.speaker, ln.text, 0)] = {"picked": 0, "takes": [{
                "take_id": take_id, "text": ln.text, "seed": 7,
                "fingerprint": _old_fingerprint(ln.speaker, ln.text, voice, settings)}]}
        carol = parse_script(script).lines[2]  # a take as last month's studio wrote it: the record, no fingerprint
        sf.write(folder / "takes" / "0a0b0c0d0e02.flac", np.full(4096, 0.3, np.float32), 44100, subtype="PCM_24")
        np.save(folder / "takes" / "0a0b0c0d0e02.npy", np.zeros((10, 2), np.int64))
        lines[make_line_id(carol.speaker, carol.text, 0)] = {"picked": 0, "takes": [{
            "take_id": "0a0b0c0d0e02", "text": carol.text, "seed": 7, "fingerprint": "", "speaker": "Carol",
            "voice": voice_key(a),
            "settings": {k: v for k, v in take_settings(settings).items() if v is not None}}]}  # as dumped
        (folder / "project.json").write_text(json.dumps({
            "format": 1, "title": "", "script": script, "cast": {"Alice": a.id, "Bob": b.id, "Carol": a.id},
            "settings": asdict(settings), "gap_s": 0.4, "lines": lines}))

        assert w.projects.open(folder)
        project_shown(qtbot, w)
        assert w.document.script.line_ids == tuple(lines)  # the content ids became the first ids
        assert [w.document.state(ln).kind for ln in w.document.script.lines] == ["fresh", "fresh", "fresh"]
        takes = [w.document.project.takes_of(line_id)[0] for line_id in lines]  # each now carries the one fingerprint
        assert [t.fingerprint for t in takes] == [fingerprint_of(t) for t in takes] and all(fingerprint_of(t) for t in takes)
        assert [s.line_id for s in w.timeline.segments()] == list(lines)
        w.editor.setPlainText(script.replace("An old line.", "An old line, edited."))
        w.reparse()
        assert w.document.script.line_ids == tuple(lines)
        assert [w.document.state(ln).kind for ln in w.document.script.lines] == ["stale", "fresh", "fresh"]
        w.projects.save()
        doc = json.loads((folder / "project.json").read_text())
        assert doc["line_ids"] == list(lines)
        row = doc["lines"][w.document.script.line_ids[1]]["takes"][0]
        assert (row["speaker"], row["settings"]["temperature"]) == ("Bob", 0.8) and row["voice"].startswith(b.id)
        assert w.projects.open(folder)  # the saved ids and records come back
        assert w.document.script.line_ids == tuple(lines)
        assert [w.document.state(ln).kind for ln in w.document.script.lines] == ["stale", "fresh", "fresh"]
        assert [row["takes"][0]["fingerprint"] for row in doc["lines"].values()] == [t.fingerprint for t in takes]
    finally:
        close_studio(w)
