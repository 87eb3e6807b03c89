"""Keys that mean different things depending on where the focus is: Space, and Edit ▸ Cut/Copy/Paste/Select All.

Space plays and pauses anywhere in the window, as in a DAW, except where Space already means something: a text
field types it, a button or check box presses it, a combo box opens. Qt asks the focused widget first
(`ShortcutOverride`); text fields claim Space themselves, and `SpaceForPlayback` claims it for the others: a
filter on the focused widget alone, moved as the focus moves (on the application it would put every event of every
widget through Python, each waiting for the interpreter behind the studio's other threads).

The Edit commands act on the text field that has the focus (a voice's name, a transcript, the tag filter) and
on the script when no text field has it.
"""

from __future__ import annotations

import shiboken6
from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (QAbstractButton, QAbstractSpinBox, QApplication, QComboBox, QLineEdit,
                               QPlainTextEdit, QTextEdit, QWidget)

SPACE_KEEPERS = (QAbstractButton, QComboBox, QLineEdit, QPlainTextEdit, QTextEdit, QAbstractSpinBox)
"""Widgets for which Space is theirs: it types, presses or opens."""
TEXT_FIELDS = (QLineEdit, QPlainTextEdit, QTextEdit)


class SpaceForPlayback(QObject):
    """Follows the focus in `window`: a plain Space on a focused widget that keeps Space goes to that widget, not
    to the window's Play / Pause shortcut."""

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self.window = window
        self._on: QWidget | None = None
        self._following = True
        QApplication.instance().focusChanged.connect(self._follow)
        self._follow(None, QApplication.focusWidget())

    def _follow(self, _old: QWidget | None, new: QWidget | None) -> None:
        if self._on is not None and shiboken6.isValid(self._on):
            self._on.removeEventFilter(self)
        self._on = None
        if isinstance(new, SPACE_KEEPERS) and shiboken6.isValid(self) and new.window() is self.window:
            new.installEventFilter(self)
            self._on = new

    def stop(self) -> None:
        """The window closes: Space is no longer followed."""
        if self._following:
            self._following = False
            QApplication.instance().focusChanged.disconnect(self._follow)
            self._follow(None, None)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if (event.type() == QEvent.Type.ShortcutOverride and isinstance(event, QKeyEvent)
                and event.key() == Qt.Key.Key_Space and event.modifiers() == Qt.KeyboardModifier.NoModifier):
            event.accept()  # accepted override: the key goes to the widget as a key press
        return False


def edit_target(script: QPlainTextEdit) -> QWidget:
    """The text field Edit ▸ Cut/Copy/Paste/Select All act on: the focused one (a spin box's own field
    included), else the script."""
    focus = QApplication.focusWidget()
    if isinstance(focus, QAbstractSpinBox):
        focus = focus.findChild(QLineEdit)
    return focus if isinstance(focus, TEXT_FIELDS) else script


def run_edit(command: str, script: QPlainTextEdit) -> None:
    """`command` ("cut", "copy", "paste", "selectAll") on `edit_target`."""
    target = edit_target(script)
    getattr(target, command)()
    if target is script:
        script.setFocus()
