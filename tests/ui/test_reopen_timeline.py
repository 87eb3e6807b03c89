"""Reopening a book: its timeline is laid out a slice of lines a pass, so the window answers meanwhile, and an edit
meanwhile lands on the laid-out timeline as if it came after. Counted, not timed."""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QApplication

from s2studio.audio import timeline as timeline_module
from s2studio.audio.timeline import Track
from s2studio.state.project import Take
from s2studio.state.take_check import TakeCheck
from s2studio.ui.control import slices
from test_book_open import rendered_project, studio  # noqa: F401 - the fixture

SLICE = 5


def sliced_reopen(qtbot, w, tmp_path, monkeypatch) -> tuple:  # noqa: ANN001
    """A saved rendered book, laid out `SLICE` lines a pass when opened; its path and the ids of the tracks made
    (in order) from now on."""
    path, _edited = rendered_project(qtbot, w, tmp_path)
    monkeypatch.setattr(timeline_module, "LAYOUT_SLICE", SLICE, raising=False)
    monkeypatch.setattr(slices, "BUDGET_S", 0.0)  # one step a pass
    made: list[str] = []
    real = Track.__init__
    monkeypatch.setattr(Track, "__init__",
                        lambda self, line_id, *a, **k: (made.append(line_id), real(self, line_id, *a, **k))[1])
    return path, made


def test_a_book_reopened_lays_out_its_timeline_a_slice_a_pass_and_an_edit_meanwhile_lands_exactly(
        qtbot, studio, tmp_path, monkeypatch):  # noqa: F811 - the fixture
    w = studio
    path, made = sliced_reopen(qtbot, w, tmp_path, monkeypatch)
    assert w.projects.open(path)
    per_pass = [len(made)]
    while w.showing.busy or len(w.timeline.layout.tracks) < 24:
        before = len(made)
        QApplication.processEvents()
        per_pass.append(len(made) - before)
        assert len(per_pass) < 200
    assert max(per_pass) <= SLICE and sum(per_pass) == 24  # a slice of the book's takes a pass, never all at once
    at_once = [t.line_id for t in w.timeline.layout.tracks]
    assert at_once == list(w.document.script.line_ids)

    assert w.projects.open(path)
    while len(made) < 24 + 2 * SLICE:  # a few slices laid out
        QApplication.processEvents()
    gone = w.document.script.lines[3]
    cursor = w.editor.textCursor()  # the person deletes a line meanwhile
    cursor.setPosition(gone.start)
    cursor.movePosition(QTextCursor.MoveOperation.NextBlock, QTextCursor.MoveMode.KeepAnchor)
    cursor.removeSelectedText()
    w.reparse()
    qtbot.waitUntil(lambda: not w.showing.busy and not w.session._laying.busy)
    layout = w.timeline.layout
    assert [t.line_id for t in layout.tracks] == [k for k in at_once if k != gone.line_id]
    lengths = np.array([t.length for t in layout.tracks])
    starts = np.concatenate([[0], np.cumsum(lengths[:-1] + w.timeline.gap)])  # each line a gap after the last
    np.testing.assert_array_equal(layout.starts, starts)
    assert w.player_bar.waveform.range() == (0, starts[-1] + lengths[-1])


def test_takes_that_change_while_a_book_is_laid_out_wait_for_its_end_and_land_exactly(
        qtbot, studio, tmp_path, monkeypatch):  # noqa: F811 - the fixture
    """A check result (the take itself unchanged) and a new take for a line already laid out both arrive while the
    reopened book is laid out: neither lays out the rest of the book in its pass, and the new take is on the
    timeline once the layout is done, the lines after it moved by its length."""
    w = studio
    path, made = sliced_reopen(qtbot, w, tmp_path, monkeypatch)
    assert w.projects.open(path)
    while len(made) < 2 * SLICE:  # two slices laid out: lines 0-9 placed, the rest not yet
        QApplication.processEvents()
    first, second = w.document.script.lines[1].line_id, w.document.script.lines[2].line_id
    before = len(made)
    checked = w.document.project.current(first)
    w.document.set_check(checked, TakeCheck((), "a key"))  # as a check result does
    longer = Take("a-new-take", second, w.document.script.lines[2].text, audio=np.full(50_000, 0.25, np.float32))
    w.document.add_take(longer)  # as a take rendered meanwhile does
    assert len(made) - before == 0 and w.session._laying.busy  # both wait: nothing laid out in this pass
    qtbot.waitUntil(lambda: not w.session._laying.busy)
    layout = w.timeline.layout
    assert [t.line_id for t in layout.tracks] == list(w.document.script.line_ids)
    placed = layout.tracks[layout.index[second]]
    assert placed.source is longer.sound and placed.length == 50_000
    lengths = np.array([t.length for t in layout.tracks])
    np.testing.assert_array_equal(layout.starts, np.concatenate([[0], np.cumsum(lengths[:-1] + w.timeline.gap)]))
