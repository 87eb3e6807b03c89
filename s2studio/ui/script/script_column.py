"""The window's centre column laid out: the cast bar on top, the chapters beside the script editor, the find bar
and the warning line below them."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSplitter, QVBoxLayout, QWidget


def script_column(cast_bar: QWidget, chapters: QWidget, editor: QWidget, below: list[QWidget]) -> tuple[QWidget,
                                                                                                       QSplitter]:
    """The column and its chapters/editor splitter (the window remembers where the person left it)."""
    column = QWidget()
    layout = QVBoxLayout(column)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.setSpacing(0)
    layout.addWidget(cast_bar)
    splitter = QSplitter(Qt.Orientation.Horizontal)
    splitter.addWidget(chapters)
    splitter.addWidget(editor)
    splitter.setStretchFactor(1, 1)
    splitter.setSizes([170, 550])
    layout.addWidget(splitter, 1)
    for widget in below:
        layout.addWidget(widget)
    return column, splitter
