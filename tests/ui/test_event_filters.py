"""The studio puts no Python filter on the application: the events of the window's widgets (a modal dialog hidden
sends one to each of them) reach no Python code but the widgets' own. The wheel guard sits on the fields it guards,
the cast's rows and a dialog's included, and Space's filter on the focused widget alone. Counted, not timed."""

from __future__ import annotations

import sys

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QApplication, QDialog, QLabel, QProgressDialog, QSpinBox, QVBoxLayout, QWidget

from s2studio.ui import wheel_guard
from test_new_user_settings import wheel  # one turn of the wheel over a widget
from ui_helpers import close_studio, fake_engine, on_modal, open_studio


def test_no_event_of_the_windows_widgets_goes_through_python_filters(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, fake_engine)
    w.editor.setFocus()
    label = w.findChild(QLabel)
    filtered: list[QObject] = []

    def calls(frame, event: str, _arg) -> None:  # noqa: ANN001 - every Python filter called, by whom
        if event == "call" and frame.f_code.co_name == "eventFilter":
            filtered.append(list(frame.f_locals.values())[1])  # (self, the object watched, the event)

    sys.setprofile(calls)
    try:
        for _ in range(50):
            QApplication.sendEvent(label, QEvent(QEvent.Type.User))
        dialog = QProgressDialog("Saving…", "Cancel", 0, 0, w)  # shown and hidden: an event to each widget
        dialog.setWindowModality(Qt.WindowModality.ApplicationModal)
        dialog.setMinimumDuration(0)
        dialog.show()
        qtbot.wait(20)
        dialog.cancel()
        qtbot.wait(20)
    finally:
        sys.setprofile(None)
    widgets = w.findChildren(QWidget)
    fields = [f for f in widgets if wheel_guard.guarded(f)]
    assert label not in filtered and len(filtered) > 0  # (each field guarded gets the dialog's events too)
    others = {id(o) for o in filtered if not wheel_guard.guarded(o)}  # the window's own, the focused widget's
    assert len(others) <= 4 and len(fields) < 50 and len(widgets) > 300
    assert len(filtered) < len(widgets) / 2  # on the application, each widget's event twice: over 700
    close_studio(w)


def test_cast_rows_and_dialog_fields_are_guarded_as_they_come(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, fake_engine)
    w.editor.setPlainText("Alice: One.\nBob: Two.")
    w.reparse()
    qtbot.waitUntil(lambda: "Bob" in w.cast_panel.combos)
    combo = w.cast_panel.combos["Bob"]
    combo.addItem("another", "another")  # something the wheel could move to
    combo.setCurrentIndex(0)
    assert combo.property(wheel_guard.MARK) and combo.focusPolicy() == Qt.FocusPolicy.StrongFocus
    wheel(combo, -1)
    assert combo.currentIndex() == 0  # a row added after the window was built: guarded as it came
    dialog = QDialog(w)  # any dialog: its fields are guarded once the focus is in it
    box = QSpinBox(dialog)
    QVBoxLayout(dialog).addWidget(box)
    seen: dict = {}

    def in_dialog(d: QDialog) -> None:
        try:
            qtbot.waitUntil(lambda: QApplication.focusWidget() is box)
            box.clearFocus()
            wheel(box, 1)
            seen["guarded"], seen["value"] = bool(box.property(wheel_guard.MARK)), box.value()
        finally:
            d.reject()

    on_modal(qtbot, QDialog, in_dialog)
    dialog.exec()
    assert seen == {"guarded": True, "value": 0}  # guarded as the focus came in: the wheel did not change it
    close_studio(w)


def test_space_is_filtered_on_the_focused_widget_alone(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, fake_engine)
    w.activateWindow()
    toggles: list[int] = []
    for name in ("play_pause", "player_play_pause"):
        w.actions_by_name[name].triggered.connect(lambda *_: toggles.append(1))
    w.editor.setPlainText("Alice: One.")
    w.reparse()
    qtbot.waitUntil(lambda: "Alice" in w.cast_panel.combos)
    combo = w.cast_panel.combos["Alice"]
    combo.setFocus()
    qtbot.waitUntil(combo.hasFocus)
    assert w.space._on is combo
    qtbot.keyClick(combo, Qt.Key.Key_Space)  # a combo box opens with Space: it is the combo's
    combo.hidePopup()
    assert toggles == []
    w.player_bar.waveform.setFocus()
    qtbot.waitUntil(w.player_bar.waveform.hasFocus)
    assert w.space._on is None
    qtbot.keyClick(w.player_bar.waveform, Qt.Key.Key_Space)
    assert toggles == [1]
    close_studio(w)
