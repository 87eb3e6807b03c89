"""The script editor: highlighting, tag completion after `[`, inline parser warnings, current-line marks.

Highlighting is regex-based and runs per row (`highlighter`), so it never waits for the parser; the parser's warnings arrive as underlines after a short debounce (see MainWindow).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

from PySide6.QtCore import QMimeData, QRect, QStringListModel, Qt, Signal
from PySide6.QtGui import (QColor, QFontDatabase, QInputMethodEvent, QKeyEvent, QPalette, QTextBlock,
                           QTextCharFormat, QTextCursor, QTextFormat)
from PySide6.QtWidgets import QCompleter, QPlainTextEdit, QTextEdit, QToolTip, QWidget

from s2studio.state.script import Line, Script
from s2studio.ui.colors import is_dark
from s2studio.ui.script.chunked_paste import ChunkedPaste
from s2studio.ui.script.gutter import WIDTH as GUTTER_WIDTH
from s2studio.ui.script.gutter import LineGutter
from s2studio.ui.script.highlighter import ScriptHighlighter
from s2studio.ui.script.undo_steps import LineSteps

MIN_TEXT_WIDTH = 32
"""The least width the script's text keeps however narrow the window's middle gets."""


def lines_on_row(script: Script, row: int) -> list[Line]:
    """The script lines of text line `row` (1-based; several when raw speaker tags split it), found by
    bisection: a book has 10,000 lines and the cursor moves often."""
    lines = script.lines
    i = bisect_left(lines, row, key=_row_of)
    out = []
    while i < len(lines) and lines[i].source_line == row:
        out.append(lines[i])
        i += 1
    return out


def _row_of(line: Line) -> int:
    return line.source_line


def _end_of(line: Line) -> int:
    return line.end


@dataclass(frozen=True)
class InlineWarning:
    start: int
    end: int
    message: str


class ScriptEditor(QPlainTextEdit):
    """Plain text with highlighting, `[` completion, warning underlines, a 'now playing' band and a gutter
    of line states."""

    cursor_line_changed = Signal(int)
    """Block number (0-based) of the text cursor."""
    edited = Signal()
    """The text changed (typing, paste, undo…); not emitted when only the highlighting changed, which
    `textChanged` is."""
    mark_clicked = Signal(str)
    """The gutter mark of this line id was clicked."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("scriptEditor")
        self.setAccessibleName("Script editor")
        self.setPlaceholderText("Alice: Did you hear that? [whispering] Someone is at the door.\n"
                                "Bob: [laughing] It's only the cat.")
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.GeneralFont)
        font.setPointSizeF(max(font.pointSizeF(), 10.5) * 1.1)
        self.setFont(font)
        self.document().setDocumentMargin(12)
        self.setTabChangesFocus(True)
        self.highlighter = ScriptHighlighter(self.document(), is_dark(self.palette()), self.blocks_on_screen)
        self._warnings: list[InlineWarning] = []
        self._playing_block = -1
        self._selected_block = -1
        self.completer = QCompleter(self)
        self.completer.setModel(QStringListModel([], self.completer))
        self.completer.setWidget(self)
        self.completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.completer.setFilterMode(Qt.MatchFlag.MatchContains)
        self.completer.setCompletionMode(QCompleter.CompletionMode.PopupCompletion)
        self.completer.activated.connect(self._complete)
        self.cursorPositionChanged.connect(self._cursor_moved)
        self.document().contentsChange.connect(self._contents_changed)
        self.line_steps = LineSteps(self)  # a line added is one undo step
        self.pasting = ChunkedPaste(self, self.edited.emit)  # a book pasted a part a pass, `edited` after the last
        self._last_block = 0
        self.setMouseTracking(True)
        self.gutter = LineGutter(self)
        self.gutter.mark_clicked.connect(self.mark_clicked)
        self.setViewportMargins(GUTTER_WIDTH, 0, 0, 0)
        # never squeezed to no text at all: with a viewport of zero width, wrapping to it and the scroll bars it
        # needs change each other's size for ever and the window stops answering
        self.setMinimumWidth(GUTTER_WIDTH + MIN_TEXT_WIDTH + self.verticalScrollBar().sizeHint().width()
                             + 2 * self.frameWidth())

    # -- tags ------------------------------------------------------------------------------------

    def set_tag_names(self, names: list[str]) -> None:
        self.completer.model().setStringList(sorted(set(names), key=str.lower))

    def insert_tag(self, tag: str) -> None:
        """Insert `[tag]` at the cursor, with a space before it when the text needs one."""
        cursor = self.textCursor()
        before = self.toPlainText()[max(0, cursor.position() - 1):cursor.position()]
        text = f"[{tag.strip('[]')}]"
        if before and not before.isspace() and before != "[":
            text = " " + text
        cursor.insertText(text + " ")
        self.setTextCursor(cursor)
        self.setFocus()

    def _open_prefix(self) -> str | None:
        """Text typed after an unclosed `[` on the current line, or None outside a tag."""
        cursor = self.textCursor()
        line = cursor.block().text()[: cursor.positionInBlock()]
        i = line.rfind("[")
        if i < 0 or "]" in line[i:]:
            return None
        return line[i + 1:]

    def _complete(self, tag: str) -> None:
        prefix = self._open_prefix()
        cursor = self.textCursor()
        if prefix is not None:
            cursor.movePosition(QTextCursor.MoveOperation.Left, QTextCursor.MoveMode.KeepAnchor, len(prefix))
        after = cursor.block().text()[cursor.positionInBlock() + len(cursor.selectedText()):]
        cursor.insertText(tag + ("" if after.startswith("]") else "]"))
        self.setTextCursor(cursor)

    # -- a long paste: in parts; anything that edits or reads the text meanwhile finishes it first -------------

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 - Qt override (paste, drop)
        self.pasting.finish()
        if not (source.hasText() and self.pasting.start(source.text())):
            super().insertFromMimeData(source)

    def inputMethodEvent(self, event: QInputMethodEvent) -> None:  # noqa: N802 - Qt override
        self.pasting.finish()
        super().inputMethodEvent(event)

    def undo(self) -> None:
        self.pasting.finish()
        super().undo()

    def redo(self) -> None:
        self.pasting.finish()
        super().redo()

    def cut(self) -> None:
        self.pasting.finish()
        super().cut()

    def toPlainText(self) -> str:  # noqa: N802 - the text as the person pasted it, whole
        self.pasting.finish()
        return super().toPlainText()

    def setPlainText(self, text: str) -> None:  # noqa: N802 - another project's text: a paste's rest is dropped
        self.pasting.stop()
        super().setPlainText(text)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        self.pasting.finish()
        popup = self.completer.popup()
        if popup.isVisible() and event.key() in (Qt.Key.Key_Enter, Qt.Key.Key_Return, Qt.Key.Key_Tab,
                                                 Qt.Key.Key_Escape):
            event.ignore()
            return
        self.line_steps.press(event, lambda: super(ScriptEditor, self).keyPressEvent(event))
        prefix = self._open_prefix()
        if prefix is None or not event.text():
            popup.hide()
            return
        self.completer.setCompletionPrefix(prefix)
        if self.completer.completionCount() == 0:
            popup.hide()
            return
        rect = self.cursorRect()
        rect.setWidth(popup.sizeHintForColumn(0) + popup.verticalScrollBar().sizeHint().width() + 16)
        popup.setCurrentIndex(self.completer.completionModel().index(0, 0))
        self.completer.complete(rect)

    # -- warnings and marks ---------------------------------------------------------------------

    def set_warnings(self, warnings: list[InlineWarning]) -> None:
        self._warnings = list(warnings)
        self._update_selections()

    @property
    def warnings(self) -> list[InlineWarning]:
        return list(self._warnings)

    def set_selected_block(self, block: int) -> None:
        """Mark the selected line's text line (-1: none) with a faint band: a line selected by a click on the
        timeline shows where it is even while the editor, without the focus, draws no cursor."""
        if block != self._selected_block:
            self._selected_block = block
            self._update_selections()

    def set_playing_block(self, block: int) -> None:
        """Highlight the line being heard (-1: none)."""
        if block != self._playing_block:
            self._playing_block = block
            self._update_selections()

    def line_at_cursor(self, script: Script) -> Line | None:
        """The script line the text cursor is on (of several on one text line, the one it is in)."""
        cursor = self.textCursor()
        pos, block = cursor.position(), cursor.blockNumber() + 1
        on_block = lines_on_row(script, block)
        for ln in on_block:
            if ln.start <= pos <= ln.end:
                return ln
        return on_block[0] if on_block else None

    def lines_in_selection(self, script: Script) -> list[Line]:
        """The script lines the selection touches, or the cursor's line when nothing is selected."""
        cursor = self.textCursor()
        if not cursor.hasSelection():
            line = self.line_at_cursor(script)
            return [line] if line is not None else []
        first, last = cursor.selectionStart(), cursor.selectionEnd()
        lines = script.lines
        i = bisect_right(lines, first, key=_end_of)
        out = []
        while i < len(lines) and lines[i].start < last:
            out.append(lines[i])
            i += 1
        return out

    def select_block(self, block: int, position: int | None = None) -> None:
        """Put the cursor on `block` (at `position` in the text when given) and scroll it into view."""
        target = self.document().findBlockByNumber(block)
        if not target.isValid():
            return
        cursor = self.textCursor()
        cursor.setPosition(position if position is not None else target.position())
        self.setTextCursor(cursor)
        self.ensureCursorVisible()

    def _update_selections(self) -> None:
        sels = []
        for number, alpha in ((self._selected_block, 22), (self._playing_block, 55)):
            block = self.document().findBlockByNumber(number) if number >= 0 else None
            if block is not None and block.isValid():
                sel = QTextEdit.ExtraSelection()
                color = QColor(self.palette().color(QPalette.ColorRole.Highlight))
                color.setAlpha(alpha)
                sel.format.setBackground(color)
                sel.format.setProperty(QTextFormat.Property.FullWidthSelection, True)
                sel.cursor = QTextCursor(block)
                sels.append(sel)
        length = self.document().characterCount() - 1
        for w in self._warnings:
            sel = QTextEdit.ExtraSelection()
            sel.format.setUnderlineStyle(QTextCharFormat.UnderlineStyle.WaveUnderline)
            sel.format.setUnderlineColor(QColor("#e8590c"))
            sel.format.setBackground(QColor(232, 89, 12, 30))
            sel.format.setToolTip(w.message)
            cursor = QTextCursor(self.document())
            start = min(w.start, length)
            end = min(max(w.end, start + 1), length)
            cursor.setPosition(start)
            cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
            sel.cursor = cursor
            sels.append(sel)
        self.setExtraSelections(sels)

    def warning_at(self, position: int) -> InlineWarning | None:
        for w in self._warnings:
            if w.start <= position <= max(w.end, w.start + 1):
                return w
        return None

    def event(self, e) -> bool:  # noqa: ANN001 - Qt override
        if e.type() == e.Type.ToolTip:
            cursor = self.cursorForPosition(e.pos())
            w = self.warning_at(cursor.position())
            if w is not None:
                QToolTip.showText(e.globalPos(), w.message, self)
            else:
                QToolTip.hideText()
            return True
        return super().event(e)

    def _contents_changed(self, _position: int, removed: int, added: int) -> None:
        if (removed or added) and not self.pasting.busy:
            self.edited.emit()

    def _cursor_moved(self) -> None:
        block = self.textCursor().blockNumber()
        if block != self._last_block:
            self._last_block = block
            self.cursor_line_changed.emit(block)

    def blocks_on_screen(self) -> Iterator[QTextBlock]:
        """The rows the editor shows now (highlighted before the others)."""
        block, offset, height = self.firstVisibleBlock(), self.contentOffset(), self.viewport().height()
        while block.isValid() and self.blockBoundingGeometry(block).translated(offset).top() <= height:
            yield block
            block = block.next()

    def resizeEvent(self, e) -> None:  # noqa: ANN001, N802 - Qt override: the gutter beside the text
        super().resizeEvent(e)
        r = self.contentsRect()
        self.gutter.setGeometry(QRect(r.left(), r.top(), GUTTER_WIDTH, r.height()))

    def changeEvent(self, e) -> None:  # noqa: ANN001, N802 - Qt override: follow light/dark switches
        if e.type() == e.Type.PaletteChange:
            self.highlighter.set_dark(is_dark(self.palette()))
        super().changeEvent(e)
