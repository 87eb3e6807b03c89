"""A book in the studio: the chapter list jumps, renders and scopes the timeline through real clicks, and
the work the studio does follows what changed, not the length of the script: a finished take updates its
own line, Render All announces its lines once, an edit reparses the rows it touched. Counted, not timed."""

from __future__ import annotations

import gc
import weakref

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor

from s2studio.state.take_check import TakeCheck
from ui_helpers import cast_two_voices, close_studio, fake_engine, open_studio, shown_all

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
    two = [ln.line_id for ln in w.document.script.lines if "of chapter 2" in ln.text]
    qtbot.mouseClick(panel.render_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not w.flow.busy and len(w.document.project.lines) == 4, timeout=30000)
    assert sorted(w.document.project.lines) == sorted(two)
    render(qtbot, w)  # the whole book
    wave, layout = w.player_bar.waveform, w.timeline.layout
    assert wave.range() == (0, layout.end)
    qtbot.mouseClick(panel.timeline_button, Qt.MouseButton.LeftButton)  # the timeline shows chapter 2 alone
    lo, hi = layout.bounds(two[0])[0], layout.bounds(two[-1])[1]
    assert wave.scope == tuple(two) and wave.range() == (lo, hi) and wave.fitted
    assert panel.timeline_button.text() == "Timeline: chapter"
    assert wave.origin == lo and wave.x_of(hi) <= wave.width()
    click_chapter(qtbot, w, "Chapter 3")  # the scope follows the chapter chosen
    assert wave.range()[0] == layout.bounds(w.document.script.lines[9].line_id)[0]
    qtbot.mouseClick(panel.timeline_button, Qt.MouseButton.LeftButton)  # the whole book again
    assert wave.scope is None and wave.range() == (0, layout.end)
    assert panel.timeline_button.text() == "Timeline: book"
    cursor = w.editor.textCursor()
    cursor.setPosition(w.document.script.lines[1].start)
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
    n = len(w.document.script.lines)
    assert len(announced[0]) == n and all(len(a) == 1 for a in announced[1:])  # once, then one line per take
    assert started[0] == updates  # queueing the lines worked out no line's state
    assert w.lines.updates - updates == n  # one per finished take, none more
    qtbot.waitUntil(lambda: not w.player_bar.waveform._throttle.isActive())  # its repaints come at most 10 times a second
    w.player_bar.waveform.repaint()
    line = w.document.script.lines[25]
    x0, x1 = (w.player_bar.waveform.x_of(b) for b in w.timeline.layout.bounds(line.line_id))
    before = (w.lines.updates, w.player_bar.waveform.columns_drawn, w.player_bar.waveform.peaks.packed_changes)
    cursor = w.editor.textCursor()
    cursor.setPosition(line.start + 1)
    w.editor.setTextCursor(cursor)
    render(qtbot, w, "render_line")  # a new take of the same length swaps in place
    qtbot.waitUntil(lambda: not w.player_bar.waveform._throttle.isActive())
    w.player_bar.waveform.repaint()
    assert w.lines.updates - before[0] == 1
    assert w.player_bar.waveform.peaks.packed_changes - before[2] == 1
    assert w.player_bar.waveform.columns_drawn - before[1] <= (x1 - x0) + 4 < w.player_bar.waveform.width() / 4
    moved: list[bool] = []
    w.session.timeline_changed.connect(lambda: moved.append(True))
    layout, take = w.timeline.layout, w.document.project.current(line.line_id)
    w.document.set_check(take, TakeCheck((), "a key"))  # what a check sends back: the take's audio is as it was
    assert w.timeline.layout is layout and moved == []  # no relayout, no repaint of the waveform
    assert w.lines.updates - before[0] == 2  # its line's state (the mark) only


