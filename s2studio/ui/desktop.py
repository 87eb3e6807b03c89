"""What the window asks of the desktop: show a folder in the file manager (Help ▸ Open Log Folder, the export
dialog's Open Folder)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices


def open_folder(folder: Path) -> bool:
    """Show `folder` in the desktop's file manager (created first, so that it can be shown); False when the
    desktop has no file manager to show it in."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))
