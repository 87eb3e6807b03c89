"""Takes of the line under the cursor: keep several, pick one, A/B the last two picks."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QPushButton, QVBoxLayout, QWidget

from s2studio.engine.api import SAMPLE_RATE
from s2studio.state.project import LineTakes


class TakesPanel(QWidget):
    pick_requested = Signal(str, int)
    """(line_id, take index)."""
    audition_requested = Signal(str)
    """Play this line from its start."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("takesPanel")
        self.setAccessibleName("Takes of the current line")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.title = QLabel("No line under the cursor.")
        self.title.setWordWrap(True)
        self.list = QListWidget()
        self.list.setAccessibleName("Takes; select one to hear it in the timeline")
        self.list.itemClicked.connect(self._clicked)
        self.list.itemActivated.connect(self._clicked)
        row = QHBoxLayout()
        self.ab_button = QPushButton("A/B")
        self.ab_button.setToolTip("Switch between the two last picked takes and play the line")
        self.ab_button.setAccessibleName("Compare takes A and B")
        self.ab_button.clicked.connect(self.toggle_ab)
        self.play_button = QPushButton("Play line")
        self.play_button.setAccessibleName("Play this line")
        self.play_button.clicked.connect(lambda: self._line_id and self.audition_requested.emit(self._line_id))
        row.addWidget(self.ab_button)
        row.addWidget(self.play_button)
        layout.addWidget(self.title)
        layout.addWidget(self.list, 1)
        layout.addLayout(row)
        self._line_id: str | None = None
        self._takes: LineTakes | None = None
        self._previous: dict[str, int] = {}

    def show_line(self, line_id: str | None, label: str, takes: LineTakes | None, stale: bool) -> None:
        self._line_id, self._takes = line_id, takes
        self.list.clear()
        if line_id is None:
            self.title.setText("No line under the cursor.")
        else:
            state = "not rendered" if takes is None or not takes.takes else ("stale: edited since rendered" if stale
                                                                              else "up to date")
            self.title.setText(f"<b>{label}</b><br><small>{state}</small>")
        if takes is not None:
            for i, take in enumerate(takes.takes):
                secs = len(take.audio) / SAMPLE_RATE
                item = QListWidgetItem(f"Take {i + 1}   {secs:4.1f} s   seed {take.seed}")
                item.setData(Qt.ItemDataRole.UserRole, i)
                if i == takes.picked:
                    f = item.font()
                    f.setBold(True)
                    item.setFont(f)
                    item.setText(item.text() + "   ✓")
                self.list.addItem(item)
            if 0 <= takes.picked < self.list.count():
                self.list.setCurrentRow(takes.picked)
        count = len(takes.takes) if takes else 0
        self.ab_button.setEnabled(count >= 2)
        self.play_button.setEnabled(count >= 1)

    def _clicked(self, item: QListWidgetItem) -> None:
        if self._line_id is None or self._takes is None:
            return
        index = int(item.data(Qt.ItemDataRole.UserRole))
        if index != self._takes.picked:
            self._previous[self._line_id] = self._takes.picked
            self.pick_requested.emit(self._line_id, index)

    def step(self, delta: int) -> None:
        """Pick the next/previous take (keyboard)."""
        if self._line_id is None or self._takes is None or not self._takes.takes:
            return
        index = (self._takes.picked + delta) % len(self._takes.takes)
        self._previous[self._line_id] = self._takes.picked
        self.pick_requested.emit(self._line_id, index)

    def toggle_ab(self) -> None:
        if self._line_id is None or self._takes is None or len(self._takes.takes) < 2:
            return
        other = self._previous.get(self._line_id)
        if other is None or other == self._takes.picked or other >= len(self._takes.takes):
            other = (self._takes.picked - 1) % len(self._takes.takes)
        self._previous[self._line_id] = self._takes.picked
        self.pick_requested.emit(self._line_id, other)
        self.audition_requested.emit(self._line_id)
