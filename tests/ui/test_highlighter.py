"""The script's colours: a row an edit touched is coloured at once; a book set whole is coloured a slice at a
time, the rows on screen first, never all in one pass of the event loop. Counted, not timed."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QFont, QTextCursor

from s2studio.ui.control import slices
from s2studio.ui.script import highlighter as highlighter_module
from s2studio.ui.script.editor import ScriptEditor

ROWS = ["# Chapter 1"] + [f"{'Alice' if i % 2 else 'Bob'}: Line {i} [sigh] of the book." for i in range(2999)]


class Paints(QObject):
    count = 0

    def eventFilter(self, _watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        self.count += event.type() == QEvent.Type.Paint
        return False


def formats(editor: ScriptEditor, row: int) -> list[tuple[int, int, bool]]:
    block = editor.document().findBlockByNumber(row)
    return [(r.start, r.length, r.format.fontWeight() == QFont.Weight.Bold) for r in block.layout().formats()]


def test_a_book_is_coloured_a_slice_at_a_time_and_an_edited_row_at_once(qtbot, monkeypatch):
    passes: list[int] = []
    real = highlighter_module.ScriptHighlighter._work

    def counted(self, until):
        before = self.rows_highlighted
        real(self, until)
        passes.append(self.rows_highlighted - before)

    monkeypatch.setattr(highlighter_module.ScriptHighlighter, "_work", counted)
    editor = ScriptEditor()
    qtbot.addWidget(editor)
    editor.resize(600, 400)
    editor.show()
    h = editor.highlighter
    qtbot.waitUntil(lambda: not h.pending)
    before = h.rows_highlighted
    paints = Paints()
    editor.viewport().installEventFilter(paints)
    monkeypatch.setattr(slices, "BUDGET_S", 0.0002)  # many passes
    editor.setPlainText("\n".join(ROWS))
    assert h.rows_highlighted - before <= 2 * highlighter_module.AT_ONCE and h.pending  # not 3,000 rows at once
    qtbot.waitUntil(lambda: not h.pending, timeout=20000)
    assert len(passes) > 3 and max(passes) < len(ROWS)  # in slices
    assert len(passes) >= 20 and paints.count < 10  # the rows not shown are coloured without repainting the view
    assert formats(editor, 0) == [(0, 11, True)]  # the heading, bold
    assert formats(editor, 2000) == [(0, 6, True), (17, 6, False)]  # "Alice:", then the tag
    cursor = QTextCursor(editor.document().findBlockByNumber(2500))
    cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock)
    cursor.insertText(" [laughing]")
    assert formats(editor, 2500)[-1][:2] == (len(ROWS[2500]) + 1, 10)  # coloured at once
