"""A live plot of a training run's loss per step, drawn with QPainter.

Neither pyqtgraph nor QtCharts is among our PySide6 packages, and a line of a few thousand points needs neither:
the widget keeps (step, loss) pairs and draws them scaled to its size, with the step and loss ranges on the axes.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent, QPen, QPolygonF
from PySide6.QtWidgets import QSizePolicy, QWidget


class LossPlot(QWidget):
    """Loss against step; `add` a point as each step finishes."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Loss plot")
        self.setMinimumSize(320, 160)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.points: list[tuple[int, float]] = []
        self.total_steps = 0
        """The run's last step: the x axis spans 1..total_steps, so the line grows towards the right edge."""

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(520, 220)

    def clear(self, total_steps: int = 0) -> None:
        self.points = []
        self.total_steps = total_steps
        self.update()

    def add(self, step: int, loss: float) -> None:
        self.points.append((step, loss))
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        p.fillRect(self.rect(), pal.base())
        fm = p.fontMetrics()
        left, bottom = fm.horizontalAdvance("00.000") + 10, fm.height() + 8
        area = QRectF(left, 8, self.width() - left - 12, self.height() - bottom - 8)
        p.setPen(QPen(pal.mid().color(), 1))
        p.drawRect(area)
        text = pal.text().color()
        if not self.points:
            p.setPen(text)
            p.drawText(area, Qt.AlignmentFlag.AlignCenter, "The loss appears here step by step")
            return
        steps = [s for s, _ in self.points]
        losses = [v for _, v in self.points]
        x0, x1 = min(steps[0], 1), max(self.total_steps, steps[-1], steps[0] + 1)
        lo, hi = min(losses), max(losses)
        if hi - lo < 1e-9:
            lo, hi = lo - 0.5, hi + 0.5
        pad = (hi - lo) * 0.05
        lo, hi = lo - pad, hi + pad

        def at(step: int, loss: float) -> QPointF:
            return QPointF(area.left() + (step - x0) / (x1 - x0) * area.width(),
                           area.bottom() - (loss - lo) / (hi - lo) * area.height())

        p.setPen(text)
        p.drawText(QRectF(0, area.top() - 2, left - 6, fm.height()), Qt.AlignmentFlag.AlignRight, f"{hi:.3f}")
        p.drawText(QRectF(0, area.bottom() - fm.height() + 2, left - 6, fm.height()), Qt.AlignmentFlag.AlignRight,
                   f"{lo:.3f}")
        p.drawText(QRectF(area.left(), area.bottom() + 4, area.width(), fm.height()), Qt.AlignmentFlag.AlignLeft,
                   f"step {x0}")
        p.drawText(QRectF(area.left(), area.bottom() + 4, area.width(), fm.height()), Qt.AlignmentFlag.AlignRight,
                   f"step {x1}")
        p.drawText(QRectF(area.left(), area.bottom() + 4, area.width(), fm.height()), Qt.AlignmentFlag.AlignHCenter,
                   f"loss {losses[-1]:.4f} at step {steps[-1]}")
        p.setPen(QPen(pal.highlight().color(), 2))
        line = QPolygonF([at(s, v) for s, v in self.points])
        p.drawPolyline(line)
        for point in line:
            p.drawEllipse(point, 2.5, 2.5)
