"""The line under the script that names its first warning (and how many more), hidden when there is none; the
editor underlines each warning where it is."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QWidget

from s2studio.state.script import Script


class WarningBar(QLabel):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.setObjectName("warningBar")
        self.setAccessibleName("Script warnings")
        self.setWordWrap(True)
        self.setContentsMargins(10, 4, 10, 4)
        self.setStyleSheet("#warningBar { color: #c2410c; }")
        self.setVisible(False)

    def show_warnings(self, script: Script) -> None:
        warnings = script.warnings
        if not warnings:
            self.setVisible(False)
            return
        first = min(warnings, key=lambda w: w.start)
        line = script.source.count("\n", 0, first.start) + 1
        more = f"  (+{len(warnings) - 1} more: hover the underlines)" if len(warnings) > 1 else ""
        self.setText(f"⚠ Line {line}: {first.message}{more}")
        self.setVisible(True)
