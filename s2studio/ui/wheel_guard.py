"""The mouse wheel scrolls; it changes a field only when the person is working in that field.

Qt lets the wheel change any spin box, combo box or slider under the pointer, focused or not: scrolling the
Settings tab past Temperature changes the temperature, and one notch over Speed reloads the model. Each such
field is guarded (`guard`): it takes the focus by click or Tab only (`StrongFocus`), and a wheel over it without
the focus scrolls the nearest scroll area around it instead (nothing, when there is none). With the focus, the wheel
changes the field as before.

The guard is a filter on the fields themselves, never on the application: a Python filter there would see every
event of every widget, and each one waits for the interpreter while the studio's other threads hold it (hiding a
modal progress dialog over a window of 600 widgets took 29 ms beside two busy threads instead of 1). Fields are
guarded where they are made: the window's once it is built (`guard`), a dialog's as the focus first enters it
(`install`), and rows added later (the cast's) as they are added.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (QAbstractScrollArea, QAbstractSlider, QAbstractSpinBox, QApplication, QComboBox,
                               QScrollBar, QWidget)

GUARDED = (QAbstractSpinBox, QComboBox, QAbstractSlider)
"""Fields a wheel would change."""
MARK = "s2studio-wheel-guarded"
"""The property a guarded field carries, so that guarding it again changes nothing."""


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
    """The filter on each guarded field: one for the application, its child (`the_guard`)."""

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() != QEvent.Type.Wheel or not isinstance(obj, QWidget) or obj.hasFocus():
            return False
        assert isinstance(event, QWheelEvent)
        area = scroll_area_around(obj)
        if area is not None:
            viewport = area.viewport()
            at = QPointF(viewport.mapFromGlobal(event.globalPosition().toPoint()))
            QApplication.sendEvent(viewport, QWheelEvent(
                at, event.globalPosition(), event.pixelDelta(), event.angleDelta(), event.buttons(),
                event.modifiers(), event.phase(), event.inverted(), event.source()))
        event.accept()
        return True

    def follow_focus(self, old: QWidget | None, new: QWidget | None) -> None:
        """The focus moved: when into another window (a dialog just shown), that window's fields are guarded."""
        if new is not None and (old is None or old.window() is not new.window()):
            guard(new.window())


def the_guard(app: QApplication | None = None) -> WheelGuard:
    """The application's one guard, made (and set to follow the focus) when first asked for."""
    app = app if app is not None else QApplication.instance()
    existing = app.findChild(WheelGuard)
    if existing is None:
        existing = WheelGuard(app)
        app.focusChanged.connect(existing.follow_focus)
    return existing


def guard(root: QWidget) -> None:
    """Guard `root` and every field inside it that is not guarded yet."""
    fields = [root] if guarded(root) else []
    fields += [w for kind in GUARDED for w in root.findChildren(kind) if guarded(w)]
    if not fields:
        return
    the = the_guard()
    for field in fields:
        if field.property(MARK):
            continue
        field.setProperty(MARK, True)
        if field.focusPolicy() == Qt.FocusPolicy.WheelFocus:
            field.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        field.installEventFilter(the)


def install(app: QApplication) -> WheelGuard:
    """Guard the fields of each window the focus enters (once: later calls return the same guard)."""
    return the_guard(app)
