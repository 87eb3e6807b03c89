"""The script and the timeline as a new user met them: the timeline's selection follows the line by id when a line
is inserted above, speakers keep their colours for the life of the project, a click on a segment selects its line
without moving the view, and a line added is one undo step that never marks another line stale."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QPalette, QTextCursor
from PySide6.QtWidgets import QLabel

from s2studio.state.project_files import load_project
from ui_helpers import cast_two_voices, close_studio, fake_engine, open_studio, project_shown

SCRIPT = "Alice: One [sigh] two.\nBob: Three.\nAlice: Four."


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def rendered(qtbot, tmp_path: Path, frames: int = 12):
    w = open_studio(qtbot, lambda: fake_engine(frames=frames))
    cast_two_voices(w, tmp_path, SCRIPT)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: len(w.document.project.lines) == 3 and not w.flow.busy, timeout=15000)
    return w


def put_cursor(w, position: int) -> None:
    cursor = w.editor.textCursor()
    cursor.setPosition(position)
    w.editor.setTextCursor(cursor)


def label_colors(w) -> dict[str, str]:
    return {w.player_bar.waveform.speaker_of(i): w.player_bar.waveform.colour_of(i).name() for i in w.document.script.line_ids}


def test_the_timeline_selection_follows_the_line_when_one_is_inserted_above(qtbot, data_dir, tmp_path):
    w = rendered(qtbot, tmp_path)
    bob = w.document.script.lines[1]
    put_cursor(w, bob.start + 2)
    assert w.player_bar.waveform.selected_line == bob.line_id
    put_cursor(w, 0)  # on Alice's first line, then a line inserted above it
    w.editor.textCursor().insertText("Bob: Hello first.\n")
    w.reparse()
    first_alice = w.document.script.lines[1]
    assert first_alice.speaker == "Alice" and w.lines.selected() == first_alice
    assert w.player_bar.waveform.selected_line == first_alice.line_id  # not the line now at that index among rendered ones
    close_studio(w)


def cast_label_colors(w) -> dict[str, str]:  # noqa: ANN001
    labels = {s: w.cast_panel.combos[s].parentWidget().findChild(QLabel) for s in w.document.script.speakers}
    return {s: label.palette().color(QPalette.ColorRole.WindowText).name() for s, label in labels.items()
            if s in ("Alice", "Bob")}


def test_speakers_keep_their_colours_for_the_life_of_the_project(qtbot, data_dir, tmp_path):
    w = rendered(qtbot, tmp_path)
    before = label_colors(w)
    cast_labels = cast_label_colors(w)
    assert cast_labels == {s: before[s] for s in ("Alice", "Bob")}  # the cast names them in the timeline's colours
    put_cursor(w, 0)
    qtbot.keyClicks(w.editor, "Carol: I speak first now.")
    qtbot.keyClick(w.editor, Qt.Key.Key_Return)
    w.reparse()
    assert w.document.script.speakers[0] == "Carol"
    after = label_colors(w)
    assert after["Alice"] == before["Alice"] and after["Bob"] == before["Bob"]
    assert after["Carol"] not in (before["Alice"], before["Bob"])
    assert cast_label_colors(w) == cast_labels
    w.actions_by_name["undo"].trigger()
    w.reparse()
    assert w.editor.toPlainText() == SCRIPT and label_colors(w) == before
    w.actions_by_name["redo"].trigger()
    w.reparse()
    assert label_colors(w) == after  # Carol comes back in her colour
    w.projects.save_as(tmp_path / "colours.s2proj")
    assert load_project(tmp_path / "colours.s2proj").speaker_colors == {"Alice": 0, "Bob": 1, "Carol": 2}
    w.projects.new()
    w.projects.open(tmp_path / "colours.s2proj")
    project_shown(qtbot, w)
    assert label_colors(w) == after
    close_studio(w)


def test_a_click_on_a_segment_selects_its_line_and_the_view_stays(qtbot, data_dir, tmp_path):
    w = rendered(qtbot, tmp_path, frames=60)
    bob = w.document.script.lines[1]
    put_cursor(w, 0)
    wave = w.player_bar.waveform
    start, end = w.timeline.layout.bounds(bob.line_id)
    wave.zoom(6)  # Bob's line is wider than the view
    middle = (start + end) // 2
    wave.scroll_to(middle - wave.visible // 2)
    origin = wave.origin
    assert origin > start
    qtbot.mouseClick(wave, Qt.MouseButton.LeftButton, pos=QPoint(int(wave.x_of(middle)), wave.height() // 2))
    assert w.lines.selected() == bob and w.editor.textCursor().blockNumber() == bob.source_line - 1
    assert wave.selected_line == bob.line_id and wave.origin == origin  # no jump back to the line's start
    assert abs(w.player.position - middle) < wave.samples_per_pixel + 1
    selected = [s for s in w.editor.extraSelections() if s.cursor.blockNumber() == bob.source_line - 1]
    assert selected  # the line is marked in the editor, which has no focus to draw its cursor
    close_studio(w)


def undo_history(w, qtbot) -> list[tuple[str, list[str]]]:
    """Ctrl+Z until nothing is left; after each, the text and the state of every line, parsed at once."""
    seen = []
    while w.editor.document().isUndoAvailable():
        qtbot.keyClick(w.editor, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
        w.reparse()
        seen.append((w.editor.toPlainText(), [w.document.state(ln).kind for ln in w.document.script.lines]))
    return seen


@pytest.mark.parametrize("how", ["typed in front of a line, then Enter", "Enter at a line's end, then typed"])
def test_a_line_added_is_one_undo_step_and_never_marks_another_stale(qtbot, data_dir, tmp_path, how):
    w = rendered(qtbot, tmp_path)
    w.editor.document().clearUndoRedoStacks()
    w.editor.setFocus()
    bob = w.document.script.lines[1]
    if how.startswith("typed"):
        put_cursor(w, w.editor.document().findBlockByNumber(bob.source_line - 1).position())
        qtbot.keyClicks(w.editor, "Carol: Hi.")
        qtbot.keyClick(w.editor, Qt.Key.Key_Return)
    else:
        put_cursor(w, w.document.script.lines[0].end)
        qtbot.keyClick(w.editor, Qt.Key.Key_Return)
        qtbot.keyClicks(w.editor, "Carol: Hi.")
    w.reparse()
    assert w.editor.toPlainText() == "Alice: One [sigh] two.\nCarol: Hi.\nBob: Three.\nAlice: Four."
    assert [w.document.state(ln).kind for ln in w.document.script.lines] == ["fresh", "none", "fresh", "fresh"]
    assert undo_history(w, qtbot) == [(SCRIPT, ["fresh", "fresh", "fresh"])]  # one Ctrl+Z, nothing stale
    close_studio(w)


def test_typing_lines_one_after_another_keeps_a_step_per_line(qtbot, data_dir):
    w = open_studio(qtbot, fake_engine)
    w.editor.document().clearUndoRedoStacks()
    w.editor.setFocus()
    qtbot.keyClicks(w.editor, "Alice: One.")
    for text in ("Bob: Two.", "Alice: Three."):
        qtbot.keyClick(w.editor, Qt.Key.Key_Return)
        qtbot.keyClicks(w.editor, text)
    texts = []
    while w.editor.document().isUndoAvailable():
        w.editor.undo()
        texts.append(w.editor.toPlainText())
    assert texts == ["Alice: One.\nBob: Two.", "Alice: One.", ""]
    close_studio(w)


def test_timeline_labels_drop_marks_then_shorten_the_name_never_cut_mid_word(qtbot):
    from PySide6.QtGui import QFont, QFontMetricsF

    from s2studio.ui.player.waveform_marks import fit_label

    metrics = QFontMetricsF(QFont())
    full = "Bob · stale · rendering…"
    assert fit_label("Bob", ["stale", "rendering…"], metrics.horizontalAdvance(full), metrics) == full
    assert fit_label("Bob", ["stale", "rendering…"], metrics.horizontalAdvance(full) - 1, metrics) == "Bob · stale"
    assert fit_label("Bob", ["rendering…"], metrics.horizontalAdvance("Bob · rende"), metrics) == "Bob"
    short = fit_label("Alice", [], metrics.horizontalAdvance("Alic"), metrics)
    assert short.endswith("…") and "Alice".startswith(short[:-1]) and len(short) >= 2
    assert fit_label("Alice", [], metrics.horizontalAdvance("A") / 2, metrics) == ""


def test_the_first_speed_readout_waits_for_a_measured_speed(qtbot):
    from PySide6.QtWidgets import QStatusBar

    from s2studio.ui.control.pace import Pace
    from s2studio.ui.status import StatusPanel

    bar = QStatusBar()
    qtbot.addWidget(bar)
    panel = StatusPanel(bar)
    pace = Pace({"a": 20, "b": 20}, started=0.0)
    panel.start()
    pace.update(1.5, "a", 1, 100, 23.04)  # the first report: one frame after the prefill
    panel.on_progress(pace)
    assert panel.speed.text() == "starting…"
    pace.update(2.0, "a", 11, 100, 1.6)
    panel.on_progress(pace)  # shown when the readout's rate limit lets it (at most 10 times a second)
    qtbot.waitUntil(lambda: panel.speed.text().startswith(" 20.0 frames/s · RTF 1.60 · ETA"), timeout=2000)