def test_an_edit_reparses_what_it_touched_and_highlighting_is_not_an_edit(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, book(4, 50))
    edits: list[int] = []
    w.editor.edited.connect(lambda: edits.append(1))
    w.editor.highlighter.set_places({"Bob": 0, "Alice": 1, "Carol": 2})  # a rehighlight changes no text
    assert edits == [] and not w._parse_timer.isActive()
    line = w.document.script.lines[120]
    updates = w.lines.updates
    cursor = w.editor.textCursor()
    cursor.setPosition(line.end)
    w.editor.setTextCursor(cursor)
    w.editor.setFocus()
    qtbot.keyClicks(w.editor, " More")
    assert edits and w._parse_timer.isActive()
    w.reparse()
    assert w.document.change.touched == (line.line_id,) and w.document.change.gone == ()
    assert w.document.script.lines[120].text == line.text + " More" and w.document.script.lines[120].line_id == line.line_id
    assert w.lines.updates - updates == 1
    cursor.movePosition(QTextCursor.MoveOperation.StartOfBlock)
    cursor.insertText("Carol: ")  # a new speaker for this line
    w.reparse()
    assert w.document.script.lines[120].speaker == "Carol" and w.player_bar.waveform.speaker_of(line.line_id) == "Carol"


def test_a_render_lets_go_of_its_project(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, book(1, 3))
    render(qtbot, w)
    old = weakref.ref(w.document.project)
    w.projects.new()
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


