"""Keys that mean different things depending on where the focus is: Space, and Edit ▸ Cut/Copy/Paste/Select All.

Space plays and pauses anywhere in the window, as in a DAW, except where Space already means something: a text
field types it, a button or check box presses it, a combo box opens. Qt asks the focused widget first
(`ShortcutOverride`); text fields claim Space themselves, and `SpaceForPlayback` claims it for the others.

The Edit commands act on the text field that has the focus (a voice's name, a transcript, the tag filter) and
on the script when no text field has it.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (QAbstractButton, QAbstractSpinBox, QApplication, QComboBox, QLineEdit,
                               QPlainTextEdit, QTextEdit, QWidget)

SPACE_KEEPERS = (QAbstractButton, QComboBox, QLineEdit, QPlainTextEdit, QTextEdit, QAbstractSpinBox)
"""Widgets for which Space is theirs: it types, presses or opens."""
TEXT_FIELDS = (QLineEdit, QPlainTextEdit, QTextEdit)


class SpaceForPlayback(QObject):
    """Installed on the application: a plain Space on a widget that keeps Space goes to that widget, not to
    the window's Play / Pause shortcut."""

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self.window = window

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if (isinstance(event, QKeyEvent) and isinstance(obj, SPACE_KEEPERS)  # the cheap tests first: every event
                and event.type() == QEvent.Type.ShortcutOverride and event.key() == Qt.Key.Key_Space
                and event.modifiers() == Qt.KeyboardModifier.NoModifier and obj.window() is self.window):
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
