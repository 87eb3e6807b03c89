"""A book pasted into the window: it arrives whole, one undo takes it back, and the views show it in steps over
several passes of the event loop (the cast a few rows a pass, the line states a slice a pass), not all in the
pass that applies the parse. Counted, not timed."""

from __future__ import annotations

import pytest
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from ui_helpers import close_studio, fake_engine, open_studio, write_wav

SPEAKERS = [f"Speaker{i}" for i in range(14)]


@pytest.fixture
def studio(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: fake_engine(6, 0.0005))
    yield w
    close_studio(w)


def book(lines: int) -> str:
    rows = [f"{SPEAKERS[i % len(SPEAKERS)]}: Line {i} of the book." for i in range(lines)]
    return "\n".join(rows) + "\n"


def test_a_pasted_book_arrives_whole_undoes_in_one_step_and_is_shown_over_several_passes(qtbot, studio, tmp_path,
                                                                                           monkeypatch):
    from s2studio.ui.control.document import OFF_THREAD_ROWS
    from s2studio.ui.window import line_states

    w = studio
    for name in SPEAKERS[:3]:  # cast by name as the parse is applied
        w.library.create(name, [(write_wav(tmp_path / f"{name}.wav", seconds=1.0), "hello there")])
    w.voices.refresh()
    w.voice_commands.reread()
    monkeypatch.setattr(w.cast_panel._builder, "budget_s", 0.0)  # the cast's rows one a pass
    text = book(OFF_THREAD_ROWS + 100)
    assert OFF_THREAD_ROWS + 100 > line_states.RECOUNT_ABOVE
    seen: list[tuple[int, int]] = []  # in the pass that applied the parse: combos made, lines recounted
    updates = w.lines.updates
    w.document.script_changed.connect(lambda _o: seen.append((len(w.cast_panel.combos), w.lines.updates - updates)))
    QApplication.clipboard().setText(text)
    w.editor.setFocus()
    w.actions_by_name["paste"].trigger()
    qtbot.waitUntil(lambda: len(w.document.script.lines) == OFF_THREAD_ROWS + 100, timeout=20000)
    assert w.document.project.script == text and w.editor.toPlainText() == text  # whole and in order
    combos_then, counted_then = seen[-1]
    assert combos_then == 1 and counted_then == 0  # in that pass: a row of the cast, no line
    qtbot.waitUntil(lambda: not w.cast_panel.building() and not w.lines._recount.busy, timeout=10000)
    assert w.lines.updates - updates >= OFF_THREAD_ROWS + 100  # every line counted, a slice a pass
    assert list(w.cast_panel.combos) == SPEAKERS
    assert w.cast_panel._builder.passes >= len(SPEAKERS)
    voices = {v.name: v.id for v in w.library.list()}
    for speaker, combo in w.cast_panel.combos.items():
        assert combo.currentData() == voices.get(speaker, "") == w.document.project.cast.get(speaker, "")
    w.actions_by_name["undo"].trigger()  # the whole paste, in one step
    assert w.editor.toPlainText() == ""