def test_a_pasted_book_is_parsed_off_the_windows_thread_and_a_pause_in_typing_parses_once(qtbot, studio, tmp_path,
                                                                                              monkeypatch):
    import threading

    from s2studio.state.script_edits import ScriptParser
    from s2studio.ui.control.document import OFF_THREAD_ROWS

    w = studio
    cast_two_voices(w, tmp_path)
    text = book(3, OFF_THREAD_ROWS // 2) + "Carol: a speaker the cast does not have.\n"
    w.library.create("Carol", [(tmp_path / "a.wav", "hello there")])
    w.voices.refresh()
    w.voice_commands.reread()
    parses: list[tuple[str, bool]] = []
    for name in ("parse", "reparse"):
        real = getattr(ScriptParser, name)

        def counted(self, *args, _real=real, _name=name, **kwargs):  # noqa: ANN001, ANN202
            parses.append((_name, threading.current_thread() is threading.main_thread()))
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(ScriptParser, name, counted)
    cursor = w.editor.textCursor()
    cursor.select(QTextCursor.SelectionType.Document)
    w.editor.setTextCursor(cursor)
    w.editor.insertPlainText(text)  # what a paste does
    qtbot.waitUntil(lambda: len(w.document.script.lines) == 1 + 3 * (OFF_THREAD_ROWS // 2) + 1, timeout=20000)
    assert w.document.parses_off_thread == 1
    assert parses and not any(on_gui for _name, on_gui in parses)  # parsed (twice: Carol got her voice) off it
    assert w.document.project.cast["Carol"] == w.library.list()[-1].id and w.document.project.script == text
    assert not [x for x in w.document.script.warnings if x.kind == "unknown_speaker"]
    assert w.document.script == w.document._ids.carry(w.document.script, ScriptParser().parse(text, w.document._known()))
    parses.clear()
    line = w.document.script.lines[700]
    cursor.setPosition(line.end)
    w.editor.setTextCursor(cursor)
    w.editor.setFocus()
    qtbot.keyClicks(w.editor, " and more")
    qtbot.waitUntil(lambda: w.document.script.lines[700].text == line.text + " and more", timeout=5000)
    assert parses == [("reparse", True)] and w.document.script.lines[700].line_id == line.line_id


def test_opening_another_project_lets_go_of_the_one_before(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, book(1, 3))
    render(qtbot, w)
    w.projects.save_as(tmp_path / "a.s2proj")
    qtbot.waitUntil(lambda: not w.store.unsaved_work, timeout=10000)
    w.projects.new()
    w.editor.setPlainText(book(1, 2))
    w.reparse()
    w.projects.save_as(tmp_path / "b.s2proj")
    qtbot.waitUntil(lambda: not w.store.unsaved_work, timeout=10000)
    assert w.projects.open(tmp_path / "a.s2proj")
    from s2studio.state.project import Take

    a = weakref.ref(w.document.project)
    takes = {t.take_id for entry in w.document.project.lines.values() for t in entry.takes}
    assert len(takes) == 4
    gc.collect()  # what survives a full collection is frozen (ui/control/heap.py): A's objects too
    assert w.projects.open(tmp_path / "b.s2proj")
    assert a() is None  # freed by its reference counts: nothing thaws what is frozen to look for cycles

    def takes_of_a() -> list[Take]:  # (listed, not collected: a take only a collection of cycles would free is listed)
        gc.unfreeze()
        return [t for t in gc.get_objects() if isinstance(t, Take) and t.take_id in takes]

    qtbot.waitUntil(lambda: not takes_of_a(), timeout=5000)  # (the takes panel shows B's line at its next pass)


def test_the_chapter_panel_fits_a_narrow_column(qtbot, studio, tmp_path):
    """Long titles are cut (the tooltip has them whole), never scrolled sideways; both buttons show their text."""
    w = studio
    title = "Chapter one, in which a visitor comes to the door at night and nobody answers"
    cast_two_voices(w, tmp_path, f"# {title}\nAlice: Hello?\nBob: Nobody.\n")
    w.resize(1360, 860)
    panel = w.chapter_panel
    sizes = w.script_splitter.sizes()
    w.script_splitter.setSizes([160, sum(sizes) - 160] + [0] * (len(sizes) - 2))
    qtbot.waitUntil(lambda: 0 < panel.width() <= 170)
    item = panel.list.item(0)
    assert title in item.toolTip() and "2 lines" in item.toolTip()
    assert panel.list.horizontalScrollBar().maximum() == 0 and not panel.list.horizontalScrollBar().isVisible()
    assert panel.list.fontMetrics().horizontalAdvance(item.text()) > panel.list.viewport().width()  # so it is cut
    panel.timeline_button.setChecked(True)  # its longer text: "Timeline: chapter"
    for button in (panel.render_button, panel.timeline_button):
        assert button.fontMetrics().horizontalAdvance(button.text()) < button.width() <= panel.width()


def test_a_timeline_slow_to_draw_is_repainted_less_often_as_it_changes(qtbot, studio, monkeypatch):
    from s2studio.ui.player import waveform

    view = studio.player_bar.waveform
    clock = iter([10.0, 10.06, 20.0, 20.001])  # a compose of 60 ms, then one of 1 ms
    monkeypatch.setattr(waveform, "perf_counter", lambda: next(clock))
    view._compose()
    assert view._throttle.interval() == 300  # 60 ms is at most a fifth of the window's thread
    view._compose()
    assert view._throttle.interval() == 1000 // waveform.MAX_REPAINT_HZ


def test_a_cast_change_while_a_pasted_book_parses_keeps_the_paste(qtbot, studio, tmp_path):
    from s2studio.ui.control.document import OFF_THREAD_ROWS

    w = studio
    cast_two_voices(w, tmp_path)
    text = book(2, OFF_THREAD_ROWS)
    w.document.set_text_soon(text)  # on a thread now
    assert w.document.parses_off_thread == 1 and len(w.document.script.lines) == 2
    w.document.set_cast("Alice", "")  # parses again: the pasted text, not the one before it
    qtbot.waitUntil(lambda: len(w.document.script.lines) == 1 + 2 * OFF_THREAD_ROWS, timeout=20000)
    assert w.document.project.script == text and w.document.parses_off_thread == 2


def test_a_books_warnings_parsed_again_off_the_thread_touch_no_line(qtbot, studio, tmp_path):
    from s2studio.ui.control.document import OFF_THREAD_ROWS

    w = studio
    cast_two_voices(w, tmp_path, book(2, OFF_THREAD_ROWS // 2))
    qtbot.waitUntil(lambda: not w.document.script.warnings, timeout=20000)  # the cast's own reparse, off the thread too
    qtbot.waitUntil(lambda: shown_all(w), timeout=20000)  # the book's lines' states, made in slices after its parse
    updates, parses = w.lines.updates, w.document.parses_off_thread
    changes: list[object] = []
    w.document.script_changed.connect(lambda _order: changes.append(w.document.change))
    w.document.set_cast("Alice", "")  # Alice's lines are warned about now: no line changed
    qtbot.waitUntil(lambda: bool(changes), timeout=20000)
    assert w.document.parses_off_thread == parses + 1
    assert changes[0].touched == () and changes[0].gone == () and w.lines.updates == updates
    assert {x.kind for x in w.document.script.warnings} == {"unknown_speaker"}


def test_a_save_right_after_a_paste_writes_the_pasted_book(qtbot, studio, tmp_path):
    import json

    from s2studio.ui.control.document import OFF_THREAD_ROWS

    w = studio
    cast_two_voices(w, tmp_path)
    text = book(2, OFF_THREAD_ROWS)
    w.document.set_text_soon(text)  # still parsing on its thread when the save comes
    assert w.document.project.script != text
    w.projects.save_as(tmp_path / "pasted.s2proj")
    qtbot.waitUntil(lambda: not w.store.unsaved_work, timeout=20000)
    saved = json.loads((tmp_path / "pasted.s2proj" / "project.json").read_text())
    assert saved["script"] == text and len(saved["line_ids"]) == 1 + 2 * OFF_THREAD_ROWS


def test_a_render_with_every_row_shown_walks_no_rows_of_the_script(qtbot, studio, tmp_path, monkeypatch):
    from s2studio.ui import check_commands

    walks: list[object] = []
    real = check_commands.show_only_rows
    monkeypatch.setattr(check_commands, "show_only_rows", lambda *a: (walks.append(a[1]), real(*a))[1])
    w = studio
    cast_two_voices(w, tmp_path, book(1, 6))
    render(qtbot, w)
    assert walks == []  # no filter on: nothing to hide, no walk per finished take


def test_a_takes_neighbours_of_its_speaker_are_found_around_it_as_in_the_list_of_all_lines():
    import random

    from s2studio.state.script import parse_script
    from s2studio.ui.control.take_checks import NEIGHBOURS, _same_speaker

    rng = random.Random(5)
    script = parse_script("\n".join(f"{rng.choice('ABC')}: line {i}." for i in range(300)))
    lines = script.lines
    for line in lines[::7]:
        order = [ln.line_id for ln in lines if ln.speaker == line.speaker]  # the whole list, as it was
        at = order.index(line.line_id)
        expected = order[max(0, at - NEIGHBOURS):at] + order[at + 1:at + 1 + NEIGHBOURS]
        speakers, ids = script.line_speakers, script.line_ids
        around = _same_speaker(speakers, ids, line.index, -1, line.speaker)[::-1] + _same_speaker(
            speakers, ids, line.index, 1, line.speaker)
        assert around == expected


def test_the_gutter_repaints_its_rows_on_screen_and_works_out_no_row_off_screen(qtbot, studio, tmp_path):
    """A take's mark changed far below the screen costs no walk of the editor's layout to that row."""
    w = studio
    cast_two_voices(w, tmp_path, book(2, 200))
    editor, gutter = w.editor, w.editor.gutter
    editor.verticalScrollBar().setValue(150)
    shown = [number for number, _top, _height, _middle in gutter._visible_blocks()]
    assert 150 in shown and 5 < len(shown) < 100
    asked: list[int] = []
    repainted: list[tuple] = []
    geometry, update = editor.blockBoundingGeometry, gutter.update
    editor.blockBoundingGeometry = lambda block: (asked.append(block.blockNumber()), geometry(block))[1]
    gutter.update = lambda *rect: (repainted.append(rect), update(*rect))[1]
    gutter.refresh(range(editor.document().blockCount()))
    assert asked == shown and len(repainted) == len(shown)
    asked.clear()
    gutter.refresh([editor.document().blockCount() - 1, 2, shown[3]])
    assert asked == [shown[3]] and len(repainted) == len(shown) + 1
