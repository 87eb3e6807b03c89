"""One undo step per line the person adds to the script.

Qt's text undo keeps a run of typing as one step and an Enter as another, so a line added by typing it and
pressing Enter took two Ctrl+Z, and the first one left a state the person never wrote: typed at the start of a
line, undoing only the Enter joined the new text to the line after it ("Carol: Hi.Bob: Three."), which the
parser read as an edit of Bob's line and marked its takes stale until the second Ctrl+Z. Two rules make a new
line one step, and every other edit stays as Qt groups it:

- Enter in the middle of a line, straight after typing there (a line typed in front of another), ends that
  typing in the same step: the typing is undone and made again with the Enter in one edit block.
- Enter at the end of a line, and the typing straight after it on the new line, are one step (the typing
  joins the Enter's edit block).

A run of typing ends when the cursor moves or any other key is pressed.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeyEvent, QTextCursor
from PySide6.QtWidgets import QPlainTextEdit

ENTER_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)
COMMAND_MODIFIERS = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier | \
    Qt.KeyboardModifier.MetaModifier


def utf16(text: str) -> bytes:
    return text.encode("utf-16-le", "surrogatepass")


class LineSteps:
    """Wraps the editor's key handling (`press`)."""

    def __init__(self, editor: QPlainTextEdit) -> None:
        self.editor = editor
        self._start: int | None = None
        """Where the run of typing the cursor ends began (None: no run)."""
        self._end = -1
        self._after_enter = False
        """The run follows an Enter at a line's end: its typing joins that step."""

    def press(self, event: QKeyEvent, handle: Callable[[], None]) -> None:
        cursor = self.editor.textCursor()
        in_run = self._start is not None and cursor.position() == self._end and not cursor.hasSelection()
        mods = event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
        if event.key() in ENTER_KEYS and mods == Qt.KeyboardModifier.NoModifier and not cursor.hasSelection():
            rest = cursor.block().text()[cursor.positionInBlock():]
            if rest.strip() and in_run and not self._after_enter and self._enter_with_typing():
                self._start = None
                return
            handle()
            at_end = not rest.strip()
            self._start = self.editor.textCursor().position() if at_end else None
            self._end, self._after_enter = self._start if at_end else -1, at_end
            return
        text = event.text()
        if text and text.isprintable() and not (mods & COMMAND_MODIFIERS) and not cursor.hasSelection():
            start = cursor.position()  # before the key: a copied cursor moves with what is typed at it
            if in_run and self._after_enter:
                joined = self.editor.textCursor()
                joined.joinPreviousEditBlock()
                handle()
                joined.endEditBlock()
            else:
                handle()
                if not in_run:
                    self._start, self._after_enter = start, False
            self._end = self.editor.textCursor().position()
            return
        self._start = None
        handle()

    def _enter_with_typing(self) -> bool:
        """Undo the run of typing and make it again together with the Enter, as one step; False (nothing
        changed) when the last undo step is not exactly that run."""
        doc = self.editor.document()
        start, end = self._start or 0, self._end
        before = utf16(doc.toPlainText())  # positions count UTF-16 units, as Qt's do
        typed = before[2 * start:2 * end].decode("utf-16-le")
        if not typed or not doc.isUndoAvailable():
            return False
        doc.undo()
        if utf16(doc.toPlainText()) != before[:2 * start] + before[2 * end:]:
            doc.redo()
            return False
        cursor = QTextCursor(doc)
        cursor.setPosition(start)
        cursor.beginEditBlock()
        cursor.insertText(typed)
        cursor.insertBlock()
        cursor.endEditBlock()
        self.editor.setTextCursor(cursor)
        return True
