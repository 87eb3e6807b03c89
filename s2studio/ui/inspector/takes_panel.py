"""Takes of the selected line: every take kept, one picked (heard and exported), each with its length,
seed, time and whether it answers the line as it is now; play the line alone, loop it, A/B two takes
inside the loop, delete a take and undo that."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QGridLayout, QLabel, QListWidget, QListWidgetItem, QPushButton, QVBoxLayout,
                               QWidget)

from s2studio.state.project import LineTakes, Take
from s2studio.state.take_check import MARKS

TITLE_CHARS = 120
"""The selected line's text is shown whole up to this length, then cut with "…" (the whole text in its tooltip)."""


def checked(take: Take) -> str:
    """What the checks found in the take, in one line with its mark ("" before it is checked)."""
    if take.check is None:
        return ""
    return f"{MARKS[take.check.verdict]} checks: {take.check.summary()}"


def _when(take: Take) -> str:
    """When the take was made: the time today, else the date."""
    try:
        made = datetime.fromisoformat(take.created or "")
    except ValueError:
        return ""
    return made.strftime("%H:%M" if made.date() == datetime.now().date() else "%d %b %H:%M")


class TakesPanel(QWidget):
    pick_requested = Signal(str, int)
    """(line_id, take index)."""
    play_requested = Signal(str)
    """Play this line alone, from its start to its end."""
    loop_requested = Signal(str, bool)
    """(line_id, on): loop the line, or stop looping."""
    ab_requested = Signal(str)
    """The pick was switched for A/B: loop the line with the new pick."""
    delete_requested = Signal(str, str)
    """(line_id, take_id)."""
    restore_requested = Signal()
    """Undo the last delete."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("takesPanel")
        self.setAccessibleName("Takes of the selected line")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.title = QLabel("No line selected.")
        self.title.setWordWrap(True)
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.list = QListWidget()
        self.list.setAccessibleName("Takes; click one to hear it in the timeline")
        self.list.setWordWrap(True)
        self.list.itemClicked.connect(self._clicked)
        self.list.itemActivated.connect(self._clicked)
        grid = QGridLayout()
        self.play_button = self._button("Play line", "Play this line alone, to its end", grid, 0, 0)
        self.play_button.clicked.connect(lambda: self._line_id and self.play_requested.emit(self._line_id))
        self.loop_button = self._button("Loop", "Play this line round and round", grid, 0, 1)
        self.loop_button.setCheckable(True)
        self.loop_button.toggled.connect(self._loop_toggled)
        self.ab_button = self._button("A/B", "Switch between the two last picked takes, looping the line", grid, 0, 2)
        self.ab_button.clicked.connect(self.toggle_ab)
        self.delete_button = self._button("Delete take", "Delete the selected take (it can be undone)", grid, 1, 0)
        self.delete_button.clicked.connect(self._delete)
        self.undo_button = self._button("Undo delete", "Bring the last deleted take back", grid, 1, 1)
        self.undo_button.clicked.connect(self.restore_requested)
        self.undo_button.setEnabled(False)
        layout.addWidget(self.title)
        layout.addWidget(self.list, 1)
        layout.addLayout(grid)
        self._line_id: str | None = None
        self._takes: LineTakes | None = None
        self._previous: dict[str, int] = {}
        self._loading = False

    @staticmethod
    def _button(text: str, tip: str, grid: QGridLayout, row: int, col: int) -> QPushButton:
        b = QPushButton(text)
        b.setToolTip(tip)
        b.setAccessibleName(tip)
        grid.addWidget(b, row, col)
        return b

    @property
    def line_id(self) -> str | None:
        return self._line_id

    def show_line(self, line_id: str | None, label: str, takes: LineTakes | None, state: str,
                  notes: Sequence[str] = (), looping: bool = False) -> None:
        """`state`: the line's state in words; `notes`: per take, how it differs from the line now."""
        self._line_id, self._takes = line_id, takes
        self.list.clear()
        shown = label if len(label) <= TITLE_CHARS else label[:TITLE_CHARS - 1].rstrip() + "…"
        self.title.setText("No line selected." if line_id is None
                           else f"<b>{html.escape(shown)}</b><br><small>{html.escape(state)}</small>")
        self.title.setToolTip(label if shown != label else "")
        for i, take in enumerate(takes.takes if takes else ()):
            picked = i == takes.picked
            head = f"Take {i + 1}{'  ✓' if picked else ''}    {take.seconds:.1f} s    seed {take.seed}"
            backend = (take.settings or {}).get("backend")
            head += f"    {backend}" if backend else ""
            when = _when(take)
            text = head + (f"    {when}" if when else "")
            note = "\n".join(n for n in (notes[i] if i < len(notes) else "", checked(take)) if n)
            item = QListWidgetItem(text + (f"\n{note}" if note else ""))
            item.setData(Qt.ItemDataRole.UserRole, i)
            item.setToolTip(f"Take {i + 1}: “{take.text}”" + (f"\n{note}" if note else ""))
            if picked:
                f = item.font()
                f.setBold(True)
                item.setFont(f)
            self.list.addItem(item)
        if takes is not None and 0 <= takes.picked < self.list.count():
            self.list.setCurrentRow(takes.picked)
        count = len(takes.takes) if takes else 0
        self.ab_button.setEnabled(count >= 2)
        self.play_button.setEnabled(count >= 1)
        self.loop_button.setEnabled(count >= 1)
        self.delete_button.setEnabled(count >= 1)
        self._loading = True
        self.loop_button.setChecked(looping and count >= 1)
        self._loading = False

    def set_can_restore(self, can: bool) -> None:
        self.undo_button.setEnabled(can)

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
        """Pick the take picked before this one (or the one before it) and loop the line."""
        if self._line_id is None or self._takes is None or len(self._takes.takes) < 2:
            return
        line_id = self._line_id
        other = self._previous.get(line_id)
        if other is None or other == self._takes.picked or other >= len(self._takes.takes):
            other = (self._takes.picked - 1) % len(self._takes.takes)
        self._previous[line_id] = self._takes.picked
        self.pick_requested.emit(line_id, other)
        self.ab_requested.emit(line_id)

    def _loop_toggled(self, on: bool) -> None:
        if not self._loading and self._line_id is not None:
            self.loop_requested.emit(self._line_id, on)

    def _delete(self) -> None:
        if self._line_id is None or self._takes is None:
            return
        row = self.list.currentRow()
        if 0 <= row < len(self._takes.takes):
            self._previous.pop(self._line_id, None)
            self.delete_requested.emit(self._line_id, self._takes.takes[row].take_id)
