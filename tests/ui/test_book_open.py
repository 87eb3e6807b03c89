"""Opening a book: what shows a whole project at once (the cast's rows, ...) is built over several passes of the
event loop, so that the window keeps answering, ends as if built at once, and loses nothing done meanwhile.
Counted, not timed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from s2studio.ui.control import document as document_module
from s2studio.ui.control import slices
from s2studio.ui.script import cast_panel as cast_module
from s2studio.ui.script.cast_panel import CastPanel
from ui_helpers import cast_two_voices, close_studio, fake_engine, open_studio

SPEAKERS = [f"Speaker{i:02d}" for i in range(20)]
VOICES = [(f"v{i}", f"Voice {i}") for i in range(5)]


def chosen(panel: CastPanel) -> dict[str, str]:
    return {s: combo.currentData() for s, combo in panel.combos.items()}


def test_a_large_cast_is_built_a_few_rows_a_pass_and_a_pick_meanwhile_is_kept(qtbot):
    panel = CastPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.set_voices(VOICES)
    picked: list[tuple[str, str]] = []
    panel.cast_changed.connect(lambda speaker, vid: picked.append((speaker, vid)))
    cast = {s: VOICES[i % len(VOICES)][0] for i, s in enumerate(SPEAKERS)}
    panel.set_speakers(SPEAKERS, cast, {s: i for i, s in enumerate(SPEAKERS)})
    assert list(panel.combos) == SPEAKERS[:cast_module.CHIPS_PER_PASS]  # the rest after the window answered
    assert panel.building()
    panel.combos[SPEAKERS[0]].setCurrentIndex(panel.combos[SPEAKERS[0]].findData("v4"))  # a pick meanwhile
    passes = 1
    while panel.building():
        QApplication.processEvents()
        passes += 1
        assert len(panel.combos) <= passes * cast_module.CHIPS_PER_PASS
    assert passes == -(-len(SPEAKERS) // cast_module.CHIPS_PER_PASS)
    assert picked == [(SPEAKERS[0], "v4")]
    assert chosen(panel) == {**cast, SPEAKERS[0]: "v4"}
    assert [panel.combos[s].objectName() for s in SPEAKERS] == [f"cast:{s}" for s in SPEAKERS]
    everyone = CastPanel()  # the same cast built in one pass: the same rows
    qtbot.addWidget(everyone)
    cast_module_passes = cast_module.CHIPS_PER_PASS
    try:
        cast_module.CHIPS_PER_PASS = len(SPEAKERS)
        everyone.set_voices(VOICES)
        everyone.set_speakers(SPEAKERS, {**cast, SPEAKERS[0]: "v4"}, {s: i for i, s in enumerate(SPEAKERS)})
    finally:
        cast_module.CHIPS_PER_PASS = cast_module_passes
    assert not everyone.building()
    assert chosen(everyone) == chosen(panel)
    assert everyone.summary.text() == panel.summary.text()


def test_a_new_cast_while_the_last_is_built_builds_only_the_new_one(qtbot):
    panel = CastPanel()
    qtbot.addWidget(panel)
    panel.set_voices(VOICES)
    panel.set_speakers(SPEAKERS, {}, {s: i for i, s in enumerate(SPEAKERS)})
    panel.set_speakers(["Alice", "Bob"], {"Bob": "v1"}, {"Alice": 0, "Bob": 1})
    qtbot.waitUntil(lambda: not panel.building())
    QApplication.processEvents()
    assert chosen(panel) == {"Alice": "", "Bob": "v1"}


# -- the studio opening a project ------------------------------------------------------------------


@pytest.fixture
def studio(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: fake_engine(4, 0.0))
    w.check_commands.checks.enabled = False  # no checker process: what is queued is counted below
    yield w
    close_studio(w)


def rendered_project(qtbot, w, tmp_path) -> tuple[Path, str]:
    """A saved project of 24 rendered lines, one of them edited since (stale); its path and that line's id."""
    cast_two_voices(w, tmp_path, "".join(f"{'Alice' if i % 2 else 'Bob'}: Line number {i}.\n" for i in range(24)))
    qtbot.waitUntil(w.actions_by_name["render_all"].isEnabled, timeout=10000)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: not w.flow.busy and len(w.document.project.lines) == 24, timeout=30000)
    edited = w.document.script.lines[5]
    cursor = w.editor.textCursor()
    cursor.setPosition(edited.end)
    cursor.insertText(" Changed")
    w.reparse()
    path = tmp_path / "book.s2proj"
    assert w.projects.save_as(path)
    qtbot.waitUntil(lambda: not w.store.unsaved_work, timeout=10000)
    return path, edited.line_id


