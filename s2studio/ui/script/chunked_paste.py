"""A long text pasted into the script a part a pass of the event loop, as one undo step.

Qt inserts a pasted text whole: a book of 10,000 rows holds the window's thread for as long as Qt takes to
split it into rows. Here a text of more than `CHUNK_ROWS` rows goes in `CHUNK_ROWS` rows at a time, in turns
of the window's work in slices (`slices.pass_budget`), each part joined to the first part's edit block, so
that one Undo takes the whole paste back. The editor says it was edited once, after the last part (the parse
waits for the whole text); whatever would edit or read the text meanwhile (a key, another paste, Undo, the
text read for a save) first inserts what is left (`finish`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QPlainTextEdit

from s2studio.ui.control.slices import pass_budget

CHUNK_ROWS = 500
"""Rows of text inserted in one step (a paste of at most this many goes in at once)."""


def chunks(text: str, rows: int = CHUNK_ROWS) -> list[str]:
    """`text` cut after every `rows`-th newline (never inside a row, nor between a CR and its LF)."""
    out, start, count = [], 0, 0
    at = text.find("\n")
    while at >= 0:
        count += 1
        if count == rows:
            out.append(text[start:at + 1])
            start, count = at + 1, 0
        at = text.find("\n", at + 1)
    if start < len(text):
        out.append(text[start:])
    return out


class ChunkedPaste(QObject):
    def __init__(self, editor: QPlainTextEdit, done: Callable[[], object]) -> None:
        super().__init__(editor)
        self._editor, self._done = editor, done
        self._left: list[str] = []
        self._cursor: QTextCursor | None = None
        self._budget = pass_budget()
        self.steps = 0
        """Parts inserted, counted (what tests read)."""

    @property
    def busy(self) -> bool:
        """A paste is going in (from its first part until after its last)."""
        return self._cursor is not None

    def start(self, text: str) -> bool:
        """Paste `text` over the editor's selection, in parts when it is long; False when it is short enough
        to be inserted as Qt does it."""
        parts = chunks(text)
        if len(parts) < 2:
            return False
        self.finish()
        cursor = self._cursor = self._editor.textCursor()
        self._left = parts[:0:-1]  # reversed: the next part is popped from the end
        cursor.beginEditBlock()
        cursor.insertText(parts[0])
        cursor.endEditBlock()
        self.steps = 1
        self._budget.ask(self._turn)
        return True

    def finish(self) -> None:
        """Insert what is left now."""
        if self._cursor is not None:
            self._budget.drop(self._turn)
            self._turn(float("inf"))

    def stop(self) -> None:
        """Drop what is left (the whole text was replaced: another project)."""
        self._budget.drop(self._turn)
        self._left, self._cursor = [], None

    def _turn(self, until: float) -> None:
        cursor = self._cursor
        if cursor is None:
            return
        while self._left:
            cursor.joinPreviousEditBlock()
            cursor.insertText(self._left.pop())
            cursor.endEditBlock()
            self.steps += 1
            if self._left and time.thread_time() >= until:
                self._budget.ask(self._turn)
                return
        self._cursor = None
        self._editor.setTextCursor(cursor)
        self._editor.ensureCursorVisible()
        self._done()
