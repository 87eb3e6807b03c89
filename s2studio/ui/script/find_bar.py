"""Find and replace in the script (Edit ▸ Find…, Replace…): a bar under the editor, as in a code editor.

Typing searches as you type from the cursor; Enter and F3 go to the next match, Shift+Enter and Shift+F3 to
the previous one, both wrapping round the script; Escape closes the bar and gives the script the focus back.
Replace changes the selected match and moves on; Replace All changes every match as one edit, so one Undo
takes it back. The bar says where it is ("3 of 12") or that nothing matches.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QKeyEvent, QTextCursor, QTextDocument
from PySide6.QtWidgets import (QCheckBox, QGridLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton, QToolButton,
                               QWidget)

Find = QTextDocument.FindFlag


class FindBar(QWidget):
    def __init__(self, editor: QPlainTextEdit, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.editor = editor
        self.setObjectName("findBar")
        self.setAccessibleName("Find and replace")
        grid = QGridLayout(self)
        grid.setContentsMargins(8, 4, 8, 4)
        grid.setHorizontalSpacing(6)
        grid.setVerticalSpacing(4)
        self.find_field = QLineEdit()
        self.find_field.setPlaceholderText("Find in the script")
        self.find_field.setAccessibleName("Find")
        self.find_field.setClearButtonEnabled(True)
        self.replace_field = QLineEdit()
        self.replace_field.setPlaceholderText("Replace with")
        self.replace_field.setAccessibleName("Replace with")
        self.match_case = QCheckBox("Match case")
        self.match_case.setAccessibleName("Match case")
        self.previous_button = self._button("↑", "Previous match (Shift+F3)")
        self.next_button = self._button("↓", "Next match (F3)")
        self.replace_button = QPushButton("Replace")
        self.replace_button.setAccessibleName("Replace this match")
        self.replace_all_button = QPushButton("Replace All")
        self.replace_all_button.setAccessibleName("Replace every match")
        self.count = QLabel("")
        self.count.setAccessibleName("Matches")
        self.count.setMinimumWidth(90)
        close = self._button("✕", "Close (Esc)")
        grid.addWidget(self.find_field, 0, 0)
        grid.addWidget(self.previous_button, 0, 1)
        grid.addWidget(self.next_button, 0, 2)
        grid.addWidget(self.match_case, 0, 3)
        grid.addWidget(self.count, 0, 4)
        grid.addWidget(close, 0, 5)
        grid.addWidget(self.replace_field, 1, 0)
        grid.addWidget(self.replace_button, 1, 1, 1, 2)
        grid.addWidget(self.replace_all_button, 1, 3)
        grid.setColumnStretch(0, 1)
        self._replace_row = (self.replace_field, self.replace_button, self.replace_all_button)
        self.find_field.textEdited.connect(lambda _text: self._search_from(self._anchor(), forward=True))
        self.find_field.installEventFilter(self)  # Shift+Enter: the previous match
        self.find_field.returnPressed.connect(self.find_next)
        self.replace_field.returnPressed.connect(self.replace_one)
        self.match_case.toggled.connect(lambda _on: self._search_from(self._anchor(), forward=True))
        self.previous_button.clicked.connect(self.find_previous)
        self.next_button.clicked.connect(self.find_next)
        self.replace_button.clicked.connect(self.replace_one)
        self.replace_all_button.clicked.connect(self.replace_all)
        close.clicked.connect(self.close_bar)
        self.setVisible(False)

    @staticmethod
    def _button(text: str, tip: str) -> QToolButton:
        b = QToolButton()
        b.setText(text)
        b.setToolTip(tip)
        b.setAccessibleName(tip)
        b.setAutoRaise(True)
        return b

    # -- opening -----------------------------------------------------------------------------------

    def open_find(self, replace: bool = False) -> None:
        """Show the bar (with the replace row for Replace…), the script's selection as the search text."""
        selected = self.editor.textCursor().selectedText()
        if selected and "\u2029" not in selected:  # one line of selected text: search for it
            self.find_field.setText(selected)
        for w in self._replace_row:
            w.setVisible(replace)
        self.setVisible(True)
        self.find_field.setFocus()
        self.find_field.selectAll()
        self._show_count()

    def close_bar(self) -> None:
        self.setVisible(False)
        self.editor.setFocus()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        if event.key() == Qt.Key.Key_Escape:
            self.close_bar()
        else:
            super().keyPressEvent(event)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if (obj is self.find_field and event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent)
                and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
                and event.modifiers() & Qt.KeyboardModifier.ShiftModifier):
            self.find_previous()
            return True
        return False

    # -- searching ---------------------------------------------------------------------------------

    def _flags(self, forward: bool) -> Find:
        flags = Find(0)
        if self.match_case.isChecked():
            flags |= Find.FindCaseSensitively
        if not forward:
            flags |= Find.FindBackward
        return flags

    def _anchor(self) -> int:
        """Search-as-you-type starts at the current match's start, so a longer text keeps the same match."""
        cursor = self.editor.textCursor()
        return cursor.selectionStart()

    def _search_from(self, position: int, forward: bool) -> bool:
        text = self.find_field.text()
        doc = self.editor.document()
        if not text:
            self._show_count()
            return False
        found = doc.find(text, position, self._flags(forward))
        if found.isNull():  # wrap round
            found = doc.find(text, 0 if forward else doc.characterCount() - 1, self._flags(forward))
        if not found.isNull():
            self.editor.setTextCursor(found)
            self.editor.ensureCursorVisible()
        self._show_count()
        return not found.isNull()

    def find_next(self) -> bool:
        if not self.isVisible():
            self.open_find()
        return self._search_from(self.editor.textCursor().selectionEnd(), forward=True)

    def find_previous(self) -> bool:
        if not self.isVisible():
            self.open_find()
        return self._search_from(self.editor.textCursor().selectionStart(), forward=False)

    def matches(self) -> list[tuple[int, int]]:
        """(start, end) of every match in the script, in order."""
        text, doc = self.find_field.text(), self.editor.document()
        out: list[tuple[int, int]] = []
        if not text:
            return out
        cursor = doc.find(text, 0, self._flags(True))
        while not cursor.isNull():
            out.append((cursor.selectionStart(), cursor.selectionEnd()))
            cursor = doc.find(text, cursor.selectionEnd(), self._flags(True))
        return out

    def _is_match(self, cursor: QTextCursor) -> bool:
        return (cursor.selectionStart(), cursor.selectionEnd()) in self.matches() if cursor.hasSelection() else False

    def _show_count(self) -> None:
        if not self.find_field.text():
            self.count.setText("")
            return
        matches = self.matches()
        cursor = self.editor.textCursor()
        here = (cursor.selectionStart(), cursor.selectionEnd())
        if not matches:
            self.count.setText("No match")
        elif here in matches:
            self.count.setText(f"{matches.index(here) + 1} of {len(matches)}")
        else:
            self.count.setText(f"{len(matches)} match{'es' * (len(matches) != 1)}")

    # -- replacing ---------------------------------------------------------------------------------

    def replace_one(self) -> None:
        """Replace the selected match (or find one first) and go to the next."""
        cursor = self.editor.textCursor()
        if not self._is_match(cursor):
            self.find_next()
            return
        cursor.insertText(self.replace_field.text())
        self.editor.setTextCursor(cursor)
        self.find_next()

    def replace_all(self) -> int:
        """Replace every match in one edit (one Undo); returns how many."""
        matches = self.matches()
        if not matches:
            self._show_count()
            return 0
        cursor = QTextCursor(self.editor.document())
        cursor.beginEditBlock()
        for start, end in reversed(matches):  # from the end, so earlier offsets stay valid
            cursor.setPosition(start)
            cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
            cursor.insertText(self.replace_field.text())
        cursor.endEditBlock()
        self.count.setText(f"Replaced {len(matches)}")
        return len(matches)
