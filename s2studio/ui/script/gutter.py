"""The editor's gutter: beside each script line, its state (rendered, stale, not rendered, rendering) and
how many takes it has; clicking the mark selects the line's takes.

It asks for the marks of the rows it shows, when it paints them (`set_source`), and for a mark's words
when the pointer rests on it: what it costs follows the rows on screen, not the length of the script."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from PySide6.QtCore import QPoint, QPointF, QRect, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QPlainTextEdit, QToolTip, QWidget

MarkKind = Literal["none", "fresh", "stale", "rendering"]

COLORS: dict[str, str] = {"fresh": "#2f9e44", "stale": "#e8590c", "rendering": "#1c7ed6", "none": "#868e96"}
CHECK_MARKS: dict[str, tuple[str, str]] = {"passed": ("✓", "#2f9e44"), "warning": ("!", "#f08c00"),
                                           "failed": ("✗", "#e03131")}
"""What the checks found in the picked take: its sign and colour at the gutter's right edge."""
WIDTH = 54
CHECK_WIDTH = 12


@dataclass(frozen=True)
class LineMark:
    line_id: str
    kind: MarkKind
    takes: int
    check: str = ""
    """The picked take's check verdict ("" when not checked, or nothing to show)."""


MarkSource = Callable[[int], LineMark | None]
"""Block number -> the mark of the (first) script line on it."""
TipSource = Callable[[int], str]
"""Block number -> what its mark means, in words (the tooltip)."""

class LineGutter(QWidget):
    mark_clicked = Signal(str)
    """line id of the mark clicked."""

    def __init__(self, editor: QPlainTextEdit) -> None:
        super().__init__(editor)
        self.setObjectName("lineGutter")
        self.setAccessibleName("Line states: click a mark to show the line's takes")
        self.setMouseTracking(True)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self._editor = editor
        self._marks: MarkSource = lambda _block: None
        self._tips: TipSource = lambda _block: ""
        editor.updateRequest.connect(self._scrolled)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(WIDTH, 0)

    def set_source(self, marks: MarkSource, tips: TipSource) -> None:
        self._marks, self._tips = marks, tips
        self.update()

    def mark(self, block: int) -> LineMark | None:
        return self._marks(block)

    def tip(self, block: int) -> str:
        return self._tips(block)

    def refresh(self, blocks: Iterable[int] | None = None) -> None:
        """Marks changed: repaint these rows (None: every row on screen); they ask for their marks again."""
        if blocks is None:
            self.update()
            return
        editor = self._editor
        first = editor.firstVisibleBlock().blockNumber()  # rows off screen are skipped before any geometry: a
        last = editor.cursorForPosition(QPoint(0, self.height())).blockNumber()  # far block's is a walk to it
        offset = editor.contentOffset()
        for number in blocks:
            if not first <= number <= last:
                continue
            block = editor.document().findBlockByNumber(number)
            if block.isValid() and block.isVisible():
                geometry = editor.blockBoundingGeometry(block).translated(offset)
                if geometry.bottom() >= 0 and geometry.top() <= self.height():
                    self.update(0, int(geometry.top()), self.width(), int(geometry.height()) + 1)

    def _scrolled(self, rect: QRect, dy: int) -> None:
        if dy:
            self.scroll(0, dy)
        else:
            self.update(0, rect.y(), self.width(), rect.height())

    def _visible_blocks(self):  # noqa: ANN202 - (block number, top, height, middle of its first line)
        editor = self._editor
        block = editor.firstVisibleBlock()
        offset = editor.contentOffset()
        while block.isValid():
            geometry = editor.blockBoundingGeometry(block).translated(offset)
            if geometry.top() > self.height():
                break
            if block.isVisible():
                layout = block.layout()
                first = layout.lineAt(0) if layout is not None and layout.lineCount() else None
                middle = geometry.top() + (first.y() + first.height() / 2 if first is not None
                                           else geometry.height() / 2)
                yield block.blockNumber(), geometry.top(), geometry.height(), middle
            block = block.next()

    def block_at(self, y: float) -> int | None:
        for number, top, height, _middle in self._visible_blocks():
            if top <= y < top + height:
                return number
        return None

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        p = QPainter(self)
        pal = self.palette()
        p.fillRect(event.rect(), pal.color(QPalette.ColorRole.AlternateBase))
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        small = self.font()
        small.setPointSizeF(max(small.pointSizeF() * 0.8, 7.0))
        p.setFont(small)
        area = event.rect()
        for number, top, height, cy in self._visible_blocks():
            if top + height < area.top() or top > area.bottom():
                continue  # not in the region to repaint (one line's mark changed)
            mark = self._marks(number)
            if mark is None:
                continue
            color = QColor(COLORS[mark.kind])
            r = 5.0
            centre = QPointF(11, cy)
            if mark.kind == "none":  # not rendered: a ring
                p.setPen(QPen(color, 1.5))
                p.setBrush(Qt.BrushStyle.NoBrush)
            elif mark.kind == "stale":  # a half-filled disc: rendered, but for an older line
                p.setPen(QPen(color, 1.5))
                p.setBrush(Qt.BrushStyle.NoBrush)
                p.drawEllipse(centre, r, r)
                p.setBrush(color)
                p.setPen(Qt.PenStyle.NoPen)
                p.drawPie(QRectF(centre.x() - r, cy - r, 2 * r, 2 * r), 90 * 16, 180 * 16)
                centre = None
            else:
                p.setPen(Qt.PenStyle.NoPen)
                p.setBrush(color)
            if centre is not None:
                if mark.kind == "rendering":  # a play triangle: the engine is on it
                    p.drawPolygon([QPointF(7, cy - 5), QPointF(7, cy + 5), QPointF(16, cy)])
                else:
                    p.drawEllipse(centre, r, r)
            if mark.takes:
                p.setPen(pal.color(QPalette.ColorRole.PlaceholderText))
                p.drawText(QRectF(19, cy - 8, WIDTH - 21 - CHECK_WIDTH, 16),
                           Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, f"×{mark.takes}")
            if mark.check in CHECK_MARKS:
                sign, color = CHECK_MARKS[mark.check]
                p.setPen(QColor(color))
                p.drawText(QRectF(WIDTH - CHECK_WIDTH - 1, cy - 8, CHECK_WIDTH, 16), Qt.AlignmentFlag.AlignCenter, sign)
        p.end()

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        block = self.block_at(event.position().y())
        mark = self._marks(block) if block is not None else None
        if mark is not None and event.button() == Qt.MouseButton.LeftButton:
            self.mark_clicked.emit(mark.line_id)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        block = self.block_at(event.position().y())
        tip = self._tips(block) if block is not None else ""
        if tip:
            QToolTip.showText(event.globalPosition().toPoint(), tip, self)
        else:
            QToolTip.hideText()
