"""The window's toolbar and menu bar, laid out from the one table of actions (`ui.actions.SPECS`): a menu per
spec's menu, in the table's order, with a separator before each group; File ▸ Open Recent follows the project
store's list."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMainWindow, QMenu, QToolBar

from s2studio.ui.actions import SPECS
from s2studio.ui.control.projects import ProjectStore

TOOLBAR = ("render_all", "render_stale", "render_line", "stop_render", None, "play_pause", "play_from_cursor", None,
           "export")
GROUPS = frozenset({"quit", "undo", "cut", "find", "insert_tag", "render_all", "play_pause", "loop_line", "next_take",
                    "new_voice", "open_log_folder"})
"""The actions that open a group of their menu (a separator above them)."""


def add_toolbar(window: QMainWindow, actions: dict[str, QAction]) -> QToolBar:
    toolbar = QToolBar("Main", window)
    toolbar.setObjectName("mainToolbar")
    toolbar.setMovable(False)
    toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
    for name in TOOLBAR:
        if name is None:
            toolbar.addSeparator()
        else:
            toolbar.addAction(actions[name])
    window.addToolBar(toolbar)
    return toolbar


class Menus:
    def __init__(self, window: QMainWindow, actions: dict[str, QAction], store: ProjectStore,
                 open_project: Callable[[Path], object]) -> None:
        self.store, self._open_project = store, open_project
        menus: dict[str, QMenu] = {}
        for spec in SPECS:
            if spec.scope != "window":
                continue
            menu = menus.get(spec.menu)
            if menu is None:
                menu = menus[spec.menu] = window.menuBar().addMenu("&" + spec.menu)
            if spec.name in GROUPS and menu.actions():
                menu.addSeparator()
            menu.addAction(actions[spec.name])
            if spec.name == "open_project":
                self.recent = menu.addMenu("Open &Recent")
        store.recent_changed.connect(self.fill_recent)
        self.fill_recent()

    def fill_recent(self) -> None:
        self.recent.clear()
        for path in self.store.recent():
            self.recent.addAction(path.name, lambda p=path: self._open_project(p))
        self.recent.setEnabled(bool(self.recent.actions()))
