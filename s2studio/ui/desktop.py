"""What the window asks of the desktop: show a folder in the file manager (Help ▸ Open Log Folder, the export
dialog's Open Folder), and where there is none (a bare window manager, a server with X forwarding), say where the
folder is in a dialog whose path can be selected and copied."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget


def open_folder(folder: Path) -> bool:
    """Show `folder` in the desktop's file manager (created first, so that it can be shown); False when the
    desktop has no file manager to show it in."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))


class FolderDialog(QDialog):
    """"<what> is in this folder:" and the path, selected, with a Copy button."""

    def __init__(self, folder: Path, what: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("folderDialog")
        self.setWindowTitle(f"Where {what.lower()} is")
        self.setMinimumWidth(520)
        layout = QVBoxLayout(self)
        note = QLabel(f"No file manager could be opened on this computer. {what} is in this folder:")
        note.setWordWrap(True)
        layout.addWidget(note)
        self.path = QLineEdit(str(folder))
        self.path.setReadOnly(True)
        self.path.setAccessibleName("Folder path")
        self.path.selectAll()
        layout.addWidget(self.path)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.copy_button = QPushButton("Copy path")
        self.copy_button.setAccessibleName("Copy the folder's path")
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.path.text()))
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)


def reveal_folder(folder: Path, what: str, parent: QWidget | None = None) -> bool:
    """Open `folder` in the file manager, else show `FolderDialog` (not modal); True when a file manager opened."""
    if open_folder(folder):
        return True
    dialog = FolderDialog(folder, what, parent)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.show()
    return False
