"""The export dialog's path fields: the mix's file name, and the folders (stems, clips, chapters) that follow it
("…/scene.wav" -> "…/scene stems") until the person types or picks one of their own.

A path being typed is rarely a valid one ("", "/", "/tmp/"): every function here accepts any text and never
raises; a folder follows only a name that can be a file's.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtWidgets import QCheckBox, QFileDialog, QHBoxLayout, QLineEdit, QPushButton, QWidget


def file_name_ok(text: str) -> bool:
    """`text` names a file: not empty, not a folder ("…/"), with a name that is not "." or ".."."""
    text = text.strip()
    if not text or text.endswith(("/", os.sep)):
        return False
    return Path(text).expanduser().name not in ("", ".", "..")


def _row(edit: QLineEdit, slot) -> QHBoxLayout:  # noqa: ANN001
    row = QHBoxLayout()
    row.setContentsMargins(0, 0, 0, 0)
    row.addWidget(edit, 1)
    button = QPushButton("…")
    button.setAccessibleName(f"Browse: {edit.accessibleName()}")
    button.setMaximumWidth(32)
    button.clicked.connect(slot)
    row.addWidget(button)
    return row


def browse_file(parent: QWidget, edit: QLineEdit) -> QWidget:
    """`edit` with a "…" button that picks the file to write."""
    def browse() -> None:
        name, _ = QFileDialog.getSaveFileName(parent, "Export to", edit.text())
        if name:
            edit.setText(name)

    w = QWidget()
    w.setLayout(_row(edit, browse))
    return w


class FolderField(QWidget):
    """A folder for one kind of output, named after the mix ("scene stems") until the person chooses one."""

    def __init__(self, accessible_name: str, suffix: str, box: QCheckBox) -> None:
        super().__init__()
        self.suffix, self.box = suffix, box
        self.edit = QLineEdit()
        self.edit.setAccessibleName(accessible_name)
        self.following = True
        self.edit.textEdited.connect(self._chosen)
        self.setLayout(_row(self.edit, self._browse))

    def _chosen(self) -> None:
        self.following = False

    def _browse(self) -> None:
        name = QFileDialog.getExistingDirectory(self, self.box.accessibleName(), self.edit.text())
        if name:
            self.following = False
            self.edit.setText(name)
            self.box.setChecked(True)

    def follow(self, out: Path) -> None:
        """The mix is now `out` (a valid file name): the folder beside it, unless the person chose their own."""
        if self.following:
            self.edit.setText(str(out.with_name(f"{out.stem} {self.suffix}")))

    def text(self) -> str:
        return self.edit.text()

    def setText(self, text: str) -> None:  # noqa: N802 - as QLineEdit's, for whoever fills the field in
        self.edit.setText(text)

    def path(self) -> Path:
        return Path(self.edit.text()).expanduser()
