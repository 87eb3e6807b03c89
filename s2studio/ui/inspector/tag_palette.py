"""The tag palette: the curated tags of `resources/tags.json` by category; activating one inserts it."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLineEdit, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from s2studio.state.tags import load_palette


class TagPalette(QWidget):
    tag_chosen = Signal(str)
    """The tag text without brackets."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("tagPalette")
        self.setAccessibleName("Tag palette")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter tags…")
        self.filter.setAccessibleName("Filter tags")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self._filter)
        self.filter.returnPressed.connect(self._insert_first)
        self.tree = QTreeWidget()
        self.tree.setHeaderHidden(True)
        self.tree.setAccessibleName("Tags by category; press Enter to insert at the cursor")
        self.tree.setRootIsDecorated(True)
        self.tree.itemActivated.connect(self._activated)
        layout.addWidget(self.filter)
        layout.addWidget(self.tree)
        for cat in load_palette():
            parent_item = QTreeWidgetItem([cat.name])
            parent_item.setToolTip(0, cat.description)
            parent_item.setFlags(Qt.ItemFlag.ItemIsEnabled)
            for t in cat.tags:
                item = QTreeWidgetItem([f"[{t.tag}]"])
                item.setData(0, Qt.ItemDataRole.UserRole, t.tag)
                item.setToolTip(0, t.hint)
                parent_item.addChild(item)
            self.tree.addTopLevelItem(parent_item)
        self.tree.expandToDepth(0)

    def names(self) -> list[str]:
        out = []
        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            out += [top.child(j).data(0, Qt.ItemDataRole.UserRole) for j in range(top.childCount())]
        return out

    def _activated(self, item: QTreeWidgetItem) -> None:
        tag = item.data(0, Qt.ItemDataRole.UserRole)
        if tag:
            self.tag_chosen.emit(tag)

    def _insert_first(self) -> None:
        """Enter in the filter inserts the first matching tag (Ctrl+T, type, Enter: no mouse needed)."""
        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            for j in range(top.childCount()):
                child = top.child(j)
                if not child.isHidden() and not top.isHidden():
                    self.tag_chosen.emit(child.data(0, Qt.ItemDataRole.UserRole))
                    self.filter.clear()
                    return

    def _filter(self, text: str) -> None:
        needle = text.strip().lower()
        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            shown = 0
            for j in range(top.childCount()):
                child = top.child(j)
                hide = bool(needle) and needle not in child.text(0).lower() and needle not in child.toolTip(0).lower()
                child.setHidden(hide)
                shown += not hide
            top.setHidden(shown == 0)
