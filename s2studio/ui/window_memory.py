"""The window as the person left it: its size and place (maximised or not), the toolbar, and where the
splitters between the voices, the script, the inspector and the player were dragged. Saved when the window
closes, restored when it is built (QSettings under `window/`)."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QSettings
from PySide6.QtWidgets import QMainWindow, QSplitter


class WindowMemory:
    def __init__(self, window: QMainWindow, settings: QSettings, splitters: dict[str, QSplitter]) -> None:
        self.window, self.settings, self.splitters = window, settings, splitters

    def restore(self) -> bool:
        """Put the window and its splitters back; False (the defaults stay) when nothing was saved."""
        geometry = self.settings.value("window/geometry")
        if not isinstance(geometry, QByteArray) or geometry.isEmpty():
            return False
        self.window.restoreGeometry(geometry)
        state = self.settings.value("window/state")
        if isinstance(state, QByteArray):
            self.window.restoreState(state)
        for name, splitter in self.splitters.items():
            sizes = self.settings.value(f"window/{name}")
            if isinstance(sizes, QByteArray):
                splitter.restoreState(sizes)
        return True

    def save(self) -> None:
        self.settings.setValue("window/geometry", self.window.saveGeometry())
        self.settings.setValue("window/state", self.window.saveState())
        for name, splitter in self.splitters.items():
            self.settings.setValue(f"window/{name}", splitter.saveState())
