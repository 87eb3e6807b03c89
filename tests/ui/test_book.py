"""A book in the studio: the chapter list jumps, renders and scopes the timeline through real clicks, and
the work the studio does follows what changed, not the length of the script: a finished take updates its
own line, Render All announces its lines once, an edit reparses the rows it touched. Counted, not timed."""

from __future__ import annotations

import gc
import weakref

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor

from ui_helpers import cast_two_voices, close_studio, fake_engine, open_studio

FRAMES = 6


@pytest.fixture
def studio(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: fake_engine(FRAMES, 0.0005))
    yield w
    close_studio(w)


def book(chapters: int, lines: int) -> str:
    rows = ["Alice: An opening line before any chapter."]
    for c in range(chapters):
        rows.append(f"# Chapter {c + 1}")
        rows += [f"{'Alice' if i % 2 else 'Bob'}: Line {i} of chapter {c + 1}." for i in range(lines)]
    return "\n".join(rows) + "\n"


def render(qtbot, w, action: str = "render_all") -> None:
    qtbot.waitUntil(w.actions_by_name[action].isEnabled, timeout=10000)  # no model (re)load in the way
    started: list[object] = []
    w.session.busy_changed.connect(started.append)
    w.actions_by_name[action].trigger()
    qtbot.waitUntil(lambda: bool(started) and not w.flow.busy, timeout=30000)


def click_chapter(qtbot, w, title: str) -> None:
    items = w.chapter_panel.list.findItems(title, Qt.MatchFlag.MatchStartsWith)
    rect = w.chapter_panel.list.visualItemRect(items[0])
    qtbot.mouseClick(w.chapter_panel.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def test_the_chapter_list_jumps_renders_a_chapter_and_scopes_the_timeline(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, book(3, 4) + "## A scene in chapter three\nBob: The scene's line.\n")
    panel = w.chapter_panel
    assert [panel.list.item(i).text() for i in range(panel.list.count())] == [
        "Opening  ·  1", "Chapter 1  ·  4", "Chapter 2  ·  4", "Chapter 3  ·  5", "    A scene in chapter three  ·  1"]
    click_chapter(qtbot, w, "Chapter 2")
    assert w.editor.textCursor().blockNumber() == 6  # the heading's row
    assert w.editor.hasFocus()
    two = [ln.line_id for ln in w.script.lines if "of chapter 2" in ln.text]
    qtbot.mouseClick(panel.render_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not w.flow.busy and len(w.project.lines) == 4, timeout=30000)
    assert sorted(w.project.lines) == sorted(two)
    render(qtbot, w)  # the whole book
    wave, layout = w.waveform, w.timeline.layout
    assert wave.range() == (0, layout.end)
    qtbot.mouseClick(panel.timeline_button, Qt.MouseButton.LeftButton)  # the timeline shows chapter 2 alone
    lo, hi = layout.bounds(two[0])[0], layout.bounds(two[-1])[1]
    assert wave.scope == tuple(two) and wave.range() == (lo, hi) and wave.fitted
    assert panel.timeline_button.text() == "Timeline: chapter"
    assert wave.origin == lo and wave.x_of(hi) <= wave.width()
    click_chapter(qtbot, w, "Chapter 3")  # the scope follows the chapter chosen
    assert wave.range()[0] == layout.bounds(w.script.lines[9].line_id)[0]
    qtbot.mouseClick(panel.timeline_button, Qt.MouseButton.LeftButton)  # the whole book again
    assert wave.scope is None and wave.range() == (0, layout.end)
    assert panel.timeline_button.text() == "Timeline: book"
    cursor = w.editor.textCursor()
    cursor.setPosition(w.script.lines[1].start)
    w.editor.setTextCursor(cursor)  # the list marks the chapter the cursor is in
    assert panel.list.currentItem().text().startswith("Chapter 1")


def test_a_finished_take_updates_its_own_line_and_render_all_announces_its_lines_once(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, book(2, 30))
    announced: list[tuple[str, ...]] = []
    w.session.rendering_changed.connect(announced.append)
    updates = w.lines.updates
    started: list[int] = []
    w.ctx.host.line_started.connect(lambda _e: started.append(w.lines.updates))
    render(qtbot, w)
    n = len(w.script.lines)
    assert len(announced[0]) == n and all(len(a) == 1 for a in announced[1:])  # once, then one line per take
    assert started[0] == updates  # queueing the lines worked out no line's state
    assert w.lines.updates - updates == n  # one per finished take, none more
    w.waveform.repaint()
    line = w.script.lines[25]
    x0, x1 = (w.waveform.x_of(b) for b in w.timeline.layout.bounds(line.line_id))
    before = (w.lines.updates, w.waveform.columns_drawn, w.waveform.peaks.packed_changes)
    cursor = w.editor.textCursor()
    cursor.setPosition(line.start + 1)
    w.editor.setTextCursor(cursor)
    render(qtbot, w, "render_line")  # a new take of the same length swaps in place
    w.waveform.repaint()
    assert w.lines.updates - before[0] == 1
    assert w.waveform.peaks.packed_changes - before[2] == 1
    assert w.waveform.columns_drawn - before[1] <= (x1 - x0) + 4 < w.waveform.width() / 4


def test_an_edit_reparses_what_it_touched_and_highlighting_is_not_an_edit(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, book(4, 50))
    edits: list[int] = []
    w.editor.edited.connect(lambda: edits.append(1))
    w.editor.highlighter.set_places({"Bob": 0, "Alice": 1, "Carol": 2})  # a rehighlight changes no text
    assert edits == [] and not w._parse_timer.isActive()
    line = w.script.lines[120]
    updates = w.lines.updates
    cursor = w.editor.textCursor()
    cursor.setPosition(line.end)
    w.editor.setTextCursor(cursor)
    w.editor.setFocus()
    qtbot.keyClicks(w.editor, " More")
    assert edits and w._parse_timer.isActive()
    w.reparse()
    assert w.document.change.touched == (line.line_id,) and w.document.change.gone == ()
    assert w.script.lines[120].text == line.text + " More" and w.script.lines[120].line_id == line.line_id
    assert w.lines.updates - updates == 1
    cursor.movePosition(QTextCursor.MoveOperation.StartOfBlock)
    cursor.insertText("Carol: ")  # a new speaker for this line
    w.reparse()
    assert w.script.lines[120].speaker == "Carol" and w.waveform.speaker_of(line.line_id) == "Carol"


def test_a_render_lets_go_of_its_project(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, book(1, 3))
    render(qtbot, w)
    old = weakref.ref(w.project)
    w.new_project()
    gc.collect()
    assert old() is None


def test_the_cursors_line_is_found_by_bisection(qtbot):
    from dataclasses import replace

    from s2studio.state.script import parse_script
    from s2studio.ui.script.editor import ScriptEditor

    class Counted(tuple):
        reads = 0

        def __getitem__(self, i):
            Counted.reads += 1
            return tuple.__getitem__(self, i)

    text = book(60, 50)
    script = parse_script(text)
    script = replace(script, lines=Counted(script.lines))
    editor = ScriptEditor()
    qtbot.addWidget(editor)
    editor.setPlainText(text)
    target = script.lines[2500]
    cursor = editor.textCursor()
    cursor.setPosition(target.start + 3)
    editor.setTextCursor(cursor)
    Counted.reads = 0
    assert editor.line_at_cursor(script) == target
    assert Counted.reads <= 20  # log2(3,001 lines) + a few, not a walk over the script
