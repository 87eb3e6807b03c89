"""The mouse wheel scrolls; it changes a field only when the person is working in that field.

Qt lets the wheel change any spin box, combo box or slider under the pointer, focused or not: scrolling the
Settings tab past Temperature changes the temperature, and one notch over Speed reloads the model. One filter on
the application fixes it everywhere, dialogs included: those fields take the focus by click or Tab only
(`StrongFocus`, set as each is polished), and a wheel over one without the focus scrolls the nearest scroll area
around it instead (nothing, when there is none). With the focus, the wheel changes the field as before.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (QAbstractScrollArea, QAbstractSlider, QAbstractSpinBox, QApplication, QComboBox,
                               QScrollBar, QWidget)

GUARDED = (QAbstractSpinBox, QComboBox, QAbstractSlider)
"""Fields a wheel would change."""


def guarded(widget: QObject) -> bool:
    """A field the wheel would change (a scroll bar is a slider that scrolls: it keeps its wheel)."""
    return isinstance(widget, GUARDED) and not isinstance(widget, QScrollBar)


def scroll_area_around(widget: QWidget) -> QAbstractScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea):
            return parent
        parent = parent.parentWidget()
    return None


class WheelGuard(QObject):
    """Installed once on the application (`install`)."""

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if not guarded(obj):  # first: every event of the application comes here, and `type()` makes a Python enum
            return False
        kind = event.type()
        if kind == QEvent.Type.Polish:
            if obj.focusPolicy() == Qt.FocusPolicy.WheelFocus:  # type: ignore[attr-defined]
                obj.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # type: ignore[attr-defined]
        elif kind == QEvent.Type.Wheel and not obj.hasFocus():  # type: ignore[attr-defined]
            assert isinstance(event, QWheelEvent) and isinstance(obj, QWidget)
            area = scroll_area_around(obj)
            if area is not None:
                viewport = area.viewport()
                at = QPointF(viewport.mapFromGlobal(event.globalPosition().toPoint()))
                QApplication.sendEvent(viewport, QWheelEvent(
                    at, event.globalPosition(), event.pixelDelta(), event.angleDelta(), event.buttons(),
                    event.modifiers(), event.phase(), event.inverted(), event.source()))
            event.accept()
            return True
        return False


def install(app: QApplication) -> WheelGuard:
    """Install the guard on `app` once (later calls return the same one)."""
    existing = app.findChild(WheelGuard)
    if existing is not None:
        return existing
    guard = WheelGuard(app)
    app.installEventFilter(guard)
    return guard