def shown(w) -> dict:
    """What the window shows of a project: lines, states drawn on the timeline and in the gutter, cast."""
    script = w.document.script
    return {"text": w.editor.toPlainText(), "ids": script.line_ids, "stale": w.player_bar.waveform.stale_lines,
            "marks": [w.lines.mark_at(i) for i in range(w.editor.document().blockCount())],
            "cast": {s: c.currentData() for s, c in w.cast_panel.combos.items()},
            "timeline": tuple(t.line_id for t in w.timeline.layout.tracks)}


def test_a_book_opened_is_shown_in_slices_and_an_edit_and_a_click_meanwhile_are_kept(qtbot, studio, tmp_path,
                                                                                      monkeypatch):
    w = studio
    path, edited = rendered_project(qtbot, w, tmp_path)
    monkeypatch.setattr(slices, "BUDGET_S", 10.0)  # at once: what the window shows when every slice is done
    assert w.projects.open(path)
    qtbot.waitUntil(lambda: not w.showing.busy and not w.lines._recount.busy)
    at_once = shown(w)
    assert at_once["stale"] == {edited} and len(at_once["ids"]) == 24
    monkeypatch.setattr(slices, "BUDGET_S", 0.0)  # one line a pass
    assert w.projects.open(path)
    recount = w.lines._recount
    assert w.editor.toPlainText() == at_once["text"]  # the text at once, the rest pass by pass
    assert w.showing.busy and not recount.busy
    target = w.document.script.lines[20]
    w.lines.select(target.line_id)  # a click on a line's mark meanwhile
    assert w.editor.textCursor().blockNumber() == target.source_line - 1
    cursor = w.editor.textCursor()
    cursor.setPosition(w.document.script.lines[2].end)
    w.editor.setTextCursor(cursor)
    qtbot.keyClicks(w.editor, " Typed")  # and an edit
    w.reparse()
    assert w.showing.busy
    qtbot.waitUntil(lambda: not w.showing.busy and not recount.busy)
    assert w.showing.passes >= 4 and recount.passes >= 20  # it yielded to the event loop between parts, lines
    now = shown(w)
    typed = w.document.script.lines[2]
    assert typed.text.endswith("Typed") and "Typed" in now["text"]
    assert now["stale"] == {edited, typed.line_id}  # the edit's line too, as when it is typed after the open
    assert now["ids"] == at_once["ids"] and now["cast"] == at_once["cast"] and now["timeline"] == at_once["timeline"]
    expected = [m if m is None or m.line_id != typed.line_id else dataclasses.replace(m, kind="stale")
                for m in at_once["marks"]]
    assert now["marks"] == expected


def test_a_book_opened_has_its_takes_upgraded_off_the_windows_thread_and_queued_for_checks_in_slices(
        qtbot, studio, tmp_path, monkeypatch):
    w = studio
    path, _edited = rendered_project(qtbot, w, tmp_path)
    upgraded_here: list[int] = []
    real = document_module.Document._upgrade_takes
    monkeypatch.setattr(document_module.Document, "_upgrade_takes",
                        lambda self: (upgraded_here.append(1), real(self))[1])
    assert w.projects.open(path)
    assert upgraded_here == []  # the writer thread did it
    assert all(t.fingerprint for e in w.document.project.lines.values() for t in e.takes)
    checks = w.check_commands.checks
    checks.enabled = True
    queued: list[str] = []
    monkeypatch.setattr(checks, "_start", lambda: None)  # nothing is checked: only what is queued is counted
    monkeypatch.setattr(checks._queue, "put", lambda job: job is not None and queued.append(job.take.take_id))
    monkeypatch.setattr(slices, "BUDGET_S", 0.0)
    checks.check_project()
    assert queued == [] and checks.busy  # from the next pass on
    qtbot.waitUntil(lambda: not checks._queuing.busy)
    assert checks._queuing.passes >= 24
    picked = [e.current.take_id for e in w.document.project.lines.values() if e.current is not None]
    assert queued[:len(picked)] == picked and len(queued) == len(set(queued))


def test_slices_yield_between_passes_start_again_from_scratch_and_finish_at_once(qtbot, monkeypatch):
    monkeypatch.setattr(slices, "BUDGET_S", 0.0)
    done: list[str] = []
    seen: list[int] = []
    work = slices.Slices(seen.append, lambda: done.append("done"))
    work.start(range(5))
    assert seen == [0] and work.busy
    QApplication.processEvents()
    assert seen == [0, 1]
    work.start(range(10, 13), now=False)  # what was left of the first run is dropped
    assert seen == [0, 1]
    qtbot.waitUntil(lambda: not work.busy)
    assert seen == [0, 1, 10, 11, 12] and done == ["done"] and work.passes == 4  # the last finds nothing left
    work.start(range(100, 103))
    work.finish()
    assert seen[-3:] == [100, 101, 102] and done == ["done", "done"] and not work.busy
