"""The Fine-tune dialog's checkpoints: a row per saved checkpoint (step, loss, Play its preview, Use this one), as
tall as its rows up to `VISIBLE_ROWS` (then it scrolls). The dialog owns the rows' state (`CheckpointRow`) and
says what a click does (`play_requested`, `keep_requested`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QPushButton, QTableWidget, QTableWidgetItem, QWidget

VISIBLE_ROWS = 4
"""Rows shown before the table scrolls (and never fewer than two rows' height)."""
PLAY_WORDS = {"ready": "▶ Play", "rendering": "Rendering…", "failed": "No preview", "no model": "No preview"}


@dataclass
class CheckpointRow:
    step: int
    loss: float | None
    folder: Path
    preview: Path | None = None
    state: str = "waiting"
    """"waiting" (for the engine), "rendering", "ready", "failed" or "no model"."""

    @property
    def lora(self) -> Path:
        return self.folder / "lora.safetensors"


class CheckpointTable(QTableWidget):
    play_requested = Signal(object)
    """A `CheckpointRow` whose preview should play."""
    keep_requested = Signal(object)
    """A `CheckpointRow` whose LoRA the voice should take."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, 4, parent)
        self.setHorizontalHeaderLabels(["Step", "Loss", "Preview", ""])
        self.setAccessibleName("Checkpoints")
        self.verticalHeader().setVisible(False)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self._fit()

    def show_rows(self, rows: Sequence[CheckpointRow], running: bool) -> None:
        """One row per checkpoint; "Use this one" waits while a run is going."""
        for i in range(self.rowCount()):  # replaced buttons go when the event loop next runs: out of sight now
            for column in (2, 3):
                if (old := self.cellWidget(i, column)) is not None:
                    old.hide()
        self.setRowCount(len(rows))
        for i, row in enumerate(rows):
            self.setItem(i, 0, QTableWidgetItem(str(row.step)))
            self.setItem(i, 1, QTableWidgetItem("—" if row.loss is None else f"{row.loss:.4f}"))
            play = QPushButton(PLAY_WORDS.get(row.state, "Waiting…"))
            play.setAccessibleName(f"Play the preview of step {row.step}")
            play.setEnabled(row.state == "ready")
            play.clicked.connect(lambda _=False, r=row: self.play_requested.emit(r))
            self.setCellWidget(i, 2, play)
            keep = QPushButton("Use this one")
            keep.setAccessibleName(f"Use the LoRA of step {row.step} for this voice")
            keep.setEnabled(not running)
            keep.clicked.connect(lambda _=False, r=row: self.keep_requested.emit(r))
            self.setCellWidget(i, 3, keep)
        self._fit()

    def play_button(self, index: int) -> QPushButton:
        return self.cellWidget(index, 2)  # type: ignore[return-value]

    def keep_button(self, index: int) -> QPushButton:
        return self.cellWidget(index, 3)  # type: ignore[return-value]

    def _fit(self) -> None:
        """As tall as the rows shown: rows of buttons are taller than a table's usual row, so the fixed height it
        had showed one and a half."""
        self.resizeRowsToContents()
        heights = [self.rowHeight(i) for i in range(min(self.rowCount(), VISIBLE_ROWS))]
        usual = heights[0] if heights else max(self.verticalHeader().defaultSectionSize(),
                                               QPushButton("Use this one").sizeHint().height())
        heights += [usual] * (2 - len(heights))  # room for two rows before there are any
        self.setFixedHeight(self.horizontalHeader().sizeHint().height() + sum(heights) + 2 * self.frameWidth())
