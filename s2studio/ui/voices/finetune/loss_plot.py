"""A live plot of a training run's loss per step, on pyqtgraph's PlotWidget.

pyqtgraph draws, scales, pans and zooms (mouse wheel, drag; right-click for its menu, which also exports the plot);
this widget only keeps the run's (step, loss) pairs, fixes the x range to the run's steps so the line grows
towards the right edge, and follows the window's palette (light or dark) instead of pyqtgraph's black default.
Imported only when the Fine-tune dialog opens (pyqtgraph takes most of a second to import on a slow CPU).
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QSize
from PySide6.QtWidgets import QSizePolicy, QVBoxLayout, QWidget


class LossPlot(QWidget):
    """Loss against step; `add` a point as each step finishes."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Loss plot")
        self.setMinimumSize(320, 160)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.points: list[tuple[int, float]] = []
        self.total_steps = 0
        """The run's last step: the x axis spans 1..total_steps."""
        pal = self.palette()
        text, line = pal.text().color(), pal.highlight().color()
        self.view = pg.PlotWidget(background=pal.base().color())
        item = self.view.getPlotItem()
        for side in ("left", "bottom"):
            axis = item.getAxis(side)
            axis.setPen(pg.mkPen(pal.mid().color()))
            axis.setTextPen(pg.mkPen(text))
        item.setLabel("bottom", "step", color=text.name())
        item.setLabel("left", "loss", color=text.name())
        item.showGrid(x=True, y=True, alpha=0.15)
        item.setMenuEnabled(True)
        self.curve = item.plot([], [], pen=pg.mkPen(line, width=2), symbol="o", symbolSize=5,
                               symbolBrush=line, symbolPen=None)
        self.empty = pg.TextItem("The loss appears here step by step", color=text, anchor=(0.5, 0.5))
        item.addItem(self.empty)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view)
        self.clear()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(520, 220)

    def clear(self, total_steps: int = 0) -> None:
        self.points = []
        self.total_steps = total_steps
        self.curve.setData([], [])
        self.empty.setVisible(True)
        self.empty.setPos((1 + max(total_steps, 2)) / 2, 0.5)
        self.view.setXRange(1, max(total_steps, 2), padding=0.02)
        self.view.setYRange(0, 1)

    def add(self, step: int, loss: float) -> None:
        self.points.append((step, loss))
        steps = [s for s, _ in self.points]
        self.empty.setVisible(False)
        self.curve.setData(steps, [v for _, v in self.points])
        self.view.setXRange(min(steps[0], 1), max(self.total_steps, steps[-1], steps[0] + 1), padding=0.02)
        self.view.enableAutoRange(axis="y")