def test_a_pasted_book_goes_in_a_part_a_pass_undoes_whole_and_a_key_meanwhile_lands_after_it(qtbot, studio):
    from s2studio.state.script import parse_script
    from s2studio.ui.script.chunked_paste import CHUNK_ROWS

    w, doc = studio, studio.editor.document()
    text = book(5 * CHUNK_ROWS + 7)
    highlighted = w.editor.highlighter.rows_highlighted
    parses = w.document.parses_off_thread
    QApplication.clipboard().setText(text)
    w.editor.setFocus()
    w.actions_by_name["paste"].trigger()
    assert doc.blockCount() == CHUNK_ROWS + 1 and w.editor.pasting.busy  # a part in the paste's pass, not the book
    assert w.editor.highlighter.rows_highlighted == highlighted  # its rows coloured in turns, those on screen first
    qtbot.waitUntil(lambda: not w.editor.pasting.busy)
    assert w.editor.pasting.steps == 6 and doc.toPlainText() == text
    qtbot.waitUntil(lambda: w.document.project.script == text, timeout=20000)
    assert w.document.parses_off_thread == parses + 1  # parsed once, whole: not a part at a time
    assert [(ln.speaker, ln.text) for ln in w.document.script.lines] == [
        (ln.speaker, ln.text) for ln in parse_script(text).lines]
    w.actions_by_name["undo"].trigger()  # the whole paste, in one step
    assert doc.toPlainText() == ""
    w.actions_by_name["redo"].trigger()
    assert doc.toPlainText() == text
    w.actions_by_name["undo"].trigger()

    QApplication.clipboard().setText(text)  # a key pressed while the paste goes in: after the whole paste
    w.actions_by_name["paste"].trigger()
    assert w.editor.pasting.busy
    QTest.keyClicks(w.editor, "x")
    assert not w.editor.pasting.busy and doc.toPlainText() == text + "x"
    w.actions_by_name["undo"].trigger()
    w.actions_by_name["undo"].trigger()
    assert doc.toPlainText() == ""


def test_a_pause_in_typing_in_a_book_refreshes_its_line_a_pass_after_the_parse(qtbot, studio):
    from s2studio.ui.window.line_states import SOON_LINES

    w = studio
    text = book(SOON_LINES + 10)
    w.editor.setPlainText(text)
    w.reparse()
    qtbot.waitUntil(lambda: len(w.document.script.lines) == SOON_LINES + 10 and not w.lines._recount.busy,
                    timeout=20000)
    row = w.editor.document().findBlockByNumber(500)
    cursor = w.editor.textCursor()
    cursor.setPosition(row.position() + row.length() - 1)
    w.editor.setTextCursor(cursor)
    updates, seen = w.lines.updates, []
    w.document.script_changed.connect(lambda _o: seen.append(w.lines.updates))
    QTest.keyClicks(w.editor, "x")
    w.reparse()  # the pause's parse
    assert seen == [updates]  # in the parse's pass: no line's state worked out
    qtbot.waitUntil(lambda: w.lines.updates > updates)
    assert w.lines.updates == updates + 1  # the edited line, a pass later
    assert w.document.script.lines[500].text.endswith("x")


def test_opening_another_project_while_a_paste_goes_in_asks_about_and_saves_the_whole_paste(qtbot, studio, tmp_path,
                                                                                           monkeypatch):
    import json

    from s2studio.ui.dialogs import project_commands
    from s2studio.ui.script.chunked_paste import CHUNK_ROWS

    w = studio
    other, draft = tmp_path / "other.s2proj", tmp_path / "draft.s2proj"
    w.editor.setPlainText("Alice: Another project.\n")
    w.reparse()
    assert w.projects.save_as(other) and w.projects.new()
    text = book(3 * CHUNK_ROWS + 7)
    QApplication.clipboard().setText(text)
    w.editor.setFocus()
    w.actions_by_name["paste"].trigger()
    assert w.editor.pasting.busy  # the first part in, the rest to come
    asked: list[str] = []
    button = project_commands.QMessageBox.StandardButton
    monkeypatch.setattr(project_commands.QMessageBox, "question", lambda _w, _t, text, *a: asked.append(text)
                        or button.Save)
    monkeypatch.setattr(project_commands.QFileDialog, "getSaveFileName", lambda *a, **k: (str(draft), ""))
    w.projects.ask = True
    try:
        assert w.projects.open(other)  # in the paste's pass: asked about, and saved, the whole paste
    finally:
        w.projects.ask = False
    assert asked == ["Save the changes to the project before opening another project?"]
    assert json.loads((draft / "project.json").read_text())["script"] == text
    assert w.editor.toPlainText() == "Alice: Another project.\n" and not w.editor.pasting.busy
